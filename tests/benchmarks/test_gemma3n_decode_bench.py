"""benchmarks/gemma3n_decode.py runs end to end on tiny settings and reports tiered figures."""

import json

import pytest


@pytest.mark.slow
@pytest.mark.hf
def test_json_figures_carry_tiers_and_consistent_ratios(capsys, load_benchmark):
    mod = load_benchmark("gemma3n_decode")
    assert mod.main(["--layers", "1", "--vocab", "8192", "--tokens", "2", "--repeats", "1", "--check",
                     "--prompt", "6", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    f = res["ledger"]["figures"]
    for case in ("e2b-width", "embedded"):
        for name in ("transformers fp32 eager s/token", "pccx s/token", "INT4 bytes/token"):
            assert f[f"{case}: {name}"]["tier"] == "measured" and f[f"{case}: {name}"]["value"] > 0
        sp = f[f"{case}: speedup vs transformers"]
        assert sp["tier"] == "derived"
        assert sp["value"] == pytest.approx(f[f"{case}: transformers fp32 eager s/token"]["value"]
                                            / f[f"{case}: pccx s/token"]["value"])
    assert f["host bandwidth"]["tier"] == "measured"
    # one E2B-width layer + 8192-row LM head: INT4 codes + FP32 row scales streamed per token
    assert f["e2b-width: INT4 bytes/token"]["value"] > 30e6
    for case in ("e2b-width", "embedded"):  # GEMM prefill timed (its logits checked under --check)
        pre = f[f"{case}: prefill speedup vs transformers"]
        assert pre["tier"] == "derived" and pre["value"] == pytest.approx(
            f[f"{case}: transformers fp32 prefill s/prompt token"]["value"]
            / f[f"{case}: pccx GEMM prefill s/prompt token"]["value"])
    for c in res["cases"]:  # the compiled model ran: every instruction on a fast path, logits checked
        assert c["fallbacks"] == 0 and c["checked"] and c["instructions"] > 100
        assert c["variants"] == 2  # one decode program (one span bucket) + one 6-token prefill chunk
