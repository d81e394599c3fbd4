"""A plain, slow statement of the timing model, the one the fast loops are tested against.

Scope today: engines (no pools), the in-order issuer (``issue_cycles``, ``issue_window``, synchronous
ops), on-chip hazards (RAW/WAR/WAW over ``reads``/``writes``), setup ``latency``, work ``cycles``,
drain ``tail``, and transfers sharing bandwidth resources max-min fairly. Prefetch streams, FIFO
couplings, token queues, command queues and engine pools are not stated here yet: for those
`simulate_reference` raises `TimingError` (the readable loop, `timing_state.Sim`, still defines them).

Every event is handled the same obvious way: settle the instant (issue, start, complete, repeated
until nothing changes), look at what each engine's head is doing, give every running op its rate,
find the next event, move time there and book each engine's share of it. The floating-point
operations are the model's, in its order, so results agree with the fast loops bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from npukit.sim.timing_types import (
    FRACTION_EPS,
    EngineStats,
    Machine,
    Op,
    OpTiming,
    TimingError,
    TimingResult,
    TokenOp,
    ranges_conflict,
    validate_program,
    waterfill,
)

INF = math.inf
FULL_RATE_SLACK = 1e-9  # an op at this fraction of its nominal rate or more is not stalled
BANDWIDTH_BOUND_SLACK = 1e-6  # a transfer's share below this fraction of its cap: bandwidth-bound


@dataclass
class OpState:
    """One op while the program runs."""

    op: Op
    position: int  # in program order
    engine: int
    issue: float = INF
    start: float = INF
    end: float = INF
    work_done: float = 0.0  # fraction of the op's work
    work_end: float = INF  # when the work ran out (the tail follows)
    busy: float = 0.0
    stalls: dict[str, float] = field(default_factory=dict)

    @property
    def has_work(self) -> bool:
        return self.op.cycles > 0 or self.op.xfer_bytes > 0

    @property
    def rate_cap(self) -> float:
        """Fraction of its work per cycle at full engine speed."""
        return 1.0 / self.op.cycles if self.op.cycles > 0 else INF


@dataclass
class EngineState:
    name: str
    queue: list[int]  # program positions of its ops
    head: int = 0  # index into queue
    busy: float = 0.0
    idle: float = 0.0
    stalls: dict[str, float] = field(default_factory=dict)

    def current(self) -> int | None:
        return self.queue[self.head] if self.head < len(self.queue) else None


@dataclass
class Survey:
    """What the heads do during the coming interval."""

    running: list[int] = field(default_factory=list)
    filling: list[int] = field(default_factory=list)  # started, in setup latency or drain tail
    waiting: list[int] = field(default_factory=list)  # engines whose head is not issued
    blocked: list[int] = field(default_factory=list)  # engines whose head waits for a hazard
    next_event: float = INF  # cycles from now


@dataclass
class Rates:
    rate: dict[int, float] = field(default_factory=dict)  # op position -> fraction per cycle
    bandwidth_bound: dict[int, bool] = field(default_factory=dict)


def _check_scope(machine: Machine, ops: Sequence[Op]) -> None:
    if machine.streams or machine.queues or machine.command_depth is not None:
        raise TimingError("the reference model does not state streams, token or command queues yet")
    if any(not isinstance(e, str) for e in machine.engines):
        raise TimingError("the reference model does not state engine pools yet")
    for op in ops:
        if op.stream is not None or op.fifo_from is not None or isinstance(op, TokenOp):
            raise TimingError("the reference model does not state streams, FIFOs or tokens yet")


class ReferenceSim:
    """One run of the model; `run` returns the `TimingResult`."""

    def __init__(self, machine: Machine, ops: Sequence[Op]) -> None:
        self.machine = machine
        self.capacity = {r.name: r.bytes_per_cycle for r in machine.resources}
        _check_scope(machine, ops)
        names = tuple(machine.engines)
        validate_program(machine, list(ops), self.capacity, {}, names)
        index = {name: i for i, name in enumerate(names)}
        self.ops = [OpState(op, p, index[op.engine]) for p, op in enumerate(ops)]
        self.engines = [EngineState(str(name), [p for p, op in enumerate(ops) if op.engine == name])
                        for name in names]
        self.window = len(ops) + 1 if machine.issue_window is None else machine.issue_window
        self.next_to_issue = 0
        self.sync_op: int | None = None  # the synchronous op the issuer waits for
        self.next_issue_time = 0.0
        self.resource_bytes = dict.fromkeys(self.capacity, 0.0)
        self.usage: list[tuple[float, dict[str, float]]] = []

    # --- the instant t ----------------------------------------------------------------------------
    def issued_unstarted(self) -> int:
        return sum(1 for s in self.ops[:self.next_to_issue] if s.start == INF)

    def issuer_may_go(self, t: float) -> bool:
        return (self.next_to_issue < len(self.ops) and self.sync_op is None
                and self.issued_unstarted() < self.window and t >= self.next_issue_time - FRACTION_EPS)

    def first_hazard(self, p: int) -> int | None:
        """The earliest unfinished op before ``p`` that it conflicts with (RAW/WAR/WAW)."""
        op = self.ops[p].op
        if not (op.reads or op.writes):
            return None
        mine = (*op.reads, *op.writes)
        for q in range(p):
            if self.ops[q].end == INF and ranges_conflict(self.ops[q].op, mine, op.writes):
                return q
        return None

    def step_head(self, t: float, e: int) -> bool:
        """Start or complete engine ``e``'s head at ``t`` if it may; True if something changed."""
        p = self.engines[e].current()
        if p is None or p >= self.next_to_issue:
            return False
        s = self.ops[p]
        if s.start == INF:
            if self.first_hazard(p) is not None:
                return False
            s.start = t
            return True
        if t < s.start + s.op.latency - FRACTION_EPS:
            return False
        if s.work_done < 1 - FRACTION_EPS:
            if s.has_work:
                return False
            s.work_done, s.work_end = 1.0, t  # no work: only latency and tail
        if not t >= s.work_end + s.op.tail - FRACTION_EPS:
            return False
        s.end, s.work_done = t, 1.0
        if self.sync_op == p:
            self.sync_op, self.next_issue_time = None, t + self.machine.issue_cycles
        self.engines[e].head += 1
        return True

    def settle(self, t: float) -> None:
        changed = True
        while changed:
            changed = False
            while self.issuer_may_go(t):
                p = self.next_to_issue
                self.ops[p].issue = t
                self.next_issue_time = t + self.machine.issue_cycles
                if not self.ops[p].op.is_async:
                    self.sync_op = p
                self.next_to_issue += 1
                changed = True
            for e in range(len(self.engines)):
                changed = self.step_head(t, e) or changed

    # --- the interval after t ---------------------------------------------------------------------
    def survey(self, t: float) -> Survey:
        out = Survey()
        for e, eng in enumerate(self.engines):
            p = eng.current()
            if p is None:
                continue
            if p >= self.next_to_issue:
                out.waiting.append(e)
                continue
            s = self.ops[p]
            if s.start == INF:
                out.blocked.append(e)
                continue
            latency_end = s.start + s.op.latency
            if latency_end > t + FRACTION_EPS:
                out.next_event = min(out.next_event, latency_end - t)
                out.filling.append(p)
            elif s.start <= t and s.work_done < 1:
                out.running.append(p)
            else:
                out.filling.append(p)
            tail_end = s.work_end + s.op.tail
            if t + FRACTION_EPS < tail_end < INF:
                out.next_event = min(out.next_event, tail_end - t)
        return out

    def solve_rates(self, running: list[int]) -> Rates:
        """Each running op's rate: its engine's, or its max-min fair share of bandwidth if lower."""
        out = Rates()
        movers = [p for p in running if self.ops[p].op.xfer_bytes > 0]
        caps = [self.ops[p].rate_cap * self.ops[p].op.xfer_bytes for p in movers]
        shares = waterfill(caps, [self.ops[p].op.path for p in movers], self.capacity) if movers else []
        share_of = dict(zip(movers, shares, strict=True))
        for p in running:
            s = self.ops[p]
            if p in share_of:
                by_bandwidth = share_of[p] / s.op.xfer_bytes
                out.rate[p] = by_bandwidth if by_bandwidth < s.rate_cap else s.rate_cap
                cap_bytes = s.rate_cap * s.op.xfer_bytes
                out.bandwidth_bound[p] = share_of[p] < cap_bytes * (1 - BANDWIDTH_BOUND_SLACK)
            else:
                out.rate[p], out.bandwidth_bound[p] = s.rate_cap, False
        return out

    def horizon(self, t: float, survey: Survey, rates: Rates) -> float:
        dt = survey.next_event
        issuer_waits = self.next_to_issue < len(self.ops) and self.sync_op is None
        if issuer_waits and self.next_issue_time > t + FRACTION_EPS:
            dt = min(dt, self.next_issue_time - t)
        for p in survey.running:
            r = rates.rate[p]
            if r > 0:
                dt = min(dt, (1 - self.ops[p].work_done) / r)
        return dt

    def advance(self, t: float, dt: float, running: list[int], rates: Rates) -> None:
        used = dict.fromkeys(self.capacity, 0.0)
        for p in running:
            s, r = self.ops[p], rates.rate[p]
            done = min(1.0, s.work_done + r * dt)
            if done >= 1 - FRACTION_EPS:
                s.work_done, s.work_end = 1.0, t + dt
            else:
                s.work_done = done
            if s.op.xfer_bytes > 0:
                for name in s.op.path:
                    used[name] += r * s.op.xfer_bytes
        for name in self.resource_bytes:
            self.resource_bytes[name] += used[name] * dt
        if not self.usage or self.usage[-1][1] != used:
            self.usage.append((t, used))

    def nominal_rate(self, s: OpState) -> float:
        """The op's rate alone on the machine (engine speed, or its narrowest resource)."""
        if s.op.xfer_bytes <= 0:
            return s.rate_cap
        narrowest = min((self.capacity[r] for r in s.op.path), default=INF)
        return min(s.rate_cap, narrowest / s.op.xfer_bytes)

    def attribute(self, dt: float, survey: Survey, rates: Rates) -> None:
        for eng in self.engines:
            if eng.current() is None and eng.queue:
                eng.idle += dt
        for e in survey.waiting:
            _add(self.engines[e].stalls, "sync" if self.sync_op is not None else "issue", dt)
        for e in survey.blocked:
            p = self.engines[e].current()
            assert p is not None
            q = self.first_hazard(p)
            reason = "issue" if q is None else f"dep_{self.ops[q].op.engine}"
            _add(self.engines[e].stalls, reason, dt)
            _add(self.ops[p].stalls, reason, dt)
        for p in survey.filling:
            self.engines[self.ops[p].engine].busy += dt
            self.ops[p].busy += dt
        for p in survey.running:
            s = self.ops[p]
            nominal = self.nominal_rate(s)
            fraction = min(1.0, rates.rate[p] / nominal) if nominal > 0 else 1.0
            self.engines[s.engine].busy += dt * fraction
            s.busy += dt * fraction
            if fraction < 1 - FULL_RATE_SLACK:
                _add(self.engines[s.engine].stalls, "bandwidth", dt * (1 - fraction))
                _add(s.stalls, "bandwidth", dt * (1 - fraction))

    # --- the whole run ----------------------------------------------------------------------------
    def run(self) -> TimingResult:
        t, stuck, n = 0.0, 0, len(self.ops)
        while any(s.end == INF for s in self.ops):
            self.settle(t)
            if all(s.end != INF for s in self.ops):
                break
            survey = self.survey(t)
            rates = self.solve_rates(survey.running)
            dt = self.horizon(t, survey, rates)
            if dt == INF:
                p = next(s for s in self.ops if s.end == INF).op
                raise TimingError(f"deadlock at cycle {t:.0f}: op {p.index} ({p.label or p.engine}) "
                                  "can never finish")
            stuck = stuck + 1 if dt <= 0 else 0
            if stuck > 10 * n + 100:
                raise TimingError(f"no progress at cycle {t:.0f}")
            if dt <= 0:
                continue
            self.advance(t, dt, survey.running, rates)
            self.attribute(dt, survey, rates)
            t += dt
        return self.result(t)

    def result(self, t: float) -> TimingResult:
        total = max((s.end for s in self.ops), default=0.0)
        engines = {}
        for eng in self.engines:
            idle = eng.idle if eng.queue else t  # an engine without ops idles all along
            engines[eng.name] = EngineStats(eng.name, eng.busy, idle + max(0.0, total - t), eng.stalls)
        ops = [OpTiming(s.op.index, s.op.engine, s.op.label, s.issue, s.start, s.end, s.busy, s.stalls,
                        dict(s.op.args)) for s in self.ops]
        usage = [*self.usage, (total, dict.fromkeys(self.capacity, 0.0))]
        return TimingResult(total, self.machine.clock_hz, ops, engines, [], dict(self.resource_bytes),
                            usage, [])


def _add(stalls: dict[str, float], reason: str, dt: float) -> None:
    stalls[reason] = stalls.get(reason, 0.0) + dt


def simulate_reference(machine: Machine, ops: Sequence[Op]) -> TimingResult:
    """The model's definition, slowly: what `npukit.sim.timing.simulate` must return, bit for bit."""
    return ReferenceSim(machine, ops).run()
