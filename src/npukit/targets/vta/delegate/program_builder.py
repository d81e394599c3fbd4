"""Emitting VTA instruction streams: uop kernels, the token handshake and the int32 export.

`Emitter` collects decoded instruction objects (the spec's classes) and uop kernels; `words()` encodes
them, so every field is checked against the widths of the hardware description. Dependency tokens
follow TVM's double-buffering pattern: compute gives the load module two free input slots and the
store module gives compute two free accumulator slots at the start (zero-size LOAD/STORE carrying
only the push, which fsim skips), then every step pops what it consumes and pushes what it frees.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npukit.targets.vta.hw import VtaHw
from npukit.targets.vta.isa import ISA, UOP, AluOp, Mem
from npukit.targets.vta.program import Dram


@dataclass
class Emitter:
    hw: VtaHw
    dram: Dram
    instrs: list = field(default_factory=list)
    _uop_cache: dict = field(default_factory=dict)
    _loaded: tuple | None = None

    def __post_init__(self) -> None:
        self.spec = ISA.bind(self.hw)
        self.uop_spec = UOP.bind(self.hw)
        self._uop_fields = [(f.lo, f.width) for f in self.uop_spec.formats[0].values]

    def emit(self, name: str, **values) -> object:
        ins = self.spec.make(name, **values)
        self.instrs.append(ins)
        return ins

    def set_flag(self, ins, flag: str) -> object:
        """Replace ``ins`` (frozen) in the stream with a copy that also has ``flag`` set."""
        import dataclasses

        new = dataclasses.replace(ins, **{flag: True})
        self.instrs[self.instrs.index(ins)] = new
        return new

    def uops(self, key: tuple, triples: np.ndarray) -> tuple[int, int]:
        """Make sure the kernel ``triples`` (rows of dst, src, wgt) sits in uop SRAM; (bgn, end).

        Kernels live in DRAM once each; a LOAD UOP (compute module, so in order with the GEMM/ALU
        that use it) brings one in when it is not the one loaded. ``key`` identifies the kernel."""
        n = len(triples)
        if n > self.hw.uop_depth:
            raise ValueError(f"uop kernel of {n} exceeds the uop buffer")
        if self._loaded == key:
            return 0, n
        addr = self._uop_cache.get(key)
        if addr is None:
            t = np.asarray(triples, np.uint64)
            (l0, _), (l1, _), (l2, _) = self._uop_fields
            words = (t[:, 0] << np.uint64(l0)) | (t[:, 1] << np.uint64(l1)) | (t[:, 2] << np.uint64(l2))
            addr = self._uop_cache[key] = self.dram.put(words.astype(np.uint32))
        self.emit("LOAD", memory_type=Mem.UOP, sram_base=0, dram_base=addr // 4, y_size=1, x_size=n,
                  x_stride=n)
        self._loaded = key
        return 0, n

    def prologue(self) -> None:
        """Two free input slots for load (compute → load) and two free acc slots (store → compute)."""
        for _ in range(2):
            self.emit("LOAD", memory_type=Mem.UOP, push_prev=True)  # x_size 0: a token-only nop
        for _ in range(2):
            self.emit("STORE", memory_type=Mem.OUT, push_prev=True)

    def words(self) -> list[int]:
        return self.spec.encode_program(self.instrs)


def planes_for(bound: int) -> int:
    """Byte planes that carry every int32 of magnitude ≤ ``bound`` exactly (two's complement): the
    smallest p with ``bound < 2^(8p − 1)``; 4 when the bound says nothing (wrap-around possible)."""
    for p in (1, 2, 3):
        if bound < 1 << (8 * p - 1):
            return p
    return 4


def export_int32(e: Emitter, base: int, count: int, out_addrs: list[int],
                 out_row: tuple[int, int, int, int]) -> None:
    """Store the ``count`` accumulator rows at ``base`` as ``len(out_addrs)`` int8 byte planes
    (STORE truncates, so plane p holds ``acc >> 8p``): planes 1.. are copies shifted on the ALU,
    placed after plane 0. Fewer than four planes are exact when the values are known to fit
    (`planes_for`).

    ``out_row = (dram row offset, y_size, x_size, x_stride)`` in 16-byte elements within each plane;
    the SRAM rows are the y×x tile in order. The last ALU op pushes to store (compute → store) and
    the last STORE frees the accumulator slot (store → compute)."""
    row0, ys, xs, stride = out_row
    n = len(out_addrs)
    planes = [base + p * count for p in range(n)]
    last = None
    if n > 1:
        kernel = np.array([[planes[p], planes[0], 0] for p in range(1, n)], np.int64)
        e.uops(("export", base, count, n), kernel)
        for p in range(1, n):
            common = {"uop_bgn": p - 1, "uop_end": p, "iter_out": count, "iter_in": 1, "dst_factor_out": 1}
            e.emit("GEMM", reset_reg=True, **common)
            e.emit("ALU", alu_opcode=AluOp.ADD, src_factor_out=1, **common)
            last = e.emit("ALU", alu_opcode=AluOp.SHR, use_imm=True, imm=8 * p, **common)
    if last is None:  # one plane: a no-op ALU carries the token (x_size 0 loads cannot push to store)
        last = e.emit("ALU", alu_opcode=AluOp.ADD, use_imm=True, imm=0, uop_end=0, iter_out=1, iter_in=1)
    e.set_flag(last, "push_next")
    for p in range(n):
        e.emit("STORE", memory_type=Mem.OUT, sram_base=planes[p], dram_base=out_addrs[p] // 16 + row0,
               y_size=ys, x_size=xs, x_stride=stride, pop_prev=(p == 0), push_prev=(p == n - 1))


def read_int32(image: np.ndarray, addrs: list[int], nbytes: int) -> np.ndarray:
    """Reassemble int32 values from the byte planes `export_int32` wrote: the low planes unsigned,
    the top plane signed (sign extension)."""
    top = len(addrs) - 1
    v = image[addrs[top]:addrs[top] + nbytes].view(np.int8).astype(np.int64) << (8 * top)
    for p in range(top):
        v += image[addrs[p]:addrs[p] + nbytes].astype(np.int64) << (8 * p)
    return ((v + 2**31) % 2**32 - 2**31).astype(np.int32)
