"""benchmarks/tflite_interp.py checks bit-identity with LiteRT before timing, and reports measured
inferences/s for npukit and both LiteRT resolvers with derived ratios from the same run."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("tflite_interp")


def test_json_rows_carry_tiers_and_same_run_ratios(bench, capsys):
    assert bench.main(["--models", "zoo:digits", "--rounds", "1", "--min-time", "0.02", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    f = row["figures"]
    assert row["outputs_equal_ref"] is True
    for k in ("npukit", "npukit_batch", "litert_ref", "litert_default"):
        assert f[f"{k}_inf_per_s"]["tier"] == "measured" and f[f"{k}_inf_per_s"]["value"] > 0
    for peer in ("litert_ref", "litert_default"):
        r = f[f"ratio_vs_{peer}"]
        assert r["tier"] == "derived"
        assert r["value"] == pytest.approx(f["npukit_inf_per_s"]["value"] / f[f"{peer}_inf_per_s"]["value"])


def test_a_wrong_interpreter_is_refused(bench, monkeypatch):
    from npukit.models.tflite import Interpreter

    real_run = Interpreter.run
    def off_by_one(self, feeds):
        return {k: v + 1 for k, v in real_run(self, feeds).items()}

    monkeypatch.setattr(Interpreter, "run", off_by_one)
    with pytest.raises(SystemExit, match="differs from LiteRT BUILTIN_REF"):
        bench.bench_model("zoo:digits", 1, 0.01)


@pytest.mark.slow
def test_reference_interpreter_is_not_slower_than_litert_reference_on_resnet8(bench):
    """The acceptance bar, measured interleaved in one run: npukit ≥ LiteRT BUILTIN_REF on ResNet-8."""
    row = bench.bench_model("resnet8-cifar10", rounds=5, min_time=0.15)
    assert row["figures"]["ratio_vs_litert_ref"].value >= 1.0
