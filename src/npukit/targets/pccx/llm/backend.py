"""The ``quant`` target for the GGUF LLM families (``gemma3``, ``llama``): `LlmW4A8`, pccx's W4A8
matrix arithmetic and KV formats (``--kv fp16|int8|int4``). Weights are quantised on first use."""

from __future__ import annotations

from typing import Any

from npukit.models.llm.config import ARCHITECTURES
from npukit.runtime.backends import ModelBackend, register_backend
from npukit.targets.pccx.llm.model import KV_MODES, LlmW4A8


class LlmQuant(ModelBackend):
    target = "quant"

    def __init__(self, model: Any, kv: str = "fp16") -> None:
        self.model = model
        self.ref = LlmW4A8(model.weights, kv=kv)
        self.kv = kv

    def stats(self) -> dict[str, Any]:
        return {"target": self.target, **self.ref.stats()}


for _arch in ARCHITECTURES:
    register_backend(_arch, "quant", LlmQuant, kv_modes=KV_MODES,
                     help="pccx W4A8 matrix products (INT4 weights, groups of 32) and KV formats")
