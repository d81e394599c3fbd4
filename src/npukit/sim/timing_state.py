"""The event loop behind `npukit.sim.timing.simulate` (the model is described there).

Per-event work is kept proportional to what is in flight: op attributes are unpacked once into
lists indexed by program position; each op's on-chip hazards are found once, when it is issued,
against the ops then in flight (later ops cannot block it), and a blocked op only skips past the
ones that have since finished; the active producer→consumer FIFO links are tracked incrementally;
stream buffer levels are computed once per event; the rate fixed point stops as soon as its
stream caps repeat (the next round would recompute the same rates); water-filling results are
memoised on their exact inputs. The arithmetic itself (every sum, in its order) is the one the
model defines, so results are bit-identical to a direct per-event re-scan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from npukit.sim.timing import (
    _BEPS,
    _EPS,
    EngineStats,
    Fetch,
    Machine,
    Op,
    OpTiming,
    TimingError,
    TimingResult,
    _waterfill,
)

_INF = math.inf


def _validate(machine: Machine, ops: list[Op], capacity: dict[str, float], streams: dict) -> None:
    for pos, op in enumerate(ops):
        if op.engine not in machine.engines:
            raise TimingError(f"op {op.index} uses unknown engine {op.engine!r}")
        for r in op.path:
            if r not in capacity:
                raise TimingError(f"op {op.index} crosses unknown resource {r!r}")
        if op.stream is not None and op.stream not in streams:
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
            if r not in capacity:
                raise TimingError(f"stream {s.name!r} crosses unknown resource {r!r}")


class Sim:
    def __init__(self, machine: Machine, ops: Sequence[Op]) -> None:
        self.m, self.ops = machine, list(ops)
        ops = self.ops
        n = len(ops)
        self.capacity = {r.name: r.bytes_per_cycle for r in machine.resources}
        self.streams = {s.name: s for s in machine.streams}
        _validate(machine, ops, self.capacity, self.streams)
        eidx = {e: i for i, e in enumerate(machine.engines)}
        self.ename = list(machine.engines)
        self.queue = [[p for p, o in enumerate(ops) if o.engine == e] for e in machine.engines]
        self.head = [0] * len(self.queue)
        self.cur = [q[0] if q else -1 for q in self.queue]  # head op of each engine, -1 once drained
        # static per-op attributes
        self.eng = [eidx[o.engine] for o in ops]
        self.cyc = [o.cycles for o in ops]
        self.lat = [o.latency for o in ops]
        self.tail = [o.tail for o in ops]
        self.path = [o.path for o in ops]
        self.xfer = [o.xfer_bytes for o in ops]
        self.strm = [o.stream for o in ops]
        self.sbr = [o.stream_bytes for o in ops]  # raw stream_bytes
        self.sb = [o.stream_bytes if o.stream is not None else 0.0 for o in ops]
        self.isasync = [o.is_async for o in ops]
        self.cap = [1.0 / o.cycles if o.cycles > 0 else math.inf for o in ops]
        link: list[int | None] = []
        for o in ops:
            pr = o.fifo_from
            link.append(None if pr is None or not ops[pr].is_async or o.fifo_elems <= 0 else pr)
        self.link = link
        self.full = [o.fifo_depth / o.fifo_elems if link[c] is not None else 0.0 for c, o in enumerate(ops)]
        self.haswork = [bool(o.cycles or o.xfer_bytes or self.sb[c] or link[c] is not None)
                        for c, o in enumerate(ops)]
        nominal = []
        for o in ops:
            nom = 1.0 / o.cycles if o.cycles > 0 else math.inf
            if o.xfer_bytes > 0:
                alone = min(self.capacity[r] for r in o.path) if o.path else math.inf
                nom = min(nom, alone / o.xfer_bytes)
            nominal.append(nom)
        self.nominal = nominal
        self.dep_why = [f"dep_{o.engine}" for o in ops]
        self.wait_why = [f"wait_{o.engine}" for o in ops]
        self.deps: list[list[int] | None] = [None] * n  # hazards found at issue, program order
        self.dptr = [0] * n
        self.s_ops = {s: [p for p, o in enumerate(ops) if o.stream == s and o.stream_bytes > 0]
                      for s in self.streams}
        self.s_cur = dict.fromkeys(self.streams, 0)
        self.s_fetched = dict.fromkeys(self.streams, 0.0)
        self.s_consumed = dict.fromkeys(self.streams, 0.0)  # by finished ops
        self.inflight: dict[int, None] = {}  # issued, not finished, program order
        self.act: list[int] = []  # issued, unfinished consumers with an active FIFO coupling
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
        self.estats = [EngineStats(e) for e in machine.engines]
        self.res_bytes = dict.fromkeys(self.capacity, 0.0)
        self.usage: list[tuple[float, dict[str, float]]] = []
        self.levels: list[tuple[float, dict[str, float]]] = []
        self.t = 0.0
        self.next_issue, self.k, self.blocker = 0.0, 0, -1
        self.n_done = 0
        self.wf_memo: dict[tuple, list[float]] = {}

    # --- hazards ---------------------------------------------------------------------------------
    def _hazards(self, p: int) -> list[int] | None:
        """Ops in flight when ``p`` issues that ``p`` must wait for (RAW/WAR/WAW), program order."""
        op = self.ops[p]
        if not (op.reads or op.writes):
            return None
        wr, rw = op.writes, op.reads + op.writes
        fifo = op.fifo_from
        ops, isasync = self.ops, self.isasync
        out = []
        for q in self.inflight:
            if q == fifo and isasync[q]:
                continue  # streamed through the FIFO instead of via L2
            e = ops[q]
            if (any(x0 < y1 and y0 < x1 for x0, x1 in e.writes for y0, y1 in rw)
                    or (wr and any(x0 < y1 and y0 < x1 for x0, x1 in e.reads for y0, y1 in wr))):
                out.append(q)
        return out

    def _blocking(self, p: int) -> int | None:
        """An earlier unfinished op this one must wait for, else None."""
        d = self.deps[p]
        if not d:
            return None
        end, i, m = self.end, self.dptr[p], len(d)
        while i < m and end[d[i]] != _INF:
            i += 1
        self.dptr[p] = i
        return d[i] if i < m else None

    # --- instantaneous transitions ---------------------------------------------------------------
    def _settle(self) -> None:
        t = self.t
        n = len(self.ops)
        win = self.m.issue_window
        ic = self.m.issue_cycles
        issue, start, end, frac = self.issue, self.start, self.end, self.frac
        cur, head, queue = self.cur, self.head, self.queue
        inflight, link, strm = self.inflight, self.link, self.strm
        changed = True
        while changed:
            changed = False
            while (self.k < n and self.blocker < 0 and t >= self.next_issue - _EPS
                   and (win is None or self.unstarted < win)):
                p = self.k
                issue[p] = t
                self.next_issue = t + ic
                if not self.isasync[p]:
                    self.blocker = p
                self.k += 1
                self.unstarted += 1
                self.deps[p] = self._hazards(p)
                inflight[p] = None
                if link[p] is not None:
                    self.act.append(p)
                changed = True
            for e, p in enumerate(cur):
                if p < 0:
                    continue
                if start[p] == _INF and issue[p] <= t and self._blocking(p) is None:
                    start[p] = t
                    self.unstarted -= 1
                    changed = True
                if start[p] <= t and self._complete(p):
                    end[p] = t
                    frac[p] = 1.0
                    h = head[e] = head[e] + 1
                    q = queue[e]
                    cur[e] = q[h] if h < len(q) else -1
                    self.n_done += 1
                    del inflight[p]
                    if strm[p] is not None:
                        self.s_consumed[strm[p]] += self.sb[p]
                    if self.blocker == p:
                        self.blocker = -1
                        self.next_issue = t + ic
                    changed = True
            fetched, sb = self.fetched, self.sb
            for s, lst in self.s_ops.items():
                i = self.s_cur[s]
                while i < len(lst) and fetched[lst[i]] >= sb[lst[i]] - _BEPS:
                    p = lst[i]
                    self.s_fetched[s] += sb[p] - fetched[p]
                    fetched[p] = sb[p]
                    self.fetch_t1[p] = min(self.fetch_t1[p], t)
                    self.fetch_t0[p] = min(self.fetch_t0[p], t)
                    i += 1
                    self.s_cur[s] = i
                    changed = True

    def _complete(self, p: int) -> bool:
        t = self.t
        if t < self.start[p] + self.lat[p] - _EPS:
            return False
        if self.frac[p] < 1 - _EPS:
            if self.haswork[p]:
                return False
            self.frac[p], self.prog_end[p] = 1.0, t  # no work: only latency and tail
        return t >= self.prog_end[p] + self.tail[p] - _EPS

    def _links(self) -> list[tuple[int, int]]:
        """Active (producer, consumer) FIFO couplings: both unfinished, consumer issued."""
        end, link = self.end, self.link
        out = []
        keep = []
        for c in self.act:
            if end[c] != _INF:
                continue
            keep.append(c)
            pr = link[c]
            if end[pr] == _INF:  # type: ignore[index]
                out.append((pr, c))
        self.act = keep
        return out  # type: ignore[return-value]

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
        t, start, lat, frac = self.t, self.start, self.lat, self.frac
        return [p for p in self.cur
                if p >= 0 and start[p] + lat[p] <= t + _EPS and start[p] <= t and frac[p] < 1]

    def _level(self, s: str) -> float:
        frac, sbr, strm = self.frac, self.sbr, self.strm
        run = sum(frac[p] * sbr[p] for p in self.running if strm[p] == s)
        return self.s_fetched[s] - self.s_consumed[s] - run

    def _waterfill(self, caps: list[float], paths: list[tuple[str, ...]]) -> list[float]:
        key = (tuple(caps), tuple(paths))
        got = self.wf_memo.get(key)
        if got is None:
            got = self.wf_memo[key] = _waterfill(caps, paths, self.capacity)
        return got

    def _rates(self, running: list[int], links: list[tuple[int, int]], level: dict[str, float]):
        cap, xfer, path, strm, sbr, frac, fetched = (self.cap, self.xfer, self.path, self.strm, self.sbr,
                                                      self.frac, self.fetched)
        streams = self.streams
        targets = {s: self._fetch_target(s) for s in streams}
        scap = {s: streams[s].bytes_per_cycle for s, p in targets.items() if p is not None}
        xops = [p for p in running if xfer[p] > 0]
        xcaps = [cap[p] * xfer[p] for p in xops]
        xpaths = [path[p] for p in xops]
        nx = len(xops)
        wants = [p for p in running if strm[p] is not None and sbr[p] > 0]
        rate: dict[int, float] = {}
        why: dict[int, str] = {}
        share: dict[str, float] = {}
        for _ in range(12):
            caps = xcaps + list(scap.values())
            got = self._waterfill(caps, xpaths + [streams[s].path for s in scap]) if caps else []
            share = {}
            new_rate, new_why = {}, {}
            for i in range(nx):
                p, g = xops[i], got[i]
                new_rate[p] = g / xfer[p]
                if g < xcaps[i] * (1 - 1e-6):
                    new_why[p] = "bandwidth"
            for s, g in zip(scap, got[nx:], strict=True):
                share[s] = g
            for p in running:
                new_rate[p], new_why[p] = min(cap[p], new_rate.get(p, math.inf)), new_why.get(p, "")
            for p in wants:  # weights must have arrived
                sb = sbr[p]
                avail = fetched[p] - frac[p] * sb
                if avail <= _BEPS and fetched[p] < sb - _BEPS:
                    s = strm[p]
                    inflow = share.get(s, 0.0) if targets.get(s) == p else 0.0  # type: ignore[arg-type]
                    lim = inflow / sb
                    if lim < new_rate[p]:
                        new_rate[p], new_why[p] = lim, s  # type: ignore[assignment]
            for pr, c in links + links[::-1]:  # forward then backward along chains
                gap = frac[pr] - frac[c]
                rc = new_rate.get(c, 0.0)
                rp = new_rate.get(pr, 0.0)
                if gap <= _EPS and c in new_rate and rp < rc:  # FIFO empty: consumer follows
                    new_rate[c], new_why[c] = rp, self.wait_why[pr]
                # FIFO full (only once the consumer runs): the producer waits
                if gap >= self.full[c] - _EPS and pr in new_rate and rc < rp and self.start[c] <= self.t:
                    new_rate[pr], new_why[pr] = rc, self.wait_why[c]
            new_scap = {}
            for s, p in targets.items():
                if p is None:
                    continue
                c = streams[s].bytes_per_cycle
                if level[s] >= streams[s].capacity_bytes - _BEPS:
                    c = sum(new_rate.get(q, 0.0) * sbr[q] for q in running if strm[q] == s)
                new_scap[s] = c
            # the rates depend on the stream caps alone: equal caps mean the next round repeats this one
            stable = new_scap == scap
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
            links = self._links()
            level = {s: self._level(s) for s in self.streams}
            rate, why, share, targets = self._rates(running, links, level)
            dt = self._next_dt(running, rate, share, targets, links, level)
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

    def _next_dt(self, running, rate, share, targets, links, level) -> float:
        t, frac, fetched, sbr, strm = self.t, self.frac, self.fetched, self.sbr, self.strm
        cand = []
        if self.k < len(self.ops) and self.blocker < 0 and self.next_issue > t + _EPS:
            cand.append(self.next_issue - t)
        for p in running:
            r = rate.get(p, 0.0)
            if r > 0:
                cand.append((1 - frac[p]) / r)
                s = strm[p]
                if s is not None and sbr[p] > 0:
                    inflow = share.get(s, 0.0) if targets.get(s) == p else 0.0
                    avail = fetched[p] - frac[p] * sbr[p]
                    out = r * sbr[p]
                    if out > inflow * (1 + 1e-12) and avail > _BEPS:
                        cand.append(avail / (out - inflow))
        start, lat, prog_end, tail = self.start, self.lat, self.prog_end, self.tail
        for p in self.cur:
            if p >= 0:
                lat_end = start[p] + lat[p]
                if lat_end > t + _EPS:
                    cand.append(lat_end - t)
                tail_end = prog_end[p] + tail[p]
                if t + _EPS < tail_end < math.inf:
                    cand.append(tail_end - t)
        for s, p in targets.items():
            if p is None:
                continue
            f = share.get(s, 0.0)
            if f > 0:
                cand.append((sbr[p] - fetched[p]) / f)
                cons = sum(rate.get(q, 0.0) * sbr[q] for q in running if strm[q] == s)
                room = self.streams[s].capacity_bytes - level[s]
                if f > cons * (1 + 1e-12) and room > _BEPS:
                    cand.append(room / (f - cons))
        for pr, c in links:
            gap = frac[pr] - frac[c]
            rc, rp = rate.get(c, 0.0), rate.get(pr, 0.0)
            full = self.full[c]
            if rc > rp and gap > _EPS:
                cand.append(gap / (rc - rp))
            if rp > rc and full - gap > _EPS and start[c] <= t:
                cand.append((full - gap) / (rp - rc))
        cand = [c for c in cand if c >= 0]
        return max(min(cand), 0.0) if cand else math.inf

    def _account(self, dt, running, rate, why, share, targets) -> None:
        if dt <= 0:
            return
        t, frac, xfer, path, prog_end = self.t, self.frac, self.xfer, self.path, self.prog_end
        used = dict.fromkeys(self.capacity, 0.0)
        for p in running:
            r = rate.get(p, 0.0)
            frac[p] = min(1.0, frac[p] + r * dt)
            if frac[p] >= 1 - _EPS:
                frac[p], prog_end[p] = 1.0, t + dt
            if xfer[p] > 0:
                for res in path[p]:
                    used[res] += r * xfer[p]
        fetched, sbr = self.fetched, self.sbr
        for s, p in targets.items():
            if p is None:
                continue
            f = share.get(s, 0.0)
            if f > 0:
                self.fetch_t0[p] = min(self.fetch_t0[p], t)
                got = min(sbr[p], fetched[p] + f * dt) - fetched[p]
                fetched[p] += got
                self.s_fetched[s] += got
                for res in self.streams[s].path:
                    used[res] += f
        for res, u in used.items():
            self.res_bytes[res] += u * dt
        if not self.usage or self.usage[-1][1] != used:
            self.usage.append((t, used))
        if self.streams:
            self.levels.append((t, {s: self._level(s) for s in self.streams}))
        issue, start, busy, ostall = self.issue, self.start, self.busy, self.ostall
        for e, p in enumerate(self.cur):
            st = self.estats[e]
            if p < 0:
                st.idle += dt
                continue
            if issue[p] > t:
                reason = "sync" if self.blocker >= 0 else "issue"
            elif start[p] > t:
                b = self._blocking(p)
                reason = self.dep_why[b] if b is not None else "issue"
            elif p not in running:  # pipeline fill, drain and setup latency count as busy
                st.busy += dt
                busy[p] += dt
                continue
            else:
                nominal = self.nominal[p]
                fr = min(1.0, rate.get(p, 0.0) / nominal) if nominal > 0 else 1.0
                st.busy += dt * fr
                busy[p] += dt * fr
                if fr >= 1 - 1e-9:
                    continue
                reason, dt_s = why.get(p) or "bandwidth", dt * (1 - fr)
                st.stalls[reason] = st.stalls.get(reason, 0.0) + dt_s
                ostall[p][reason] = ostall[p].get(reason, 0.0) + dt_s
                continue
            st.stalls[reason] = st.stalls.get(reason, 0.0) + dt
            if issue[p] <= t:
                ostall[p][reason] = ostall[p].get(reason, 0.0) + dt

    def _result(self) -> TimingResult:
        total = max(self.end, default=0.0)
        for st in self.estats:  # engines finished early idle until the end
            st.idle += max(0.0, total - self.t)
        ops = [OpTiming(o.index, o.engine, o.label, self.issue[p], self.start[p], self.end[p], self.busy[p],
                        self.ostall[p], dict(o.args)) for p, o in enumerate(self.ops)]
        fetches = [Fetch(o.stream, o.index, self.fetch_t0[p], self.fetch_t1[p], o.stream_bytes)
                   for p, o in enumerate(self.ops) if o.stream is not None and o.stream_bytes > 0]
        self.usage.append((total, dict.fromkeys(self.capacity, 0.0)))
        return TimingResult(total, self.m.clock_hz, ops, {st.name: st for st in self.estats}, fetches,
                            self.res_bytes, self.usage, self.levels)
