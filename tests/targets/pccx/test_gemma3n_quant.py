"""W4A8 Gemma 3n reference: op-sequence semantics, golden agreement, per-op error bounds, backend.

Oracles: the float32 reference `Gemma3nReference` (tested against transformers elsewhere), run on
the same INT4-dequantized weights; float64 NumPy formulas written here; and `ExactOps`, a float64
no-rounding implementation of every primitive, which turns the W4A8 op sequence back into plain
real arithmetic so the sequence itself can be checked against the float model to ~1e-5.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models"))  # gemma3n_tiny
from gemma3n_tiny import MIXED, SL

from npukit.errors import ConfigError, ModelError
from npukit.formats.int4 import dequantize_int4, quantize_int4
from npukit.models.gemma3n import Gemma3nConfig, Gemma3nReference, Gemma3nWeights, synthetic_weights
from npukit.models.gemma3n.weights import EMBED_PLE, DictSource
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.gemma3n_quant import Gemma3nW4A8, Int4Matrix, Int4Store, RecordingOps, kv_quantize
from npukit.targets.pccx.ops import DEVICE_OPS, EXTENDED_OPS, MOVE_OPS

F64 = np.float64
CFG = MIXED
SEQ = 16  # > sliding_window: the window, KV sharing and both RoPE thetas are all exercised


class ExactOps:
    """Every primitive in float64 with no rounding (BF16, INT8, KV quantization all skipped)."""

    def gemv(self, w, x, w_scale=None, dest=None, fmt="int4"):
        wm = np.asarray(w, F64)
        if w_scale is not None:
            wm = wm * np.asarray(w_scale, F64)[:, None]
        y = wm @ np.asarray(x, F64)
        return y if dest is None else np.asarray(dest, F64) + y

    def findemax(self, e, d):
        return max(float(e), float(np.max(d)))

    def reduce_sum(self, x, dst=None):
        return float(np.sum(np.asarray(x, F64))) + (0.0 if dst is None else float(dst))

    @staticmethod
    def _acc(y, dst):
        return y if dst is None else np.asarray(dst, F64) + y

    def cvo_exp(self, x, e_max=None, dst=None):
        return self._acc(np.exp(np.asarray(x, F64) - (0.0 if e_max is None else e_max)), dst)

    def cvo_sqrt(self, x, dst=None):
        return self._acc(np.sqrt(np.asarray(x, F64)), dst)

    def cvo_gelu(self, x, dst=None):
        a = np.asarray(x, F64)
        return self._acc(0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))), dst)

    def cvo_scale(self, x, s, recip=False, dst=None):
        a = np.asarray(x, F64)
        return self._acc(a / float(s) if recip else a * float(s), dst)

    def cvo_tanh(self, x, dst=None):
        return self._acc(np.tanh(np.asarray(x, F64)), dst)

    def cvo_mul(self, x, y):
        return np.asarray(x, F64) * np.asarray(y, F64)

    def cvo_add(self, x, y):
        return np.asarray(x, F64) + np.asarray(y, F64)

    def cvo_relu_bias(self, x, c, dst=None):
        return self._acc(np.maximum(np.asarray(x, F64) - float(c), 0.0), dst)

    def cvo_rsqrt(self, x, dst=None):
        return self._acc(1.0 / np.sqrt(np.asarray(x, F64)), dst)

    def cvo_square(self, x, dst=None):
        return self._acc(np.asarray(x, F64) ** 2, dst)

    def const(self, x):
        return F64(x)

    def kv_quantize(self, x, fmt):
        return np.asarray(x, F64), None

    def swap_halves(self, x):
        h = x.shape[-1] // 2
        return np.concatenate((x[..., h:], x[..., :h]), axis=-1)

    def concat(self, parts):
        return np.concatenate(parts)

    def stack(self, parts):
        return np.stack(parts)

    def host_to_l2(self, x):
        return np.asarray(x, F64)

    def l2_to_host(self, x):
        return np.asarray(x, F64)


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def _dequantized(w: Gemma3nWeights) -> Gemma3nWeights:
    """The same model as the W4A8 store holds it: INT4-dequantized matrices, BF16 vectors."""
    cfg, out = w.config, {}
    for name in w.shapes:
        a = w.get(name)
        if a.ndim == 2:
            g = cfg.hidden_size_per_layer_input if name == EMBED_PLE else None
            q, s = quantize_int4(a, group_size=g)
            a = dequantize_int4(q, s, group_size=g)
        else:
            a = nx.bf16(a)
        out[name] = a
    return Gemma3nWeights(cfg, DictSource(out), "dequantized")


@pytest.fixture(scope="module")
def tiny():
    cfg = Gemma3nConfig.from_hf(CFG)
    w = synthetic_weights(cfg, seed=0)
    ids = [int(t) for t in np.random.default_rng(0).integers(0, cfg.vocab_size, SEQ)]
    return cfg, w, Int4Store(w), _dequantized(w), ids


def test_op_sequence_is_the_float_model_when_rounding_is_removed(tiny):
    cfg, _, store, deq, ids = tiny
    ref = Gemma3nReference(deq).forward(ids, all_logits=True)
    got = Gemma3nW4A8(store, ops=ExactOps()).forward(ids, all_logits=True)
    assert got.shape == (SEQ, cfg.vocab_size)
    # float32 reference vs float64 sequence: only the reference's own float32 rounding remains
    assert np.max(np.abs(got - ref)) < 1e-4 * max(1.0, float(np.max(np.abs(ref))))


@pytest.mark.parametrize("kv, min_cos, mean_cos", [("fp16", 0.97, 0.985), ("int8", 0.97, 0.985),
                                                   ("int4", 0.6, 0.8)])
def test_w4a8_logits_close_to_float_on_the_same_int4_weights(tiny, kv, min_cos, mean_cos):
    # Bounds measured over synthetic seeds 0-3 with margin: BF16 (2^-9) and INT8-emax (<= 2^-7)
    # activation rounding through 6 random layers leaves cos >= 0.977 (fp16/int8 KV); 4-bit K/V of
    # a 16-wide head is coarse (cos >= 0.73). Top-1 on random logits with tiny margins: >= 3/4.
    _, _, store, deq, ids = tiny
    ref = Gemma3nReference(deq).forward(ids, all_logits=True)
    got = Gemma3nW4A8(store, kv=kv).forward(ids, all_logits=True)
    c = _cos(got.astype(F64), ref.astype(F64))
    assert c.min() >= min_cos and c.mean() >= mean_cos
    if kv != "int4":
        assert np.mean(got.argmax(-1) == ref.argmax(-1)) >= 0.75


def test_incremental_decode_equals_one_pass(tiny):
    _, _, store, _, ids = tiny
    m = Gemma3nW4A8(store, kv="int8")
    full = m.forward(ids, all_logits=True)
    m.reset()
    m.prefill(ids[:7])
    rows = [m.step(t) for t in ids[7:]]
    assert np.array_equal(np.stack(rows)[-1], full[-1])  # deterministic: bit-identical


def test_trace_uses_only_pccx_primitives_and_expected_gemv_count(tiny):
    cfg, _, store, _, ids = tiny
    ops = RecordingOps()
    m = Gemma3nW4A8(store, ops=ops)
    m.step(ids[0])
    names = {n for n, _, _ in ops.trace}
    assert names <= set(DEVICE_OPS) | set(EXTENDED_OPS) | set(MOVE_OPS)
    for n in names - set(MOVE_OPS):
        assert callable(getattr(nx, n))  # every device op is a numerics primitive
    # independent count of GEMVs for one token at position 0
    n_prod = cfg.first_kv_shared_layer
    per_layer = 1 + 1 + 2 + 3 + 2 + 2  # q, o, laurel×2, gate/up/down, routers×2, coefs×2
    per_layer += 2  # PLE gate + projection
    attn = cfg.num_attention_heads * 2  # scores and context per head
    want = (1 + 3 + 3 + 1) + cfg.num_hidden_layers * (per_layer + attn) + n_prod * 2
    assert ops.counts()["gemv"] == want
    assert ops.counts()["findemax"] == cfg.num_hidden_layers * cfg.num_attention_heads
    # sparse layers 0-1 each add one RELU_BIAS; nothing else uses it except the 2 magnitude clamps
    # per token entry/exit (3 + 3)
    assert ops.counts()["cvo_relu_bias"] == 2 + 3 + 3


# ---- individual ops against float64 math --------------------------------------------------------

def _rng(seed: int = 1) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_gemv_within_int8_activation_bound(tiny):
    _, _, store, _, _ = tiny
    m = Gemma3nW4A8(store)
    name = "layers.0.mlp.gate_proj.weight"
    mat = store.mat(name)
    x = nx.bf16(_rng().standard_normal(mat.shape[1]) * 3)
    got = m._gemv(name, x).astype(F64)
    wd = mat.codes().astype(F64) * mat.scale.astype(F64)[:, None]
    exact = wd @ x.astype(F64)
    e = math.floor(math.log2(np.max(np.abs(x))))
    # emax quantization: each |x_k - q_k·2^(e-6)| <= 2^(e-7); then one BF16 rounding of the result
    bound = np.abs(wd).sum(1) * 2.0 ** (e - 7) + np.abs(exact) * 2.0**-8 + 1e-6
    assert np.all(np.abs(got - exact) <= bound)
    assert np.max(np.abs(got - exact)) > 0  # it does quantize


def test_rmsnorm_sequence_within_bf16_ulps(tiny):
    _, _, store, _, _ = tiny
    m = Gemma3nW4A8(store)
    x = nx.bf16(_rng(2).standard_normal(64) * 5)
    g = nx.bf16(1 + 0.2 * _rng(3).standard_normal(64))
    got = m._rms(x, g).astype(F64)
    xf = x.astype(F64)
    want = xf / np.sqrt(np.mean(xf * xf) + 1e-6) * g.astype(F64)
    # 7 roundings of relative 2^-9 each (square, sum, mean, +eps, rsqrt, scale, mul)
    assert np.all(np.abs(got - want) <= np.abs(want) * 8 * 2.0**-9 + 1e-30)


def test_gaussian_topk_matches_float64_rule(tiny):
    _, _, store, _, _ = tiny
    m = Gemma3nW4A8(store)
    g = nx.bf16(_rng(4).standard_normal(4096))
    z = 1.6448536269514722
    got = m._gaussian_topk(g, z).astype(F64)
    gf = g.astype(F64)
    cut = gf.mean() + gf.std() * z
    want = np.maximum(gf - cut, 0.0)
    # BF16 z (1.6484375) and BF16 statistics move the cutoff by < 0.01; outputs differ by at most that
    assert np.max(np.abs(got - want)) < 0.01
    assert abs(np.mean(got > 0) - 0.05) < 0.01  # keeps ~5 % of a Gaussian


def test_rope_rotation_within_bf16_bound(tiny):
    _, _, store, _, _ = tiny
    m = Gemma3nW4A8(store)
    m.pos = 1000
    x = nx.bf16(_rng(5).standard_normal(16))
    cos, sin = m._rope(SL)
    got = m._rotate(x, cos, sin).astype(F64)
    inv = 10000.0 ** (-np.arange(0, 16, 2) / 16)  # the default local (sliding) theta
    ang = np.concatenate([1000 * inv, 1000 * inv])
    xf = x.astype(F64)
    rot = np.concatenate([-xf[8:], xf[:8]])
    want = xf * np.cos(ang) + rot * np.sin(ang)
    # table entries and products rounded to BF16, angle in float32 as transformers computes it
    assert np.max(np.abs(got - want)) <= 6 * 2.0**-9 * np.max(np.abs(xf)) + 1e-3 * np.max(np.abs(xf))


def test_attention_head_matches_float64_softmax(tiny):
    cfg, _, store, _, _ = tiny
    m = Gemma3nW4A8(store, kv="fp16")
    rng = _rng(6)
    n, d = 9, cfg.head_dim
    k = nx.bf16(rng.standard_normal((n, d)))
    v = nx.bf16(rng.standard_normal((n, d)))
    q = nx.bf16(rng.standard_normal(d))
    o = m.ops
    scores = o.gemv(k.astype(np.float16), q, fmt="fp16")
    p = o.cvo_exp(scores, o.findemax(np.float32(-np.inf), scores))
    p = o.cvo_scale(p, o.reduce_sum(p), recip=True)
    out = o.gemv(np.ascontiguousarray(v.astype(np.float16).T), p, fmt="fp16").astype(F64)
    s = k.astype(F64) @ q.astype(F64)
    pw = np.exp(s - s.max())
    want = (pw / pw.sum()) @ v.astype(F64)
    assert np.max(np.abs(out - want)) < 0.05 * np.max(np.abs(v))


@pytest.mark.parametrize("fmt, qmax", [("int8", 127), ("int4", 7)])
def test_kv_quantize_roundtrip_bound(fmt, qmax):
    x = nx.bf16(_rng(7).standard_normal((2, 16)) * 4)
    q, s = kv_quantize(x, fmt)
    assert q.dtype == np.int8 and s.shape == (2,) and s.dtype == np.float32
    assert np.all(np.abs(q) <= qmax)
    amax = np.max(np.abs(x.astype(F64)), axis=1)
    assert np.allclose(s, amax / qmax, rtol=1e-6)
    err = np.abs(q * s[:, None].astype(F64) - x)
    assert np.all(err <= s[:, None] * 0.5 + 1e-7)


def test_kv_fp16_is_exact_for_bf16_values():
    x = nx.bf16(_rng(8).standard_normal((2, 16)))
    q, s = kv_quantize(x, "fp16")
    assert s is None and q.dtype == np.float16 and np.array_equal(q.astype(np.float32), x)


def test_int4_tables_grouped_rows_match_formats_int4():
    rng = _rng(9)
    w = rng.standard_normal((10, 24)).astype(np.float32)
    mat = Int4Matrix.quantize(w, group=8)
    q, s = quantize_int4(w, group_size=8)
    idx = np.array([7, 2])
    assert np.array_equal(mat.dequant_rows(idx), dequantize_int4(q, s, group_size=8)[idx])
    assert mat.packed.shape == (10, 12) and mat.scale.shape == (10, 3)
    assert np.array_equal(mat.codes(), q)


@pytest.mark.parametrize("k", [23, 64])
def test_int4_row_lookup_of_a_memmapped_table_matches_formats_int4(tmp_path, k):
    # the host's embedding lookup (one table lookup per packed byte) against `formats.int4`'s
    # dequantization, bit for bit: an odd K (a padding nibble), every code, a table on disk
    rng = _rng(10)
    w = rng.standard_normal((12, k)).astype(np.float32)
    w[0] = 0.0
    w[0, :15] = np.arange(-7, 8)  # every code the absmax rule gives (|q| <= 7), in row 0
    mat = Int4Matrix.quantize(w)
    q, s = quantize_int4(w)
    path = tmp_path / "packed.bin"
    mat.packed.tofile(path)
    mat.packed = np.memmap(path, np.uint8, "r", shape=mat.packed.shape)
    idx = np.array([0, 11, 5, 0])
    got = mat.dequant_rows(idx)
    assert type(got) is np.ndarray and got.dtype == np.float32 and got.shape == (4, k)
    assert np.array_equal(got.view(np.uint32), dequantize_int4(q, s)[idx].view(np.uint32))
    assert set(q[0].tolist()) >= set(range(-7, 8))


# ---- errors and backend -------------------------------------------------------------------------

def test_bad_token_and_kv_format(tiny):
    cfg, _, store, _, _ = tiny
    with pytest.raises(ModelError, match="out of range"):
        Gemma3nW4A8(store).step(cfg.vocab_size)
    with pytest.raises(ConfigError, match="KV cache format"):
        Gemma3nW4A8(store, kv="int3")


def test_backend_registered_with_kv_modes(tiny):
    from npukit.models.loading import LoadedModel
    from npukit.runtime import backends

    cfg, w, _, _, ids = tiny
    spec = backends.get_spec("gemma3n", "quant")
    assert spec.kv_modes == ("fp16", "int8", "int4")
    model = LoadedModel("gemma3n", "tiny", cfg, w)
    be = backends.create_backend(model, "quant", kv="int4")
    direct = Gemma3nW4A8(Int4Store(w), kv="int4").prefill(ids[:5])
    assert np.array_equal(be.prefill(ids[:5]), direct)
    st = be.stats()
    assert st["kv"] == "int4" and st["position"] == 5 and st["kv_bytes"] > 0
    with pytest.raises(ConfigError):
        backends.create_backend(model, "quant", kv="fp32")


@pytest.mark.parametrize("head_dim", [16, 24])  # plain halves (16), word-padded ones (24)
def test_rope_rows_of_a_block_are_the_rows_position_by_position(head_dim):
    """`host_rope_rows` (one vectorised pass) against `host_rope` at every position up to the model's
    maximum, bit for bit, for both layer types, from a block start of 0 and from an odd one."""
    cfg = Gemma3nConfig.from_hf(dict(CFG, head_dim=head_dim))
    m = Gemma3nW4A8(Int4Store(synthetic_weights(cfg, seed=0)))
    assert m.lay.heads_padded == (head_dim == 24)
    n = cfg.max_position_embeddings
    for layer_type in (SL, "full_attention"):
        cos, sin = m.host_rope_rows(layer_type, 0, n)
        assert cos.shape == sin.shape == (n, m.lay.D) and cos.dtype == sin.dtype == F64
        for p in range(n):
            c, s = m.host_rope(layer_type, p)
            assert cos[p].tobytes() == c.tobytes() and sin[p].tobytes() == s.tobytes(), p
        odd_cos, odd_sin = m.host_rope_rows(layer_type, 37, 5)
        assert odd_cos.tobytes() == cos[37:42].tobytes() and odd_sin.tobytes() == sin[37:42].tobytes()
