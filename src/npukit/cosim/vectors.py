"""The unit-vector format ``npukit cosim`` reads (``npukit-unit-vectors/1``), written by the targets'
exporters: ``manifest.json`` with, per unit, a field table (direction, bits, signedness, symbolic
shape, meaning), the cycle model's formula and the cases; arrays as ``$readmemh`` files (one element
per line, two's complement at the field's bits, row-major), scalars as ``value`` in the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "npukit-unit-vectors/1"


@dataclass(frozen=True)
class Field:
    """One named quantity of a unit: direction, element width and signedness, shape, meaning."""

    direction: str  # "in" or "out"
    bits: int
    signed: bool
    shape: str  # symbolic, e.g. "[T, D]"; "" for a scalar
    doc: str

    def describe(self) -> dict[str, Any]:
        return {"dir": self.direction, "bits": self.bits, "signed": self.signed, "shape": self.shape,
                "doc": self.doc}


def readmemh(a: Any, bits: int) -> str:
    digits = -(-bits // 4)
    mask = (1 << bits) - 1
    flat = np.asarray(a, dtype=object).reshape(-1)
    return "\n".join(f"{int(v) & mask:0{digits}x}" for v in flat) + "\n"


def write_case(out: Path, unit: str, n: int, case: dict[str, Any], fields: dict[str, Field],
               shared: dict[str, tuple[str, list[int]]] | None = None) -> dict[str, Any]:
    """One case's files (``<unit>/<NNNN>_<field>.hex``) and its manifest entry; ``shared`` names fields
    whose one file serves every case (field → (file, shape))."""
    entry: dict[str, Any] = {"label": case["label"], "cycles": case.get("cycles"), "values": {}}
    for name, fld in fields.items():
        if shared and name in shared:
            f, shape = shared[name]
            entry["values"][name] = {"file": f, "shape": shape}
            continue
        val = case[name]
        if not fld.shape:
            entry["values"][name] = {"value": int(val), "shape": []}
            continue
        arr = np.asarray(val, dtype=object) if not isinstance(val, np.ndarray) else val
        f = f"{unit}/{n:04d}_{name}.hex"
        (out / f).write_text(readmemh(arr, fld.bits))
        entry["values"][name] = {"file": f, "shape": list(arr.shape)}
    return entry


def unit_entry(fields: dict[str, Field], cycle_model: str, cases: list[dict[str, Any]]) -> dict[str, Any]:
    return {"fields": {k: f.describe() for k, f in fields.items()}, "cycle_model": cycle_model,
            "cases": cases}
