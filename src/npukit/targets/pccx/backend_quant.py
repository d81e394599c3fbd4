"""The ``quant`` target for Gemma 3n: the W4A8 pccx reference (`npukit.targets.pccx.gemma3n_quant`).

``--kv fp16|int8|int4`` picks the KV-cache storage. Weights are quantized to INT4 once, per tensor,
when the backend is created (the float checkpoint or synthetic preset is read one tensor at a time).
"""

from __future__ import annotations

import time
from typing import Any

from npukit.runtime.backends import ModelBackend, register_backend
from npukit.targets.pccx.gemma3n_quant import KV_FORMATS, Gemma3nW4A8
from npukit.targets.pccx.gemma3n_quant.cache import load_store


class Gemma3nQuant(ModelBackend):
    """Backend wrapper around `Gemma3nW4A8`."""

    target = "quant"

    def __init__(self, model: Any, kv: str = "fp16", kv_max_tokens: int | None = None,
                 kv_sink: int | None = None, kv_window: int | None = None) -> None:
        from npukit.targets.pccx.kv_ring import ring_size

        t0 = time.perf_counter()
        self.model = model
        self.store, _ = load_store(model.weights)  # INT4 image cached by content hash
        self.quantize_s = time.perf_counter() - t0
        self.ref = Gemma3nW4A8(self.store, kv=kv)
        self.kv = kv
        cap, sink = ring_size(kv_max_tokens, kv_sink, kv_window)
        if cap is not None:  # the pccx KV ring's eviction policy (full-attention layers)
            cfg = self.store.config
            self.ref.cache.set_ring(cap, sink, tuple(i for i in cfg.kv_producers if cfg.window(i) is None))

    def stats(self) -> dict[str, Any]:
        return {"target": self.target, "kv": self.kv, "position": self.ref.pos,
                "kv_bytes": self.ref.cache.nbytes, "weight_bytes": self.store.nbytes,
                "quantize_seconds": round(self.quantize_s, 3)}


register_backend("gemma3n", "quant", Gemma3nQuant, kv_modes=KV_FORMATS,
                 help="W4A8 pccx reference: INT4 weights, INT8 activations, BF16 vectors, fp16/int8/int4 KV")
