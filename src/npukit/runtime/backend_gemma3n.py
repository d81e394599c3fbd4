"""The ``golden`` target for Gemma 3n: the float32 NumPy reference (not transformers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from npukit.models.gemma3n.reference import KV_MODES, Gemma3nReference
from npukit.runtime.backends import register_backend


class Gemma3nGolden:
    """Backend wrapper around `Gemma3nReference` (``kv``: fp32 exact, or fp16-rounded cache)."""

    target = "golden"

    def __init__(self, model: Any, kv: str = "fp32", plan: str = "auto") -> None:
        self.model = model
        self.ref = Gemma3nReference(model.weights, kv=kv, plan=plan)
        self.kv = kv

    def reset(self) -> None:
        self.ref.reset()

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        return self.ref.prefill(ids)

    def step(self, token: int) -> np.ndarray:
        return self.ref.step(token)

    def stats(self) -> dict[str, Any]:
        return {"target": self.target, "kv": self.kv, **self.ref.stats()}


register_backend("gemma3n", "golden", Gemma3nGolden, kv_modes=KV_MODES,
                 help="float32 NumPy reference of transformers' Gemma 3n")
