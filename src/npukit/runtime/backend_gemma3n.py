"""The ``golden`` target for Gemma 3n: the float32 NumPy reference (not transformers)."""

from __future__ import annotations

from typing import Any

from npukit.models.gemma3n.reference import KV_MODES, Gemma3nReference
from npukit.runtime.backends import ModelBackend, register_backend


class Gemma3nGolden(ModelBackend):
    """Backend wrapper around `Gemma3nReference` (``kv``: fp32 exact, or fp16-rounded cache)."""

    target = "golden"

    def __init__(self, model: Any, kv: str = "fp32", plan: str = "auto") -> None:
        self.model = model
        self.ref = Gemma3nReference(model.weights, kv=kv, plan=plan)
        self.kv = kv

    def stats(self) -> dict[str, Any]:
        return {"target": self.target, "kv": self.kv, **self.ref.stats()}


register_backend("gemma3n", "golden", Gemma3nGolden, kv_modes=KV_MODES,
                 help="float32 NumPy reference of transformers' Gemma 3n")
