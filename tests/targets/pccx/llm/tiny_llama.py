"""A tiny random Llama GGUF file (written by the PyPI ``gguf`` writer) whose matrices are Q8_0, so the
weight policy re-quantises them to INT4 (GPTQ), plus one Q4_0 matrix that maps without loss."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from gguf.quants import quantize

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, VOCAB = 128, 256, 2, 4, 2, 96
SHAPES = {"attn_q": (HIDDEN, HIDDEN), "attn_k": (HIDDEN // 2, HIDDEN), "attn_v": (HIDDEN // 2, HIDDEN),
          "attn_output": (HIDDEN, HIDDEN), "ffn_gate": (FFN, HIDDEN), "ffn_up": (FFN, HIDDEN),
          "ffn_down": (HIDDEN, FFN)}
LOSSLESS = "blk.1.attn_output.weight"  # stored as Q4_0: INT4 already, never calibrated


def write_tiny_llama(path: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in (("embedding_length", HIDDEN), ("feed_forward_length", FFN), ("block_count", LAYERS),
                       ("attention.head_count", HEADS), ("attention.head_count_kv", KV_HEADS),
                       ("context_length", 256)):
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_tensor("token_embd.weight", quantize(rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32),
                                               gguf.GGMLQuantizationType.Q8_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
    for layer in range(LAYERS):
        for norm in ("attn_norm", "ffn_norm"):
            gamma = (1 + 0.3 * rng.standard_normal(HIDDEN)).astype(np.float32)
            w.add_tensor(f"blk.{layer}.{norm}.weight", gamma)
        for part, (rows, cols) in SHAPES.items():
            name = f"blk.{layer}.{part}.weight"
            kind = gguf.GGMLQuantizationType.Q4_0 if name == LOSSLESS else gguf.GGMLQuantizationType.Q8_0
            values = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
            w.add_tensor(name, quantize(values, kind), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
