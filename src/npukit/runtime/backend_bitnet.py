"""BitNet b1.58 backends of the model family: ``golden`` (float32 AutoBitLinear arithmetic) and
``quant`` (the integer reference of ternfpga's datapath, `npukit.models.bitnet.intpath`).

The ``tern`` backend — the same integer datapath executed by the simulated ternfpga — is the tern
target's (`npukit.targets.tern.backend`): it extends `BitNetBackend` with the engine's operation set,
the timing core and traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError
from npukit.evidence import Ledger
from npukit.models.bitnet.model import BitNet
from npukit.runtime.backends import register_backend

KV_MODES = ("fp32",)  # the references keep their K/V cache in float32


class BitNetBackend:
    """A BitNet reference run one sequence at a time; ``ops`` (a target's operation set) executes the
    ``quant`` datapath's projections when given."""

    ops: Any = None

    def __init__(self, model: Any, kv: str = "fp32", target: str = "golden", temperature: str = "fold",
                 trace: str | None = None, ops: Any = None) -> None:
        if trace is not None and ops is None:
            raise ConfigError(f"--trace needs a target with a timing model; {target!r} has none (use tern)")
        self.target, self.kv, self.trace_path, self.ops = target, kv, trace, ops
        mode = "golden" if target == "golden" else "quant"
        self.net = BitNet(model.config, model.weights, mode=mode, ops=ops, temperature=temperature)
        self.cache = self.net.new_cache()

    def reset(self) -> None:
        self.cache = self.net.new_cache()

    def _forward(self, ids: list[int], kind: str) -> np.ndarray:
        return self.net.forward(ids, self.cache)[-1]

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        return self._forward([int(t) for t in ids], "prefill")

    def step(self, token: int) -> np.ndarray:
        return self._forward([int(token)], "decode")

    def timing(self) -> Ledger:
        raise ConfigError(f"target {self.target!r} has no timing model (only tern)")

    def trace(self, path: str | Path, phase: str = "") -> Path:
        raise ConfigError(f"target {self.target!r} has no timing model (only tern)")

    def stats(self) -> dict[str, Any]:
        c = self.net.cfg
        return {"target": self.target, "kv": self.kv, "positions": self.cache.length,
                "kv_bytes": 2 * c.num_hidden_layers * self.cache.length * c.kv_dim * 4}


def _factory(target: str):
    def make(model: Any, kv: str = "fp32", **options: Any) -> BitNetBackend:
        return BitNetBackend(model, kv=kv, target=target, **options)
    return make


register_backend("bitnet", "golden", _factory("golden"), KV_MODES,
                 help="float32 NumPy reference of transformers' BitNet (AutoBitLinear)")
register_backend("bitnet", "quant", _factory("quant"), KV_MODES,
                 help="integer reference of ternfpga's datapath (int8×ternary, Q15 glue, fixed-point units)")
