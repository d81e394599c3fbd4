"""benchmarks/gemma3n_decode.py runs end to end on tiny settings and reports tiered figures."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "gemma3n_decode.py"


@pytest.mark.slow
@pytest.mark.hf
def test_json_figures_carry_tiers_and_consistent_ratios(capsys):
    spec = importlib.util.spec_from_file_location("bench_gemma3n_decode", PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_gemma3n_decode"] = mod
    spec.loader.exec_module(mod)
    assert mod.main(["--layers", "1", "--vocab", "8192", "--tokens", "2", "--repeats", "1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    f = res["ledger"]["figures"]
    for name in ("transformers fp32 eager s/token", "pccx fastsim s/token", "host bandwidth",
                 "INT4 bytes/token"):
        assert f[name]["tier"] == "measured" and f[name]["value"] > 0
    assert f["speedup vs transformers"]["tier"] == "derived"
    assert f["speedup vs transformers"]["value"] == pytest.approx(
        f["transformers fp32 eager s/token"]["value"] / f["pccx fastsim s/token"]["value"])
    # one E2B-width layer + 8192-row LM head: INT4 codes + FP32 row scales streamed per token
    assert f["INT4 bytes/token"]["value"] > 30e6
    assert res["fallbacks"] == 0
