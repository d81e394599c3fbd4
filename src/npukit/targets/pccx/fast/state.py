"""What the fast executor's binders share: the records they build and the simulator state they use.

`fastmat` (GEMV/GEMM) and `fastcvo` (CVO, reductions) bind one instruction into a closure over the
simulator's arrays. They take the simulator as an argument typed by `FastState` — the attributes and
methods they read or write — and never import `fastsim`, which imports them (no import circle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from npukit.sim.work import Work


@dataclass
class Codes:
    """Unpacked INT4 weights of one host image, valid until a write overlaps [start, end)."""

    start: int
    end: int
    codes: np.ndarray
    scale: np.ndarray
    valid: bool = True


@dataclass
class MatBinding:
    """A GEMV/GEMM bound to the weight descriptors it was built for (``key``); ``run`` replays it."""

    key: bytes
    work: Work | None  # None: ``run`` returns the Work (a K-major GEMV's depends on its live rows)
    run: Callable[[], Work | None]
    codes: Codes | None


class FastState(Protocol):
    """The part of `fastsim.FastSimulator` the binders use."""

    l2: np.ndarray  # [words, 8] BF16 bits
    flat: np.ndarray  # l2 as one row of BF16 bits
    cc: np.ndarray  # [fmap, weight][slot][a, b, c]
    host: Any  # ddr.TrackedDDR (``view`` added to `memory.HostDDR`, and ``view_at``)
    limits: Any  # isa.Limits
    profile: str
    backend: str  # "numba" | "numpy"
    weights: str  # "int8" | "packed" | "auto"
    simd_rows: bool  # packed INT4 row dots on SIMD intrinsics (AVX-512 VNNI or AVX2)
    s_reg: np.uint16
    e_max: np.uint16
    _regs: np.ndarray  # [S, e_max] bits: the storage behind s_reg and e_max
    trace: list
    _k: dict[str, Any]  # numba kernels by name
    _qbuf: np.ndarray
    _cached_bytes: int  # bytes of unpacked INT4 codes held
    twins: Any  # twins.TwinChooser: parallel or serial twin of a large GEMV kernel

    @property
    def emax(self) -> np.float32: ...

    def int4_codes(self, addr: int, m: int, k: int, w_scale: bool) -> Codes | None: ...

    def int4_kmajor_codes(self, addr: int, m: int, k: int) -> Codes | None: ...
