"""The ``golden`` target for the GGUF LLM families (``gemma3``, ``llama``): the float32 NumPy reference
(`npukit.models.llm.reference.LlmReference`), checked against transformers' float run."""

from __future__ import annotations

from typing import Any

from npukit.models.llm.config import ARCHITECTURES
from npukit.models.llm.reference import KV_MODES, LlmReference
from npukit.runtime.backends import ModelBackend, register_backend


class LlmGolden(ModelBackend):
    """Backend wrapper around `LlmReference` (``kv``: fp32 exact, or fp16-rounded cache)."""

    target = "golden"

    def __init__(self, model: Any, kv: str = "fp32") -> None:
        self.model = model
        self.ref = LlmReference(model.weights, kv=kv)
        self.kv = kv

    def stats(self) -> dict[str, Any]:
        return {"target": self.target, "kv": self.kv, **self.ref.stats()}


for _arch in ARCHITECTURES:
    register_backend(_arch, "golden", LlmGolden, kv_modes=KV_MODES,
                     help="float32 NumPy reference of transformers' float model (GGUF weights dequantised)")
