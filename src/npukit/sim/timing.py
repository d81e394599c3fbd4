"""Target-neutral event-driven timing core (fluid model at instruction granularity).

A target adapter turns each `npukit.sim.work.Work` record into an `Op` and describes the machine
(`Machine`: engines, bandwidth resources, prefetch streams, clock). `simulate` then runs this model:

* **Issue.** One issuer walks the program in order. An async op lets the issuer go on after
  ``issue_cycles``; a synchronous op blocks it until the op completes. ``issue_window`` bounds how
  many issued ops may wait to start (a command FIFO).
* **Engines.** One in-order queue per engine: an op starts when it is issued, every earlier op of its
  engine is done, and no earlier unfinished op conflicts with it (RAW/WAR/WAW overlap of the on-chip
  ``reads``/``writes`` ranges). After ``latency`` cycles (DMA setup) it progresses at ``1/cycles`` of
  its work per cycle at best, and completes ``tail`` cycles after its work runs out (pipeline drain).
* **Bandwidth resources** (DDR, ports) are shared by every transfer in flight with max-min fair
  sharing (water-filling), re-solved at each event; an op's transfer bytes limit its progress rate.
* **Prefetch streams** (a weight buffer): bytes for stream ops are fetched in program order into a
  buffer of ``capacity_bytes``; fetching for op *j* may begin once *j* is issued and the previous op of
  the stream has started ("prefetch starts when the previous GEMV launches"). A consumer progresses
  no faster than its bytes arrive; the fetch pauses while the buffer is full.
* **Producer→consumer FIFOs.** An op may name a producer op (``fifo_from``): it may then start while
  the producer runs and consume its output as produced; the producer stalls once it is ``fifo_depth``
  elements ahead of a consumer that has started (the SFU running behind a GEMV over a direct FIFO).
  Before the consumer starts, the producer's output goes to L2 unthrottled, so a consumer queued
  behind the producer's own successors cannot deadlock it.

* **Dependency tokens** (VTA's load/compute/store handshake). The machine may declare bounded token
  queues (`TokenQueue`); a `TokenOp` pops tokens from the queues in ``pop`` (in order, one each)
  before it starts and pushes one to each queue in ``push`` (in order) when its work and tail are
  done; an empty queue holds back the popping engine, a full one the pushing engine (the op ends
  when its last push lands). ``command_depth`` bounds each engine's own command queue (issued ops
  queued behind the op the engine holds), so one engine waiting on a token does not hold the issuer
  for the others.
  A program that can never make progress raises `TokenDeadlock` naming the queues and ops.
* **Engine pools** (several cores of one engine type). ``EnginePool(name, count)`` among the engines
  declares cores ``name.0`` … ``name.<count-1>``; an op naming a core runs there, an op naming the
  pool goes, in program order among the pool's ops, to the first core that has nothing of its own
  left to do (ties: the lowest index). Statistics and the trace are per core.

Between events every rate is constant, so progress, buffer levels and stall attribution are exact
for this model. Time is in cycles of the machine's reference clock. `docs/timing.md` walks through
the model, the event loop's phases and a worked example.
"""

from __future__ import annotations

from collections.abc import Sequence

from npukit.sim.timing_types import (
    BYTES_EPS,
    FRACTION_EPS,
    EnginePool,
    EngineStats,
    Fetch,
    Machine,
    Op,
    OpTiming,
    Resource,
    Stream,
    TimingError,
    TimingResult,
    TokenDeadlock,
    TokenOp,
    TokenQueue,
    TokenWait,
    ranges_conflict,
    validate_program,
    waterfill,
)

__all__ = [
    "BYTES_EPS",
    "FRACTION_EPS",
    "EnginePool",
    "EngineStats",
    "Fetch",
    "Machine",
    "Op",
    "OpTiming",
    "Resource",
    "Stream",
    "TimingError",
    "TimingResult",
    "TokenDeadlock",
    "TokenOp",
    "TokenQueue",
    "TokenWait",
    "ranges_conflict",
    "simulate",
    "validate_program",
    "waterfill",
]


def simulate(machine: Machine, ops: Sequence[Op]) -> TimingResult:
    """Schedule ``ops`` (program order) on ``machine``; see the module docstring for the model."""
    # imported here, not at the top: importing the types must not load numba (the compiled loop)
    from npukit.sim.timing_fast import try_simulate
    from npukit.sim.timing_state import Sim

    res = try_simulate(machine, ops)
    return res if res is not None else Sim(machine, ops).run()
