"""BitNet b1.58 backends: ``golden`` (float32 AutoBitLinear arithmetic), ``quant`` (int8 × ternary
integer reference) and ``tern`` (the same integer arithmetic with every projection executed by the
simulated ternfpga engine — base-3 weight stream, K-lane sign-select, int32 accumulation, and the
activation-sparse gather for ``down_proj``). ``tern`` is bit-identical to ``quant`` by construction
of the engine (exact integer sums), which the tests check logit for logit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from npukit.models.bitnet.model import BitNet, TernaryLinear
from npukit.runtime.backends import register_backend
from npukit.targets.tern.engine import PackedMatrix, TernaryEngine

KV_MODES = ("fp32",)  # the reference keeps its K/V cache in float32


class BitNetBackend:
    def __init__(self, model: Any, kv: str = "fp32", target: str = "golden", lanes: int = 8,
                 gather: bool = True) -> None:
        self.target, self.kv = target, kv
        self.engine: TernaryEngine | None = None
        matvec = None
        if target == "tern":
            self.engine = TernaryEngine(lanes)
            self._packed: dict[int, PackedMatrix] = {}
            self.gather = gather
            matvec = self._engine_matvec
        mode = "golden" if target == "golden" else "quant"
        self.net = BitNet(model.config, model.weights, mode=mode, matvec=matvec)
        self.cache = self.net.new_cache()

    def _engine_matvec(self, lin: TernaryLinear, q: np.ndarray) -> np.ndarray:
        assert self.engine is not None
        W = self._packed.get(id(lin))
        if W is None:
            W = self._packed[id(lin)] = PackedMatrix.from_trits(lin.t)
        if self.gather and lin.name == "down_proj":  # relu² makes down_proj's input sparse
            return self.engine.gather_gemv(W, q, lin.name)
        return self.engine.gemv(W, q, lin.name)

    def reset(self) -> None:
        self.cache = self.net.new_cache()

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        return self.net.forward(list(ids), self.cache)[-1]

    def step(self, token: int) -> np.ndarray:
        return self.net.forward([int(token)], self.cache)[-1]

    def stats(self) -> dict[str, Any]:
        c = self.net.cfg
        out: dict[str, Any] = {"target": self.target, "kv": self.kv, "positions": self.cache.length,
                               "kv_bytes": 2 * c.num_hidden_layers * self.cache.length * c.kv_dim * 4}
        if self.engine is not None:
            s = self.engine.stats
            out.update(engine_lanes=self.engine.K, engine_cycles=s.tiles, engine_dense_cycles=s.dense_tiles,
                       engine_weight_bytes=s.weight_bytes, engine_gemvs=s.gemvs)
        return out


def _factory(target: str):
    def make(model: Any, kv: str = "fp32", **options: Any) -> BitNetBackend:
        return BitNetBackend(model, kv=kv, target=target, **options)
    return make


register_backend("bitnet", "golden", _factory("golden"), KV_MODES,
                 help="float32 NumPy reference of transformers' BitNet (AutoBitLinear)")
register_backend("bitnet", "quant", _factory("quant"), KV_MODES,
                 help="int8 activations × ternary weights, exact integer accumulation, then scaling")
register_backend("bitnet", "tern", _factory("tern"), KV_MODES,
                 help="the quant arithmetic on the simulated ternfpga engine (bit-identical to quant)")
