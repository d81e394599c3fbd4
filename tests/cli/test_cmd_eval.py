"""`npukit eval`: the digits model over its full held-out set on VTA within the minute the issue
asks, JSON output, and dispatch on the model kind (an unsupported kind exits 2 with one line)."""

from __future__ import annotations

import json
import time

from npukit.cli.main import main


def test_eval_digits_full_heldout_on_vta_under_a_minute(capsys) -> None:
    t0 = time.perf_counter()
    assert main(["eval", "zoo:digits", "--target", "vta", "--dataset", "zoo:digits", "--json"]) == 0
    elapsed = time.perf_counter() - t0
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 450 and out["target"] == "vta"
    assert out["agree_with_litert_ref"] == 450
    assert 0.9 < out["top1"] <= 1.0
    assert out["figures"]["vta_cycles_per_inference"]["tier"] == "projected"
    assert elapsed < 60, f"{elapsed:.1f} s"


def test_eval_table_names_tiers(capsys) -> None:
    assert main(["eval", "zoo:digits", "--dataset", "zoo:digits", "--limit", "10"]) == 0
    text = capsys.readouterr().out
    assert "top-1" in text and "measured" in text and "10/10 bit-identical" in text


def test_eval_other_model_kinds_are_one_line_errors(capsys) -> None:
    assert main(["eval", "model.gguf", "--dataset", "zoo:digits"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'gguf' is not supported" in err[0]
