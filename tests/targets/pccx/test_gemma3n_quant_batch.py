"""Batched W4A8 forward (`Gemma3nW4A8.forward_batch`, the prefill the pccx compiler lowers onto GEMMs).

Oracle: the same reference run token by token with `step` — the contract is bit identity of the
logits and of every stored KV code and scale, not closeness.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models"))  # gemma3n_tiny
from gemma3n_tiny import MIXED

from npukit.errors import ModelError
from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx.gemma3n_quant import Gemma3nW4A8, Int4Store, RecordingOps

CFG = MIXED
IDS = [3, 77, 12, 5, 100, 64, 9, 31, 2, 88, 41]


@pytest.fixture(scope="module")
def store():
    return Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=4))


def _bits(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


@pytest.mark.parametrize("kv", ["fp16", "int8", "int4"])
def test_batched_chunks_equal_token_steps_bit_for_bit(store, kv):
    ref = Gemma3nW4A8(store, kv=kv)
    want = np.stack([ref.step(t) for t in IDS])
    got = Gemma3nW4A8(store, kv=kv)
    # chunks of 1, 6 (past the sliding window of 5) and 4 tokens, all logits of the middle one
    first = got.forward_batch(IDS[:1])
    mid = got.forward_batch(IDS[1:7], all_logits=True)
    last = got.forward_batch(IDS[7:])
    v = CFG["vocab_size"]
    assert first.shape == (1, v) and mid.shape == (6, v) and last.shape == (1, v)
    assert np.array_equal(_bits(first[0]), _bits(want[0]))
    assert np.array_equal(_bits(mid), _bits(want[1:7]))
    assert np.array_equal(_bits(last[0]), _bits(want[-1]))
    assert got.pos == ref.pos == len(IDS)
    assert got.cache.length == ref.cache.length
    for layer, buf in ref.cache.layers.items():
        n = ref.cache.length[layer]
        for key, arr in buf.items():
            a, b = arr[:, :n], got.cache.layers[layer][key][:, :n]
            assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), (layer, key)
    # decoding on from the batched state stays identical
    assert np.array_equal(_bits(got.step(7)), _bits(ref.step(7)))


def test_one_gemm_per_weight_matrix_per_chunk(store):
    step_ops, batch_ops = RecordingOps(), RecordingOps()
    Gemma3nW4A8(store, ops=step_ops).step(IDS[0])
    Gemma3nW4A8(store, ops=batch_ops).forward_batch(IDS[:5])
    cfg = store.config
    kv_gemvs = 2 * cfg.num_hidden_layers * cfg.num_attention_heads  # scores + context per head
    weight_gemvs = step_ops.counts()["gemv"] - kv_gemvs
    unembed = cfg.altup_num_inputs - 1 + 1  # last token only: AltUp unembedding projections + LM head
    counts = batch_ops.counts()
    assert counts["gemm"] == weight_gemvs - unembed  # one per matrix, whatever T
    assert counts["gemv"] == 5 * kv_gemvs + unembed
    assert all(shape[1] == (5, shape[0][1]) for name, shape, _ in batch_ops.trace if name == "gemm")


def test_bad_chunks_are_typed_errors(store):
    m = Gemma3nW4A8(store, kv="int8")
    with pytest.raises(ModelError, match="no input tokens"):
        m.forward_batch([])
    with pytest.raises(ModelError, match="out of range"):
        m.forward_batch([1, CFG["vocab_size"]])
    with pytest.raises(ModelError, match="max_position_embeddings"):
        m.forward_batch([1] * (CFG["max_position_embeddings"] + 1))
    m.cache.set_ring(6, 1, (2,))
    m.forward_batch(IDS[:6])  # fills the ring exactly: fine
    with pytest.raises(ModelError, match="wrap the KV ring"):
        m.forward_batch(IDS[6:8])
    assert m.pos == 6
