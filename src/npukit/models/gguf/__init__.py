"""GGUF checkpoints: the file reader (metadata, tensors) and ggml tensor-type decoding."""

from npukit.models.gguf.quants import GGML_TYPES, GGMLType, dequantize, ggml_type
from npukit.models.gguf.reader import GGUFFile

__all__ = ["GGML_TYPES", "GGMLType", "GGUFFile", "dequantize", "ggml_type"]
