"""The event loop behind `npukit.sim.timing.simulate` (the model is described there).

`Sim.__init__` unpacks the ops once into lists indexed by program position; `Sim.run` then repeats,
event after event, the phases of `npukit.sim.timing_phases` (settle at t, survey the heads, solve the
rates, find the next event, advance and attribute) and builds the `TimingResult`.

Per-event work is kept proportional to what is in flight: each op's on-chip hazards are found once,
when it is issued, against the ops then in flight (later ops cannot block it), and a blocked op only
skips past the ones that have since finished; the active producer→consumer FIFO links are tracked
incrementally; stream buffer levels are computed once per event; the rate fixed point stops as soon
as its stream caps repeat (the next round would recompute the same rates); water-filling results
are memoised on their exact inputs. The arithmetic itself (every sum, in its order) is the one the
model defines, so results are bit-identical to a direct per-event re-scan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import attrgetter

from npukit.sim.timing_phases import Phases
from npukit.sim.timing_rates import Rates
from npukit.sim.timing_tokens import Tokens, check_tokens, expand_engines
from npukit.sim.timing_types import (
    EngineStats,
    Fetch,
    Machine,
    Op,
    OpTiming,
    TimingError,
    TimingResult,
    ranges_conflict,
    validate_program,
)

_INF = math.inf
_MASK_SPAN = 1 << 16  # addresses below this are compared as bit sets


class Sim(Phases, Rates, Tokens):
    """One `simulate` call: static per-op tables, then `run` (one pass of the event loop per event)."""

    # every table and piece of run state is a slot: the phases load dozens of them per event
    __slots__ = (
        "act", "blocker", "busy", "cap", "capacity", "cdepth", "cores", "cq", "cur", "dead",
        "dep_why", "deps", "dptr", "e_busy", "e_idle", "e_stalls", "end", "eng", "fetch_t0", "fetch_t1",
        "fetched", "fmoved", "frac", "full", "gated", "haswork", "head", "ic", "inflight", "isasync",
        "issue", "k", "last_used", "lat", "levels", "link", "live", "m", "moved", "n", "n_done",
        "next_issue", "nominal", "nres", "nstr", "ops", "ostall", "pending", "pool_cores", "pool_next",
        "pool_ops", "pools", "pop_ptr", "pop_why", "pops", "prog_end", "push_ptr", "push_why", "pushes",
        "pushing", "queue", "res_bytes", "rmask", "rpath", "s_bpc", "s_capb", "s_consumed", "s_cur",
        "s_fetched", "s_next", "s_ops", "s_prev", "s_rpath", "sb", "sbr", "sidx", "snames", "start",
        "streams", "tail", "tok_cap", "tokens", "unstarted", "unused", "upath", "usage", "wait_why",
        "wf_memo", "win", "wmask", "xcap", "xfer", "xkey", "xlow", "zeros_r", "zeros_s")

    def __init__(self, machine: Machine, ops: Sequence[Op]) -> None:
        self.m, self.ops = machine, list(ops)
        ops = self.ops
        self.capacity = capacity = {r.name: r.bytes_per_cycle for r in machine.resources}
        self.streams = {s.name: s for s in machine.streams}
        self.cores, self.pools = expand_engines(machine)
        names = {*self.cores, *self.pools} if self.pools else self.cores
        validate_program(machine, ops, capacity, self.streams, names)
        check_tokens(machine, ops)
        self.n = len(ops)
        col = {a: list(map(attrgetter(a), ops)) for a in (
            "engine", "cycles", "latency", "tail", "path", "xfer_bytes", "stream", "stream_bytes", "is_async",
            "fifo_from")}
        self.lat, self.tail, self.xfer = col["latency"], col["tail"], col["xfer_bytes"]
        self.sbr, self.isasync = col["stream_bytes"], col["is_async"]  # stream bytes as given
        self._engine_tables(col["engine"])
        self._path_tables(col["path"], col["cycles"])
        self._stream_and_fifo_tables(col["stream"], col["cycles"], col["fifo_from"])
        self._token_tables()

    def _engine_tables(self, engine: list[str]) -> None:
        """Engine ordinals, the in-order queue of each engine (a pool's ops join a core's queue when
        dispatched: ordinal -1 until then), each op's command queue, and the stall names ops cause."""
        cores, pools = self.cores, self.pools
        eix = {e: i for i, e in enumerate(cores)}
        self.queue = queue = [[] for _ in cores]
        if pools:
            self.eng = eng = [eix.get(e, -1) for e in engine]
            pix = {name: i for i, name in enumerate(pools)}
            self.pool_ops = [[c for c, e in enumerate(engine) if e == name] for name in pools]
            self.pool_cores = list(pools.values())
            self.cq = [e if e >= 0 else len(cores) + pix[engine[c]] for c, e in enumerate(eng)]
        else:
            self.eng = eng = list(map(eix.__getitem__, engine))  # engine ordinal
            self.pool_ops, self.pool_cores, self.cq = [], [], eng
        for c, e in enumerate(eng):
            if e >= 0:  # (-1: a pool op, queued on a core when dispatched)
                queue[e].append(c)
        dep = {e: f"dep_{e}" for e in (*cores, *pools)}
        wait = {e: f"wait_{e}" for e in (*cores, *pools)}
        self.dep_why = list(map(dep.__getitem__, engine))
        self.wait_why = list(map(wait.__getitem__, engine))

    def _path_tables(self, path: list[tuple[str, ...]], cycles: list[float]) -> None:
        """Per op: resource ordinals on its path, rate caps, water-filling memo keys, nominal rate."""
        capacity, xfer, inf = self.capacity, self.xfer, _INF
        rix = {r: i for i, r in enumerate(capacity)}
        pinfo = {}  # per distinct path: resource ordinals, distinct ones, an id, the narrowest resource
        try:
            uniq = dict.fromkeys(path)
        except TypeError:  # a path given as a list: as a tuple
            path = list(map(tuple, path))
            uniq = dict.fromkeys(path)
        for pth in uniq:
            rp = tuple(rix[r] for r in pth)
            pinfo[pth] = (rp, tuple(dict.fromkeys(rp)), len(pinfo),
                          min(capacity[r] for r in pth) if pth else inf)
        self.rpath = [pinfo[pth][0] for pth in path]
        self.upath = [pinfo[pth][1] for pth in path]
        self.cap = cap = [1.0 / c if c > 0 else inf for c in cycles]
        self.xcap = xcap = [c * x for c, x in zip(cap, xfer, strict=True)]  # a transfer's rate cap
        self.xlow = [c * (1 - 1e-6) for c in xcap]  # below this a transfer is bandwidth-bound
        self.xkey = [(c, pinfo[pth][2]) for c, pth in zip(xcap, path, strict=True)]  # water-filling memo keys
        self.nominal = [min(c, pinfo[pth][3] / x) if x > 0 else c  # full rate alone on the machine
                        for c, x, pth in zip(cap, xfer, path, strict=True)]
        self.wf_memo: dict[tuple, list[float]] = {}

    def _stream_and_fifo_tables(self, stream: list[str | None], cycles: list[float],
                                fifo: list[int | None]) -> None:
        """Each stream's ops in program order and the bytes each op draws; the FIFO links."""
        ops, n, sbr, isasync, xfer = self.ops, self.n, self.sbr, self.isasync, self.xfer
        six = {s: i for i, s in enumerate(self.streams)}
        self.s_ops = [[c for c in range(n) if stream[c] == s and sbr[c] > 0] for s in self.streams]
        self.sidx = [-1 if s is None else six[s] for s in stream]
        self.sb = sb = [b if s is not None else 0.0 for s, b in zip(stream, sbr, strict=True)]  # drawn
        self.link = link = [None] * n
        self.full = full = [0.0] * n
        for c in [c for c in range(n) if fifo[c] is not None]:
            pr, o = fifo[c], ops[c]
            if isasync[pr] and o.fifo_elems > 0:
                link[c] = pr
                full[c] = o.fifo_depth / o.fifo_elems
        self.haswork = [bool(c or x or b or lk is not None)
                        for c, x, b, lk in zip(cycles, xfer, sb, link, strict=True)]

    # --- hazards ---------------------------------------------------------------------------------
    def _hazards(self, p: int, inflight: dict[int, None]) -> list[int]:
        """Ops in flight when ``p`` issues that ``p`` must wait for (RAW/WAR/WAW), program order.

        Ops issued later cannot block ``p``, and an op once finished never blocks again, so the
        first unfinished entry of this list is the op ``p`` waits for at any later time.
        """
        op = self.ops[p]
        ops, isasync, wmask, rmask = self.ops, self.isasync, self.wmask, self.rmask
        wm = rm = 0  # its ranges as address bit sets, where they are plain small ranges
        pm = None
        for x0, x1 in op.reads:
            if not (type(x0) is type(x1) is int and 0 <= x0 < x1 <= _MASK_SPAN):  # (plain ints only)
                break
            rm |= ((1 << (x1 - x0)) - 1) << x0
        else:
            for x0, x1 in op.writes:
                if not (type(x0) is type(x1) is int and 0 <= x0 < x1 <= _MASK_SPAN):
                    break
                wm |= ((1 << (x1 - x0)) - 1) << x0
            else:
                pm = wm
        wmask[p], rmask[p] = pm, rm
        rwm = wm | rm
        fifo, wr = op.fifo_from, op.writes
        rw = (*op.reads, *wr)
        out = []
        for q in inflight:
            qm = wmask[q]
            if pm is not None and qm is not None:  # bit sets meet exactly where two ranges overlap
                if not (qm & rwm or rmask[q] & wm):
                    continue
            elif not ranges_conflict(ops[q], rw, wr):
                continue
            if not (q == fifo and isasync[q]):  # (a FIFO producer streams to p instead of via L2)
                out.append(q)
        return out

    # --- the event loop --------------------------------------------------------------------------
    def _begin(self) -> None:
        """The run's state: engine heads, per-op times and progress, stream state, accumulators."""
        n, ne, nstr, nres = self.n, len(self.queue), len(self.m.streams), len(self.capacity)
        self.nstr, self.nres = nstr, nres
        self.head = [0] * ne
        self.cur = cur = [q[0] if q else -1 for q in self.queue]  # head op of each engine, -1 once drained
        self.live = [e for e in range(ne) if cur[e] >= 0]  # engines with ops left, in engine order
        pooled = {c for cs in self.pool_cores for c in cs}  # (a pool's core may get ops at any time)
        self.unused = [e for e in range(ne) if cur[e] < 0 and e not in pooled]  # idle all along
        self.dead: list[int] = [e for e in range(ne) if cur[e] < 0 and e in pooled]  # idle for now
        self.pool_next = [0] * len(self.pool_ops)  # the next op each pool dispatches
        self.s_cur = [0] * nstr
        self.s_next = [lst[0] if lst else -1 for lst in self.s_ops]  # the op a stream fetches for next
        self.s_prev = [n] * nstr  # the stream's op before that (n: none; start[n] is -inf)
        self.s_fetched = [0.0] * nstr
        self.s_consumed = [0.0] * nstr  # by finished ops
        self.s_capb = [s.capacity_bytes for s in self.m.streams]
        self.s_bpc = [s.bytes_per_cycle for s in self.m.streams]
        self.snames = [s.name for s in self.m.streams]
        rnames = list(self.capacity)
        self.s_rpath = [tuple(rnames.index(r) for r in s.path) for s in self.m.streams]
        self.zeros_s, self.zeros_r = [0.0] * nstr, [0.0] * nres
        self.fmoved = list(range(nstr))  # streams whose fetched bytes moved (all, before the first instant)
        self.issue, self.start, self.end = [_INF] * n, [_INF] * n + [-_INF], [_INF] * n  # (start[n]: s_prev)
        self.frac = [0.0] * n
        self.prog_end = [_INF] * n  # when the op's work ran out (its tail follows)
        self.fetched = [0.0] * n
        self.fetch_t0, self.fetch_t1 = [_INF] * n, [_INF] * n
        self.busy = [0.0] * n
        self.ostall: list[dict[str, float]] = [{} for _ in range(n)]
        self.deps: list[list[int] | None] = [None] * n  # hazards found at issue, program order
        self.dptr = [0] * n  # deps[p][:dptr[p]] have finished
        # bit sets of an op's written / read addresses (no ranges: 0; None: not made, for ranges that
        # are empty, negative or beyond _MASK_SPAN), made when an op with ranges issues
        self.wmask: list[int | None] = [0] * n
        self.rmask = [0] * n
        self.e_busy, self.e_idle = [0.0] * ne, [0.0] * ne
        self.e_stalls: list[dict[str, float]] = [{} for _ in range(ne)]
        self.res_bytes = [0.0] * nres
        self.usage: list[tuple[float, list[float]]] = []
        self.levels: list[tuple[float, object]] = []
        self.last_used: list[float] | None = None
        self.inflight: dict[int, None] = {}  # issued, not finished, program order
        self.act: list[int] = []  # issued, unfinished consumers with an active FIFO coupling
        self.win = n + 1 if self.m.issue_window is None else self.m.issue_window  # (n + 1: never the limit)
        self.ic = self.m.issue_cycles
        self.cdepth = self.m.command_depth
        if self.gated or self.cdepth is not None:
            self._token_state()
        self.next_issue, self.k, self.blocker, self.unstarted, self.n_done = 0.0, 0, -1, 0, 0

    def run(self) -> TimingResult:
        """Event after event: settle at t, survey, solve rates and the next event, advance to it."""
        self._begin()
        n = self.n
        settle, survey, solve, advance, attribute = self._settle, self._survey, self._solve, self._advance, \
            self._attribute
        t, stuck = 0.0, 0
        while self.n_done < n:
            settle(t)
            if self.n_done >= n:
                break
            running, rs, waiting, blocked, filling, dt, links, tg, lvl, fetching = survey(t)
            rate, why, share, dt = solve(t, dt, running, rs, links, tg, lvl, fetching)
            if dt == _INF:
                raise self._deadlock(t)
            stuck = stuck + 1 if dt <= 0 else 0
            if stuck > 10 * n + 100:
                raise TimingError(f"no progress at cycle {t:.0f}")
            if dt <= 0:
                continue
            advance(t, dt, running, rs, tg, fetching, rate, share)
            attribute(dt, running, waiting, blocked, filling, rate, why)
            t += dt
        return self._result(t)

    def _deadlock(self, t: float) -> TimingError:
        if self.gated and (stuck := self._token_deadlock(t)) is not None:
            return stuck
        ops, end = self.ops, self.end
        p = next(p for p in range(self.n) if end[p] == _INF)
        return TimingError(f"deadlock at cycle {t:.0f}: op {ops[p].index} "
                           f"({ops[p].label or ops[p].engine}) can never finish")

    def _result(self, t: float) -> TimingResult:
        """Totals per engine (engines finished early idle until the end), op and fetch; samples as dicts."""
        m, ops, end, e_idle = self.m, self.ops, self.end, self.e_idle
        total = max(end, default=0.0)
        for e in self.unused:  # idle at every step: the same sums, in the same order, as t itself
            e_idle[e] = t
        engines = {name: EngineStats(name, self.e_busy[e], e_idle[e] + max(0.0, total - t), self.e_stalls[e])
                   for e, name in enumerate(self.cores)}
        issue, start, busy, ostall = self.issue, self.start, self.busy, self.ostall
        if not self.pools:
            res = [OpTiming(o.index, o.engine, o.label, issue[p], start[p], end[p], busy[p], ostall[p],
                            dict(o.args)) for p, o in enumerate(ops)]
        else:  # a pool op: the core it ran on
            names = [self.cores[e] if e >= 0 else o.engine for e, o in zip(self.eng, ops, strict=True)]
            res = [OpTiming(o.index, names[p], o.label, issue[p], start[p], end[p], busy[p], ostall[p],
                            dict(o.args)) for p, o in enumerate(ops)]
        sidx, sbr = self.sidx, self.sbr
        fetches = [Fetch(o.stream, o.index, self.fetch_t0[p], self.fetch_t1[p], o.stream_bytes)
                   for p, o in enumerate(ops) if sidx[p] >= 0 and sbr[p] > 0]
        rnames = list(self.capacity)
        usage = [(u_t, dict(zip(rnames, u))) for u_t, u in self.usage]  # noqa: B905 (same lengths)
        usage.append((total, dict.fromkeys(self.capacity, 0.0)))
        snames = [s.name for s in m.streams]
        levels = self.levels
        if self.nstr == 1:
            levels = [(l_t, {snames[0]: v}) for l_t, v in levels]
        elif self.nstr:
            levels = [(l_t, dict(zip(snames, v))) for l_t, v in levels]  # noqa: B905
        return TimingResult(total, m.clock_hz, res, engines, fetches,
                            dict(zip(rnames, self.res_bytes, strict=True)), usage, levels)  # type: ignore[arg-type]
