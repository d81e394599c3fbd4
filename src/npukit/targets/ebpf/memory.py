"""The VM's address space: named regions at fixed virtual bases; every access is bounds-checked.

Layout (bases far apart, so an overrun never lands in a neighbour)::

    0x1_0000_0000  stack   512 bytes per call frame (r10 = frame top, read-only register)
    0x2_0000_0000  input   the entry buffer (uBPF ``mem`` / Alkali ``ibuf``)
    0x3_0000_0000  output  Alkali ``obuf``
    0x4_0000_0000  ...     ELF data sections (.rodata*, .data, .bss), 0x1000_0000 apart

A failing access raises `MemoryFault` naming pc, instruction, address, size and the region it missed
or violated.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from npukit.targets.ebpf.errors import MemoryFault

STACK_BASE = 0x1_0000_0000
INPUT_BASE = 0x2_0000_0000
OUTPUT_BASE = 0x3_0000_0000
SECTION_BASE = 0x4_0000_0000
SECTION_STRIDE = 0x1000_0000
FRAME_SIZE = 512

UNPACK = {
    1: struct.Struct("<B").unpack_from,
    2: struct.Struct("<H").unpack_from,
    4: struct.Struct("<I").unpack_from,
    8: struct.Struct("<Q").unpack_from,
}
PACK = {
    1: struct.Struct("<B").pack_into,
    2: struct.Struct("<H").pack_into,
    4: struct.Struct("<I").pack_into,
    8: struct.Struct("<Q").pack_into,
}
MASK = {1: 0xFF, 2: 0xFFFF, 4: 0xFFFFFFFF, 8: 0xFFFFFFFFFFFFFFFF}


@dataclass
class Region:
    name: str
    base: int
    data: bytearray
    writable: bool = True

    @property
    def end(self) -> int:
        return self.base + len(self.data)

    def contains(self, addr: int, size: int) -> bool:
        return self.base <= addr and addr + size <= self.base + len(self.data)


class Memory:
    """Regions plus checked little-endian loads and stores."""

    def __init__(self, regions: list[Region]) -> None:
        self.regions = [r for r in regions if len(r.data)]
        self.describe_pc: Callable[[int], str] = lambda pc: "?"

    def region(self, name: str) -> Region | None:
        return next((r for r in self.regions if r.name == name), None)

    def find(self, addr: int, size: int) -> Region | None:
        for r in self.regions:
            if r.base <= addr and addr + size <= r.base + len(r.data):
                return r
        return None

    def fault(self, addr: int, size: int, kind: str, pc: int) -> MemoryFault:
        region = self._explain(addr, size, kind)
        return MemoryFault(pc, self.describe_pc(pc), addr, size, region, kind)

    def _explain(self, addr: int, size: int, kind: str) -> str:
        hit = self.find(addr, size)
        if hit is not None and not hit.writable and kind == "store":
            return f"in read-only region {hit.name}"
        touching = [r for r in self.regions if r.base <= addr < r.end or r.base < addr + size <= r.end]
        if touching:
            r = touching[0]
            return f"crosses the end of region {r.name} [0x{r.base:x}, 0x{r.end:x})"
        near = min(self.regions, key=lambda r: min(abs(addr - r.base), abs(addr - r.end)), default=None)
        if near is None:
            return "with no region mapped"
        return f"outside every mapped region (nearest: {near.name} [0x{near.base:x}, 0x{near.end:x}))"

    def load(self, addr: int, size: int, pc: int = -1) -> int:
        r = self.find(addr, size)
        if r is None:
            raise self.fault(addr, size, "load", pc)
        return UNPACK[size](r.data, addr - r.base)[0]

    def store(self, addr: int, size: int, value: int, pc: int = -1) -> None:
        r = self.find(addr, size)
        if r is None or not r.writable:
            raise self.fault(addr, size, "store", pc)
        PACK[size](r.data, addr - r.base, value & MASK[size])

    def read_bytes(self, addr: int, size: int, pc: int = -1) -> bytes:
        if size == 0:
            return b""
        r = self.find(addr, size)
        if r is None:
            raise self.fault(addr, size, "load", pc)
        return bytes(r.data[addr - r.base : addr - r.base + size])

    def write_bytes(self, addr: int, data: bytes, pc: int = -1) -> None:
        if not data:
            return
        r = self.find(addr, len(data))
        if r is None or not r.writable:
            raise self.fault(addr, len(data), "store", pc)
        r.data[addr - r.base : addr - r.base + len(data)] = data

    def read_cstring(self, addr: int, pc: int = -1, limit: int = 1 << 16) -> bytes:
        r = self.find(addr, 1)
        if r is None:
            raise self.fault(addr, 1, "load", pc)
        start = addr - r.base
        end = r.data.find(b"\0", start, start + limit)
        if end < 0:
            raise self.fault(addr, min(limit, len(r.data) - start) + 1, "load (unterminated string)", pc)
        return bytes(r.data[start:end])
