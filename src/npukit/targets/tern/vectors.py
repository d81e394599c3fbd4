"""Golden vectors of the ternfpga units for RTL tests: every ternary-engine GEMV (packed base-3 weight
rows, INT8 activations, INT32 sums), every attention-unit call (INT16 q/k/v, the score shift, the
INT64 numerators and sum of exponentials) and every FFN-glue call (INT32 gate/up, the Q15 norm weight,
INT8 output) of a generation on the ``tern`` backend, as ``$readmemh`` files and a JSON manifest.

Recording wraps the backend's operation set, so the recorded outputs are the ones the run used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from npukit.targets.tern.ops import TernOps

# (array name, element bits) per unit: what the RTL ports carry
PORTS = {
    "engine": (("weights", 8), ("x", 8), ("y", 32)),
    "attention": (("q", 16), ("k", 16), ("v", 16), ("num", 64), ("sum_e", 64)),
    "ffn_glue": (("gate", 32), ("up", 32), ("w_q", 16), ("out", 8)),
}


class RecordingTernOps(TernOps):
    """TernOps that keeps each unit call's operands and results (up to ``limit`` per unit)."""

    limit = 64

    def _keep(self, unit: str, **arrays: Any) -> None:
        cases = self.__dict__.setdefault("cases", {u: [] for u in PORTS})
        if len(cases[unit]) < self.limit:
            cases[unit].append({k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v
                                for k, v in arrays.items()})

    def matvec(self, layer: int, lin: Any, q: np.ndarray) -> np.ndarray:
        y = super().matvec(layer, lin, q)
        W = self._packed[id(lin)]
        self._keep("engine", label=f"L{layer}.{lin.name}", weights=W.rows, x=q, y=y, rows=W.out_features,
                   cols=W.in_features)
        return y

    def attention(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  shift: int) -> tuple[np.ndarray, np.ndarray]:
        num, sum_e = super().attention(layer, q, k, v, shift)
        for h in range(q.shape[0]):
            self._keep("attention", label=f"L{layer}.h{h}", q=q[h], k=k[:, h], v=v[:, h], num=num[h],
                       sum_e=sum_e[h:h + 1], shift=shift)
        return num, sum_e

    def ffn_glue(self, layer: int, g: np.ndarray, u: np.ndarray, w_q: np.ndarray) -> np.ndarray:
        out = super().ffn_glue(layer, g, u, w_q)
        for t in range(g.shape[0]):
            self._keep("ffn_glue", label=f"L{layer}.t{t}", gate=g[t], up=u[t], w_q=w_q, out=out[t])
        return out


def _readmemh(a: np.ndarray, bits: int) -> str:
    digits = bits // 4
    mask = (1 << bits) - 1
    return "\n".join(f"{int(v) & mask:0{digits}x}" for v in np.asarray(a).reshape(-1)) + "\n"


def export(cases: dict[str, list[dict[str, Any]]], out: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Write each case's arrays as ``<unit>/<NNNN>_<array>.hex`` (two's complement, the port width)
    and ``manifest.json``."""
    manifest: dict[str, Any] = {**meta, "byte_order": "little", "hex": "$readmemh, one element per line, "
                                "two's complement at the port width", "units": {}}
    for unit, ports in PORTS.items():
        rows = []
        d = out / unit
        d.mkdir(parents=True, exist_ok=True)
        for n, case in enumerate(cases.get(unit, [])):
            entry: dict[str, Any] = {k: v for k, v in case.items() if not isinstance(v, np.ndarray)}
            for name, bits in ports:
                arr = case[name]
                f = f"{unit}/{n:04d}_{name}.hex"
                (out / f).write_text(_readmemh(arr, bits))
                entry[name] = {"file": f, "shape": list(arr.shape), "bits": bits}
            rows.append(entry)
        manifest["units"][unit] = rows
    manifest["units"]["engine_weight_format"] = ("base-3 packed trits, 5 per byte, rows back to back "
                                                 "(npukit.targets.tern.engine.PackedMatrix)")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
