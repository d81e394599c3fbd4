"""Decoder-only LLMs read from GGUF files: Gemma 3 (text) and Llama (SmolLM2 and the like) — config from
the file's metadata, float32 weights as transformers loads them, and the float32 NumPy reference."""

from npukit.models.llm.config import ARCHITECTURES, LlmConfig
from npukit.models.llm.weights import LlmWeights

__all__ = ["ARCHITECTURES", "LlmConfig", "LlmWeights"]
