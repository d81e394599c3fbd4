"""`LlmReference`: the float32 NumPy forward pass of Gemma 3 (text) and Llama, op for op as transformers'
eager implementation computes it (float32 RMSNorm, RoPE tables from float32 inverse frequencies,
``softmax(q k^T * scale + mask)``), with a KV cache for one sequence.

KV modes: ``fp32`` keeps keys and values exact; ``fp16`` rounds them to half precision as they enter the
cache. Quantising targets reuse the forward pass and swap the matrix products (`Linear`) and the cache
rounding (`kv_store`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from npukit.errors import ConfigError, ModelError
from npukit.models.llm.weights import LlmWeights

KV_MODES = ("fp32", "fp16")
GELU_C = np.float32(np.sqrt(2.0 / np.pi))


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float, one_plus: bool) -> np.ndarray:
    var = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
    y = x * (np.float32(1.0) / np.sqrt(var + np.float32(eps)))
    return y * (np.float32(1.0) + w) if one_plus else w * y


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(GELU_C * (x + np.float32(0.044715) * x * x * x)))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1.0) + np.exp(-x))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def rope_tables(theta: float, dim: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    inv = np.float32(1.0) / (np.float32(theta) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    freqs = positions.astype(np.float32)[:, None] * inv[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x: (heads, T, dim); rotate-half RoPE."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


# a matrix product y = x @ W.T for one weight (quantising targets replace it)
Linear = Callable[[np.ndarray, str], np.ndarray]


class KVCache:
    """Per-layer keys/values (kv_heads, positions, head_dim), grown by doubling."""

    def __init__(self, layers: int, heads: int, dim: int) -> None:
        self.layers, self.heads, self.dim = layers, heads, dim
        self.reset()

    def reset(self) -> None:
        self.k = [np.zeros((self.heads, 0, self.dim), np.float32) for _ in range(self.layers)]
        self.v = [np.zeros((self.heads, 0, self.dim), np.float32) for _ in range(self.layers)]
        self.length = [0] * self.layers

    def append(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n, t = self.length[layer], k.shape[1]
        if n + t > self.k[layer].shape[1]:
            cap = max(2 * (n + t), 64)
            for store in (self.k, self.v):
                grown = np.zeros((self.heads, cap, self.dim), np.float32)
                grown[:, :n] = store[layer][:, :n]
                store[layer] = grown
        self.k[layer][:, n:n + t] = k
        self.v[layer][:, n:n + t] = v
        self.length[layer] = n + t
        return self.k[layer][:, :n + t], self.v[layer][:, :n + t]


class LlmReference:
    """One sequence at a time: ``prefill(ids)``, ``step(token)`` -> float32 logits of the last position;
    ``forward(ids, all_logits=True)`` -> logits of every position (perplexity)."""

    def __init__(self, weights: LlmWeights, kv: str = "fp32", linear: Linear | None = None) -> None:
        if kv not in KV_MODES:
            raise ConfigError(f"kv mode {kv!r} unsupported (use one of {', '.join(KV_MODES)})")
        self.w, self.cfg, self.kv = weights, weights.cfg, kv
        self.linear: Linear = linear or (lambda x, name: x @ self.w.tensor(name).T)
        c = self.cfg
        self.cache = KVCache(c.num_layers, c.num_kv_heads, c.head_dim)
        self.pos = 0

    def kv_store(self, x: np.ndarray) -> np.ndarray:
        """The values the cache keeps for fresh keys or values (fp16: rounded to half precision)."""
        return x.astype(np.float16).astype(np.float32) if self.kv == "fp16" else x

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        return self.w.embedding[tokens]

    def reset(self) -> None:
        self.cache.reset()
        self.pos = 0

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        self.reset()
        return self.forward(ids)[-1]

    def step(self, token: int) -> np.ndarray:
        return self.forward([token])[-1]

    def stats(self) -> dict[str, Any]:
        c = self.cfg
        per_token = 2 * c.num_layers * c.num_kv_heads * c.head_dim * (2 if self.kv == "fp16" else 4)
        return {"positions": self.pos, "kv_bytes": per_token * self.pos}

    def forward(self, ids: Sequence[int], all_logits: bool = True) -> np.ndarray:
        c = self.cfg
        tokens = np.asarray(ids, dtype=np.int64)
        if tokens.size == 0 or tokens.min() < 0 or tokens.max() >= c.vocab_size:
            raise ModelError(f"token ids must be in [0, {c.vocab_size}) and non-empty")
        x = self.embed(tokens)
        if c.gemma:
            x = x * np.float32(c.hidden_size ** 0.5)
        positions = np.arange(self.pos, self.pos + tokens.size)
        for layer in range(c.num_layers):
            x = self._block(layer, x, positions)
        self.pos += tokens.size
        x = rms_norm(x if all_logits else x[-1:], self.w.final_norm, c.rms_norm_eps, c.gemma)
        return self.linear(x, "output.weight" if not c.tied_embeddings else "token_embd.weight")

    def _block(self, layer: int, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        c, w = self.cfg, self.w
        h = rms_norm(x, w.block(layer, "attn_norm"), c.rms_norm_eps, c.gemma)
        a = self._attention(layer, h, positions)
        if c.gemma:
            a = rms_norm(a, w.block(layer, "post_attn_norm"), c.rms_norm_eps, True)
        x = x + a
        h = rms_norm(x, w.block(layer, "ffn_norm"), c.rms_norm_eps, c.gemma)
        act = gelu_tanh if c.gemma else silu
        gate = act(self.linear(h, w.name(layer, "gate")))
        f = self.linear(gate * self.linear(h, w.name(layer, "up")), w.name(layer, "down"))
        if c.gemma:
            f = rms_norm(f, w.block(layer, "post_ffn_norm"), c.rms_norm_eps, True)
        return x + f

    def _attention(self, layer: int, h: np.ndarray, positions: np.ndarray) -> np.ndarray:
        c, w = self.cfg, self.w
        t, d = h.shape[0], c.head_dim
        q = self.linear(h, w.name(layer, "q")).reshape(t, c.num_heads, d).transpose(1, 0, 2)
        k = self.linear(h, w.name(layer, "k")).reshape(t, c.num_kv_heads, d).transpose(1, 0, 2)
        v = self.linear(h, w.name(layer, "v")).reshape(t, c.num_kv_heads, d).transpose(1, 0, 2)
        if c.gemma:
            q = rms_norm(q, w.block(layer, "q_norm"), c.rms_norm_eps, True)
            k = rms_norm(k, w.block(layer, "k_norm"), c.rms_norm_eps, True)
        cos, sin = rope_tables(c.layer_theta(layer), d, positions)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        keys, values = self.cache.append(layer, self.kv_store(k), self.kv_store(v))
        group = c.num_heads // c.num_kv_heads
        keys, values = np.repeat(keys, group, axis=0), np.repeat(values, group, axis=0)
        scores = (q @ keys.transpose(0, 2, 1)) * np.float32(c.query_scale)
        kpos = np.arange(keys.shape[1])
        allowed = kpos[None, :] <= positions[:, None]
        if c.is_sliding(layer) and c.sliding_window:
            allowed &= positions[:, None] - kpos[None, :] < c.sliding_window
        scores = np.where(allowed[None], scores, np.float32(-np.inf))
        out = softmax(scores) @ values  # (heads, T, d)
        return self.linear(out.transpose(1, 0, 2).reshape(t, c.num_heads * d), w.name(layer, "o"))
