"""Registers the Gemma 3n family with the model loader (HF directories and the gemma3n-* presets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from npukit.models.gemma3n.config import MULTIMODAL_MODEL_TYPES, TEXT_MODEL_TYPES, Gemma3nConfig
from npukit.models.gemma3n.weights import Gemma3nWeights, synthetic_weights
from npukit.models.loading import LoadedModel, load_tokenizer, register_family
from npukit.models.safetensors import open_checkpoint


def load_gemma3n(raw: dict[str, Any], directory: Path | None, name: str, seed: int) -> LoadedModel:
    cfg = Gemma3nConfig.from_hf(raw)
    if directory is None:
        return LoadedModel("gemma3n", name, cfg, synthetic_weights(cfg, seed, f"preset {name}"),
                           None, "preset", raw)
    weights = Gemma3nWeights(cfg, open_checkpoint(directory), str(directory))
    return LoadedModel("gemma3n", name, cfg, weights, load_tokenizer(directory), "checkpoint", raw)


register_family("gemma3n", TEXT_MODEL_TYPES + MULTIMODAL_MODEL_TYPES, load_gemma3n)
