"""A plain, slow statement of the timing model, the one the fast loops are tested against.

It states everything `npukit.sim.timing` describes: engines and engine pools, the in-order issuer
(``issue_cycles``, ``issue_window``, synchronous ops, per-engine ``command_depth``), on-chip hazards
(RAW/WAR/WAW over ``reads``/``writes``), setup ``latency``, work ``cycles``, drain ``tail``,
transfers sharing bandwidth resources max-min fairly, prefetch streams, producer→consumer FIFOs
and dependency-token queues.

Every event is handled the same obvious way: settle the instant ``t`` (issue, then start and
complete each engine's heads, then hand pool ops to free cores, repeated until nothing changes;
then note finished prefetches), look at what each engine's head is doing, give every running op its
rate, find the next event, move time there and book each engine's share of it (those interval steps
live in `npukit.sim.timing_ref_flow`). The floating-point operations are the model's, in its order,
so results agree with the fast loops bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

from npukit.sim.timing_ref_flow import INF, EngineState, Flow, OpState, StreamState
from npukit.sim.timing_tokens import check_tokens, expand_engines
from npukit.sim.timing_types import (
    BYTES_EPS,
    FRACTION_EPS,
    EngineStats,
    Fetch,
    Machine,
    Op,
    OpTiming,
    TimingError,
    TimingResult,
    TokenDeadlock,
    TokenWait,
    validate_program,
)


def _queue_ordinals(machine: Machine, op: Op, what: str) -> tuple[int, ...]:
    """The token queues ``op`` pops or pushes (``what``), as ordinals (one name alone: that queue)."""
    names = getattr(op, what, ())
    names = (names,) if isinstance(names, str) else names
    index = {q.name: i for i, q in enumerate(machine.queues)}
    for name in names:
        if name not in index:
            raise TimingError(f"op {op.index} {what}s unknown token queue {name!r}")
    return tuple(index[name] for name in names)


class ReferenceSim(Flow):
    """One run of the model; `run` returns the `TimingResult`."""

    def __init__(self, machine: Machine, ops: Sequence[Op]) -> None:
        ops = list(ops)
        self.machine = machine
        self.capacity = {r.name: r.bytes_per_cycle for r in machine.resources}
        cores, pools = expand_engines(machine)
        validate_program(machine, ops, self.capacity, {s.name: s for s in machine.streams}, {*cores, *pools})
        check_tokens(machine, ops)
        self.pools = {name: list(members) for name, members in pools.items()}
        self.engines = [EngineState(name, [p for p, op in enumerate(ops) if op.engine == name])
                        for name in cores]
        index = {name: e for e, name in enumerate(cores)}
        self.ops = [OpState(op, p, index.get(op.engine), op.engine) for p, op in enumerate(ops)]
        if machine.queues:
            for s in self.ops:
                s.pops = _queue_ordinals(machine, s.op, "pop")
                s.pushes = _queue_ordinals(machine, s.op, "push")
        self.tokens = [q.initial for q in machine.queues]
        self.streams = [StreamState(st, [p for p, op in enumerate(ops)
                                         if op.stream == st.name and op.stream_bytes > 0])
                        for st in machine.streams]
        self.window = len(ops) + 1 if machine.issue_window is None else machine.issue_window
        self.next_to_issue = 0
        self.sync_op: int | None = None  # the synchronous op the issuer waits for
        self.next_issue_time = 0.0
        self.resource_bytes = dict.fromkeys(self.capacity, 0.0)
        self.usage: list[tuple[float, dict[str, float]]] = []
        self.levels: list[tuple[float, dict[str, float]]] = []

    # --- the issuer -------------------------------------------------------------------------------
    def is_head(self, p: int) -> bool:
        e = self.ops[p].engine
        return e is not None and self.engines[e].current() == p

    def queued_commands(self, command_queue: str) -> int:
        """Issued ops waiting in a command queue: not yet their engine's head (a pool op: not handed on)."""
        return sum(1 for s in self.ops[:self.next_to_issue]
                   if s.command_queue == command_queue and s.end == INF and not self.is_head(s.position))

    def issuer_may_go(self, t: float) -> bool:
        unstarted = sum(1 for s in self.ops[:self.next_to_issue] if s.start == INF)
        if not (self.next_to_issue < len(self.ops) and self.sync_op is None and unstarted < self.window
                and t >= self.next_issue_time - FRACTION_EPS):
            return False
        depth = self.machine.command_depth
        return depth is None or self.queued_commands(self.ops[self.next_to_issue].command_queue) < depth

    def issue(self, t: float) -> bool:
        """Issue ops in program order while the issuer may; True if it issued any."""
        issued = False
        while self.issuer_may_go(t):
            s = self.ops[self.next_to_issue]
            s.issue = t
            self.next_issue_time = t + self.machine.issue_cycles
            if not s.op.is_async:
                self.sync_op = s.position
            self.next_to_issue += 1
            issued = True
        return issued

    # --- tokens -----------------------------------------------------------------------------------
    def pop_tokens(self, s: OpState) -> bool:
        """Pop what it can of its queues, in order (True: something moved)."""
        moved = False
        while s.popped < len(s.pops) and self.tokens[s.pops[s.popped]] > 0:
            self.tokens[s.pops[s.popped]] -= 1
            s.popped += 1
            moved = True
        return moved

    def push_tokens(self, s: OpState) -> bool:
        """Push what it can to its queues, in order (True: something moved); it waits while one is full."""
        moved = False
        while s.pushed < len(s.pushes) and self.tokens[s.pushes[s.pushed]] < self.machine.queues[
                s.pushes[s.pushed]].capacity:
            self.tokens[s.pushes[s.pushed]] += 1
            s.pushed += 1
            moved = True
        s.pushing = s.pushed < len(s.pushes)
        return moved

    # --- engine heads -----------------------------------------------------------------------------
    def try_start(self, t: float, s: OpState) -> bool | None:
        """Start ``s`` at ``t`` once no hazard holds it and its tokens are popped. None: it started;
        else whether a token moved."""
        if self.first_hazard(s.position) is not None:
            return False
        moved = self.pop_tokens(s)
        if s.popped < len(s.pops):
            return moved
        s.start = t
        return None

    def try_complete(self, t: float, s: OpState) -> bool | None:
        """Complete ``s`` at ``t`` once its latency, work and tail are done and its tokens pushed.
        None: it completed; else whether a token moved."""
        if t < s.start + s.op.latency - FRACTION_EPS:
            return False
        if s.work_done < 1 - FRACTION_EPS:
            if s.has_work:
                return False
            s.work_done, s.work_end = 1.0, t  # no work: only latency and tail
        if not t >= s.work_end + s.op.tail - FRACTION_EPS:
            return False
        moved = self.push_tokens(s)
        if s.pushing:
            return moved
        s.end, s.work_done = t, 1.0
        if s.op.stream is not None:
            self.streams[self.stream_index(s.op.stream)].consumed += s.op.stream_bytes
        if self.sync_op == s.position:
            self.sync_op, self.next_issue_time = None, t + self.machine.issue_cycles
        return None

    def run_heads(self, t: float, e: int) -> bool:
        """Start and complete engine ``e``'s issued heads at ``t``, one after the other while they may;
        True if anything changed."""
        changed = False
        eng = self.engines[e]
        while (p := eng.current()) is not None and p < self.next_to_issue:
            s = self.ops[p]
            if s.start == INF:
                moved = self.try_start(t, s)
                if moved is not None:
                    return changed or moved
                changed = True
            moved = self.try_complete(t, s)
            if moved is not None:
                return changed or moved
            eng.head += 1
            changed = True
        return changed

    def dispatch(self) -> bool:
        """Hand issued pool ops, in program order per pool, each to the lowest-numbered core with nothing
        issued left in its own queue, ahead of that core's later ops; True if any was handed on."""
        moved = False
        for name, members in self.pools.items():
            for s in self.ops[:self.next_to_issue]:
                if s.op.engine != name or s.engine is not None:
                    continue
                free = [e for e in members
                        if (c := self.engines[e].current()) is None or c >= self.next_to_issue]
                if not free:
                    break
                eng = self.engines[free[0]]
                eng.queue.insert(eng.head, s.position)
                s.engine = free[0]
                moved = True
        return moved

    def complete_fetches(self, t: float) -> None:
        """Prefetches whose bytes have all arrived: the stream moves on to its next op."""
        for st in self.streams:
            while st.next < len(st.ops) and (
                    (s := self.ops[st.ops[st.next]]).fetched >= s.op.stream_bytes - BYTES_EPS):
                st.fetched += s.op.stream_bytes - s.fetched
                s.fetched = s.op.stream_bytes
                s.fetch_end = min(s.fetch_end, t)
                s.fetch_start = min(s.fetch_start, t)
                st.next += 1

    def settle(self, t: float) -> None:
        changed = True
        while changed:
            changed = self.issue(t)
            for e in range(len(self.engines)):
                changed = self.run_heads(t, e) or changed
            changed = self.dispatch() or changed
        self.complete_fetches(t)

    # --- the whole run ----------------------------------------------------------------------------
    def run(self) -> TimingResult:
        t, stuck, n = 0.0, 0, len(self.ops)
        while any(s.end == INF for s in self.ops):
            self.settle(t)
            if all(s.end != INF for s in self.ops):
                break
            survey = self.survey(t)
            rates = self.solve_rates(t, survey)
            dt = self.horizon(t, survey, rates)
            if dt == INF:
                raise self.deadlock(t)
            stuck = stuck + 1 if dt <= 0 else 0
            if stuck > 10 * n + 100:
                raise TimingError(f"no progress at cycle {t:.0f}")
            if dt <= 0:
                continue
            self.advance(t, dt, survey, rates)
            self.attribute(dt, survey, rates)
            t += dt
        return self.result(t)

    def deadlock(self, t: float) -> TimingError:
        """A `TokenDeadlock` naming every head stuck on a token, else the first op that cannot finish."""
        waits = []
        for eng in self.engines:
            p = eng.current()
            if p is None or p >= self.next_to_issue:
                continue
            s = self.ops[p]
            if s.pushing:
                action, qi = "push", s.pushes[s.pushed]
            elif s.start == INF and s.popped < len(s.pops):
                action, qi = "pop", s.pops[s.popped]
            else:
                continue
            q = self.machine.queues[qi]
            waits.append(TokenWait(s.op.index, s.op.label, eng.name, action, q.name, self.tokens[qi],
                                   q.capacity))
        if waits:
            return TokenDeadlock(t, waits)
        op = next(s for s in self.ops if s.end == INF).op
        return TimingError(f"deadlock at cycle {t:.0f}: op {op.index} ({op.label or op.engine}) "
                           "can never finish")

    def result(self, t: float) -> TimingResult:
        total = max((s.end for s in self.ops), default=0.0)
        engines = {eng.name: EngineStats(eng.name, eng.busy, eng.idle + max(0.0, total - t), eng.stalls)
                   for eng in self.engines}
        ops = [OpTiming(s.op.index, self.engine_name(s.position), s.op.label, s.issue, s.start, s.end, s.busy,
                        s.stalls, dict(s.op.args)) for s in self.ops]
        fetches = [Fetch(s.op.stream, s.op.index, s.fetch_start, s.fetch_end, s.op.stream_bytes)
                   for s in self.ops if s.draws_stream]
        usage = [*self.usage, (total, dict.fromkeys(self.capacity, 0.0))]
        return TimingResult(total, self.machine.clock_hz, ops, engines, fetches, dict(self.resource_bytes),
                            usage, self.levels)


def simulate_reference(machine: Machine, ops: Sequence[Op]) -> TimingResult:
    """The model's definition, slowly: what `npukit.sim.timing.simulate` must return, bit for bit."""
    return ReferenceSim(machine, ops).run()
