"""Prefill on pccx GEMMs (`PccxDriver.prefill`): bit-exact against the W4A8 reference run token by token.

Oracle: `Gemma3nW4A8.step` (numerics in Python, no program) for every prompt token; the driver's
logits must equal the reference's bits, and decoding on from the prefilled KV ring must too.
Structure: the chunk program's Work records against one decode token's (each weight tile streamed
once per chunk, N = T) and against the reference's op trace.
"""

from __future__ import annotations

import numpy as np
import pytest

from npukit.errors import ConfigError, ModelError
from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.models.gemma3n.weights import EMBED, EMBED_PLE
from npukit.targets.pccx import isa
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.gemma3n_quant import Gemma3nW4A8, Int4Store

SL, FU = "sliding_attention", "full_attention"
CFG = dict(
    model_type="gemma3n_text", vocab_size=96, vocab_size_per_layer_input=80, hidden_size=32,
    hidden_size_per_layer_input=8, intermediate_size=[64, 48, 64, 48], num_hidden_layers=4,
    num_attention_heads=2, num_key_value_heads=1, head_dim=16, laurel_rank=8, num_kv_shared_layers=1,
    sliding_window=12, layer_types=[SL, FU, SL, SL], activation_sparsity_pattern=[0.95, 0.9, 0, 0],
    max_position_embeddings=64, final_logit_softcapping=30.0,
)
PROMPT = [5, 17, 2, 90, 33, 7, 61, 8, 44, 19, 70, 3, 28, 55, 11, 80]  # past the window: some steps
DECODE = [4, 66, 21]


@pytest.fixture(scope="module")
def store():
    return Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=3))


def _bits(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def _check(store, kv, drv, prompt):
    ref = Gemma3nW4A8(store, kv=kv)
    want = [ref.step(t) for t in prompt][-1]
    got = drv.prefill(prompt)
    assert np.array_equal(_bits(got), _bits(want))
    for t in DECODE:
        assert np.array_equal(_bits(drv.step(t)), _bits(ref.step(t))), f"decode at {ref.pos - 1}"


@pytest.mark.parametrize("kv", ["fp16", "int8", "int4"])
def test_prefill_chunks_are_bit_identical_to_token_steps(store, kv):
    drv = PccxDriver(timing=False, prefill_chunk=5).open().load(store).kv_init(kv).start()
    _check(store, kv, drv, PROMPT)
    runs = [(r.position, r.tokens) for r in drv.records if r.phase == "prefill"]
    # chunks of T_max = 5 up to the window (12), then the tokens whose writes would evict: one by one
    assert runs == [(0, 5), (5, 5), (10, 2), (12, 1), (13, 1), (14, 1), (15, 1)]
    assert [r.phase for r in drv.records[-len(DECODE):]] == ["decode"] * len(DECODE)


def test_prefill_stops_batching_where_the_capped_ring_wraps(store):
    cfg = dict(CFG, layer_types=[FU, FU, SL, FU])
    st = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(cfg), seed=7))
    drv = PccxDriver(timing=False).open().load(st).kv_init("int8", 9, 2).start()
    ref = Gemma3nW4A8(st, kv="int8")
    ref.cache.set_ring(9, 2, drv.ring.capped_layers)
    prompt = PROMPT[:14]
    want = [ref.step(t) for t in prompt][-1]
    assert np.array_equal(_bits(drv.prefill(prompt)), _bits(want))
    for t in DECODE:
        assert np.array_equal(_bits(drv.step(t)), _bits(ref.step(t)))
    runs = [(r.position, r.tokens) for r in drv.records if r.phase == "prefill"]
    assert runs[0] == (0, 9) and all(n == 1 for _, n in runs[1:]) and len(runs) == 1 + 14 - 9


def test_chunk_program_streams_each_weight_tile_once(store):
    drv = PccxDriver().open().load(store).kv_init("int8").start()
    drv.step(PROMPT[0])
    decode_works = drv.last_works
    drv.reset()
    drv.prefill(PROMPT[:6])
    chunk = drv.records[-1]
    assert (chunk.tokens, chunk.phase) == (6, "prefill") and chunk.cycles > 0
    gemms = [w for w in drv.last_works if w.engine == "gemm"]
    assert gemms and all(" N=6 " in w.label for w in gemms)

    def weight_bytes(works, dense_only):  # INT4 weight tiles (KV operands are INT8 here)
        return sum(w.weight_bytes for w in works if w.engine in ("gemv", "gemm") and " int4" in w.label
                   and not (dense_only and "kmajor" in w.label))

    # dense tiles: the chunk streams exactly what one decode token streams (each tile once, not 6 times)
    assert weight_bytes(drv.last_works, True) == weight_bytes(decode_works, True)
    cfg = store.config
    sparse_down = {f"layers.{i}.mlp.down_proj.weight" for i in range(cfg.num_hidden_layers)
                   if cfg.sparsity_multiplier(i) is not None}
    dense = [m.shape for n, m in store.mats.items() if n not in {EMBED, EMBED_PLE} | sparse_down
             and not n.startswith("altup_unembed")]  # the last token's unembedding stays GEMV
    routers = [m.shape for n, m in store.mats.items() if n.endswith("modality_router.weight")]
    # every matrix once per chunk for all 6 tokens; the AltUp router serves predict and correct (twice)
    want = 6 * (sum(m * k for m, k in dense) + sum(m * k for m, k in routers))
    assert sum(w.macs for w in gemms if "kmajor" not in w.label) == want
    words = [w for seg in drv.variants[next(k for k in drv.variants if k[0] == "prefill")].program.segments
             for w in seg.words]
    ops = [isa.decode(w, "extended").op for w in words]
    assert ops.count(isa.Op.GEMM) == len(gemms)
    st = drv.compile_report()
    assert st["prefill_chunk"]["instructions"]["gemm"] == len(gemms)
    assert "gemm.async" in st["prefill_extensions"]


def test_bad_prompts_are_typed_errors(store):
    drv = PccxDriver(timing=False).open().load(store).kv_init("fp16").start()
    with pytest.raises(ModelError, match="no input tokens"):
        drv.prefill([])
    with pytest.raises(ModelError, match="out of range"):
        drv.prefill([1, 96])
    with pytest.raises(ModelError, match="max_position_embeddings"):
        drv.prefill([1] * 65)  # no ring policy: the cap is max_position_embeddings (64)
    assert drv.position == 0 and not drv.records
    with pytest.raises(ConfigError, match="prefill chunk"):
        PccxDriver(prefill_chunk=0)
    with pytest.raises(ConfigError, match="start"):
        PccxDriver().prefill([1])
