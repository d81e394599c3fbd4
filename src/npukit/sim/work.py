"""The interface between a functional simulator and the timing model.

A target's functional simulator executes one instruction and describes what it asked of the
machine as a `Work` record; the timing model (``npukit.sim.timing``) turns a stream of `Work`
records into cycles per engine, stalls and a trace. Keeping this record small and target-neutral
is what lets pccx and tern share one timing core.
"""

from __future__ import annotations

from dataclasses import dataclass

Range = tuple[int, int]  # [start, end) in a memory's own address units


@dataclass(frozen=True)
class Work:
    index: int  # position in the program
    engine: str  # which engine queue executes it: "gemv", "gemm", "sfu", "dma", "ctrl", ...
    label: str  # human text (the disassembly)
    macs: int = 0  # multiply-accumulates performed
    sfu_elems: int = 0  # elements through a special-function unit
    weight_bytes: int = 0  # bytes streamed from DRAM through the weight path
    ddr_read_bytes: int = 0  # other DRAM reads (DMA, KV)
    ddr_write_bytes: int = 0
    onchip_read_bytes: int = 0  # L2 / scratchpad traffic
    onchip_write_bytes: int = 0
    is_async: bool = False  # the issuer does not wait for completion
    reads: tuple[Range, ...] = ()  # on-chip ranges read (for dependency tracking)
    writes: tuple[Range, ...] = ()  # on-chip ranges written
    lanes: int = 0  # parallel units engaged on the engine (e.g. GEMV cores); 0 = all of them
