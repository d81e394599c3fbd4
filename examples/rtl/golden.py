"""Read an `npukit vectors` directory the way an RTL testbench needs it: the manifest, the memory
images, and the expected machine state at each checkpoint (initial image + the deltas so far).

Plain Python + NumPy, no simulator dependency: `test_pccx.py` (cocotb) uses it, and so can any other
harness (Verilator C++ via a JSON dump, a SystemVerilog DPI shim).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Checkpoint:
    after: int  # instructions completed
    pc: int
    status: int
    s_reg: int  # BF16 bits
    e_max: int  # BF16 bits
    l2: np.ndarray  # the whole expected L2, [words, 8] uint16
    ddr: dict[int, np.ndarray] = field(default_factory=dict)  # region base -> expected bytes


class Vectors:
    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.manifest = json.loads((self.dir / "manifest.json").read_text())

    @property
    def program_hex(self) -> Path:
        """The $readmemh file to load into the instruction memory."""
        return self.dir / self.manifest["program"]["hex"]

    def l2(self, which: str = "init") -> np.ndarray:
        raw = (self.dir / self.manifest["files"][which]["l2"]["bin"]).read_bytes()
        return np.frombuffer(raw, "<u2").reshape(-1, self.manifest["l2"]["elements_per_word"]).copy()

    def ddr(self, which: str = "init") -> dict[int, np.ndarray]:
        out = {}
        for base, info in self.manifest["files"][which]["ddr"].items():
            out[int(base, 16)] = np.frombuffer((self.dir / info["bin"]).read_bytes(), np.uint8).copy()
        return out

    def checkpoints(self) -> Iterator[Checkpoint]:
        """Expected state after each checkpointed instruction, in order."""
        l2, ddr = self.l2("init"), self.ddr("init")
        for line in (self.dir / self.manifest["files"]["checkpoints"]).read_text().splitlines():
            c = json.loads(line)
            for word, bits in c["l2"]:
                v = int(bits, 16)
                l2[int(word, 16)] = [(v >> (16 * i)) & 0xFFFF for i in range(l2.shape[1])]
            for addr, byte in c["ddr"]:
                a = int(addr, 16)
                base = max(b for b in ddr if b <= a)
                ddr[base][a - base] = int(byte, 16)
            yield Checkpoint(c["after"], c["pc"], c["status"], int(c["s_reg"], 16), int(c["e_max"], 16),
                             l2.copy(), {b: m.copy() for b, m in ddr.items()})
