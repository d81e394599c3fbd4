"""The bitnet backends: tern bit-identical to quant over a greedy run (dense and gather engine modes),
per-phase simulated cycles in stats(), and the Perfetto trace."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models"))
import bitnet_tiny as tiny

from npukit.errors import ConfigError
from npukit.models.loading import load_model
from npukit.runtime.backends import create_backend
from npukit.runtime.generate import generate

PROMPT = [5, 17, 42, 99]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    c = tiny.config("online")
    path = tiny.write_online(tmp_path_factory.mktemp("bitnet") / "hf", c, tiny.float_weights(c, seed=3))
    return load_model(path)


def _run(model, target, n=24, **kw):
    b = create_backend(model, target, **kw)
    return b, generate(b, PROMPT, n, keep_logits=True)


@pytest.mark.parametrize("gather", [False, True], ids=["dense", "gather"])
def test_tern_bit_identical_to_quant(model, gather):
    _, q = _run(model, "quant")
    b, t = _run(model, "tern", gather=gather)
    assert t.tokens == q.tokens and len(set(q.tokens)) > 1
    assert all(np.array_equal(a, c) for a, c in zip(t.logits, q.logits, strict=True))
    st = b.stats()
    assert st["engine_gemvs"] == 2 * 7 * 24  # prefill + 23 steps, 7 projections × 2 layers
    assert (st["engine_cycles"] < st["engine_dense_cycles"]) == gather
    figs = st["timing"]["figures"]
    for ph in ("host-split", "fabric-attention", "fabric-ffn-glue", "engine-bound"):
        assert figs[f"cycles_per_token.{ph}"]["tier"] == ("projected")  # tiny shapes: host glue scaled
        assert figs[f"cycles_per_token.{ph}"]["source"]
    # moving glue onto the fabric only ever removes cycles
    order = [figs[f"cycles_per_token.{ph}"]["value"] for ph in
             ("host-split", "fabric-attention", "fabric-ffn-glue", "engine-bound")]
    assert order == sorted(order, reverse=True)


def test_trace_and_errors(model, tmp_path):
    b, _ = _run(model, "tern", n=3)
    path = b.trace(tmp_path / "t.json", phase="fabric-attention")
    ev = json.loads(path.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    assert tracks == {"engine", "attention", "ffn_glue", "host"}
    xs = [e for e in ev if e["ph"] == "X"]
    # fabric-attention: 4 query heads × 2 layers × (4 prompt + 2 steps) queries on the attention unit
    assert sum(e["cat"] == "attention" for e in xs) == 4 * 2 * 6
    assert all(e["cat"] != "ffn_glue" for e in xs)  # the FFN glue still runs on the host
    with pytest.raises(ConfigError, match="phase"):
        b.trace(tmp_path / "x.json", phase="warp")
    with pytest.raises(ConfigError, match="only tern"):
        create_backend(model, "quant").trace(tmp_path / "q.json")
