"""benchmarks/formats.py runs, checks agreement with its peers, and reports tiered figures."""

import json

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("formats")


def test_json_rows_cover_every_format_and_carry_tiers(bench, capsys):
    assert bench.main(["--size", "8192", "--repeats", "1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    names = {(r["format"], r["op"]) for r in res["rows"]}
    for f in ["fp8 e4m3fn", "fp8 e5m2", "fp8 e4m3", "mxfp8_e4m3", "mxfp6_e3m2", "mxfp4_e2m1", "mxint8",
              "TQ1_0", "TQ2_0"]:
        assert (f, "decode") in names and (f, "encode") in names
    for r in res["rows"]:
        assert r["npukit"]["tier"] == "measured" and r["peer"]["tier"] == "measured"
        assert r["ratio"]["tier"] == "derived"
        assert r["npukit"]["value"] > 0 and r["peer"]["value"] > 0
        assert r["ratio"]["value"] == pytest.approx(r["npukit"]["value"] / r["peer"]["value"])


def test_disagreeing_peer_is_refused(bench, monkeypatch):
    import numpy as np

    bad = bench.Case("x", "decode", lambda: np.zeros(4, np.float32), lambda: np.ones(4, np.float32),
                     "peer", 16, bench._bits_equal)
    monkeypatch.setattr(bench, "_fp8_cases", lambda x: [bad])
    monkeypatch.setattr(bench, "_mx_cases", lambda x: [])
    monkeypatch.setattr(bench, "_ternary_cases", lambda x: [])
    with pytest.raises(AssertionError, match="disagree"):
        bench.run(4096, 1, progress=False)
    nan = np.array([np.nan, -0.0], np.float32)
    assert bench._bits_equal(nan, nan.copy())
    assert not bench._bits_equal(nan, np.array([np.nan, 0.0], np.float32))
