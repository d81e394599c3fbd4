"""`npukit eval`: the digits model over its full held-out set on VTA within the minute the issue
asks, JSON output; a GGUF LLM's perplexity table with tiers; dispatch on the model kind (an
unsupported kind or a target of the other kind exits 2 with one line)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from npukit.cli.main import main
from npukit.models.gguf.installed import installed_gguf


def npukit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "npukit", *args], capture_output=True, text=True,
                          timeout=300)


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
    assert main(["eval", "model.onnx", "--dataset", "zoo:digits"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'onnx' is not supported" in err[0]


def test_eval_target_of_the_other_kind_is_one_line_error(capsys) -> None:
    assert main(["eval", "zoo:digits", "--dataset", "zoo:digits", "--target", "golden"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ref or vta" in err[0]


@pytest.mark.slow
def test_eval_gguf_prints_perplexity_with_evidence() -> None:
    out = npukit("eval", str(installed_gguf("smollm2")), "--text", "/usr/share/common-licenses/GPL-3",
                 "--target", "golden", "--kv", "fp16", "--window", "40")
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("perplexity"))
    assert float(line.split()[1]) > 1.0
    assert "measured" in line and "golden --kv fp16, first 40 tokens of GPL-3" in line


def test_eval_bad_text_exits_2_with_one_line(tmp_path) -> None:
    out = npukit("eval", str(installed_gguf("smollm2")), "--text", str(tmp_path / "nope.txt"))
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "cannot read" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_eval_gguf_on_pccx_equals_quant(capsys) -> None:
    """The pccx target's logits are quant's bit for bit, so the perplexity is the same number."""
    got = {}
    for target in ("quant", "pccx"):
        assert main(["eval", str(installed_gguf("smollm2")), "--text", "/usr/share/common-licenses/GPL-3",
                     "--target", target, "--kv", "int4", "--window", "12", "--json"]) == 0
        got[target] = json.loads(capsys.readouterr().out)["perplexity"]
    assert got["pccx"] == got["quant"] > 1.0
