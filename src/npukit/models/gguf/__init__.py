"""GGUF checkpoints: the file reader (metadata, tensors) and ggml tensor-type decoding."""

from npukit.models.gguf.quants import GGML_TYPES, GGMLType, dequantize, ggml_type
from npukit.models.gguf.reader import GGUFFile
from npukit.models.gguf.tokenizer import GGUFTokenizerInfo, tokenizer_from_gguf

__all__ = ["GGML_TYPES", "GGMLType", "GGUFFile", "GGUFTokenizerInfo", "dequantize", "ggml_type",
           "tokenizer_from_gguf"]
