"""npukit shard compile / run and npukit demo shard."""

from __future__ import annotations

import json

import numpy as np
import pytest

from npukit.cli.main import main

from .conftest import hf_sentence_embedding


def test_compile_writes_a_plan(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["shard", "compile", "minilm", "--hw", "rk3588", "--seq", "24", "--no-sandwich",
                 "--schedule", "data-parallel", "--out", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert plan["options"]["schedule"] == "data-parallel"
    assert plan["tasks"] == sum(s["tasks"] for s in plan["shards"])
    assert all(o["working_set"]["scratch_bytes"] <= 32768 for o in plan["ops"] if o["working_set"])
    assert "submissions" in capsys.readouterr().out


def test_compile_without_tiling_is_one_readable_line(capsys):
    assert main(["shard", "compile", "minilm", "--seq", "64", "--no-tiling", "--no-sandwich"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("npukit: error: placement (0xe010): op layer0.") and "\n" not in err
    assert "limit" in err and "enable tiling" in err


def test_bad_inputs_are_errors_not_tracebacks(tmp_path, capsys):
    assert main(["shard", "compile", str(tmp_path / "nope")]) == 2
    assert main(["shard", "run", "minilm"]) == 2  # no --text
    assert main(["shard", "compile", "minilm", "--seq", "8", "--no-sandwich",
                 "--out", str(tmp_path / "missing" / "plan.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("npukit: error:") == 3 and "Traceback" not in err


@pytest.mark.slow
def test_run_json_has_embeddings_cosine_and_timing(tmp_path, capsys, minilm, minilm_hf):
    texts = ["Tiles must fit the scratchpad.", "The cat slept on the warm windowsill all afternoon."]
    trace = tmp_path / "t.json"
    argv = ["shard", "run", "minilm", "--json", "--trace", str(trace)]
    for t in texts:
        argv += ["--text", t]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"embeddings", "cosine", "cycles", "latency_ms", "shards"}
    emb = np.array(data["embeddings"])
    for e, ids in zip(emb, minilm.tokenize(texts), strict=True):  # independent oracle: transformers
        assert float(e @ hf_sentence_embedding(minilm_hf, ids)) >= 0.999
    assert all(c >= 0.999 for c in data["cosine"])
    assert data["cycles"] > 0 and data["shards"] == 12 and data["tiers"]["latency_ms"] == "projected"
    events = json.loads(trace.read_text())["traceEvents"]
    assert {"npu0", "npu1", "npu2"} <= {e["args"]["name"] for e in events if e.get("name") == "thread_name"}


@pytest.mark.slow
def test_demo_shard(capsys):
    assert main(["demo", "shard", "--max-ops", "3000"]) == 0
    out = capsys.readouterr().out
    assert "placement (0xe010)" in out and "25,165,824 B" in out
    assert "24 submissions" in out
    assert "holds" in out and "error" in out
    assert "0.999" in out or "pip install" in out
