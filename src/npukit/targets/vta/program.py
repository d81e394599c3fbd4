"""A VTA program as data (instructions + a DRAM image) and the entry points `npukit sim --target vta`
uses: run functionally, then time the same instruction list on the shared core."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npukit.errors import ConfigError
from npukit.sim.timing import TimingResult
from npukit.targets.vta.hw import VtaHw
from npukit.targets.vta.isa import ISA
from npukit.targets.vta.sim import Counters, Simulator
from npukit.targets.vta.timing import time_program


@dataclass
class RunResult:
    dram: np.ndarray
    counters: Counters
    timing: TimingResult | None
    instructions: int
    finished: int


@dataclass
class Dram:
    """A bump allocator over one byte image; regions aligned so any SRAM element size divides them."""

    align: int = 256
    chunks: list[np.ndarray] = field(default_factory=list)
    size: int = 0

    def put(self, data: np.ndarray) -> int:
        """Place ``data`` (any dtype, little-endian bytes); returns its byte address."""
        addr = self.reserve(data.nbytes)
        self.chunks.append((addr, np.ascontiguousarray(data).view(np.uint8).reshape(-1)))
        return addr

    def reserve(self, nbytes: int) -> int:
        addr = self.size
        self.size = addr + -(-max(nbytes, 1) // self.align) * self.align
        return addr

    def image(self) -> np.ndarray:
        img = np.zeros(self.size, np.uint8)
        for addr, raw in self.chunks:
            img[addr:addr + raw.size] = raw
        return img


def run(hw: VtaHw, instrs: list, dram: np.ndarray, *, timing: bool = True,
        skip_exec: bool = False) -> RunResult:
    sim = Simulator(hw, dram, skip_exec=skip_exec)
    sim.run(instrs)
    res = time_program(hw, instrs) if timing else None
    return RunResult(sim.state.dram, sim.counters, res, len(instrs), sim.finished)


def simulate(words: list[int], hw: VtaHw, dram_kib: int = 1024, skip_exec: bool = False) -> dict:
    """``npukit sim --target vta``: a program on a zeroed DRAM of ``dram_kib`` KiB."""
    if not 1 <= dram_kib <= 1 << 20:
        raise ConfigError(f"--dram-kib must be between 1 and {1 << 20} (1 GiB), got {dram_kib}")
    instrs = ISA.bind(hw).decode_program(words)
    out = run(hw, instrs, np.zeros(dram_kib * 1024, np.uint8), skip_exec=skip_exec)
    return {"timing": out.timing, "instructions": out.instructions,
            "state": {**out.counters.to_json(), "finish": out.finished}}


def add_cli_arguments(group, command: str) -> None:
    if command == "sim":
        group.add_argument("--dram-kib", dest="dram_kib", type=int, default=1024,
                           help="size of the zeroed DRAM the program runs against (KiB)")
        group.add_argument("--skip-exec", dest="skip_exec", action="store_true",
                           help="timing only: keep counters and tokens, skip the arithmetic")
