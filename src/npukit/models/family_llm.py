"""Registers the GGUF decoder LLMs with the model loader: families ``gemma3`` (Gemma 3, text) and ``llama``
(Llama and its kin, e.g. SmolLM2), chosen by a ``.gguf`` file's ``general.architecture``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from npukit.errors import ModelError
from npukit.models.gguf import tokenizer_from_gguf
from npukit.models.llm.config import ARCHITECTURES
from npukit.models.llm.weights import open_gguf_llm
from npukit.models.loading import LoadedModel, register_family, register_gguf_architecture


def load_llm_gguf(path: Path, name: str) -> LoadedModel:
    """A Gemma 3 / Llama GGUF file with the tokenizer its metadata describes."""
    cfg, weights, g = open_gguf_llm(path)
    tokenizer = tokenizer_from_gguf(g.meta)[0] if "tokenizer.ggml.model" in g.meta else None
    return LoadedModel(cfg.arch, name, cfg, weights, tokenizer, "checkpoint",
                       {"model_type": cfg.arch, "format": "gguf"})


def _directories_unsupported(raw: dict[str, Any], _dir: Path | None, name: str, _seed: int) -> LoadedModel:
    raise ModelError(f"{name}: {raw.get('model_type')} runs from a .gguf file (no presets or directories)")


for _arch in ARCHITECTURES:
    # no Hugging Face model_type is claimed: these families load from GGUF files only
    register_family(_arch, (), _directories_unsupported)
    register_gguf_architecture(_arch, load_llm_gguf)
