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

Between events every rate is constant, so progress, buffer levels and stall attribution are exact
for this model. Time is in cycles of the machine's reference clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from npukit.errors import NpukitError
from npukit.sim.work import Range

_EPS = 1e-9  # relative tolerance on fractions
_BEPS = 1e-6  # absolute tolerance on bytes / elements


class TimingError(NpukitError):
    """A program the timing model cannot schedule (deadlock, inconsistent op description)."""


@dataclass(frozen=True)
class Resource:
    name: str
    bytes_per_cycle: float


@dataclass(frozen=True)
class Stream:
    name: str
    path: tuple[str, ...]  # resources the fetched bytes cross
    capacity_bytes: float
    bytes_per_cycle: float = math.inf  # the stream's own limit besides its path


@dataclass(frozen=True)
class Machine:
    engines: tuple[str, ...]
    resources: tuple[Resource, ...] = ()
    streams: tuple[Stream, ...] = ()
    clock_hz: float = 1e9
    issue_cycles: float = 0.0
    issue_window: int | None = None


@dataclass(frozen=True)
class Op:
    index: int
    engine: str
    label: str = ""
    cycles: float = 0.0  # engine cycles at full rate
    latency: float = 0.0  # fixed cycles before progress starts
    tail: float = 0.0  # cycles from the last unit of work to completion (pipeline drain)
    path: tuple[str, ...] = ()  # resources crossed by this op's own transfer
    xfer_bytes: float = 0.0
    stream: str | None = None
    stream_bytes: float = 0.0
    fifo_from: int | None = None  # position (in the op list) of the producer feeding this op
    fifo_depth: float = 0.0  # elements
    fifo_elems: float = 0.0  # elements passing through the FIFO
    is_async: bool = False
    reads: tuple[Range, ...] = ()
    writes: tuple[Range, ...] = ()
    args: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class OpTiming:
    index: int
    engine: str
    label: str
    issue: float
    start: float
    end: float
    busy: float
    stalls: dict[str, float]
    args: dict[str, Any]

    @property
    def cycles(self) -> float:
        return self.end - self.start

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "engine": self.engine, "label": self.label, "issue": self.issue,
                "start": self.start, "end": self.end, "cycles": self.cycles, "busy": self.busy,
                "stalls": dict(self.stalls), "args": self.args}


@dataclass
class EngineStats:
    name: str
    busy: float = 0.0
    idle: float = 0.0
    stalls: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"busy": self.busy, "idle": self.idle, "stalls": dict(self.stalls)}


@dataclass
class Fetch:
    """One op's bytes moving through a prefetch stream."""

    stream: str
    index: int
    start: float
    end: float
    bytes: float

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "index": self.index, "start": self.start, "end": self.end,
                "bytes": self.bytes}


@dataclass
class TimingResult:
    cycles: float
    clock_hz: float
    ops: list[OpTiming]
    engines: dict[str, EngineStats]
    fetches: list[Fetch]
    resource_bytes: dict[str, float]
    # piecewise-constant samples (t, {resource: bytes/cycle}) and (t, {stream: buffered bytes})
    usage: list[tuple[float, dict[str, float]]]
    levels: list[tuple[float, dict[str, float]]]

    @property
    def seconds(self) -> float:
        return self.cycles / self.clock_hz

    def to_json(self) -> dict[str, Any]:
        return {"cycles": self.cycles, "seconds": self.seconds, "clock_hz": self.clock_hz,
                "engines": {k: v.to_json() for k, v in self.engines.items()},
                "resource_bytes": dict(self.resource_bytes),
                "ops": [o.to_json() for o in self.ops], "fetches": [f.to_json() for f in self.fetches]}


def _overlap(a: Sequence[Range], b: Sequence[Range]) -> bool:
    return any(x0 < y1 and y0 < x1 for x0, x1 in a for y0, y1 in b)


def _conflict(early: Op, late: Op) -> bool:
    return (_overlap(early.writes, late.reads) or _overlap(early.writes, late.writes)
            or _overlap(early.reads, late.writes))


def _waterfill(caps: list[float], paths: list[tuple[str, ...]], capacity: dict[str, float]) -> list[float]:
    """Max-min fair rates for flows with individual caps over shared resources."""
    n = len(caps)
    rate = [0.0] * n
    frozen = [False] * n
    left = dict(capacity)
    while not all(frozen):
        level = math.inf
        for i in range(n):
            if not frozen[i]:
                level = min(level, caps[i] - rate[i])
        for r, c in left.items():
            users = sum(1 for i in range(n) if not frozen[i] and r in paths[i])
            if users:
                level = min(level, c / users)
        if math.isinf(level):
            raise TimingError("a transfer has neither a rate cap nor a bandwidth resource on its path")
        for i in range(n):
            if not frozen[i]:
                rate[i] += level
                for r in paths[i]:
                    left[r] -= level
        for i in range(n):
            if frozen[i]:
                continue
            if rate[i] >= caps[i] * (1 - _EPS) or any(left[r] <= capacity[r] * _EPS for r in paths[i]):
                frozen[i] = True
    return rate


class _Sim:
    def __init__(self, machine: Machine, ops: Sequence[Op]) -> None:
        self.m, self.ops, n = machine, list(ops), len(ops)
        self.capacity = {r.name: r.bytes_per_cycle for r in machine.resources}
        self.streams = {s.name: s for s in machine.streams}
        for pos, op in enumerate(self.ops):
            if op.engine not in machine.engines:
                raise TimingError(f"op {op.index} uses unknown engine {op.engine!r}")
            for r in op.path:
                if r not in self.capacity:
                    raise TimingError(f"op {op.index} crosses unknown resource {r!r}")
            if op.stream is not None and op.stream not in self.streams:
                raise TimingError(f"op {op.index} draws from unknown stream {op.stream!r}")
            if op.fifo_from is not None and not 0 <= op.fifo_from < pos:
                raise TimingError(f"op {op.index}: fifo producer must be an earlier op")
            if min(op.cycles, op.latency, op.tail, op.xfer_bytes, op.stream_bytes) < 0:
                raise TimingError(f"op {op.index} has a negative cost")
            if op.cycles <= 0 and (op.stream_bytes > 0 or op.fifo_from is not None):
                raise TimingError(f"op {op.index} consumes a stream or FIFO but has no engine cycles")
            if op.fifo_from is not None and op.fifo_elems > 0 and op.fifo_depth <= 0:
                raise TimingError(f"op {op.index}: a FIFO needs a positive depth")
        for s in machine.streams:
            for r in s.path:
                if r not in self.capacity:
                    raise TimingError(f"stream {s.name!r} crosses unknown resource {r!r}")
        self.queue = {e: [p for p, o in enumerate(self.ops) if o.engine == e] for e in machine.engines}
        self.head = dict.fromkeys(machine.engines, 0)  # index into queue[e]
        self.s_ops = {s: [p for p, o in enumerate(self.ops) if o.stream == s and o.stream_bytes > 0]
                      for s in self.streams}
        self.s_cur = dict.fromkeys(self.streams, 0)
        self.fifo_cons = [p for p, o in enumerate(self.ops) if o.fifo_from is not None]
        self.s_fetched = dict.fromkeys(self.streams, 0.0)
        self.s_consumed = dict.fromkeys(self.streams, 0.0)  # by finished ops
        self.inflight: list[int] = []  # issued, not finished, program order
        self.unstarted = 0
        self.running: list[int] = []
        inf = math.inf
        self.issue, self.start, self.end = [inf] * n, [inf] * n, [inf] * n
        self.frac = [0.0] * n
        self.prog_end = [inf] * n  # when the op's work ran out (its tail follows)
        self.fetched = [0.0] * n
        self.fetch_t0, self.fetch_t1 = [inf] * n, [inf] * n
        self.busy = [0.0] * n
        self.ostall: list[dict[str, float]] = [{} for _ in range(n)]
        self.estats = {e: EngineStats(e) for e in machine.engines}
        self.res_bytes = dict.fromkeys(self.capacity, 0.0)
        self.usage: list[tuple[float, dict[str, float]]] = []
        self.levels: list[tuple[float, dict[str, float]]] = []
        self.t = 0.0
        self.next_issue, self.k, self.blocker = 0.0, 0, -1
        self.n_done = 0

    # --- state predicates ----------------------------------------------------------------------
    def _done(self, p: int) -> bool:
        return self.end[p] <= self.t

    def _stream_bytes(self, p: int) -> float:
        return self.ops[p].stream_bytes if self.ops[p].stream is not None else 0.0

    def _blocking(self, p: int) -> int | None:
        """An earlier unfinished op this one must wait for, else None."""
        op = self.ops[p]
        if not (op.reads or op.writes):
            return None
        for q in self.inflight:
            if q >= p:
                break
            if q == op.fifo_from and self.ops[q].is_async:
                continue  # streamed through the FIFO instead of via L2
            if _conflict(self.ops[q], op):
                return q
        return None

    def _linked(self, c: int) -> int | None:
        """Producer of consumer ``c`` when the FIFO coupling is active."""
        p = self.ops[c].fifo_from
        if p is None or not self.ops[p].is_async or self.ops[c].fifo_elems <= 0:
            return None
        return p

    # --- instantaneous transitions ---------------------------------------------------------------
    def _settle(self) -> None:
        changed = True
        while changed:
            changed = False
            n = len(self.ops)
            win = self.m.issue_window
            while (self.k < n and self.blocker < 0 and self.t >= self.next_issue - _EPS
                   and (win is None or self.unstarted < win)):
                p = self.k
                self.issue[p] = self.t
                self.next_issue = self.t + self.m.issue_cycles
                if not self.ops[p].is_async:
                    self.blocker = p
                self.k += 1
                self.unstarted += 1
                self.inflight.append(p)
                changed = True
            for e, q in self.queue.items():
                h = self.head[e]
                if h >= len(q):
                    continue
                p = q[h]
                if self.start[p] == math.inf and self.issue[p] <= self.t and self._blocking(p) is None:
                    self.start[p] = self.t
                    self.unstarted -= 1
                    changed = True
                if self.start[p] <= self.t and self._complete(p):
                    self.end[p] = self.t
                    self.frac[p] = 1.0
                    self.head[e] += 1
                    self.n_done += 1
                    self.inflight.remove(p)
                    if self.ops[p].stream is not None:
                        self.s_consumed[self.ops[p].stream] += self._stream_bytes(p)
                    if self.blocker == p:
                        self.blocker = -1
                        self.next_issue = self.t + self.m.issue_cycles
                    changed = True
            for s, lst in self.s_ops.items():
                while self.s_cur[s] < len(lst) and self.fetched[lst[self.s_cur[s]]] >= \
                        self._stream_bytes(lst[self.s_cur[s]]) - _BEPS:
                    p = lst[self.s_cur[s]]
                    self.s_fetched[s] += self._stream_bytes(p) - self.fetched[p]
                    self.fetched[p] = self._stream_bytes(p)
                    self.fetch_t1[p] = min(self.fetch_t1[p], self.t)
                    self.fetch_t0[p] = min(self.fetch_t0[p], self.t)
                    self.s_cur[s] += 1
                    changed = True

    def _complete(self, p: int) -> bool:
        op = self.ops[p]
        if self.t < self.start[p] + op.latency - _EPS:
            return False
        if self.frac[p] < 1 - _EPS:
            if op.cycles or op.xfer_bytes or self._stream_bytes(p) or self._linked(p) is not None:
                return False
            self.frac[p], self.prog_end[p] = 1.0, self.t  # no work: only latency and tail
        return self.t >= self.prog_end[p] + op.tail - _EPS

    def _links(self) -> list[tuple[int, int]]:
        """Active (producer, consumer) FIFO couplings: both unfinished, consumer issued."""
        out = []
        keep = []
        for c in self.fifo_cons:
            if self.end[c] <= self.t:
                continue
            keep.append(c)
            pr = self._linked(c)
            if pr is not None and self.issue[c] <= self.t and self.end[pr] > self.t:
                out.append((pr, c))
        self.fifo_cons = keep
        return out

    def _fetch_target(self, s: str) -> int | None:
        lst = self.s_ops[s]
        i = self.s_cur[s]
        if i >= len(lst):
            return None
        p = lst[i]
        if self.issue[p] > self.t:
            return None
        if i > 0 and self.start[lst[i - 1]] > self.t:
            return None
        return p

    # --- rates -----------------------------------------------------------------------------------
    def _running(self) -> list[int]:
        out = []
        for e, q in self.queue.items():
            h = self.head[e]
            if h < len(q):
                p = q[h]
                if (self.start[p] + self.ops[p].latency <= self.t + _EPS and self.start[p] <= self.t
                        and self.frac[p] < 1):
                    out.append(p)
        return out

    def _level(self, s: str) -> float:
        run = sum(self.frac[p] * self.ops[p].stream_bytes for p in self.running if self.ops[p].stream == s)
        return self.s_fetched[s] - self.s_consumed[s] - run

    def _rates(self, running: list[int]):
        cap = {}
        for p in running:
            op = self.ops[p]
            cap[p] = 1.0 / op.cycles if op.cycles > 0 else math.inf
        targets = {s: self._fetch_target(s) for s in self.streams}
        scap = {s: self.streams[s].bytes_per_cycle for s, p in targets.items() if p is not None}
        rate: dict[int, float] = {}
        why: dict[int, str] = {}
        share: dict[str, float] = {}
        for _ in range(12):
            flows = [(p, self.ops[p].path, cap[p] * self.ops[p].xfer_bytes) for p in running
                     if self.ops[p].xfer_bytes > 0]
            flows += [(s, self.streams[s].path, c) for s, c in scap.items()]
            got = _waterfill([f[2] for f in flows], [f[1] for f in flows], self.capacity) if flows else []
            share = {}
            new_rate, new_why = {}, {}
            for (key, _, c), g in zip(flows, got, strict=True):
                if isinstance(key, str):
                    share[key] = g
                else:
                    new_rate[key] = g / self.ops[key].xfer_bytes
                    if g < c * (1 - 1e-6):
                        new_why[key] = "bandwidth"
            for p in running:
                new_rate[p], new_why[p] = min(cap[p], new_rate.get(p, math.inf)), new_why.get(p, "")
            for p in running:  # weights must have arrived
                op = self.ops[p]
                if op.stream is None or op.stream_bytes <= 0:
                    continue
                avail = self.fetched[p] - self.frac[p] * op.stream_bytes
                if avail <= _BEPS and self.fetched[p] < op.stream_bytes - _BEPS:
                    inflow = share.get(op.stream, 0.0) if targets.get(op.stream) == p else 0.0
                    lim = inflow / op.stream_bytes
                    if lim < new_rate[p]:
                        new_rate[p], new_why[p] = lim, op.stream
            links = self._links()
            for pr, c in links + links[::-1]:  # forward then backward along chains
                gap = self.frac[pr] - self.frac[c]
                rc = new_rate.get(c, 0.0)
                rp = new_rate.get(pr, 0.0)
                if gap <= _EPS and c in new_rate and rp < rc:  # FIFO empty: consumer follows
                    new_rate[c], new_why[c] = rp, f"wait_{self.ops[pr].engine}"
                full = self.ops[c].fifo_depth / self.ops[c].fifo_elems
                # FIFO full (only once the consumer runs): the producer waits
                if gap >= full - _EPS and pr in new_rate and rc < rp and self.start[c] <= self.t:
                    new_rate[pr], new_why[pr] = rc, f"wait_{self.ops[c].engine}"
            new_scap = {}
            for s, p in targets.items():
                if p is None:
                    continue
                c = self.streams[s].bytes_per_cycle
                if self._level(s) >= self.streams[s].capacity_bytes - _BEPS:
                    c = sum(new_rate.get(q, 0.0) * self.ops[q].stream_bytes for q in running
                            if self.ops[q].stream == s)
                new_scap[s] = c
            stable = new_rate == rate and new_scap == scap
            rate, why, scap = new_rate, new_why, new_scap
            if stable:
                break
        return rate, why, share, targets

    # --- main loop -------------------------------------------------------------------------------
    def run(self) -> TimingResult:
        n = len(self.ops)
        stuck = 0
        while self.n_done < n:
            self._settle()
            if self.n_done >= n:
                break
            running = self.running = self._running()
            rate, why, share, targets = self._rates(running)
            dt = self._next_dt(running, rate, share, targets)
            if math.isinf(dt):
                p = next(p for p in range(n) if self.end[p] == math.inf)
                raise TimingError(f"deadlock at cycle {self.t:.0f}: op {self.ops[p].index} "
                                  f"({self.ops[p].label or self.ops[p].engine}) can never finish")
            stuck = stuck + 1 if dt <= 0 else 0
            if stuck > 10 * n + 100:
                raise TimingError(f"no progress at cycle {self.t:.0f}")
            self._account(dt, running, rate, why, share, targets)
            self.t += dt
        return self._result()

    def _next_dt(self, running, rate, share, targets) -> float:
        cand = []
        if self.k < len(self.ops) and self.blocker < 0 and self.next_issue > self.t + _EPS:
            cand.append(self.next_issue - self.t)
        for p in running:
            op = self.ops[p]
            r = rate.get(p, 0.0)
            if r > 0:
                cand.append((1 - self.frac[p]) / r)
            if op.stream is not None and op.stream_bytes > 0 and r > 0:
                inflow = share.get(op.stream, 0.0) if targets.get(op.stream) == p else 0.0
                avail = self.fetched[p] - self.frac[p] * op.stream_bytes
                out = r * op.stream_bytes
                if out > inflow * (1 + 1e-12) and avail > _BEPS:
                    cand.append(avail / (out - inflow))
        for e, q in self.queue.items():
            h = self.head[e]
            if h < len(q):
                p = q[h]
                lat_end = self.start[p] + self.ops[p].latency
                if lat_end > self.t + _EPS:
                    cand.append(lat_end - self.t)
                tail_end = self.prog_end[p] + self.ops[p].tail
                if self.t + _EPS < tail_end < math.inf:
                    cand.append(tail_end - self.t)
        for s, p in targets.items():
            if p is None:
                continue
            f = share.get(s, 0.0)
            if f > 0:
                cand.append((self.ops[p].stream_bytes - self.fetched[p]) / f)
                cons = sum(rate.get(q, 0.0) * self.ops[q].stream_bytes for q in running
                           if self.ops[q].stream == s)
                room = self.streams[s].capacity_bytes - self._level(s)
                if f > cons * (1 + 1e-12) and room > _BEPS:
                    cand.append(room / (f - cons))
        for pr, c in self._links():
            gap = self.frac[pr] - self.frac[c]
            rc, rp = rate.get(c, 0.0), rate.get(pr, 0.0)
            full = self.ops[c].fifo_depth / self.ops[c].fifo_elems
            if rc > rp and gap > _EPS:
                cand.append(gap / (rc - rp))
            if rp > rc and full - gap > _EPS and self.start[c] <= self.t:
                cand.append((full - gap) / (rp - rc))
        cand = [c for c in cand if c >= 0]
        return max(min(cand), 0.0) if cand else math.inf

    def _account(self, dt, running, rate, why, share, targets) -> None:
        if dt <= 0:
            return
        used = dict.fromkeys(self.capacity, 0.0)
        for p in running:
            op = self.ops[p]
            r = rate.get(p, 0.0)
            self.frac[p] = min(1.0, self.frac[p] + r * dt)
            if self.frac[p] >= 1 - _EPS:
                self.frac[p], self.prog_end[p] = 1.0, self.t + dt
            if op.xfer_bytes > 0:
                for res in op.path:
                    used[res] += r * op.xfer_bytes
        for s, p in targets.items():
            if p is None:
                continue
            f = share.get(s, 0.0)
            if f > 0:
                self.fetch_t0[p] = min(self.fetch_t0[p], self.t)
                got = min(self.ops[p].stream_bytes, self.fetched[p] + f * dt) - self.fetched[p]
                self.fetched[p] += got
                self.s_fetched[s] += got
                for res in self.streams[s].path:
                    used[res] += f
        for res, u in used.items():
            self.res_bytes[res] += u * dt
        if not self.usage or self.usage[-1][1] != used:
            self.usage.append((self.t, used))
        if self.streams:
            self.levels.append((self.t, {s: self._level(s) for s in self.streams}))
        run = set(running)
        for e, q in self.queue.items():
            st = self.estats[e]
            h = self.head[e]
            if h >= len(q):
                st.idle += dt
                continue
            p = q[h]
            if self.issue[p] > self.t:
                reason = "sync" if self.blocker >= 0 else "issue"
            elif self.start[p] > self.t:
                b = self._blocking(p)
                reason = f"dep_{self.ops[b].engine}" if b is not None else "issue"
            elif p not in run:  # pipeline fill, drain and setup latency count as busy
                st.busy += dt
                self.busy[p] += dt
                continue
            else:
                op = self.ops[p]
                nominal = 1.0 / op.cycles if op.cycles > 0 else math.inf
                if op.xfer_bytes > 0:
                    alone = min(self.capacity[r] for r in op.path) if op.path else math.inf
                    nominal = min(nominal, alone / op.xfer_bytes)
                frac = min(1.0, rate.get(p, 0.0) / nominal) if nominal > 0 else 1.0
                st.busy += dt * frac
                self.busy[p] += dt * frac
                if frac >= 1 - 1e-9:
                    continue
                reason, dt_s = why.get(p) or "bandwidth", dt * (1 - frac)
                st.stalls[reason] = st.stalls.get(reason, 0.0) + dt_s
                self.ostall[p][reason] = self.ostall[p].get(reason, 0.0) + dt_s
                continue
            st.stalls[reason] = st.stalls.get(reason, 0.0) + dt
            if self.issue[p] <= self.t:
                self.ostall[p][reason] = self.ostall[p].get(reason, 0.0) + dt

    def _result(self) -> TimingResult:
        total = max(self.end, default=0.0)
        for st in self.estats.values():  # engines finished early idle until the end
            st.idle += max(0.0, total - self.t)
        ops = [OpTiming(o.index, o.engine, o.label, self.issue[p], self.start[p], self.end[p], self.busy[p],
                        self.ostall[p], dict(o.args)) for p, o in enumerate(self.ops)]
        fetches = [Fetch(o.stream, o.index, self.fetch_t0[p], self.fetch_t1[p], o.stream_bytes)
                   for p, o in enumerate(self.ops) if o.stream is not None and o.stream_bytes > 0]
        self.usage.append((total, dict.fromkeys(self.capacity, 0.0)))
        return TimingResult(total, self.m.clock_hz, ops, self.estats, fetches, self.res_bytes,
                            self.usage, self.levels)


def simulate(machine: Machine, ops: Sequence[Op]) -> TimingResult:
    """Schedule ``ops`` (program order) on ``machine``; see the module docstring for the model."""
    return _Sim(machine, ops).run()
