"""`LlmConfig`: the shape and numerics of a Gemma 3 (text) or Llama decoder, from GGUF metadata.

GGUF keys are ``<arch>.<key>`` (llama.cpp's names). What the metadata leaves out follows transformers'
config defaults for the architecture, since transformers is the float oracle: Gemma 3's local RoPE base
(10,000), query scale (``query_pre_attn_scalar`` 256), and 5 sliding layers to 1 global one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from npukit.errors import ModelError

ARCHITECTURES = ("gemma3", "llama")


@dataclass(frozen=True)
class LlmConfig:
    arch: str  # "gemma3" or "llama" (GGUF general.architecture; also the model family)
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float  # global layers (all layers for llama)
    rope_local_theta: float  # gemma3's sliding layers
    sliding_window: int | None  # gemma3: keys within this many positions (self included)
    sliding_pattern: int  # gemma3: every n-th layer is global
    query_scale: float  # multiplies q before q.k
    tied_embeddings: bool
    context_length: int
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    @property
    def gemma(self) -> bool:
        return self.arch == "gemma3"

    def is_sliding(self, layer: int) -> bool:
        return self.gemma and bool((layer + 1) % self.sliding_pattern)

    def layer_theta(self, layer: int) -> float:
        return self.rope_local_theta if self.is_sliding(layer) else self.rope_theta

    @classmethod
    def from_gguf(cls, meta: dict[str, Any], tensor_shapes: dict[str, tuple[int, ...]],
                  where: str) -> LlmConfig:
        arch = meta.get("general.architecture")
        if arch not in ARCHITECTURES:
            raise ModelError(f"{where}: GGUF architecture {arch!r} is not an LLM family npukit runs "
                             f"({', '.join(ARCHITECTURES)})")

        def m(key: str, default: Any = None) -> Any:
            v = meta.get(f"{arch}.{key}", default)
            if v is None:
                raise ModelError(f"{where}: GGUF metadata {arch}.{key} missing")
            return v

        if "token_embd.weight" not in tensor_shapes:
            raise ModelError(f"{where}: no token_embd.weight tensor")
        hidden, heads = int(m("embedding_length")), int(m("attention.head_count"))
        head_dim = int(m("attention.key_length", meta.get(f"{arch}.rope.dimension_count", hidden // heads)))
        gemma = arch == "gemma3"
        eos = meta.get("tokenizer.ggml.eos_token_id")
        return cls(
            arch=arch, vocab_size=int(tensor_shapes["token_embd.weight"][0]), hidden_size=hidden,
            intermediate_size=int(m("feed_forward_length")), num_layers=int(m("block_count")),
            num_heads=heads, num_kv_heads=int(m("attention.head_count_kv", heads)), head_dim=head_dim,
            rms_norm_eps=float(m("attention.layer_norm_rms_epsilon", 1e-6)),
            rope_theta=float(m("rope.freq_base", 10000.0)), rope_local_theta=10000.0,
            sliding_window=int(m("attention.sliding_window")) if gemma else None, sliding_pattern=6,
            query_scale=256.0 ** -0.5 if gemma else 1.0 / math.sqrt(head_dim),
            tied_embeddings="output.weight" not in tensor_shapes,
            context_length=int(m("context_length", 2048)),
            bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
            eos_token_ids=() if eos is None else (int(eos),))

    def to_hf_config(self) -> dict[str, Any]:
        """The transformers-style ``config.json`` fields of this shape (what `npukit.perf` reads)."""
        return {"model_type": "gemma3_text" if self.gemma else "llama", "hidden_size": self.hidden_size,
                "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_layers,
                "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
                "head_dim": self.head_dim, "vocab_size": self.vocab_size,
                "max_position_embeddings": self.context_length, "sliding_window": self.sliding_window,
                "tie_word_embeddings": self.tied_embeddings}


def gguf_llm_config(path: str) -> LlmConfig:
    """The `LlmConfig` of a Gemma 3 / Llama GGUF file from its metadata (no tensor is read)."""
    from npukit.models.gguf import GGUFFile

    g = GGUFFile(path)
    return LlmConfig.from_gguf(g.meta, {n: g.shape(n) for n in g.tensors}, str(path))
