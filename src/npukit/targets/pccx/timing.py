"""pccx timing adapter: `Work` records → `npukit.sim.timing` ops on a machine built from `PccxHw`.

Reference clock: the 400 MHz core clock. AXI-side rates (HP and ACP ports at 250 MHz) are
converted to bytes per core cycle, and DDR's effective bandwidth likewise.

* **gemv** — ``macs / (lanes · macs_per_core)`` core cycles (a grouped GEMV adds its group sums,
  ``sfu_elems / sfu rate``), then the reduction-tree depth as drain. Weights
  (``weight_bytes``) and other DRAM operands (``ddr_read_bytes``: KV cache) arrive through the weight
  stream DDR → HP ports → weight buffer (``weight_buffer.total_bytes``), fetched ahead of compute
  once the previous stream op has launched (pccx overlap rule 1).
* **gemm** — ``macs / (rows · cols · macs_per_dsp)`` cycles plus fill/drain; weights as for gemv.
* **sfu** — ``sfu_elems / elems_per_clk`` cycles, then the pipeline depth as drain. A CVO that
  reads what the most recent async GEMV/GEMM wrote takes it over the direct FIFO (``sfu.fifo_depth``
  elements): it may start while the GEMV runs and throttles it if it falls behind (overlap rule 2).
* **dma** — MEMCPY bytes to/from DDR cross DDR and the ACP port into L2 port A; an L2→L2 copy
  crosses port A only. ``dma.setup_cycles`` of latency each.
* **ctrl** — MEMSET: ``dma.memset_cycles_per_entry`` per constant-cache entry written.
* Compute ops' on-chip traffic (``onchip_*_bytes``) crosses L2 port B, their DDR writes the ACP.

Sync/async comes from ``Work.is_async``; the issuer's command FIFO depth is
``frontend.cmd_fifo_depth``. PLE precompute "off the critical path" (rule 3) is a scheduling choice
the program expresses with async instructions and disjoint ranges; nothing here special-cases it.
"""

from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from typing import Any

from npukit.sim.timing import Machine, Op, Resource, Stream, TimingError, TimingResult, simulate
from npukit.sim.work import Work
from npukit.targets.pccx.hw import PccxHw

ENGINES = ("gemv", "gemm", "sfu", "dma", "ctrl")
WEIGHTS = "weights"


def machine(hw: PccxHw) -> Machine:
    core = hw.clocks.core_hz
    per_cycle = 1.0 / core
    resources = (
        Resource("ddr", hw.ddr.bytes_per_s * per_cycle),
        Resource("hp", hw.hp_ports.peak_bytes_per_s(hw.clocks) * per_cycle),
        Resource("acp", hw.acp.peak_bytes_per_s(hw.clocks) * per_cycle),
        Resource("l2a", float(hw.l2.port_bytes_per_clk)),
        Resource("l2b", float(hw.l2.port_bytes_per_clk)),
    )
    streams = (Stream(WEIGHTS, ("ddr", "hp"), float(hw.weight_buffer.total_bytes)),)
    return Machine(engines=ENGINES, resources=resources, streams=streams, clock_hz=core,
                   issue_cycles=0.0, issue_window=hw.frontend.cmd_fifo_depth)


# `Op`'s fields in `Op`'s order as a plain named tuple: what `simulate_works` hands the timing core, which
# only reads the fields (a frozen dataclass costs several times more to build, once per instruction)
_OpRecord = namedtuple("_OpRecord", [f.name for f in fields(Op)])  # type: ignore[misc]


def _overlaps(a, b) -> bool:
    return any(x0 < y1 and y0 < x1 for x0, x1 in a for y0, y1 in b)


def to_ops(hw: PccxHw, works: Iterable[Work], record: Callable[..., Any] = Op, renumber: bool = False
           ) -> list[Op]:
    """One `Op` per Work (``record``: what to build from `Op`'s fields, given in `Op`'s order).
    ``renumber``: op i gets index i (a program run in segments, each numbering its Works from 0)."""
    ops: list[Any] = []
    make = record
    last_mat: int | None = None  # position of the latest GEMV/GEMM, a candidate FIFO producer
    mat_writes: tuple = ()  # its writes
    linked: set[int] = set()
    # the device numbers (properties of the preset), read once
    gemv_cores, gemv_mpc, gemv_tail = hw.gemv.cores, hw.gemv.macs_per_core, float(hw.gemv.pipeline_cycles)
    gemm_rate, gemm_tail = hw.gemm.macs_per_clk, float(hw.gemm.pipeline_cycles)
    sfu_rate, sfu_tail = hw.sfu.instances * hw.sfu.elems_per_clk, float(hw.sfu.pipeline_cycles)
    sfu_depth = float(hw.sfu.fifo_depth)
    dma_setup, memset = float(hw.dma.setup_cycles), float(hw.dma.memset_cycles_per_entry)
    ceil = math.ceil
    # Op fields by position: index, engine, label, cycles, latency, tail, path, xfer_bytes, stream,
    # stream_bytes, fifo_from, fifo_depth, fifo_elems, is_async, reads, writes, args
    for w in works:
        pos = len(ops)
        engine, wb, dr, dw = w.engine, w.weight_bytes, w.ddr_read_bytes, w.ddr_write_bytes
        args = {}
        if w.macs:
            args["macs"] = w.macs
        if wb + dr + dw:
            args["bytes"] = wb + dr + dw
        if wb:
            args["weight_bytes"] = wb
        if w.sfu_elems:
            args["sfu_elems"] = w.sfu_elems
        onchip = float(w.onchip_read_bytes + w.onchip_write_bytes)
        reads, writes = tuple(w.reads), tuple(w.writes)
        if engine == "gemv" or engine == "gemm":
            if engine == "gemv":
                lanes = w.lanes or gemv_cores
                if not 0 < lanes <= gemv_cores:
                    raise TimingError(f"work {w.index}: {lanes} GEMV lanes, the device has {gemv_cores}")
                rate, tail = lanes * gemv_mpc, gemv_tail
            else:
                rate, tail = gemm_rate, gemm_tail
            streamed = float(wb + dr)
            path, xfer = _compute_traffic(onchip, dw)
            # a grouped GEMV's group sums (pccx/grouped.py): SFU elements ahead of its MACs, not overlapped
            sums = ceil(w.sfu_elems / sfu_rate) if w.sfu_elems else 0
            ops.append(make(pos if renumber else w.index, engine, w.label,
                            float(max(1, ceil(w.macs / rate)) + sums),
                            0.0, tail, path,
                            xfer, WEIGHTS if streamed else None, streamed, None, 0.0, 0.0, w.is_async, reads,
                            writes, args))
            last_mat, mat_writes = pos, writes
        elif engine == "sfu":
            cycles = float(max(1, ceil(w.sfu_elems / sfu_rate)))
            producer = None
            if (last_mat is not None and last_mat not in linked and ops[last_mat].is_async
                    and _overlaps(mat_writes, reads)):
                producer = last_mat
                linked.add(producer)
            path, xfer = _compute_traffic(onchip, dw)
            ops.append(make(pos if renumber else w.index, engine, w.label, cycles, 0.0, sfu_tail, path, xfer,
                            None, 0.0, producer,
                            sfu_depth, float(max(w.sfu_elems, 1)) if producer is not None else 0.0,
                            w.is_async, reads, writes, args))
        elif engine == "dma":
            ddr = float(dr + dw + wb)
            if ddr:
                path, xfer = ("ddr", "acp", "l2a"), ddr
            else:
                path, xfer = ("l2a",), onchip
            ops.append(make(pos if renumber else w.index, engine, w.label, 0.0, dma_setup, 0.0,
                            path if xfer else (), xfer, None,
                            0.0, None, 0.0, 0.0, w.is_async, reads, writes, args))
        elif engine == "ctrl":
            ops.append(make(pos if renumber else w.index, engine, w.label, memset, 0.0, 0.0, (), 0.0, None,
                            0.0, None, 0.0, 0.0,
                            w.is_async, reads, writes, args))
        else:
            raise TimingError(f"work {w.index}: no pccx engine {w.engine!r} (known: {', '.join(ENGINES)})")
        if engine != "sfu" and last_mat is not None and last_mat != pos and _overlaps(mat_writes, writes):
            last_mat = None  # the GEMV result was overwritten before any CVO read it
    return ops


def _compute_traffic(onchip: float, ddr_write: int) -> tuple[tuple[str, ...], float]:
    if ddr_write:  # results written back to DDR (KV append) dominate; L2 port B is not the limit
        return ("ddr", "acp"), float(ddr_write)
    return (("l2b",), onchip) if onchip else ((), 0.0)


def simulate_works(hw: PccxHw, works: Sequence[Work], renumber: bool = False) -> TimingResult:
    """Time a functional simulator's Work stream on ``hw`` (``renumber``: see `to_ops`)."""
    return simulate(machine(hw), to_ops(hw, works, _OpRecord, renumber))


def roofline_cycles(hw: PccxHw, macs: int, weight_bytes: int, engine: str = "gemv", lanes: int = 0) -> float:
    """max(bandwidth-bound, compute-bound) core cycles for one weight-streaming instruction."""
    bw = hw.weight_stream_bytes_per_s / hw.clocks.core_hz
    if engine == "gemv":
        rate = (lanes or hw.gemv.cores) * hw.gemv.macs_per_core
    else:
        rate = hw.gemm.macs_per_clk
    return max(weight_bytes / bw, macs / rate)

