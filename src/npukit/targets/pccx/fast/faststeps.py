"""Copy and GEMV/GEMM plan steps of `npukit.targets.pccx.fast.fastsim` as slotted records.

Such a step binds its operands when it first runs (and rebinds when the constant-cache entries it
reads change), so what a build makes for it is only its fixed part: the instruction, its index, the
entries it reads and an empty binding. As closures (the step, its binder, its fused-run row and, for a
GEMV, its ahead binder) each step was ~19 objects the garbage collector tracks (functions, their cells
and closure tuples, an attribute dict); a span bucket's build makes ~1 200 of them (measured at hidden
1024, positions 4-35: 675 copies and 503 GEMVs, 57 % of the tracked objects the window's compiling
made), and the young collections they trigger are charged to the build. As records they are 3 (a copy)
and 6 (a GEMV) objects. A run calls few of them as single steps (the fused runs hold the rest: 9
copies a token at hidden 1024, no GEMV), where a record's Python-level ``__call__`` costs ~0.1 µs more
than a closure's call.

The attributes the fused runs and `fast.ahead` read are as on the closures: ``fuse`` (the row maker,
set only where the step can be a row: ``hasattr`` tells), ``fuse_ins``, ``fuse_may_end`` (a GEMV) and
``prebind`` (a GEMV); neither has a ``work`` attribute (its Work depends on the entries it binds). The
row maker is a record of its own that the step holds, not a method bound to the step, so a step and
its row maker form no reference cycle (a dropped plan is freed at once, not by a full collection, which
the decode loop defers: `runtime.generate.long_lived_frozen`).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from npukit.sim.work import Work
from npukit.targets.pccx.fast.fastmat import bind_mat, fused_row, mat_site, prebind_mat
from npukit.targets.pccx.fast.fastrows import int4_row
from npukit.targets.pccx.fast.state import MatBinding
from npukit.targets.pccx.isa import Device
from npukit.targets.pccx.isa import Instr as _Instr
from npukit.targets.pccx.memory import WORD_BYTES

_E = 8  # BF16 elements per L2 word


class _Copy:
    """What a MEMCPY's step and its fused-run row share: the instruction, its shape entry and the
    binding for that entry's value (`FastSimulator._bind_memcpy`). Called with the constant caches,
    it is the step's row maker (``fuse``)."""

    __slots__ = ("aux", "d0", "host_src", "idx", "ins", "s0", "sim", "slot", "state")

    def __init__(self, sim: Any, idx: int, ins: _Instr, host_src: bool) -> None:
        self.sim, self.idx, self.ins, self.slot, self.host_src = sim, idx, ins, ins.shape_ptr_addr, host_src
        self.state: list[Any] = [None, None, None]  # key, work, mover
        self.s0, self.d0, self.aux = ins.src_addr * _E, ins.dest_addr * _E, ins.aux_addr

    def bind(self, key: bytes, entry: np.ndarray) -> bool:
        bound = self.sim._bind_memcpy(self.idx, self.ins, entry)
        if bound is None:
            return False
        self.state[:] = [key, *bound]
        return True

    def __call__(self, cc: np.ndarray) -> tuple | None:
        """The fused-run row (`fastcvo.fuse_groups`) of the copy the constant caches ``cc`` (as
        the run will have set them when it reaches the copy) describe, its Work (and the host
        region it reads): valid while the shape entry holds the same (words, hi, lo), which the
        row checks when it runs."""
        slot, state, s0, d0, aux = self.slot, self.state, self.s0, self.d0, self.aux
        key = cc[0, slot].tobytes()
        if key != state[0] and not self.bind(key, cc[0, slot]):
            return None
        words, hi, lo = struct.unpack("=3H", state[0])
        key = words | hi << 16 | lo << 32
        if not self.host_src:
            return (4, slot, s0, words * _E, d0, key, 0), state[1]
        hit = self.sim.host.region_words((((hi << 16) | lo) + aux) * WORD_BYTES, words * WORD_BYTES)
        if hit is None:
            return None
        return (5, slot, hit[1], words * _E, d0, key, 0), state[1], hit[0]


class CopyStep:
    """A MEMCPY's step: bound (its Work and a closure that moves the words) for the shape entry it
    reads, rebound when that entry changes; the reference path where it cannot be bound (then it
    reports the fault)."""

    __slots__ = ("copy", "fuse", "fuse_ins", "trace")

    def __init__(self, sim: Any, idx: int, ins: _Instr) -> None:
        host_src = ins.from_device == Device.HOST
        self.copy, self.trace = _Copy(sim, idx, ins, host_src), sim.trace
        if sim.backend == "numba" and (host_src or ins.to_device != Device.HOST):
            self.fuse, self.fuse_ins = self.copy, ins

    def __call__(self) -> Work:
        copy = self.copy
        sim, slot, state = copy.sim, copy.slot, copy.state
        key = sim.cc[0, slot].tobytes()
        if key != state[0] and not copy.bind(key, sim.cc[0, slot]):
            state[0] = None
            return sim._reference(copy.idx, copy.ins)()  # (made here: a copy that falls back is rare)
        state[2]()
        work = state[1]
        self.trace.append((copy.ins, work))
        return work


class _MatRow:
    """A GEMV/GEMM step's row maker (``fuse``): its row of a fused run where its binding for the
    entries ``cc`` allows (`fastmat.fused_row`, `fastrows.int4_row`)."""

    __slots__ = ("shp", "sim", "site", "siz")

    def __init__(self, sim: Any, site: Any, shp: int, siz: int) -> None:
        self.sim, self.site, self.shp, self.siz = sim, site, shp, siz

    def __call__(self, cc: np.ndarray) -> tuple | bool:
        shp, siz = self.shp, self.siz
        key = cc[0, shp].tobytes() + cc[1, siz: siz + 2].tobytes()
        return fused_row(self.sim, self.site, key) or int4_row(self.sim, self.site, key)


class MatStep:
    """A GEMV/GEMM's step: bound (`fastmat.bind_mat`) for the shape and size entries it reads, rebound
    when they change or its cached codes go stale; the reference path where it cannot be bound."""

    __slots__ = ("cc0", "cc1", "cell", "fuse", "fuse_ins", "fuse_may_end", "idx", "ins", "shp", "sim", "site",
                 "siz", "trace")

    def __init__(self, sim: Any, idx: int, ins: _Instr) -> None:
        self.sim, self.idx, self.ins, self.trace = sim, idx, ins, sim.trace
        self.shp, self.siz = ins.shape_ptr_addr, ins.size_ptr_addr
        self.cell: list[MatBinding | None] = [None]
        self.site = mat_site(idx, ins)
        self.cc0, self.cc1 = sim.cc[0], sim.cc[1]
        if sim.backend == "numba":  # a row of a fused run where its binding allows (`fused_row`)
            self.fuse = _MatRow(sim, self.site, self.shp, self.siz)
            self.fuse_ins, self.fuse_may_end = ins, True

    def __call__(self) -> Work:
        siz, cell = self.siz, self.cell
        key = self.cc0[self.shp].tobytes() + self.cc1[siz: siz + 2].tobytes()
        b = cell[0]
        if b is None or b.key != key or (b.codes is not None and not b.codes.valid):
            b = cell[0] = bind_mat(self.sim, self.site, key)
            if b is None:
                return self.sim._reference(self.idx, self.ins)()  # (made here: falling back is rare)
        w = b.run() or b.work  # a K-major step returns its own Work (live rows vary)
        self.trace.append((self.ins, w))
        return w

    def prebind(self, cc: np.ndarray) -> Work | None:  # (`fast.ahead`)
        return prebind_mat(self.sim, self.site, self.cell, cc, self.shp, self.siz)


class SregSet:
    """A MEMSET of the S or e_max register: its step, with its Work (fixed: `FastSimulator._compile_memset`)
    and, on the numba backend, its fused-run row (kind 3)."""

    __slots__ = ("attr", "fuse", "fuse_ins", "ins", "sim", "trace", "value", "work")

    def __init__(self, sim: Any, ins: _Instr, work: Work, emax: bool) -> None:
        self.sim, self.ins, self.work, self.trace = sim, ins, work, sim.trace
        self.attr, self.value = "e_max" if emax else "s_reg", np.uint16(ins.a_value)
        if sim.backend == "numba":
            self.fuse, self.fuse_ins = ((3, int(emax), 0, 0, 0, 0, int(self.value)), work), ins

    def __call__(self) -> Work:
        setattr(self.sim, self.attr, self.value)
        self.trace.append((self.ins, self.work))
        return self.work


class CacheSet:
    """A MEMSET of a constant-cache entry: its step, with its Work and, on the numba backend, its
    fused-run row (kind 6: `fast.ahead` and the fused runs read the entry it sets from it)."""

    __slots__ = ("cache", "fuse", "fuse_ins", "ins", "sim", "slot", "trace", "values", "work")

    def __init__(self, sim: Any, ins: _Instr, work: Work) -> None:
        self.sim, self.ins, self.work, self.trace = sim, ins, work, sim.trace
        self.cache, self.slot = int(ins.dest_cache), ins.dest_addr
        self.values = (ins.a_value, ins.b_value, ins.c_value)
        if sim.backend == "numba":
            self.fuse, self.fuse_ins = ((6, self.cache, self.slot, *self.values), work), ins

    def __call__(self) -> Work:
        self.sim.cc[self.cache, self.slot] = self.values
        self.trace.append((self.ins, self.work))
        return self.work
