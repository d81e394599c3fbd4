"""Registers the BitNet b1.58 family with the model loader (HF directories and the bitnet-* presets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from npukit.models.bitnet.config import BitNetConfig
from npukit.models.bitnet.load import load_gguf, load_hf_dir, synthetic_weights
from npukit.models.gguf import GGUFFile, tokenizer_from_gguf
from npukit.models.loading import LoadedModel, load_tokenizer, register_family, register_file_format


def load_bitnet_family(raw: dict[str, Any], directory: Path | None, name: str, seed: int) -> LoadedModel:
    if directory is None:
        # presets carry no weights: synthetic master weights, quantized online
        raw = dict(raw, quantization_config=dict(raw.get("quantization_config") or {},
                                                 quantization_mode="online"))
        cfg = BitNetConfig.from_hf(raw)
        return LoadedModel("bitnet", name, cfg, synthetic_weights(cfg, seed), None, "preset", raw)
    cfg, weights = load_hf_dir(directory)
    return LoadedModel("bitnet", name, cfg, weights, load_tokenizer(directory), "checkpoint", raw)


def load_bitnet_gguf(path: Path, name: str) -> LoadedModel:
    """A llama.cpp-style BitNet GGUF file (TQ1_0 / TQ2_0 / I2_S ternary tensors), with the tokenizer
    its metadata describes when it has one."""
    cfg, weights = load_gguf(path)
    meta = GGUFFile(path).meta
    tokenizer = tokenizer_from_gguf(meta)[0] if "tokenizer.ggml.model" in meta else None
    return LoadedModel("bitnet", name, cfg, weights, tokenizer, "checkpoint", {"model_type": "bitnet"})


register_family("bitnet", ("bitnet",), load_bitnet_family)
register_file_format(".gguf", load_bitnet_gguf)
