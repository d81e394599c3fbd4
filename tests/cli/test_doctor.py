"""``npukit doctor``: the CPU as LLVM sees it, kernel paths that agree with the dispatcher, peers; and the
first-run compile announcement (a fresh numba cache compiles, and says so)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

from npukit.cli.main import main
from npukit.sim import cpu

ROOT = Path(__file__).resolve().parents[2]


def test_doctor_json_reports_cpu_paths_and_peers(capsys) -> None:
    assert main(["doctor", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    t = cpu.compile_target()
    assert rep["cpu"]["compile_target"] == t.cpu and rep["cpu"]["arch"] == t.arch
    paths = {k["family"]: k for k in rep["kernels"]}
    from npukit.kernels.fp8 import _nb
    from npukit.models.tflite.kernels import _nb_gemm
    from npukit.sim import nb_avx2, nb_simd, nb_ssse3

    assert paths["int4-gemv"]["path"] == nb_simd.probe()[0]
    assert paths["int4-gemv-avx2"]["path"] == nb_avx2.probe()[0]
    assert paths["int4-gemv-avx2"]["needs"] == "vpmaddubsw+vpmaddwd"
    assert paths["int4-gemv-ssse3"]["path"] == nb_ssse3.probe()[0]
    assert paths["int4-gemv-ssse3"]["needs"] == "pmaddubsw+pmaddwd"
    first = next((paths[f]["path"] for f in ("int4-gemv", "int4-gemv-avx2", "int4-gemv-ssse3")
                  if paths[f]["path"] != "portable"), "portable")
    assert rep["pccx_int4"]["path"] == first  # the kernels take the first fast family
    assert paths["fp8-gemm"]["path"] == _nb.probe()[0]
    assert paths["int8-conv"]["path"] == _nb_gemm.probe()[0]
    assert all(k["reason"] for k in rep["kernels"])
    assert rep["python_peers"]["ml_dtypes"]  # a dev extra: installed wherever this suite runs
    assert set(rep["tools"]) >= {"qemu-system-x86_64", "clang-14"}
    assert rep["threads"]["OMP_WAIT_POLICY"] and rep["threads"]["GOMP_SPINCOUNT"]
    from npukit.sim import threads

    assert rep["threads"]["pool"] == threads.start().describe()


def test_doctor_human_names_the_cpu_and_each_family(capsys) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert cpu.host_cpu_model() in out
    assert "int4-gemv" in out and "int4-gemv-avx2" in out and "fp8-gemm" in out and "numba" in out
    assert "pccx INT4" in out


@pytest.mark.slow
def test_doctor_warm_compiles_the_paths_users_run(capsys) -> None:
    assert main(["doctor", "--warm", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert set(rep["warmed_s"]) == {"fp8 gemm", "pccx generate (fast executor + timing loop)",
                                    "pccx grouped GEMV (GGUF LLMs)", "tflite int8 (every compiled kernel)"}


def _fp8(env: dict[str, str]) -> subprocess.CompletedProcess:
    args = ["fp8", "gemm", "--m", "4", "--n", "64", "--k", "64", "--json"]
    return subprocess.run([sys.executable, "-m", "npukit", *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


@pytest.mark.slow
def test_first_run_compiles_are_announced_then_cached(tmp_path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    env.pop("NPUKIT_QUIET", None)
    first = _fp8(env)
    assert first.returncode == 0, first.stderr
    assert "compiling kernels for this CPU" in first.stderr and "compil" in first.stderr
    assert json.loads(first.stdout)["m"] == 4  # stdout stays clean JSON
    second = _fp8(env)
    assert second.returncode == 0 and "compiling kernels" not in second.stderr  # numba's disk cache
    quiet = _fp8({**env, "NUMBA_CACHE_DIR": str(tmp_path / "numba2"), "NPUKIT_QUIET": "1"})
    assert quiet.returncode == 0 and "compiling" not in quiet.stderr
