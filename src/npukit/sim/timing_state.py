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
from operator import attrgetter

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
    _overlap,
    _validate,
    _waterfill,
)

_INF = math.inf
_MASK_SPAN = 1 << 16  # addresses below this are compared as bit sets


class Sim:
    """One `simulate` call: static per-op tables, then `run` (one pass of the event loop per event)."""

    def __init__(self, machine: Machine, ops: Sequence[Op]) -> None:
        self.m, self.ops = machine, list(ops)
        ops = self.ops
        self.capacity = capacity = {r.name: r.bytes_per_cycle for r in machine.resources}
        self.streams = {s.name: s for s in machine.streams}
        _validate(machine, ops, capacity, self.streams)
        n, inf = len(ops), math.inf
        col = {a: list(map(attrgetter(a), ops)) for a in (
            "engine", "cycles", "latency", "tail", "path", "xfer_bytes", "stream", "stream_bytes", "is_async",
            "fifo_from")}
        engine, cycles, path, stream, fifo = (col["engine"], col["cycles"], col["path"], col["stream"],
                                              col["fifo_from"])
        self.lat, self.tail, self.xfer = col["latency"], col["tail"], col["xfer_bytes"]
        self.sbr, self.isasync = col["stream_bytes"], col["is_async"]  # stream bytes as given
        xfer, sbr, isasync = self.xfer, self.sbr, self.isasync
        eix = {e: i for i, e in enumerate(machine.engines)}
        self.eng = eng = list(map(eix.__getitem__, engine))  # engine ordinal
        self.queue = queue = [[] for _ in machine.engines]
        for c, e in enumerate(eng):
            queue[e].append(c)
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
        six = {s: i for i, s in enumerate(self.streams)}
        self.s_ops = [[c for c in range(n) if stream[c] == s and sbr[c] > 0] for s in self.streams]
        self.sidx = [-1 if s is None else six[s] for s in stream]
        self.sb = sb = [b if s is not None else 0.0 for s, b in zip(stream, sbr, strict=True)]  # drawn
        self.cap = cap = [1.0 / c if c > 0 else inf for c in cycles]
        self.xcap = xcap = [c * x for c, x in zip(cap, xfer, strict=True)]  # a transfer's rate cap
        self.xlow = [c * (1 - 1e-6) for c in xcap]  # below this a transfer is bandwidth-bound
        self.xkey = [(c, pinfo[pth][2]) for c, pth in zip(xcap, path, strict=True)]  # water-filling memo keys
        self.link = link = [None] * n
        self.full = full = [0.0] * n
        for c in [c for c in range(n) if fifo[c] is not None]:
            pr, o = fifo[c], ops[c]
            if isasync[pr] and o.fifo_elems > 0:
                link[c] = pr
                full[c] = o.fifo_depth / o.fifo_elems
        self.haswork = [bool(c or x or b or lk is not None)
                        for c, x, b, lk in zip(cycles, xfer, sb, link, strict=True)]
        self.nominal = [min(c, pinfo[pth][3] / x) if x > 0 else c  # full rate alone on the machine
                        for c, x, pth in zip(cap, xfer, path, strict=True)]
        dep = {e: f"dep_{e}" for e in machine.engines}
        wait = {e: f"wait_{e}" for e in machine.engines}
        self.dep_why = list(map(dep.__getitem__, engine))
        self.wait_why = list(map(wait.__getitem__, engine))
        self.wf_memo: dict[tuple, list[float]] = {}

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
            elif not _overlap(ops[q], rw, wr):
                continue
            if not (q == fifo and isasync[q]):  # (a FIFO producer streams to p instead of via L2)
                out.append(q)
        return out

    def _fill(self, key: tuple, xops: Sequence[int], scap: list[tuple[int, float]]) -> list[float]:
        """Water-fill the transfers of ``xops`` and the stream flows ``scap``; memoised under ``key``."""
        streams = self.m.streams
        caps = [self.xcap[p] for p in xops] + [c for _, c in scap]
        paths = [self.ops[p].path for p in xops] + [streams[si].path for si, _ in scap]
        got = self.wf_memo[key] = _waterfill(caps, paths, self.capacity) if caps else []
        return got

    # --- rates -----------------------------------------------------------------------------------
    def _share_rates(self, running: list[int], got: list[float], rate: dict[int, float],
                     why: dict[int, str]) -> None:
        """Each running op's rate from its water-filled share (``got``, in order of the running ops that
        transfer): min(cap, share / bytes) as min() picks, "bandwidth" where the share binds."""
        cap, xfer, xlow = self.cap, self.xfer, self.xlow
        i = 0
        for p in running:
            c = cap[p]
            if xfer[p] > 0:
                g = got[i]
                i += 1
                r = g / xfer[p]
                rate[p] = r if r < c else c
                why[p] = "bandwidth" if g < xlow[p] else ""
            else:
                rate[p], why[p] = c, ""

    def _rates(self, t: float, running: list[int], links: list[tuple[int, int]], lvl: list[float],
               tg: list[int | None], start: list[float], frac: list[float], fetched: list[float]):
        """Progress rates (op → fraction/cycle), their limiting reasons, and each stream's inflow."""
        xfer, sidx, sbr = self.xfer, self.sidx, self.sbr
        streams = self.m.streams
        nstr = len(streams)
        scap = [(si, streams[si].bytes_per_cycle) for si in range(nstr) if tg[si] is not None]
        xops = [p for p in running if xfer[p] > 0]
        nx = len(xops)
        xk = tuple([self.xkey[p] for p in xops])
        wants = [p for p in running if sbr[p] > 0 and sidx[p] >= 0]
        memo, wait_why, full = self.wf_memo, self.wait_why, self.full
        rate: dict[int, float] = {}
        why: dict[int, str] = {}
        share = [0.0] * nstr
        for _ in range(12):
            # max-min fair shares: a function of the transfers' caps and paths and the stream caps
            key = (xk, tuple(scap))
            got = memo.get(key)
            if got is None:
                got = self._fill(key, xops, scap)
            share = [0.0] * nstr
            for j in range(len(scap)):
                share[scap[j][0]] = got[nx + j]
            new_rate, new_why = {}, {}
            self._share_rates(running, got, new_rate, new_why)
            for p in wants:  # weights must have arrived
                sb = sbr[p]
                avail = fetched[p] - frac[p] * sb
                if avail <= _BEPS and fetched[p] < sb - _BEPS:
                    si = sidx[p]
                    inflow = share[si] if tg[si] == p else 0.0
                    lim = inflow / sb
                    if lim < new_rate[p]:
                        new_rate[p], new_why[p] = lim, streams[si].name
            for pr, c in links + links[::-1]:  # forward then backward along chains
                gap = frac[pr] - frac[c]
                rc = new_rate.get(c, 0.0)
                rp = new_rate.get(pr, 0.0)
                if gap <= _EPS and c in new_rate and rp < rc:  # FIFO empty: consumer follows
                    new_rate[c], new_why[c] = rp, wait_why[pr]
                # FIFO full (only once the consumer runs): the producer waits
                if gap >= full[c] - _EPS and pr in new_rate and rc < rp and start[c] <= t:
                    new_rate[pr], new_why[pr] = rc, wait_why[c]
            new_scap = []
            for si in range(nstr):
                if tg[si] is None:
                    continue
                c = streams[si].bytes_per_cycle
                if lvl[si] >= streams[si].capacity_bytes - _BEPS:
                    c = sum(new_rate.get(q, 0.0) * sbr[q] for q in running if sidx[q] == si)
                new_scap.append((si, c))
            # the rates are a function of the stream caps: equal caps, and the next round repeats this one
            stable = new_scap == scap
            rate, why, scap = new_rate, new_why, new_scap
            if stable:
                break
        return rate, why, share

    # --- the event loop --------------------------------------------------------------------------
    def run(self) -> TimingResult:
        ops, m = self.ops, self.m
        n, inf = len(ops), math.inf
        queue = self.queue
        ne = len(queue)
        head = [0] * ne
        cur = [q[0] if q else -1 for q in queue]  # head op of each engine queue, -1 once drained
        live = [e for e in range(ne) if cur[e] >= 0]  # engines with ops left, in engine order
        unused = [e for e in range(ne) if cur[e] < 0]  # engines without ops: idle all along (see the end)
        dead: list[int] = []  # engines whose queue has drained since
        lat, tail, xfer, rpath = self.lat, self.tail, self.xfer, self.rpath
        sidx, sbr, sb = self.sidx, self.sbr, self.sb
        isasync, link, full, haswork, nominal = self.isasync, self.link, self.full, self.haswork, self.nominal
        dep_why, eng, upath = self.dep_why, self.eng, self.upath
        xkey, wf_memo = self.xkey, self.wf_memo
        streams = m.streams
        nstr = len(streams)
        s_ops = self.s_ops
        s_cur = [0] * nstr
        s_next = [lst[0] if lst else -1 for lst in s_ops]  # the op a stream fetches for next (-1: none)
        s_prev = [n] * nstr  # the stream's op before that (n: none; start[n] is -inf)
        s_fetched = [0.0] * nstr
        s_consumed = [0.0] * nstr  # by finished ops
        s_capb = [s.capacity_bytes for s in streams]
        s_rpath = [tuple(list(self.capacity).index(r) for r in s.path) for s in streams]
        snames = [s.name for s in streams]
        rnames = list(self.capacity)
        zeros_s = [0.0] * nstr
        nres = len(rnames)
        zeros_r = [0.0] * nres
        fmoved = list(range(nstr))  # streams whose fetched bytes moved (all, before the first instant)
        issue, start, end = [inf] * n, [inf] * n + [-inf], [inf] * n  # (start[n]: see s_prev)
        frac = [0.0] * n
        prog_end = [inf] * n  # when the op's work ran out (its tail follows)
        fetched = [0.0] * n
        fetch_t0, fetch_t1 = [inf] * n, [inf] * n
        busy = [0.0] * n
        ostall: list[dict[str, float]] = [{} for _ in range(n)]
        deps: list[list[int] | None] = [None] * n  # hazards found at issue, program order
        dptr = [0] * n  # deps[p][:dptr[p]] have finished
        # bit sets of an op's written / read addresses (no ranges: 0; None: not made, for ranges that
        # are empty, negative or beyond _MASK_SPAN), made when an op with ranges issues
        self.wmask: list[int | None] = [0] * n
        self.rmask = [0] * n
        e_busy, e_idle = [0.0] * ne, [0.0] * ne
        e_stalls: list[dict[str, float]] = [{} for _ in range(ne)]
        res_bytes = [0.0] * nres
        usage: list[tuple[float, dict[str, float]]] = []
        levels: list[tuple[float, dict[str, float]]] = []
        last_used: list[float] | None = None
        inflight: dict[int, None] = {}  # issued, not finished, program order
        act: list[int] = []  # issued, unfinished consumers with an active FIFO coupling
        win = n + 1 if m.issue_window is None else m.issue_window  # (n + 1: never the limit)
        ic = m.issue_cycles
        t, next_issue, k, blocker, unstarted, n_done, stuck = 0.0, 0.0, 0, -1, 0, 0, 0
        while n_done < n:
            # --- instantaneous transitions at t: issue, start, complete, fetches done ----------
            changed = True
            while changed:
                done_any = started_any = blocked_any = False
                while k < n and blocker < 0 and unstarted < win and t >= next_issue - _EPS:
                    p = k
                    issue[p] = t
                    next_issue = t + ic
                    if not isasync[p]:
                        blocker = p
                    k += 1
                    unstarted += 1
                    if ops[p].reads or ops[p].writes:
                        d = self._hazards(p, inflight)
                        if d:
                            deps[p] = d
                    inflight[p] = None
                    if link[p] is not None:
                        act.append(p)
                for e in live:  # each head, and the next one whenever a head completes
                    p = cur[e]
                    while p < k:  # (a head not issued yet waits; drained engines left `live`)
                        if start[p] == inf:
                            d = deps[p]
                            if d is not None:  # the first unfinished hazard, if any, blocks the start
                                i = dptr[p]
                                if end[d[i]] == inf:  # (still the same one)
                                    blocked_any = True
                                    break
                                dn = len(d)
                                while i < dn and end[d[i]] != inf:
                                    i += 1
                                dptr[p] = i
                                if i < dn:
                                    blocked_any = True
                                    break
                                deps[p] = None  # every hazard has finished
                            start[p] = t
                            unstarted -= 1
                            started_any = True
                        elif frac[p] < 1 - _EPS and haswork[p]:  # (both tests below are pure)
                            break
                        if t < start[p] + lat[p] - _EPS:
                            break
                        if frac[p] < 1 - _EPS:
                            if haswork[p]:
                                break
                            frac[p], prog_end[p] = 1.0, t  # no work: only latency and tail
                        if not t >= prog_end[p] + tail[p] - _EPS:
                            break
                        end[p] = t
                        frac[p] = 1.0
                        n_done += 1
                        del inflight[p]
                        if sidx[p] >= 0:
                            s_consumed[sidx[p]] += sb[p]
                        if blocker == p:
                            blocker = -1
                            next_issue = t + ic
                        done_any = True
                        h = head[e] = head[e] + 1
                        if h >= len(queue[e]):
                            cur[e] = -1
                            live = [e for e in live if cur[e] >= 0]
                            dead = [e for e in range(ne) if cur[e] < 0 and e not in unused]
                            break
                        p = cur[e] = queue[e][h]
                # Another pass can change something only if a completion may have freed a head found
                # blocked, or the issuer may go on. (A new head is looked at as soon as it is one: of
                # the effects at this instant only the order of the stream byte sums could depend on
                # that, and an op that draws from a stream cannot start and finish at one instant.)
                changed = (done_any and blocked_any) or ((done_any or started_any) and k < n and blocker < 0
                                                         and unstarted < win and t >= next_issue - _EPS)
            # fetches complete (nothing above reads or enables these, so once per instant is enough;
            # and only `fetched` moving, in the last step, can complete one)
            for si in fmoved:
                lst = s_ops[si]
                i = s_cur[si]
                while i < len(lst) and fetched[lst[i]] >= sb[lst[i]] - _BEPS:
                    p = lst[i]
                    s_fetched[si] += sb[p] - fetched[p]
                    fetched[p] = sb[p]
                    fetch_t1[p] = min(fetch_t1[p], t)
                    fetch_t0[p] = min(fetch_t0[p], t)
                    i += 1
                    s_cur[si] = i
                    s_next[si] = lst[i] if i < len(lst) else -1
                    s_prev[si] = p
            if n_done >= n:
                break
            fmoved = []
            # --- what runs, the FIFO couplings, fetch targets and buffer levels ------------------
            # (the time to the next event is the first smallest non-negative candidate, as min() over
            # them all would pick; the heads' latency and tail ends are the first candidates)
            # (heads not issued or not started offer no candidate: their ends are all infinite)
            running = []
            rs = []  # running ops that draw from a stream
            waiting = []  # engines whose head is not issued yet
            blocked = []  # engines whose head waits for a hazard
            filling = []  # heads started but not progressing: setup latency, pipeline drain
            dt = inf
            for e in live:
                p = cur[e]
                if p >= k:
                    waiting.append(e)
                    continue
                s0 = start[p]
                if s0 == inf:
                    blocked.append(e)
                    continue
                lat_end = s0 + lat[p]
                if lat_end > t + _EPS:
                    c = lat_end - t
                    if c < dt:
                        dt = c
                    filling.append(p)
                elif s0 <= t and frac[p] < 1:
                    running.append(p)
                    if sidx[p] >= 0:
                        rs.append(p)
                else:
                    filling.append(p)
                tail_end = prog_end[p] + tail[p]
                if t + _EPS < tail_end < inf:
                    c = tail_end - t
                    if c < dt:
                        dt = c
            links = []
            if act:
                keep = []
                for c in act:
                    if end[c] != inf:
                        continue
                    keep.append(c)
                    pr = link[c]
                    if end[pr] == inf:  # type: ignore[index]
                        links.append((pr, c))
                act = keep
            tg: list[int | None] = [None] * nstr  # the op each stream fetches for now
            lvl = [0.0] * nstr  # buffered bytes (needed where a stream fetches)
            fetching = False
            for si in range(nstr):
                p = s_next[si]  # fetched once issued and the stream's previous op has started
                if 0 <= p < k and start[s_prev[si]] <= t:
                    tg[si] = p
                    fetching = True
                    lvl[si] = (s_fetched[si] - s_consumed[si]
                               - sum(frac[p] * sbr[p] for p in rs if sidx[p] == si))
            if fetching or links or rs:
                rate, why, share = self._rates(t, running, links, lvl, tg, start, frac, fetched)
            else:  # no stream, no FIFO: the fixed point is one round of water-filling (see _rates)
                rate, why, share = {}, {}, zeros_s
                if running:
                    xops = [p for p in running if xfer[p] > 0]
                    got = []
                    if xops:
                        key = (tuple([xkey[p] for p in xops]), ())
                        got = wf_memo.get(key)
                        if got is None:
                            got = self._fill(key, xops, [])
                    self._share_rates(running, got, rate, why)
            # --- time to the next event ----------------------------------------------------------
            if k < n and blocker < 0 and next_issue > t + _EPS:
                c = next_issue - t
                if c >= 0 and c < dt:
                    dt = c
            for p in running:
                r = rate[p]
                if r > 0:
                    c = (1 - frac[p]) / r
                    if c >= 0 and c < dt:
                        dt = c
                    si = sidx[p]
                    if si >= 0 and sbr[p] > 0:
                        inflow = share[si] if tg[si] == p else 0.0
                        avail = fetched[p] - frac[p] * sbr[p]
                        out = r * sbr[p]
                        if out > inflow * (1 + 1e-12) and avail > _BEPS:
                            c = avail / (out - inflow)
                            if c >= 0 and c < dt:
                                dt = c
            if fetching:
                for si in range(nstr):
                    p = tg[si]
                    if p is None:
                        continue
                    f = share[si]
                    if f > 0:
                        c = (sbr[p] - fetched[p]) / f
                        if c >= 0 and c < dt:
                            dt = c
                        cons = sum(rate.get(q, 0.0) * sbr[q] for q in running if sidx[q] == si)
                        room = s_capb[si] - lvl[si]
                        if f > cons * (1 + 1e-12) and room > _BEPS:
                            c = room / (f - cons)
                            if c >= 0 and c < dt:
                                dt = c
            for pr, c in links:
                gap = frac[pr] - frac[c]
                rc, rp = rate.get(c, 0.0), rate.get(pr, 0.0)
                if rc > rp and gap > _EPS:
                    d = gap / (rc - rp)
                    if d >= 0 and d < dt:
                        dt = d
                if rp > rc and full[c] - gap > _EPS and start[c] <= t:
                    d = (full[c] - gap) / (rp - rc)
                    if d >= 0 and d < dt:
                        dt = d
            # (every candidate is >= 0, so max(dt, 0.0) would change nothing)
            if dt == inf:
                p = next(p for p in range(n) if end[p] == inf)
                raise TimingError(f"deadlock at cycle {t:.0f}: op {ops[p].index} "
                                  f"({ops[p].label or ops[p].engine}) can never finish")
            stuck = stuck + 1 if dt <= 0 else 0
            if stuck > 10 * n + 100:
                raise TimingError(f"no progress at cycle {t:.0f}")
            if dt <= 0:
                continue
            # --- advance to t + dt: progress, fetches, resource use, engine attribution ---------
            if running or fetching:
                used = [0.0] * nres
                for p in running:
                    r = rate[p]
                    f = frac[p] + r * dt
                    if not f < 1.0:  # min(1.0, f)
                        f = 1.0
                    if f >= 1 - _EPS:
                        frac[p], prog_end[p] = 1.0, t + dt
                    else:
                        frac[p] = f
                    if xfer[p] > 0:
                        for ri in rpath[p]:
                            used[ri] += r * xfer[p]
                for si in range(nstr):
                    p = tg[si]
                    if p is None:
                        continue
                    f = share[si]
                    if f > 0:
                        if t < fetch_t0[p]:
                            fetch_t0[p] = t
                        fmoved.append(si)
                        got = min(sbr[p], fetched[p] + f * dt) - fetched[p]
                        fetched[p] += got
                        s_fetched[si] += got
                        for ri in s_rpath[si]:
                            used[ri] += f
                for ri in (upath[running[0]] if len(running) == 1 and not fetching else range(nres)):
                    res_bytes[ri] += used[ri] * dt  # (an untouched resource would add 0.0: no change)
            else:  # nothing moves (no bytes to add either)
                used = zeros_r
            if last_used != used:  # samples kept raw here, made dicts at the end
                usage.append((t, used))  # type: ignore[arg-type]
                last_used = used
            if nstr == 1:
                levels.append((t, s_fetched[0] - s_consumed[0] - (  # type: ignore[arg-type]
                    sum(frac[p] * sbr[p] for p in rs if sidx[p] == 0) if rs else 0)))
            elif nstr:
                levels.append((t, tuple([s_fetched[si] - s_consumed[si] - (  # type: ignore[arg-type]
                    sum(frac[p] * sbr[p] for p in rs if sidx[p] == si) if rs else 0) for si in range(nstr)])))
            # engine attribution (each engine's and op's figures are its own: any engine order will do)
            for e in dead:
                e_idle[e] += dt
            if waiting:
                reason = "sync" if blocker >= 0 else "issue"
                for e in waiting:
                    st = e_stalls[e]
                    st[reason] = st.get(reason, 0.0) + dt
            for e in blocked:
                p = cur[e]
                reason = "issue"
                d = deps[p]
                if d:
                    i, dn = dptr[p], len(d)
                    while i < dn and end[d[i]] != inf:
                        i += 1
                    dptr[p] = i
                    if i < dn:
                        reason = dep_why[d[i]]
                st = e_stalls[e]
                st[reason] = st.get(reason, 0.0) + dt
                st = ostall[p]
                st[reason] = st.get(reason, 0.0) + dt
            for p in filling:  # pipeline fill, drain and setup latency count as busy
                e_busy[eng[p]] += dt
                busy[p] += dt
            for p in running:
                e = eng[p]
                nom = nominal[p]
                fr = 1.0
                if nom > 0:
                    fr = rate[p] / nom
                    if not fr < 1.0:  # min(1.0, fr)
                        fr = 1.0
                e_busy[e] += dt * fr
                busy[p] += dt * fr
                if fr >= 1 - 1e-9:
                    continue
                reason, dt_s = why.get(p) or "bandwidth", dt * (1 - fr)
                st = e_stalls[e]
                st[reason] = st.get(reason, 0.0) + dt_s
                st = ostall[p]
                st[reason] = st.get(reason, 0.0) + dt_s
            t += dt
        # --- the result ------------------------------------------------------------------------
        total = max(end, default=0.0)
        engines = {}
        for e in unused:  # idle at every step: the same sums, in the same order, as t itself
            e_idle[e] = t
        for e, name in enumerate(m.engines):  # engines finished early idle until the end
            engines[name] = EngineStats(name, e_busy[e], e_idle[e] + max(0.0, total - t), e_stalls[e])
        res = [OpTiming(o.index, o.engine, o.label, issue[p], start[p], end[p], busy[p], ostall[p],
                        dict(o.args)) for p, o in enumerate(ops)]
        fetches = [Fetch(o.stream, o.index, fetch_t0[p], fetch_t1[p], o.stream_bytes)
                   for p, o in enumerate(ops) if o.stream is not None and o.stream_bytes > 0]
        usage = [(u_t, dict(zip(rnames, u))) for u_t, u in usage]  # noqa: B905 (same lengths)
        usage.append((total, dict.fromkeys(self.capacity, 0.0)))
        if nstr == 1:
            levels = [(l_t, {snames[0]: v}) for l_t, v in levels]
        elif nstr:
            levels = [(l_t, dict(zip(snames, v))) for l_t, v in levels]  # noqa: B905
        return TimingResult(total, m.clock_hz, res, engines, fetches,
                            dict(zip(rnames, res_bytes, strict=True)), usage, levels)
