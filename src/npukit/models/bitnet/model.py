"""BitNet b1.58 reference in NumPy: ``golden`` (float32, transformers' AutoBitLinear arithmetic) and
``quant`` (the integer reference of ternfpga's datapath, `npukit.models.bitnet.intpath`).

golden: ``x' = rint(x·a).clip(-128,127)/a`` with ``a = 127/max(|x|, 1e-5)`` per token and
``W' = clip(rint(W·s), -1, 1)/s`` with ``s = 1/max(mean|W|, 1e-5)`` per tensor (online), or the
unpacked ternary W times ``weight_scale`` (offline) — exactly transformers' ``ActQuant``,
``WeightQuant`` and ``AutoBitLinear`` — with RMSNorm, RoPE, softmax and relu² in float32.

quant: int8 activations × ternary weights with int32 accumulation, integer RMSNorm requant, Q15
RoPE, the attention unit's Q15 exp-table softmax and the FFN-glue unit's reciprocal requant; its
integer steps go through an ``ops`` object a target can replace (the tern engine and units).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from npukit.errors import ConfigError, ModelError
from npukit.models.bitnet.config import BitNetConfig
from npukit.models.bitnet.intpath import IntegerDatapath, IntOps
from npukit.models.bitnet.norm import rms_norm

F32 = np.float32
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class TernaryLinear:
    """One projection: ternary codes ``t`` (out, in) int8 and its scale.

    ``online``: ``scale`` is transformers' ``s = 1/mean|W|`` (W' = t / s).
    ``offline``: ``scale`` is the checkpoint's ``weight_scale`` (y = (x'·t) · weight_scale).
    """

    name: str
    t: np.ndarray
    scale: np.float32
    online: bool
    _wf: np.ndarray | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        return self.t.shape  # type: ignore[return-value]

    def golden_weight(self) -> np.ndarray:
        """The float32 weight AutoBitLinear multiplies by (ternary, dequantized for online)."""
        if self._wf is None:
            tf = self.t.astype(F32)
            self._wf = tf / self.scale if self.online else tf
        return self._wf


def absmean_ternarize(w: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """transformers' WeightQuant: ``s = 1/clamp(mean|W|, 1e-5)``, ``t = clip(rint(W·s), -1, 1)``."""
    w = np.asarray(w, dtype=F32)
    s = F32(1.0) / np.maximum(np.abs(w).mean(dtype=F32), F32(1e-5))
    t = np.clip(np.rint(w * s), -1, 1).astype(np.int8)
    return t, F32(s)


def act_quant(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-token absmax int8 (transformers' ActQuant): returns (q int8, a float32 per row)."""
    x = np.asarray(x, dtype=F32)
    a = F32(127.0) / np.maximum(np.abs(x).max(axis=-1, keepdims=True), F32(1e-5))
    q = np.clip(np.rint(x * a), -128, 127).astype(np.int8)
    return q, a.astype(F32)


def rope_tables(cfg: BitNetConfig, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = cfg.head_dim
    inv = (1.0 / (F32(cfg.rope_theta) ** (np.arange(0, d, 2, dtype=F32) / F32(d)))).astype(F32)
    freqs = positions.astype(F32)[:, None] * inv[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb).astype(F32), np.sin(emb).astype(F32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x (T, heads, d): HF rotate_half pairing (i, i + d/2)."""
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return (x * cos[:, None, :] + rot * sin[:, None, :]).astype(F32)


@dataclass
class LayerWeights:
    linears: dict[str, TernaryLinear]
    input_layernorm: np.ndarray
    post_attention_layernorm: np.ndarray
    attn_sub_norm: np.ndarray
    ffn_sub_norm: np.ndarray


@dataclass
class BitNetWeights:
    embed: np.ndarray  # (vocab, hidden) float32
    layers: list[LayerWeights]
    norm: np.ndarray
    lm_head: np.ndarray  # (vocab, hidden) float32; the embedding itself when tied

    def validate(self, cfg: BitNetConfig) -> None:
        if self.embed.shape != (cfg.vocab_size, cfg.hidden_size):
            raise ModelError(f"embed_tokens has shape {self.embed.shape}, config says "
                             f"{(cfg.vocab_size, cfg.hidden_size)}")
        if len(self.layers) != cfg.num_hidden_layers:
            raise ModelError(f"{len(self.layers)} layers of weights, config says {cfg.num_hidden_layers}")
        for i, lw in enumerate(self.layers):
            for name, shp in cfg.linear_shapes().items():
                got = lw.linears[name].shape
                if got != shp:
                    raise ModelError(f"layer {i} {name} has shape {got}, expected {shp}")


@dataclass
class KVCache:
    k: list[np.ndarray]  # per layer (T, kv_heads, head_dim) float32
    v: list[np.ndarray]

    @property
    def length(self) -> int:
        return 0 if not self.k else int(self.k[0].shape[0])


Observer = Callable[[int, str, np.ndarray, np.ndarray | None], None]


class BitNet:
    """A loaded BitNet b1.58 model. ``mode`` is ``golden`` or ``quant``; in quant mode ``ops``
    executes the integer steps (default: `intpath.RefOps`) and ``temperature`` picks the softmax
    temperature rule (``fold`` or ``pow2``, see `intpath`). ``observer(layer, name, x, q)`` sees
    every projection's input (float x in golden mode; the int8 q as both in quant mode)."""

    def __init__(self, cfg: BitNetConfig, weights: BitNetWeights, mode: str = "golden",
                 ops: IntOps | None = None, observer: Observer | None = None,
                 temperature: str = "fold") -> None:
        if mode not in ("golden", "quant"):
            raise ConfigError(f"BitNet mode {mode!r} is not golden/quant")
        weights.validate(cfg)
        self.cfg, self.w, self.mode = cfg, weights, mode
        self.observer = observer
        self.intpath = IntegerDatapath(self, ops, temperature) if mode == "quant" else None

    def new_cache(self) -> KVCache:
        c = self.cfg
        z = np.zeros((0, c.num_key_value_heads, c.head_dim), F32)
        return KVCache([z] * c.num_hidden_layers, [z] * c.num_hidden_layers)

    # -- projections ----------------------------------------------------------------------------
    def linear(self, layer: int, lin: TernaryLinear, x: np.ndarray) -> np.ndarray:
        """transformers' AutoBitLinear in float32 (the golden projection)."""
        if self.observer:
            self.observer(layer, lin.name, x, None)
        q, a = act_quant(x)
        xq = q.astype(F32) / a
        y = xq @ lin.golden_weight().T
        return y if lin.online else (y * lin.scale).astype(F32)

    # -- forward --------------------------------------------------------------------------------
    def forward(self, ids: np.ndarray | list[int], cache: KVCache) -> np.ndarray:
        """Run tokens ``ids`` (appended after the cache) and return their logits (T, vocab) float32."""
        c = self.cfg
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ModelError("no tokens to run")
        if ids.min() < 0 or ids.max() >= c.vocab_size:
            raise ModelError(f"token id out of range [0, {c.vocab_size})")
        if self.intpath is not None:
            return self.intpath.forward(ids, cache)
        start = cache.length
        pos = np.arange(start, start + ids.size)
        cos, sin = rope_tables(c, pos)
        x = self.w.embed[ids].astype(F32)
        for i, lw in enumerate(self.w.layers):
            h = rms_norm(x, lw.input_layernorm, c.rms_norm_eps)
            x = x + self._attention(i, lw, h, cache, cos, sin)
            h = rms_norm(x, lw.post_attention_layernorm, c.rms_norm_eps)
            x = x + self._ffn(i, lw, h)
        x = rms_norm(x, self.w.norm, c.rms_norm_eps)
        return (x @ self.w.lm_head.T).astype(F32)

    def _attention(self, i: int, lw: LayerWeights, h: np.ndarray, cache: KVCache,
                   cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        c = self.cfg
        T = h.shape[0]
        L = lw.linears
        q = self.linear(i, L["q_proj"], h).reshape(T, c.num_attention_heads, c.head_dim)
        k = self.linear(i, L["k_proj"], h).reshape(T, c.num_key_value_heads, c.head_dim)
        v = self.linear(i, L["v_proj"], h).reshape(T, c.num_key_value_heads, c.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        cache.k[i] = np.concatenate([cache.k[i], k])
        cache.v[i] = np.concatenate([cache.v[i], v])
        K = np.repeat(cache.k[i], c.kv_groups, axis=1)  # (S, heads, d)
        V = np.repeat(cache.v[i], c.kv_groups, axis=1)
        S = K.shape[0]
        scores = np.einsum("thd,shd->hts", q, K).astype(F32) * F32(c.head_dim ** -0.5)
        qpos = np.arange(S - T, S)[:, None]
        scores = np.where(np.arange(S)[None, :] <= qpos, scores, F32(-np.inf))
        scores = scores - scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p = (p / p.sum(axis=-1, keepdims=True)).astype(F32)
        ctx = np.einsum("hts,shd->thd", p, V).reshape(T, c.q_dim).astype(F32)
        ctx = rms_norm(ctx, lw.attn_sub_norm, c.rms_norm_eps)
        return self.linear(i, L["o_proj"], ctx)

    def _ffn(self, i: int, lw: LayerWeights, h: np.ndarray) -> np.ndarray:
        L = lw.linears
        g = self.linear(i, L["gate_proj"], h)
        u = self.linear(i, L["up_proj"], h)
        r = np.maximum(g, F32(0))
        a = (r * r * u).astype(F32)
        a = rms_norm(a, lw.ffn_sub_norm, self.cfg.rms_norm_eps)
        return self.linear(i, L["down_proj"], a)

    def generate(self, prompt: list[int], max_new_tokens: int,
                 on_step: Callable[[int, np.ndarray], None] | None = None) -> list[int]:
        """Greedy decode; ``on_step(token, logits)`` sees each step's last-position logits."""
        cache = self.new_cache()
        logits = self.forward(prompt, cache)[-1]
        out: list[int] = []
        for _ in range(max_new_tokens):
            tok = int(np.argmax(logits))
            if on_step:
                on_step(tok, logits)
            out.append(tok)
            logits = self.forward([tok], cache)[-1]
        return out
