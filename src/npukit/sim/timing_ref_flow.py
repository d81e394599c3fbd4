"""The reference timing model's state and what happens *between* two events (`npukit.sim.timing_ref`
holds what happens *at* an event and the loop itself).

Between two events every rate is constant. `Flow` finds, for the interval after ``t``: what every
engine's head is doing (`survey`), the rate of every running op and the inflow of every prefetch
stream (`solve_rates`, a fixed point over the stream caps), when the next event comes (`horizon`),
and then moves progress and fetched bytes (`advance`) and books each engine's and op's share of the
interval as busy, idle or a named stall (`attribute`). Everything is plain lists and dicts of the
records below; the float operations are the model's, in its order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from npukit.sim.timing_types import BYTES_EPS, FRACTION_EPS, Machine, Op, Stream, ranges_conflict, waterfill

INF = math.inf
FULL_RATE_SLACK = 1e-9  # an op at this fraction of its nominal rate or more is not stalled
BANDWIDTH_BOUND_SLACK = 1e-6  # a transfer's share below this fraction of its cap: bandwidth-bound
FLOW_GROWTH_SLACK = 1e-12  # an inflow must exceed an outflow by this fraction to fill or drain a buffer
RATE_ROUNDS = 12  # at most this many rounds of the rate fixed point


@dataclass
class OpState:
    """One op while the program runs (positions are program order)."""

    op: Op
    position: int
    engine: int | None  # the core it runs on (None: a pool op not handed to a core yet)
    command_queue: str  # the engine or pool whose command queue it waits in once issued
    pops: tuple[int, ...] = ()  # token queue ordinals
    pushes: tuple[int, ...] = ()
    issue: float = INF
    start: float = INF
    end: float = INF
    work_done: float = 0.0  # fraction of the op's work
    work_end: float = INF  # when the work ran out (the tail follows)
    fetched: float = 0.0  # stream bytes arrived for it
    fetch_start: float = INF
    fetch_end: float = INF
    popped: int = 0  # how many of its pops are done
    pushed: int = 0
    pushing: bool = False  # its work and tail are done; it waits for room in a token queue
    busy: float = 0.0
    stalls: dict[str, float] = field(default_factory=dict)

    @property
    def has_work(self) -> bool:
        return self.op.cycles > 0 or self.op.xfer_bytes > 0

    @property
    def rate_cap(self) -> float:
        """Fraction of its work per cycle at full engine speed."""
        return 1.0 / self.op.cycles if self.op.cycles > 0 else INF

    @property
    def draws_stream(self) -> bool:
        return self.op.stream is not None and self.op.stream_bytes > 0


@dataclass
class EngineState:
    name: str
    queue: list[int]  # program positions of the ops it runs, in its order
    head: int = 0  # index into queue
    busy: float = 0.0
    idle: float = 0.0
    stalls: dict[str, float] = field(default_factory=dict)

    def current(self) -> int | None:
        return self.queue[self.head] if self.head < len(self.queue) else None


@dataclass
class StreamState:
    stream: Stream
    ops: list[int]  # the ops that draw bytes from it, program order
    next: int = 0  # index into ops: the op whose bytes it fetches next
    fetched: float = 0.0  # bytes fetched for its ops so far
    consumed: float = 0.0  # bytes drawn by its finished ops


@dataclass
class Survey:
    """What the heads do during the coming interval."""

    running: list[int] = field(default_factory=list)
    filling: list[int] = field(default_factory=list)  # started, in setup latency or drain tail
    waiting: list[int] = field(default_factory=list)  # engines whose head is not issued
    blocked: list[int] = field(default_factory=list)  # engines whose head has not started
    links: list[tuple[int, int]] = field(default_factory=list)  # (producer, consumer) FIFO pairs coupled now
    target: list[int | None] = field(default_factory=list)  # per stream: the op it fetches for now
    level: list[float] = field(default_factory=list)  # per stream: buffered bytes (where it fetches)
    next_event: float = INF  # cycles from now (a latency or tail ending)


@dataclass
class Rates:
    rate: dict[int, float] = field(default_factory=dict)  # running op -> fraction of its work per cycle
    why: dict[int, str | None] = field(default_factory=dict)  # what limits it (None: its engine)
    inflow: list[float] = field(default_factory=list)  # per stream: bytes per cycle arriving


class Flow:
    """Mixed into `npukit.sim.timing_ref.ReferenceSim`: the interval after an event."""

    machine: Machine
    capacity: dict[str, float]
    ops: list[OpState]
    engines: list[EngineState]
    streams: list[StreamState]
    next_to_issue: int
    sync_op: int | None
    next_issue_time: float
    resource_bytes: dict[str, float]
    usage: list[tuple[float, dict[str, float]]]
    levels: list[tuple[float, dict[str, float]]]

    def engine_name(self, p: int) -> str:
        """The core op ``p`` runs on, or its pool while it waits for one."""
        s = self.ops[p]
        return s.op.engine if s.engine is None else self.engines[s.engine].name

    def fifo_producer(self, c: int) -> int | None:
        """The producer streaming to ``c`` over a FIFO (an async producer and elements to pass)."""
        op = self.ops[c].op
        if op.fifo_from is None or op.fifo_elems <= 0 or not self.ops[op.fifo_from].op.is_async:
            return None
        return op.fifo_from

    def drawn(self, running: list[int], si: int, per_op: dict[int, float] | None = None) -> float:
        """Bytes (``per_op`` None: so far; else per cycle at those rates) the running ops draw from
        stream ``si``, summed in survey order."""
        total = 0.0
        for p in running:
            op = self.ops[p].op
            if op.stream == self.streams[si].stream.name:
                total += (self.ops[p].work_done if per_op is None else per_op[p]) * op.stream_bytes
        return total

    # --- survey ----------------------------------------------------------------------------------
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
        for c in range(self.next_to_issue):
            pr = self.fifo_producer(c)
            if pr is not None and self.ops[c].end == INF and self.ops[pr].end == INF:
                out.links.append((pr, c))
        for si, st in enumerate(self.streams):
            p = st.ops[st.next] if st.next < len(st.ops) else None
            prev_started = st.next == 0 or self.ops[st.ops[st.next - 1]].start <= t
            fetches = p is not None and p < self.next_to_issue and prev_started
            out.target.append(p if fetches else None)
            out.level.append(st.fetched - st.consumed - self.drawn(out.running, si) if fetches else 0.0)
        return out

    # --- rates -----------------------------------------------------------------------------------
    def solve_rates(self, t: float, sv: Survey) -> Rates:
        """Water-fill the transfers and stream fetches, then hold back ops whose weights have not arrived
        and FIFO-coupled pairs; a full buffer fetches only as fast as it is drained, so repeat until the
        stream caps repeat."""
        fetching = [si for si, p in enumerate(sv.target) if p is not None]
        stream_caps = [self.streams[si].stream.bytes_per_cycle for si in fetching]
        movers = [p for p in sv.running if self.ops[p].op.xfer_bytes > 0]
        paths = [self.ops[p].op.path for p in movers] + [self.streams[si].stream.path for si in fetching]
        out = Rates()
        for _ in range(RATE_ROUNDS):
            caps = [self.ops[p].rate_cap * self.ops[p].op.xfer_bytes for p in movers] + stream_caps
            shares = waterfill(caps, paths, self.capacity)
            out = Rates(inflow=[0.0] * len(self.streams))
            for j, si in enumerate(fetching):
                out.inflow[si] = shares[len(movers) + j]
            self.engine_or_bandwidth(sv.running, dict(zip(movers, shares, strict=False)), out)
            self.wait_for_weights(sv, out)
            self.couple_fifos(t, sv.links, out)
            new_caps = [self.streams[si].stream.bytes_per_cycle for si in fetching]
            for j, si in enumerate(fetching):
                if sv.level[si] >= self.streams[si].stream.capacity_bytes - BYTES_EPS:
                    new_caps[j] = self.drawn(sv.running, si, out.rate)
            stable = new_caps == stream_caps
            stream_caps = new_caps
            if stable:
                break
        return out

    def engine_or_bandwidth(self, running: list[int], share_of: dict[int, float], out: Rates) -> None:
        """Each running op's rate: its engine's, or its share of bandwidth per byte if lower."""
        for p in running:
            s = self.ops[p]
            if p in share_of:
                by_bandwidth = share_of[p] / s.op.xfer_bytes
                out.rate[p] = by_bandwidth if by_bandwidth < s.rate_cap else s.rate_cap
                cap_bytes = s.rate_cap * s.op.xfer_bytes
                out.why[p] = "bandwidth" if share_of[p] < cap_bytes * (1 - BANDWIDTH_BOUND_SLACK) else None
            else:
                out.rate[p], out.why[p] = s.rate_cap, None

    def wait_for_weights(self, sv: Survey, out: Rates) -> None:
        """An op whose fetched bytes are used up progresses only as fast as its bytes arrive."""
        for p in sv.running:
            s = self.ops[p]
            if not s.draws_stream:
                continue
            nbytes = s.op.stream_bytes
            if s.fetched - s.work_done * nbytes <= BYTES_EPS and s.fetched < nbytes - BYTES_EPS:
                si = self.stream_index(s.op.stream)
                limit = (out.inflow[si] if sv.target[si] == p else 0.0) / nbytes
                if limit < out.rate[p]:
                    out.rate[p], out.why[p] = limit, s.op.stream

    def couple_fifos(self, t: float, links: list[tuple[int, int]], out: Rates) -> None:
        """Along the chains, forward then backward: an empty FIFO holds the consumer to the producer's
        rate; a full one (once the consumer has started) holds the producer to the consumer's."""
        for pr, c in links + links[::-1]:
            gap = self.ops[pr].work_done - self.ops[c].work_done
            rc, rp = out.rate.get(c, 0.0), out.rate.get(pr, 0.0)
            if gap <= FRACTION_EPS and c in out.rate and rp < rc:
                out.rate[c], out.why[c] = rp, f"wait_{self.engine_name(pr)}"
            full = self.ops[c].op.fifo_depth / self.ops[c].op.fifo_elems
            if gap >= full - FRACTION_EPS and pr in out.rate and rc < rp and self.ops[c].start <= t:
                out.rate[pr], out.why[pr] = rc, f"wait_{self.engine_name(c)}"

    def stream_index(self, name: str | None) -> int:
        return next(si for si, st in enumerate(self.streams) if st.stream.name == name)

    # --- horizon ---------------------------------------------------------------------------------
    def horizon(self, t: float, sv: Survey, rt: Rates) -> float:
        """Cycles to the next event: a latency or tail ending, the issuer going on, an op's work or its
        fetched bytes running out, a prefetch completing or its buffer filling, a FIFO emptying or filling."""
        found = [sv.next_event]
        issuer_waits = self.next_to_issue < len(self.ops) and self.sync_op is None
        if issuer_waits and self.next_issue_time > t + FRACTION_EPS:
            found.append(self.next_issue_time - t)
        for p in sv.running:
            s, r = self.ops[p], rt.rate[p]
            if r <= 0:
                continue
            found.append((1 - s.work_done) / r)
            if s.draws_stream:
                si = self.stream_index(s.op.stream)
                inflow = rt.inflow[si] if sv.target[si] == p else 0.0
                left, outflow = s.fetched - s.work_done * s.op.stream_bytes, r * s.op.stream_bytes
                if outflow > inflow * (1 + FLOW_GROWTH_SLACK) and left > BYTES_EPS:
                    found.append(left / (outflow - inflow))
        for si, p in enumerate(sv.target):
            f = rt.inflow[si] if p is not None else 0.0
            if not f > 0:
                continue
            found.append((self.ops[p].op.stream_bytes - self.ops[p].fetched) / f)
            drain = self.drawn(sv.running, si, rt.rate)
            room = self.streams[si].stream.capacity_bytes - sv.level[si]
            if f > drain * (1 + FLOW_GROWTH_SLACK) and room > BYTES_EPS:
                found.append(room / (f - drain))
        for pr, c in sv.links:
            gap = self.ops[pr].work_done - self.ops[c].work_done
            rc, rp = rt.rate.get(c, 0.0), rt.rate.get(pr, 0.0)
            full = self.ops[c].op.fifo_depth / self.ops[c].op.fifo_elems
            if rc > rp and gap > FRACTION_EPS:
                found.append(gap / (rc - rp))
            if rp > rc and full - gap > FRACTION_EPS and self.ops[c].start <= t:
                found.append((full - gap) / (rp - rc))
        return min(x for x in found if x >= 0)

    # --- advance and attribute -------------------------------------------------------------------
    def advance(self, t: float, dt: float, sv: Survey, rt: Rates) -> None:
        """Progress, fetched bytes, resource bytes, and the usage and buffer-level samples over [t, t+dt)."""
        used = dict.fromkeys(self.capacity, 0.0)
        for p in sv.running:
            s, r = self.ops[p], rt.rate[p]
            done = min(1.0, s.work_done + r * dt)
            if done >= 1 - FRACTION_EPS:
                s.work_done, s.work_end = 1.0, t + dt
            else:
                s.work_done = done
            if s.op.xfer_bytes > 0:
                for name in s.op.path:
                    used[name] += r * s.op.xfer_bytes
        for si, p in enumerate(sv.target):
            f = rt.inflow[si] if p is not None else 0.0
            if not f > 0:
                continue
            s, st = self.ops[p], self.streams[si]
            s.fetch_start = min(s.fetch_start, t)
            got = min(s.op.stream_bytes, s.fetched + f * dt) - s.fetched
            s.fetched += got
            st.fetched += got
            for name in st.stream.path:
                used[name] += f
        for name in self.resource_bytes:
            self.resource_bytes[name] += used[name] * dt
        if not self.usage or self.usage[-1][1] != used:
            self.usage.append((t, used))
        if self.streams:
            self.levels.append((t, {st.stream.name: st.fetched - st.consumed - self.drawn(sv.running, si)
                                    for si, st in enumerate(self.streams)}))

    def nominal_rate(self, s: OpState) -> float:
        """The op's rate alone on the machine (engine speed, or its narrowest resource)."""
        if s.op.xfer_bytes <= 0:
            return s.rate_cap
        narrowest = min((self.capacity[r] for r in s.op.path), default=INF)
        return min(s.rate_cap, narrowest / s.op.xfer_bytes)

    def attribute(self, dt: float, sv: Survey, rt: Rates) -> None:
        """Each engine's and op's share of the interval: busy, idle or a named stall."""
        for eng in self.engines:
            if eng.current() is None:
                eng.idle += dt
        for e in sv.waiting:
            _add(self.engines[e].stalls, "sync" if self.sync_op is not None else "issue", dt)
        for e in sv.blocked:
            p = self.engines[e].current()
            assert p is not None
            reason = self.start_blocker(p)
            _add(self.engines[e].stalls, reason, dt)
            _add(self.ops[p].stalls, reason, dt)
        for p in sv.filling:  # setup latency and drain tail count as busy; a full token queue stalls
            s = self.ops[p]
            if s.pushing:
                reason = f"push_{self.machine.queues[s.pushes[s.pushed]].name}"
                _add(self.engines[s.engine].stalls, reason, dt)
                _add(s.stalls, reason, dt)
            else:
                self.engines[s.engine].busy += dt
                s.busy += dt
        for p in sv.running:
            s = self.ops[p]
            nominal = self.nominal_rate(s)
            fraction = min(1.0, rt.rate[p] / nominal) if nominal > 0 else 1.0
            self.engines[s.engine].busy += dt * fraction
            s.busy += dt * fraction
            if fraction < 1 - FULL_RATE_SLACK:
                reason = rt.why[p] or "bandwidth"
                _add(self.engines[s.engine].stalls, reason, dt * (1 - fraction))
                _add(s.stalls, reason, dt * (1 - fraction))

    def first_hazard(self, p: int) -> int | None:
        """The earliest unfinished op before ``p`` that it conflicts with (RAW/WAR/WAW); an async FIFO
        producer streams to ``p`` instead of through L2, so it is none."""
        op = self.ops[p].op
        if not (op.reads or op.writes):
            return None
        mine = (*op.reads, *op.writes)
        for q in range(p):
            s = self.ops[q]
            fifo_producer = q == op.fifo_from and s.op.is_async
            if s.end == INF and not fifo_producer and ranges_conflict(s.op, mine, op.writes):
                return q
        return None

    def start_blocker(self, p: int) -> str:
        """Why an issued head has not started: a hazard (``dep_<engine>``), a token (``pop_<queue>``)."""
        q = self.first_hazard(p)
        if q is not None:
            return f"dep_{self.engine_name(q)}"
        s = self.ops[p]
        if s.popped < len(s.pops):
            return f"pop_{self.machine.queues[s.pops[s.popped]].name}"
        return "issue"


def _add(stalls: dict[str, float], reason: str, dt: float) -> None:
    stalls[reason] = stalls.get(reason, 0.0) + dt
