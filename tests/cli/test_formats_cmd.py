"""``npukit formats``: JSON structure, spec-exact storage costs, sane error ordering."""

import json
import math

import numpy as np
import pytest

from npukit.cli.main import main

# bits per element from the layouts' specs (hand-derived; 256 columns per row)
SPEC_BITS = {
    "fp8 e4m3fn": 8.0, "fp8 e5m2": 8.0, "fp8 e4m3": 8.0,
    "mxfp8_e4m3": 8 + 8 / 32, "mxfp8_e5m2": 8.25, "mxfp6_e2m3": 6.25, "mxfp6_e3m2": 6.25,
    "mxfp4_e2m1": 4.25, "mxint8": 8.25,
    "int4 per-channel": 4 + 32 / 256, "int4 group-32": 4 + 32 / 32,
    "kv int8": 8 + 32 / 256, "kv int4": 4 + 32 / 256,
    "TQ1_0": 54 * 8 / 256, "TQ2_0": 66 * 8 / 256,
}


def _run(capsys, *args):
    rc = main(["formats", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def result():
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["formats", "--json", "--size", "32768", "--seed", "3"]) == 0
    return json.loads(buf.getvalue())


def test_json_structure(result):
    assert result["sample"]["shape"] == [128, 256] and result["sample"]["seed"] == 3
    rows = {r["format"]: r for r in result["formats"]}
    assert set(SPEC_BITS) <= set(rows)
    for r in result["formats"]:
        assert set(r) == {"format", "layout", "bits_per_element", "bytes", "rmse", "max_abs_error", "sqnr_db"}
        assert r["bytes"] * 8 == pytest.approx(r["bits_per_element"] * 32768)
        assert 0 < r["rmse"] <= r["max_abs_error"]
    assert "measured" in result["evidence"]["error"]


def test_bits_per_element_exact_from_spec(result):
    rows = {r["format"]: r for r in result["formats"]}
    for name, bits in SPEC_BITS.items():
        assert rows[name]["bits_per_element"] == bits, name


def test_error_ordering_is_sane(result):
    q = {r["format"]: r["sqnr_db"] for r in result["formats"]}
    rms = result["sample"]["rms"]
    for r in result["formats"]:  # SQNR and RMSE describe the same error
        assert r["sqnr_db"] == pytest.approx(20 * math.log10(rms / r["rmse"]), abs=1e-6)
    assert q["fp8 e4m3fn"] > q["mxfp4_e2m1"]
    assert q["fp8 e4m3fn"] > q["fp8 e5m2"]  # one more mantissa bit is worth ~6 dB
    assert 4 < q["fp8 e4m3fn"] - q["fp8 e5m2"] < 8
    assert q["mxfp8_e4m3"] > q["mxfp4_e2m1"] and q["mxfp6_e2m3"] > q["mxfp4_e2m1"]
    assert q["mxint8"] > q["mxfp6_e2m3"]
    assert q["int4 group-32"] > q["int4 per-channel"]
    assert q["kv int8"] > q["kv int4"] + 15
    assert q["TQ2_0"] < q["int4 per-channel"]


def test_deterministic_per_seed(capsys):
    a = _run(capsys, "--json", "--size", "512", "--seed", "1")[1]
    b = _run(capsys, "--json", "--size", "512", "--seed", "1")[1]
    c = _run(capsys, "--json", "--size", "512", "--seed", "2")[1]
    assert a == b and a != c


def test_text_table(capsys):
    rc, out, _ = _run(capsys, "--size", "1024")
    lines = out.splitlines()
    assert rc == 0 and lines[0].startswith("npukit formats: 4x256")
    assert lines[1].split()[:6] == ["format", "bits/elem", "bytes", "RMSE", "max", "|err|"]
    assert any(line.startswith("mxfp4_e2m1") and " 4.25 " in line for line in lines)


@pytest.mark.parametrize("size", ["100", "0", "-256"])
def test_bad_size_is_one_line_error(capsys, size):
    rc, _, err = _run(capsys, "--size", size)
    assert rc == 2 and err.startswith("npukit: error: --size") and err.count("\n") == 1


def test_sample_has_outliers():
    from npukit.cli.cmd_formats import sample

    w = sample(65536, 0)
    assert w.dtype == np.float32 and np.abs(w).max() > 10 and abs(float(w.std()) - 1.2) < 0.3
