"""Gemma 3n text decoder: typed config, weights (checkpoint or synthetic), float32 reference."""

from npukit.models.gemma3n.config import Gemma3nConfig
from npukit.models.gemma3n.reference import Gemma3nReference, KVCache
from npukit.models.gemma3n.weights import (
    Gemma3nWeights,
    SyntheticSource,
    expected_shapes,
    layer_shapes,
    parameter_count,
    synthetic_weights,
)

__all__ = [
    "Gemma3nConfig",
    "Gemma3nReference",
    "Gemma3nWeights",
    "KVCache",
    "SyntheticSource",
    "expected_shapes",
    "layer_shapes",
    "parameter_count",
    "synthetic_weights",
]
