"""Float32 NumPy reference of the Gemma 3n text decoder (the ``golden`` target).

Semantics are transformers' ``Gemma3nForCausalLM`` (see refs §5.3): AltUp with 4 streams
(predict / correct, tanh router, magnitude-matched extra streams), LAuReL, per-layer embeddings,
KV sharing, sliding-window attention on local layers, per-type RoPE θ with ``rotate_half``,
q/k/v RMSNorms (v without weight), attention scaling 1.0, Gaussian top-k sparsity, GELU-tanh,
final logit soft-capping. Everything is float32, vectorised over tokens and heads; incremental
decoding keeps a KV cache for the layers that produce K/V (consumers read their producer's).

Memory: weights are read per tensor from a `Gemma3nWeights`. In ``resident`` mode each tensor is
fetched once and kept (F32 checkpoints stay memory-mapped views, costing no private memory); in
``streamed`` mode each layer's tensors are fetched for a forward pass and dropped, and the
output projection is applied in row chunks — slow, but bounded by one layer. ``plan="auto"``
picks resident when the private float32 copies fit in half of the available memory, streamed
when one layer fits, and otherwise refuses with `ModelError` rather than swapping.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from npukit.errors import ConfigError, ModelError
from npukit.models.gemma3n.config import Gemma3nConfig
from npukit.models.gemma3n.weights import EMBED, EMBED_PLE, LM_HEAD, Gemma3nWeights, layer_shapes

F32 = np.float32
KV_MODES = ("fp32", "fp16")
_LM_CHUNK_VALUES = 1 << 26  # output-projection rows per chunk in streamed mode: 256 MiB of float32


def rms_norm(x: np.ndarray, weight: np.ndarray | None, eps: float) -> np.ndarray:
    """x · (mean(x²) + eps)^-½ · weight, in float32 (no +1 on the weight in Gemma 3n)."""
    ms = np.mean(x * x, axis=-1, keepdims=True) + F32(eps)
    y = x * np.power(ms, F32(-0.5))
    return y if weight is None else y * weight


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = F32(math.sqrt(2.0 / math.pi))
    return F32(0.5) * x * (F32(1.0) + np.tanh(c * (x + F32(0.044715) * (x * x * x))))


def rotate_half(x: np.ndarray) -> np.ndarray:
    h = x.shape[-1] // 2
    return np.concatenate((-x[..., h:], x[..., :h]), axis=-1)


def rope_tables(theta: float, head_dim: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin of shape [T, head_dim]: inv_freq = θ^(-2i/d), duplicated halves (rotate_half pairing)."""
    inv = F32(1.0) / np.power(F32(theta), np.arange(0, head_dim, 2, dtype=F32) / F32(head_dim))
    freqs = positions.astype(F32)[:, None] * inv[None, :]
    emb = np.concatenate((freqs, freqs), axis=-1)
    return np.cos(emb), np.sin(emb)


def softcap(x: np.ndarray, cap: float | None) -> np.ndarray:
    if cap is None:
        return x
    return np.tanh(x / F32(cap)) * F32(cap)


def mem_available() -> int:
    """Bytes of memory available to this process without swapping (Linux MemAvailable)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


@dataclass
class _LayerCache:
    k: np.ndarray  # [kv_heads, capacity, head_dim]
    v: np.ndarray
    start: int = 0  # absolute position of slot 0 (sliding layers drop what no query can see)
    end: int = 0  # absolute position after the last stored key


class KVCache:
    """K/V of the producing layers, stored float32 (``fp32``) or rounded through float16 (``fp16``)."""

    def __init__(self, cfg: Gemma3nConfig, mode: str = "fp32") -> None:
        if mode not in KV_MODES:
            raise ConfigError(f"float reference KV cache supports {', '.join(KV_MODES)}, not {mode!r}")
        self.cfg, self.mode = cfg, mode
        self.layers: dict[int, _LayerCache] = {}

    def reset(self) -> None:
        self.layers.clear()

    def append(self, layer: int, k: np.ndarray, v: np.ndarray) -> None:
        """Add keys/values [T, kv_heads, head_dim] at the next positions."""
        if self.mode == "fp16":
            k, v = k.astype(np.float16).astype(F32), v.astype(np.float16).astype(F32)
        k, v = k.transpose(1, 0, 2), v.transpose(1, 0, 2)
        t = k.shape[1]
        c = self.layers.get(layer)
        if c is None:
            cap = max(16, t)
            shape = (k.shape[0], cap, k.shape[2])
            c = _LayerCache(np.empty(shape, F32), np.empty(shape, F32))
            self.layers[layer] = c
        used = c.end - c.start
        if used + t > c.k.shape[1]:
            cap = max(2 * c.k.shape[1], used + t)
            for name in ("k", "v"):
                new = np.empty((k.shape[0], cap, k.shape[2]), F32)
                new[:, :used] = getattr(c, name)[:, :used]
                setattr(c, name, new)
        c.k[:, used:used + t], c.v[:, used:used + t] = k, v
        c.end += t

    def keys_values(self, layer: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Stored K, V for absolute positions [lo, hi)."""
        c = self.layers[layer]
        if lo < c.start:
            raise ModelError(f"KV cache of layer {layer} no longer holds position {lo}")
        return c.k[:, lo - c.start:hi - c.start], c.v[:, lo - c.start:hi - c.start]

    def trim(self, layer: int, keep_from: int) -> None:
        """Forget positions before ``keep_from`` (no later query of a sliding layer can see them)."""
        c = self.layers.get(layer)
        if c is None or keep_from <= c.start:
            return
        drop = min(keep_from, c.end) - c.start
        used = c.end - c.start - drop
        c.k[:, :used] = c.k[:, drop:drop + used].copy()
        c.v[:, :used] = c.v[:, drop:drop + used].copy()
        c.start += drop

    def nbytes(self) -> int:
        return sum(c.k.nbytes + c.v.nbytes for c in self.layers.values())


class Gemma3nReference:
    """The float golden: ``prefill(ids)`` then ``step(id)``, each returning float32 logits."""

    def __init__(self, weights: Gemma3nWeights, kv: str = "fp32", plan: str = "auto",
                 budget_bytes: int | None = None) -> None:
        self.w = weights
        self.cfg = weights.config
        self.cache = KVCache(self.cfg, kv)
        self.pos = 0
        self.plan = self._plan(plan, budget_bytes)
        self._kept: dict[str, np.ndarray] = {}

    # ---- memory planning -----------------------------------------------------------------
    def _plan(self, plan: str, budget: int | None) -> str:
        if plan not in ("auto", "resident", "streamed"):
            raise ConfigError(f"unknown weight plan {plan!r} (auto, resident, streamed)")
        if plan != "auto":
            return plan
        budget = mem_available() if budget is None else budget
        private = sum(4 * math.prod(s) for n, s in self.w.shapes.items()
                      if n != EMBED_PLE and not self.w.is_mapped(n))
        if private <= budget // 2:
            return "resident"
        per_layer = max(4 * sum(math.prod(s) for s in layer_shapes(self.cfg, i).values())
                        for i in range(self.cfg.num_hidden_layers))
        streamed = per_layer + 4 * _LM_CHUNK_VALUES + 4 * self.cfg.ple_dim * self.cfg.hidden_size
        if streamed > budget * 0.8:
            raise ModelError(f"float reference needs {private / 2**30:.1f} GiB resident or "
                             f"{streamed / 2**30:.1f} GiB streamed; only {budget / 2**30:.1f} GiB available")
        return "streamed"

    def _t(self, name: str) -> np.ndarray:
        if self.plan == "streamed":
            return self.w.get(name)
        t = self._kept.get(name)
        if t is None:
            t = self._kept[name] = self.w.get(name)
        return t

    def _layer(self, i: int) -> dict[str, np.ndarray]:
        return {k: self._t(f"layers.{i}.{k}") for k in layer_shapes(self.cfg, i)}

    def _embed_rows(self, ids: np.ndarray) -> np.ndarray:
        if self.plan == "resident" and (EMBED in self._kept or self.w.is_mapped(EMBED)):
            return self._t(EMBED)[ids]
        return self.w.rows(EMBED, ids)

    # ---- API -------------------------------------------------------------------------------
    def reset(self) -> None:
        self.cache.reset()
        self.pos = 0

    def prefill(self, ids: list[int] | np.ndarray) -> np.ndarray:
        return self.forward(ids)[-1]

    def step(self, token: int) -> np.ndarray:
        return self.forward([token])[-1]

    def check_ids(self, ids: np.ndarray) -> None:
        if ids.size and (ids.min() < 0 or ids.max() >= self.cfg.vocab_size):
            bad = int(ids[(ids < 0) | (ids >= self.cfg.vocab_size)][0])
            raise ModelError(f"token id {bad} out of range [0, {self.cfg.vocab_size})")

    def forward(self, ids: list[int] | np.ndarray, all_logits: bool = False) -> np.ndarray:
        """Run new tokens at the next positions; logits [T, vocab] (only the last row unless
        ``all_logits``: the earlier rows are then returned as well)."""
        cfg = self.cfg
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ModelError("no input tokens")
        self.check_ids(ids)
        t = ids.size
        if self.pos + t > cfg.max_position_embeddings:
            raise ModelError(f"context of {self.pos + t} tokens exceeds max_position_embeddings "
                             f"{cfg.max_position_embeddings}")
        positions = np.arange(self.pos, self.pos + t)
        xs, pli = self._embed(ids)
        rope = {lt: rope_tables(th, cfg.head_dim, positions) for lt, th in cfg.rope_theta.items()}
        for i in range(cfg.num_hidden_layers):
            xs = self._decoder_layer(i, xs, pli[:, i], rope[cfg.layer_types[i]], positions)
        self.pos += t
        for i in cfg.kv_producers:  # sliding producers: keep only what a future query can see
            win = cfg.window(i)
            if win is not None:
                self.cache.trim(i, self.pos - win + 1)
        h = self._unembed(xs if all_logits else xs[:, -1:])
        return self._logits(h)

    # ---- pieces ------------------------------------------------------------------------------
    def _embed(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cfg = self.cfg
        x0 = self._embed_rows(ids) * F32(math.sqrt(cfg.hidden_size))
        # PLE table lookups: ids outside the per-layer vocabulary map to row 0, as transformers does.
        pids = np.where((ids >= 0) & (ids < cfg.vocab_size_per_layer_input), ids, 0)
        ple = self.w.rows(EMBED_PLE, pids) * F32(math.sqrt(cfg.hidden_size_per_layer_input))
        ple = ple.reshape(ids.size, cfg.num_hidden_layers, cfg.hidden_size_per_layer_input)
        proj = (x0 @ self._t("per_layer_model_projection.weight").T) * F32(cfg.hidden_size ** -0.5)
        proj = rms_norm(proj.reshape(ple.shape), self._t("per_layer_projection_norm.weight"),
                        cfg.rms_norm_eps)
        pli = (proj + ple) * F32(1.0 / math.sqrt(2.0))
        target = np.sqrt(np.mean(x0 * x0, axis=-1, keepdims=True))
        streams = [x0]
        for k in range(cfg.altup_num_inputs - 1):
            s = x0 @ self._t(f"altup_projections.{k}.weight").T
            streams.append(s * target / self._magnitude(s))
        return np.stack(streams), pli

    @staticmethod
    def _magnitude(s: np.ndarray) -> np.ndarray:
        return np.sqrt(np.maximum(np.mean(s * s, axis=-1, keepdims=True), F32(1e-5)))

    def _router(self, w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        r = rms_norm(x, w["altup.router_norm.weight"], self.cfg.rms_norm_eps)
        r = r * F32(1.0 / self.cfg.hidden_size)
        return np.tanh(r @ w["altup.modality_router.weight"].T)

    def _decoder_layer(self, i: int, xs: np.ndarray, pli: np.ndarray,
                       rope: tuple[np.ndarray, np.ndarray], positions: np.ndarray) -> np.ndarray:
        cfg, w, eps, a = self.cfg, self._layer(i), self.cfg.rms_norm_eps, self.cfg.altup_active_idx
        n = cfg.altup_num_inputs
        # AltUp predict: pred[j] = xs[j] + Σ_i C[j, i]·xs[i], C from the routed active stream.
        coefs = (self._router(w, xs[a]) @ w["altup.prediction_coefs.weight"].T).reshape(-1, n, n)
        pred = np.einsum("tji,ith->jth", coefs, xs) + xs
        active = pred[a]
        normed = rms_norm(active, w["input_layernorm.weight"], eps)
        lr = (normed @ w["laurel.linear_left.weight"].T) @ w["laurel.linear_right.weight"].T
        laurel = normed + rms_norm(lr, w["laurel.post_laurel_norm.weight"], eps)
        attn = self._attention(i, w, normed, rope, positions)
        attn = rms_norm(attn, w["post_attention_layernorm.weight"], eps)
        attn_laurel = (active + attn + laurel) / F32(math.sqrt(2.0))
        mlp = self._mlp(i, w, rms_norm(attn_laurel, w["pre_feedforward_layernorm.weight"], eps))
        activated = attn_laurel + rms_norm(mlp, w["post_feedforward_layernorm.weight"], eps)
        # AltUp correct: every stream moves by (1 + coef_j)·innovation.
        corr_coefs = self._router(w, activated) @ w["altup.correction_coefs.weight"].T + F32(1.0)
        corr = corr_coefs.T[:, :, None] * (activated - active)[None] + pred
        # Per-layer input, injected into streams 1.. only.
        first = corr[a]
        if cfg.altup_correct_scale:
            first = first * w["altup.correct_output_scale"]
        g = gelu_tanh(first @ w["per_layer_input_gate.weight"].T) * pli
        g = rms_norm(g @ w["per_layer_projection.weight"].T, w["post_per_layer_input_norm.weight"], eps)
        corr[1:] += g
        return corr

    def _attention(self, i: int, w: dict[str, np.ndarray], x: np.ndarray,
                   rope: tuple[np.ndarray, np.ndarray], positions: np.ndarray) -> np.ndarray:
        cfg, eps = self.cfg, self.cfg.rms_norm_eps
        t, d, nkv = x.shape[0], cfg.head_dim, cfg.num_key_value_heads
        cos, sin = (r[:, None, :] for r in rope)
        q = (x @ w["self_attn.q_proj.weight"].T).reshape(t, -1, d)
        q = rms_norm(q, w["self_attn.q_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        src = cfg.kv_source[i]
        if src == i:
            k = (x @ w["self_attn.k_proj.weight"].T).reshape(t, nkv, d)
            k = rms_norm(k, w["self_attn.k_norm.weight"], eps)
            k = k * cos + rotate_half(k) * sin
            v = rms_norm((x @ w["self_attn.v_proj.weight"].T).reshape(t, nkv, d), None, eps)
            self.cache.append(i, k, v)
        p0, p1 = int(positions[0]), int(positions[-1]) + 1
        win = cfg.window(i)
        lo = 0 if win is None else max(0, p0 - win + 1)
        kk, vv = self.cache.keys_values(src, lo, p1)  # [nkv, S, d]
        kpos = np.arange(lo, p1)
        visible = kpos[None, :] <= positions[:, None]
        if win is not None:
            visible &= kpos[None, :] > positions[:, None] - win
        qg = q.reshape(t, nkv, -1, d)  # query heads grouped by the KV head they share
        scores = np.einsum("tgrd,gsd->grts", qg, kk)  # attention scaling is 1.0 in Gemma 3n
        scores = np.where(visible, scores, F32(-np.inf))
        scores -= scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=-1, keepdims=True)
        out = np.einsum("grts,gsd->tgrd", p, vv).reshape(t, -1)
        return out @ w["self_attn.o_proj.weight"].T

    def _mlp(self, i: int, w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        gate = x @ w["mlp.gate_proj.weight"].T
        mult = self.cfg.sparsity_multiplier(i)
        if mult is not None:  # Gaussian top-k: keep what exceeds mean + z·std (population std)
            cutoff = gate.mean(axis=-1, keepdims=True) + gate.std(axis=-1, keepdims=True) * F32(mult)
            gate = np.maximum(gate - cutoff, F32(0.0))
        return (gelu_tanh(gate) * (x @ w["mlp.up_proj.weight"].T)) @ w["mlp.down_proj.weight"].T

    def _unembed(self, xs: np.ndarray) -> np.ndarray:
        cfg = self.cfg
        target = np.sqrt(np.mean(xs[0] * xs[0], axis=-1, keepdims=True))
        streams = [xs[0]]
        for k in range(cfg.altup_num_inputs - 1):
            s = xs[k + 1] @ self._t(f"altup_unembed_projections.{k}.weight").T
            streams.append(s * target / self._magnitude(s))
        h = np.mean(np.stack(streams), axis=0)
        return rms_norm(h, self._t("norm.weight"), cfg.rms_norm_eps)

    def _logits(self, h: np.ndarray) -> np.ndarray:
        cfg = self.cfg
        if self.plan == "resident":
            out = h @ self._t(LM_HEAD if not cfg.tie_word_embeddings else EMBED).T
        else:
            rows = max(1, _LM_CHUNK_VALUES // cfg.hidden_size)
            out = np.empty((h.shape[0], cfg.vocab_size), F32)
            for r0 in range(0, cfg.vocab_size, rows):
                out[:, r0:r0 + rows] = h @ self.w.rows(LM_HEAD, slice(r0, r0 + rows)).T
        return softcap(out, cfg.final_logit_softcapping)

    def stats(self) -> dict[str, object]:
        return {"kv_bytes": self.cache.nbytes(), "position": self.pos, "weight_plan": self.plan}
