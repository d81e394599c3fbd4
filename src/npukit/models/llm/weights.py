"""`LlmWeights`: a GGUF decoder's tensors as transformers loads them, dequantised on first use.

Two conversions undo what llama.cpp's converter did, bit for bit as transformers' GGUF loader does:
Llama's q/k rows were permuted for llama.cpp's interleaved RoPE (rows are put back so that RoPE rotates
halves, as in transformers), and Gemma's RMSNorm weights were stored as ``1 + w`` (``w = stored - 1`` is
kept, and the norm multiplies by ``1 + w`` as transformers' Gemma 3 does).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from npukit.errors import ModelError
from npukit.models.gguf import GGUFFile
from npukit.models.llm.config import LlmConfig

# role -> GGUF tensor name inside block N
BLOCK_TENSORS = {
    "attn_norm": "attn_norm", "q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output",
    "q_norm": "attn_q_norm", "k_norm": "attn_k_norm", "post_attn_norm": "post_attention_norm",
    "ffn_norm": "ffn_norm", "gate": "ffn_gate", "up": "ffn_up", "down": "ffn_down",
    "post_ffn_norm": "post_ffw_norm",
}
GEMMA_ONLY = ("q_norm", "k_norm", "post_attn_norm", "post_ffn_norm")


def unpermute_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Inverse of llama.cpp's q/k permutation: per head, rows (pair i, member j) go back to j-th half."""
    rows = w.shape[0]
    half = rows // heads // 2
    return np.ascontiguousarray(w.reshape(heads, half, 2, -1).swapaxes(1, 2).reshape(rows, -1))


class LlmWeights:
    """Float32 tensors by role; ``raw(name)`` keeps the GGUF bytes available to quantising targets."""

    def __init__(self, cfg: LlmConfig, gguf: GGUFFile, where: str) -> None:
        self.cfg, self.gguf, self.where = cfg, gguf, where
        self._cache: dict[str, np.ndarray] = {}
        roles = [r for r in BLOCK_TENSORS if cfg.gemma or r not in GEMMA_ONLY]
        missing = [self.name(i, r) for i in range(cfg.num_layers) for r in roles
                   if self.name(i, r) not in gguf.tensors]
        if missing:
            raise ModelError(f"{where}: tensors missing for {cfg.arch}: {', '.join(missing[:4])}"
                             + (" ..." if len(missing) > 4 else ""))

    @staticmethod
    def name(layer: int, role: str) -> str:
        return f"blk.{layer}.{BLOCK_TENSORS[role]}.weight"

    def tensor(self, name: str) -> np.ndarray:
        got = self._cache.get(name)
        if got is None:
            got = self._convert(name, self.gguf.float32(name))
            self._cache[name] = got
        return got

    def _convert(self, name: str, w: np.ndarray) -> np.ndarray:
        cfg = self.cfg
        if not cfg.gemma and name.endswith("attn_q.weight"):
            return unpermute_rows(w, cfg.num_heads)
        if not cfg.gemma and name.endswith("attn_k.weight"):
            return unpermute_rows(w, cfg.num_kv_heads)
        if cfg.gemma and name.endswith("norm.weight"):
            return w - np.float32(1.0)
        return w

    def block(self, layer: int, role: str) -> np.ndarray:
        return self.tensor(self.name(layer, role))

    @property
    def embedding(self) -> np.ndarray:
        return self.tensor("token_embd.weight")

    @property
    def lm_head(self) -> np.ndarray:
        return self.embedding if self.cfg.tied_embeddings else self.tensor("output.weight")

    @property
    def final_norm(self) -> np.ndarray:
        return self.tensor("output_norm.weight")


def open_gguf_llm(path: str | Path) -> tuple[LlmConfig, LlmWeights, GGUFFile]:
    g = GGUFFile(path)
    cfg = LlmConfig.from_gguf(g.meta, {n: g.shape(n) for n in g.tensors}, str(path))
    return cfg, LlmWeights(cfg, g, str(path)), g
