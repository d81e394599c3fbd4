"""RTX 3090 Ti preset + GPU model, and the ``npukit fp8`` CLI / demo (small shapes)."""

from __future__ import annotations

import argparse
import hashlib
import json
import tomllib
from importlib import resources

import numpy as np
import pytest

from npukit.cli import cmd_fp8, demo_fp8
from npukit.errors import ConfigError, NpukitError
from npukit.kernels.fp8 import gpu


def preset() -> dict:
    return tomllib.loads((resources.files("npukit") / "presets" / "hw" / "rtx3090ti.toml").read_text())


def test_preset_numbers_follow_the_spec_sheet():
    """The derived peaks equal the GA102 whitepaper's RTX 3090 figures scaled by SMs x clock, and the
    DRAM rate equals 21 Gbps x 384 bit; every entry carries a tier and a source."""
    p = preset()
    scale = (84 * 1860) / (82 * 1695)
    assert p["int8_tensor_tops"]["value"] == pytest.approx(284 * scale, rel=0.01)
    assert p["fp16_tensor_fp32acc_tflops"]["value"] == pytest.approx(71 * scale, rel=0.01)
    assert p["dram_gbps"]["value"] == pytest.approx(21 * 384 / 8)
    assert p["sms"]["value"] * p["cuda_lanes_per_sm"]["value"] == 10752
    for key, v in p.items():
        if isinstance(v, dict):
            assert v["tier"] in ("measured", "derived", "projected") and v["source"], key


def test_projection_arithmetic_from_the_toml():
    p = {k: v["value"] for k, v in preset().items() if isinstance(v, dict)}
    ops = 2 * 4096**3
    proj = gpu.project(gpu.load(), 4096, 4096, 4096)
    assert proj["cached"].seconds == pytest.approx(ops / (p["fp16_tensor_fp32acc_tflops"] * 1e12
                                                         * p["gemm_efficiency"]))
    decode = 23 * 4096**2 / (p["dram_gbps"] * 1e9 * p["dram_efficiency"])
    assert proj["naive"].seconds == pytest.approx(decode + proj["cached"].seconds)
    assert proj["int8"].bound == "IMMA"
    # the seed's int8 row: 118.06 TOPS is 1.164 ms (its 0.018 ms is a typo)
    assert gpu.SEED_MS["int8"] == pytest.approx(1.164, abs=1e-3)
    rows = {r[0]: r for r in gpu.seed_table()}
    assert set(rows) == {"fused", "naive", "cached", "int8"}
    for path, (_, _, ms, seed, err) in rows.items():
        assert err == pytest.approx(100 * (ms - seed) / seed), path


def test_overrides_change_the_projection():
    base = gpu.project(gpu.load(), 4096, 4096, 4096)["naive"].seconds
    slow = gpu.project(gpu.load(["dram_efficiency.value=0.45"]), 4096, 4096, 4096)["naive"].seconds
    assert slow > base
    with pytest.raises(ConfigError):
        gpu.load(["no_such_field=1"])


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    p = argparse.ArgumentParser(prog="npukit")
    cmd_fp8.register(p.add_subparsers())
    args = p.parse_args(argv)
    try:
        rc = args.func(args)
    except NpukitError as exc:
        return 2, str(exc)
    return rc, capsys.readouterr().out


def test_cli_gemm_check_json(capsys):
    rc, out = _cli(["fp8", "gemm", "--m", "5", "--n", "70", "--k", "300", "--check", "--json",
                    "--fmt", "e4m3fn", "--reps", "1"], capsys)
    res = json.loads(out)
    assert rc == 0 and res["bit_identical"] is True
    assert res["ms"]["tier"] == "measured" and res["tops"]["tier"] == "derived"
    assert res["vs_fp64_of_fp8_weights"]["cosine"] > 0.99


def test_cli_gemm_output_digest_is_the_reference_outputs_bits(capsys):
    """output_sha256 (what cross-CPU runs compare) hashes the fp16 output: the NumPy reference's bits."""
    from npukit.kernels import fp8 as K
    from npukit.kernels.fp8 import bench, contract

    rc, out = _cli(["fp8", "gemm", "--m", "3", "--n", "40", "--k", "256", "--check", "--json", "--reps", "1",
                    "--seed", "7"], capsys)
    a16, weights, a_inv = bench.make_operands(3, 40, 256, "e4m3", 7)
    ref = K.gemm_reference(a16, weights.codes, weights.col_scales, fmt="e4m3", a_inv_scale=a_inv,
                           global_scale=weights.tensor_scale / float(contract.a_inv_f16(a_inv)))
    res = json.loads(out)
    assert rc == 0 and res["bit_identical"] is True
    assert res["output_sha256"] == hashlib.sha256(ref.astype(np.float16).tobytes()).hexdigest()
    assert res["output_sha256"] != hashlib.sha256(np.zeros_like(ref, np.float16).tobytes()).hexdigest()


def test_cli_gemm_random_bytes_int8(capsys):
    rc, out = _cli(["fp8", "gemm", "--m", "2", "--n", "9", "--k", "64", "--check", "--random-bytes",
                    "--act", "int8", "--reps", "1"], capsys)
    assert rc == 0 and "bit-identical to the NumPy reference: True" in out


def test_cli_bench_shape_and_gpu(capsys):
    rc, out = _cli(["fp8", "bench", "--shape", "4x64x128", "--reps", "1", "--json"], capsys)
    res = json.loads(out)
    assert rc == 0
    paths = res["results"][0]["paths"]
    assert paths["fused"]["resident_bytes"] == 64 * 128 + 2 * 64
    assert paths["cached"]["resident_bytes"] == 4 * 64 * 128
    assert all(v["tier"] == "measured" and v["ms"] > 0 for v in paths.values())
    assert {r["path"] for r in res["gpu_projection"]} == {"fused", "naive", "cached", "int8"}
    rc, err = _cli(["fp8", "bench", "--shape", "4x64"], capsys)
    assert rc == 2 and "MxNxK" in err


def test_demo_fp8(capsys, monkeypatch):
    from npukit.kernels.fp8 import bench

    real = bench.bench_shape
    monkeypatch.setattr(bench, "bench_shape", lambda label, m, n, k, **kw: real(label, 2, 64, 128, **kw))
    p = argparse.ArgumentParser()
    demo_fp8.add_arguments(p)
    assert demo_fp8.run(p.parse_args([])) == 0
    out = capsys.readouterr().out
    assert "bit for bit: True" in out and "fused is" in out
    assert np.isfinite(float(out.split("kernel")[1].split("cosine")[1].split()[0]))


def test_npukit_simd_portable_env_forces_portable_loops():
    import os
    import subprocess
    import sys

    env = dict(os.environ, NPUKIT_SIMD="portable")
    out = subprocess.run([sys.executable, "-c", "from npukit.kernels.fp8 import fast; print(fast.simd()[0])"],
                         env=env, capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "portable"
