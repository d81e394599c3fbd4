"""Backends for the GGUF LLM families (``gemma3``, ``llama``) on pccx:

* ``quant`` — `LlmW4A8`, pccx's W4A8 matrix arithmetic (the weight policy) and KV formats
  (``--kv fp16|int8|int4``); weights are made on first use;
* ``pccx`` — `LlmPccxOffload`: the same model with every matrix product compiled to a pccx v002 program
  and run on the simulated NPU with per-token cycles (vector operations on the host: the first step of
  the full target, docs/models.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from npukit import hw as hwmod
from npukit.evidence import Ledger, Tier
from npukit.models.llm.config import ARCHITECTURES
from npukit.runtime.backends import ModelBackend, register_backend
from npukit.targets.pccx.memory import KV_FORMATS as KV_MODES  # (the model's own check reads the same)

DEFAULT_HW = "pccx-v002-kv260"


class LlmQuant(ModelBackend):
    target = "quant"

    def __init__(self, model: Any, kv: str = "fp16") -> None:
        from npukit.targets.pccx.llm.model import LlmW4A8  # (here: listing the targets imports no model)

        self.model = model
        self.ref = LlmW4A8(model.weights, kv=kv)
        self.kv = kv

    def stats(self) -> dict[str, Any]:
        return {"target": self.target, **self.ref.stats()}


class LlmPccx(ModelBackend):
    target = "pccx"

    def __init__(self, model: Any, kv: str = "fp16", hw: str | None = None, overrides: Sequence[str] = ()
                 ) -> None:
        from npukit.targets.pccx.llm.offload import LlmPccxOffload  # (as `LlmQuant`'s import)

        self.model = model
        self.hw_name, self.overrides = hw or DEFAULT_HW, list(overrides or ())
        self.ref = LlmPccxOffload(model.weights, hwmod.load_hw(self.hw_name, self.overrides, expect="pccx"),
                                  kv=kv)
        self.kv = kv
        self.prompt_tokens = 0

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        logits = self.ref.prefill(ids)
        self.prompt_tokens = len(ids)
        return logits

    def figures(self) -> Ledger:
        led = Ledger()
        decode = self.ref.token_cycles[self.prompt_tokens:] or self.ref.token_cycles
        if not decode:
            return led
        src = (f"hw {self.hw_name}" + (f" ({', '.join(self.overrides)})" if self.overrides else "")
               + " + pccx timing model; matrix products only (norms, RoPE, attention, activations run "
               "on the host and are not counted)")
        cyc = float(np.mean(decode))
        clock = self.ref.hw.clocks.core_hz
        led.add("cycles_per_token", cyc, "cycles", Tier.DERIVED, src + ", mean over decode tokens")
        led.add("projected_tok_per_s", clock / cyc, "tok/s", Tier.DERIVED, src + ", core clock / cycles")
        return led

    def stats(self) -> dict[str, Any]:
        return {"target": self.target, "hw": self.hw_name, "overrides": self.overrides,
                "simulated_cycles_per_token": self.ref.token_cycles[self.prompt_tokens:],
                "instructions": self.ref.instructions, "programs": len(self.ref.programs),
                **self.ref.stats(), **self.figures().to_json()}


for _arch in ARCHITECTURES:
    register_backend(_arch, "quant", LlmQuant, kv_modes=KV_MODES,
                     help="pccx W4A8 matrix products (the GGUF weight policy, groups of 32) and KV formats")
    register_backend(_arch, "pccx", LlmPccx, kv_modes=KV_MODES,
                     help="matrix products compiled to pccx v002 programs, run on the simulated NPU with "
                          "per-token cycles (vector operations on the host)")
