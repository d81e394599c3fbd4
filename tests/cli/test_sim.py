"""`npukit sim` end to end: assembled program + host DDR image -> bit-exact run -> timing and trace."""

import json

import numpy as np
import pytest

from npukit.cli.main import main
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.memory import weight_entry, weight_image

W_ADDR = 0x1000_0000


def _setup(tmp_path, m, k, n_gemv=1, extra=""):
    rng = np.random.default_rng(m + k)
    w = rng.integers(-8, 8, (m, k))
    (tmp_path / "w.bin").write_bytes(weight_image(w, "int4", rng.random(m).astype(np.float32)))
    x = rng.standard_normal(k).astype(np.float32)
    (tmp_path / "x.bin").write_bytes(nx.to_bits(x).astype("<u2").tobytes())
    fmt, hi, lo = weight_entry("int4", W_ADDR)
    lines = [f"memset cache=fmap slot=2 a={m} b=1 c={k}", f"memset cache=weight slot=1 a={fmt} b={hi} c={lo}"]
    lines += [f"gemv dest={0x4000 + i * 0x800:#x} src=0x0 flags=w_scale size=1 shape=2 async"
              for i in range(n_gemv)]
    (tmp_path / "p.s").write_text("\n".join(lines) + "\n" + extra)
    return ["sim", str(tmp_path / "p.s"), "--ddr-image", f"{tmp_path / 'w.bin'}@{W_ADDR:#x}",
            "--l2-image", f"{tmp_path / 'x.bin'}@0"]


@pytest.mark.parametrize(("m", "k", "cores_log2"), [(2048, 2048, 2), (1024, 4096, 2), (2048, 2048, 0)])
def test_sim_gemv_roofline_and_trace(tmp_path, capsys, m, k, cores_log2):
    argv = [*_setup(tmp_path, m, k, n_gemv=2), "--set", f"gemv.cores_log2={cores_log2}",
            "--trace", str(tmp_path / "t.json"), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    # preset numbers: 10 GB/s effective DDR (HP ports allow 16), 32 MAC/clk per core at 400 MHz
    wbytes = m * k // 2 + 4 * m
    t_one = max(wbytes / 10e9, m * k / ((1 << cores_log2) * 32 * 400e6))
    t_setup = 2 / 400e6  # two synchronous 1-cycle MEMSETs
    assert out["timing"]["seconds"] == pytest.approx(2 * t_one + t_setup, rel=0.05)
    fig = out["ledger"]["figures"]["total cycles"]
    assert fig["tier"] == "derived" and "pccx-v002-kv260" in fig["source"]
    assert fig["value"] == pytest.approx(out["timing"]["cycles"])
    trace = json.loads((tmp_path / "t.json").read_text())
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    gemv = [(e["ts"], e["ts"] + e["dur"]) for e in xs if names[e["tid"]] == "gemv"]
    fetch = [(e["ts"], e["ts"] + e["dur"]) for e in xs if names[e["tid"]] == "weights fetch"]
    assert len(gemv) == 2 and len(fetch) == 2
    assert any(min(a1, b1) > max(a0, b0) for a0, a1 in gemv for b0, b1 in fetch)


def test_sim_table_output_and_truncation(tmp_path, capsys):
    argv = _setup(tmp_path, 256, 512, n_gemv=3, extra="cvo.exp src=0x4000 dst=0x6000 len=256 async\n")
    assert main([*argv, "--rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "4 more instructions not listed" in out
    for needle in ("engine", "busy", "total cycles", "derived", "gemv", "sfu"):
        assert needle in out


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--ddr-image", "nofile@0x0"], "no such file"),
        (["--ddr-image", "x"], "is not FILE@ADDR"),
        (["--set", "ddr.bandwidth_gbps=99"], "exceeds ddr.peak_gbps"),
    ],
)
def test_sim_bad_arguments_are_one_line_errors(tmp_path, capsys, extra, needle):
    argv = _setup(tmp_path, 64, 64)
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_sim_reports_device_fault(tmp_path, capsys):
    argv = _setup(tmp_path, 64, 64)
    argv[3] = f"{tmp_path / 'w.bin'}@0x2000_0000"  # weights not where the program looks
    assert main(argv) == 2
    assert "error interrupt" in capsys.readouterr().err
