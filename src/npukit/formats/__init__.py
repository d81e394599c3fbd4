"""Bit-exact number formats (bit layouts in docs/formats.md and each module's docstring).

Submodules, imported on first use (``from npukit.formats import fp8`` or ``npukit.formats.mx``):

* `fp8`      — OCP E4M3FN and E5M2, IEEE-style E4M3: ``encode``/``decode``, saturating or not;
* `mx`       — OCP Microscaling MXFP8/MXFP6/MXFP4/MXINT8, 32-element blocks with an E8M0 scale;
* `int4`     — symmetric INT4 weights per channel or group, nibble packing;
* `kvquant`  — INT8/INT4 KV cache per token and head with float32 scales;
* `ternary`  — BitNet b1.58 ternary weights, base-3, TQ1_0/TQ2_0, I2_S, HF 2-bit layouts;
* `fixedpoint` — TFLite integer requantization and the VTA delegate's variant.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["fixedpoint", "fp8", "int4", "kvquant", "mx", "ternary"]


def __getattr__(name: str) -> ModuleType:
    # Lazy: importing npukit.formats stays cheap, and a submodule is loaded only when used.
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
