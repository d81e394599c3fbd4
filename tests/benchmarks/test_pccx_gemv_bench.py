"""benchmarks/pccx_gemv.py checks every build against the reference GEMV, then reports tiered GB/s."""

import json

import numpy as np
import pytest

pytest.importorskip("numba")



@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("pccx_gemv")


def test_quick_json_has_every_build_and_the_numpy_stream(bench, capsys):
    from npukit.targets.pccx.fast import _nbkernels as nbk

    assert bench.main(["--quick", "--mib", "1", "--calls", "3", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert "measured" in res["tier"] and "derived" in res["tier"] and res["machine"].startswith("CPU ")
    from npukit.sim import threads

    assert res["threads"] == threads.start().describe()  # the wait policy the parallel builds ran under
    want = {"portable serial", "portable parallel", "numpy sum"}
    if nbk.SIMD == "avx512-vnni":
        want |= {"vnni serial", "vnni parallel"}
    if nbk.SIMD in ("avx2", "ssse3"):
        want |= {f"{nbk.SIMD} serial", f"{nbk.SIMD} parallel"}
    assert [(r["m"], r["k"]) for r in res["rows"]] == list(bench.QUICK)
    for r in res["rows"]:
        assert set(r["gb_per_s"]) == want and all(v > 0 for v in r["gb_per_s"].values())
        assert r["of_numpy_sum"]["portable serial"] == pytest.approx(
            r["gb_per_s"]["portable serial"] / r["gb_per_s"]["numpy sum"])


def test_a_build_that_differs_is_not_timed(bench, monkeypatch):
    def wrong(x, p, scale, dst, accm, q, lut32, lut64):
        dst[:] = np.uint16(1)
        return 0

    monkeypatch.setattr(bench, "builds", lambda: {"wrong": wrong})
    with pytest.raises(SystemExit, match="wrong differs"):
        bench.main(["--quick", "--calls", "1"])


def test_gap_keeps_the_caller_busy_before_each_call(bench, monkeypatch):
    waits = []
    monkeypatch.setattr(bench, "_busy", waits.append)
    bench.shape_row(64, 256, {"serial": lambda *a: 0}, 1, 2, gap_s=5e-5)
    assert waits == [5e-5] * 6  # (2 timed + 1 warm-up call) x (the build + the NumPy stream)
