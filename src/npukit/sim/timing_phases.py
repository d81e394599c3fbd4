"""The phases of one event of the timing event loop (`npukit.sim.timing_state.Sim.run` calls them in order).

1. **settle** (`_settle`) — everything that happens at the instant ``t``, repeated until nothing more
   can: *issue* ops in program order (`_issue`), *start and complete the heads* of the engine queues
   (popping and pushing tokens), hand pool ops to free cores (`Tokens._dispatch`), then mark the
   prefetches that completed (`_fetches_done`).
2. **survey** (`_survey`) — what each engine's head is doing now (running, setting up or draining,
   blocked, not yet issued), the active FIFO couplings, what each stream fetches and its buffer level.
3. **solve rates** (`_solve`, with the fixed point in `timing_rates`) — every running op's progress
   rate until the next event, then
4. **the horizon** (also `_solve`) — the time to the next event: an op or a prefetch finishing, a
   buffer filling or draining, a FIFO emptying or filling, the issuer going on, a latency or tail ending.
5. **advance** (`_advance`) — progress, fetched bytes and resource use over that time, and
   **attribute** (`_attribute`) it to every engine and op as busy, idle or a named stall.

Every phase reads and writes the `Sim`'s per-op lists (indexed by program position), each bound to a
local of the same name at the phase's top (``frac = self.frac``: by name, so adding a table is one
slot and the lines that use it); scalars that outlive a phase (``k``, ``blocker``, ``next_issue``,
``unstarted``, ``n_done``) and lists rebound as a whole (``live``) are the Sim's attributes.
"""

from __future__ import annotations

from npukit.sim.timing_rates import stream_bytes_drawn, stream_draw_rate
from npukit.sim.timing_types import BYTES_EPS, FRACTION_EPS

_INF = float("inf")


class Phases:
    """Mixed into `npukit.sim.timing_state.Sim`: the per-event phases."""

    __slots__ = ()

    # --- 1. settle: issue, start, complete at t ---------------------------------------------------
    def _settle(self, t: float) -> None:
        """Issue, start and complete at ``t`` until nothing changes, then note completed prefetches (a head
        starts with no hazard left and its tokens popped, completes with its tokens pushed)."""
        n, win, issue, take, give = self.n, self.win, self._issue, self._take, self._give
        queue, head, cur, start, end, frac = self.queue, self.head, self.cur, self.start, self.end, self.frac
        prog_end, lat, tail, deps, dptr = self.prog_end, self.lat, self.tail, self.deps, self.dptr
        haswork, inflight, sidx, gated, pops = self.haswork, self.inflight, self.sidx, self.gated, self.pops
        pushes, cdepth, pools, s_consumed = self.pushes, self.cdepth, bool(self.pools), self.s_consumed
        sb, (pending, cq) = self.sb, (self.pending, self.cq) if cdepth else (None, None)  # (queues: if any)
        k, blocker, next_issue, unstarted, n_done, ic = self.k, self.blocker, self.next_issue, \
            self.unstarted, self.n_done, self.ic
        changed = True
        while changed:
            if k < n and blocker < 0 and unstarted < win and t >= next_issue - FRACTION_EPS:
                k, blocker, next_issue, unstarted = issue(t, k, blocker, next_issue, unstarted)
            done_any = started_any = blocked_any = False  # (blocked: by a hazard or a token)
            for e in self.live:  # each head, and the next one whenever a head completes
                p = cur[e]
                while p < k:  # (a head not issued yet waits; drained engines left `live`)
                    if start[p] == _INF:
                        d = deps[p]
                        if d is not None:  # the first unfinished hazard, if any, blocks the start
                            i = dptr[p]
                            if end[d[i]] == _INF:  # (still the same one)
                                blocked_any = True
                                break
                            dn = len(d)
                            while i < dn and end[d[i]] != _INF:
                                i += 1
                            dptr[p] = i
                            if i < dn:
                                blocked_any = True
                                break
                            deps[p] = None  # every hazard has finished
                        if gated and pops[p] and not take(p):  # tokens to pop first
                            blocked_any = True
                            break
                        start[p] = t
                        unstarted -= 1
                        started_any = True
                    elif frac[p] < 1 - FRACTION_EPS and haswork[p]:  # (both tests below are pure)
                        break
                    if t < start[p] + lat[p] - FRACTION_EPS:
                        break
                    if frac[p] < 1 - FRACTION_EPS:
                        if haswork[p]:
                            break
                        frac[p], prog_end[p] = 1.0, t  # no work: only latency and tail
                    if not t >= prog_end[p] + tail[p] - FRACTION_EPS or (gated and pushes[p] and not give(p)):
                        break  # (tokens to push last)
                    end[p], frac[p] = t, 1.0
                    n_done += 1
                    del inflight[p]
                    if sidx[p] >= 0:
                        s_consumed[sidx[p]] += sb[p]
                    if blocker == p:
                        blocker, next_issue = -1, t + ic
                    done_any = True
                    h = head[e] = head[e] + 1
                    if h >= len(queue[e]):
                        cur[e] = -1
                        self._drained()
                        break
                    p = cur[e] = queue[e][h]
                    if cdepth and p < k:  # the engine takes its next command off its queue
                        pending[cq[p]] -= 1
            # Another pass can change something only if a completion may have freed a blocked head, or the
            # issuer may go on. (A new head is looked at at once: only the order of the stream byte sums
            # could depend on that, and an op drawing from a stream cannot start and finish at one instant.)
            changed = (done_any and blocked_any) or ((done_any or started_any) and k < n and blocker < 0
                                                     and unstarted < win and t >= next_issue - FRACTION_EPS)
            if pools:  # issued pool ops to free cores
                self.k = k
                changed = self._dispatch() or changed
            if gated and self.moved:  # a token moved: a head waiting on its queue may go on
                self.moved, changed = False, True
        self.k, self.blocker, self.next_issue = k, blocker, next_issue
        self.unstarted, self.n_done = unstarted, n_done
        if self.fmoved:
            self._fetches_done(t)

    def _issue(self, t: float, k: int, blocker: int, next_issue: float, unstarted: int):
        """Issue ops in program order while the issuer is free, the window and the next op's command
        queue have room, and it is time; returns the issuer's state (k, blocker, next_issue, unstarted)."""
        n, win, ic = self.n, self.win, self.ic
        ops, isasync, link, issue = self.ops, self.isasync, self.link, self.issue
        deps, inflight, act, hazards = self.deps, self.inflight, self.act, self._hazards
        cdepth = self.cdepth
        pending, cq = (self.pending, self.cq) if cdepth else (None, None)  # (command queues only)
        eng, cur = self.eng, self.cur
        while k < n and blocker < 0 and unstarted < win and t >= next_issue - FRACTION_EPS:
            if cdepth and pending[cq[k]] >= cdepth:  # (command queues: the next one is full)
                break
            p = k
            issue[p] = t
            next_issue = t + ic
            if not isasync[p]:
                blocker = p
            k += 1
            unstarted += 1
            if ops[p].reads or ops[p].writes:
                d = hazards(p, inflight)
                if d:
                    deps[p] = d
            inflight[p] = None
            if link[p] is not None:
                act.append(p)
            if cdepth and (eng[p] < 0 or cur[eng[p]] != p):  # (an engine's head is not queued)
                pending[cq[p]] += 1
        return k, blocker, next_issue, unstarted

    def _fetches_done(self, t: float) -> None:
        """Prefetches whose bytes have all arrived (only `_advance` moves them, so once per instant)."""
        s_ops, s_cur, s_next, s_prev = self.s_ops, self.s_cur, self.s_next, self.s_prev
        s_fetched, fetched, sb, fetch_t0 = self.s_fetched, self.fetched, self.sb, self.fetch_t0
        fetch_t1 = self.fetch_t1
        for si in self.fmoved:
            lst = s_ops[si]
            i = s_cur[si]
            while i < len(lst) and fetched[lst[i]] >= sb[lst[i]] - BYTES_EPS:
                p = lst[i]
                s_fetched[si] += sb[p] - fetched[p]
                fetched[p] = sb[p]
                fetch_t1[p] = min(fetch_t1[p], t)
                fetch_t0[p] = min(fetch_t0[p], t)
                i += 1
                s_cur[si] = i
                s_next[si] = lst[i] if i < len(lst) else -1
                s_prev[si] = p
        self.fmoved.clear()

    def _drained(self) -> None:
        """An engine queue ran out: it leaves ``live`` (the list the heads loop walks: rebound, not
        changed under it) and idles from now on."""
        cur, unused = self.cur, self.unused
        self.live = [e for e in self.live if cur[e] >= 0]
        self.dead[:] = [e for e in range(len(cur)) if cur[e] < 0 and e not in unused]

    # --- 2. survey: what every head is doing ------------------------------------------------------
    def _survey(self, t: float):
        """Classify each live engine's head, collect the FIFO couplings, stream targets and levels.

        Returns (running, rs, waiting, blocked, filling, dt, links, tg, lvl, fetching): running ops
        (and those of them that draw from a stream), engines whose head is not issued or is blocked,
        heads started but not progressing (setup latency, pipeline drain), the first event candidate
        (a latency or tail ending), producer→consumer pairs coupled now, the op each stream fetches
        for (None: none), buffered bytes per stream and whether any stream fetches.
        """
        cur, start, lat, tail = self.cur, self.start, self.lat, self.tail
        frac, prog_end, sidx, act = self.frac, self.prog_end, self.sidx, self.act
        end, link, nstr = self.end, self.link, self.nstr
        k, inf = self.k, _INF
        running, rs, waiting, blocked, filling = [], [], [], [], []
        dt = inf  # (the first smallest candidate, as min() over them all would pick)
        for e in self.live:
            p = cur[e]
            if p >= k:
                waiting.append(e)
                continue
            s0 = start[p]
            if s0 == inf:
                blocked.append(e)
                continue
            lat_end = s0 + lat[p]
            if lat_end > t + FRACTION_EPS:
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
            if t + FRACTION_EPS < tail_end < inf:
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
            act[:] = keep
        tg: list[int | None] = [None] * nstr  # the op each stream fetches for now
        lvl = [0.0] * nstr  # buffered bytes (needed where a stream fetches)
        fetching = False
        if nstr:
            s_next, s_prev, s_fetched, s_consumed = self.s_next, self.s_prev, self.s_fetched, self.s_consumed
            sbr = self.sbr
            for si in range(nstr):
                p = s_next[si]  # fetched once issued and the stream's previous op has started
                if 0 <= p < k and start[s_prev[si]] <= t:
                    tg[si] = p
                    fetching = True
                    if len(rs) == 1:  # (`stream_bytes_drawn` inline: one term is that term exactly)
                        q = rs[0]
                        lvl[si] = s_fetched[si] - s_consumed[si] - (frac[q] * sbr[q] if sidx[q] == si else 0)
                    else:
                        lvl[si] = s_fetched[si] - s_consumed[si] - stream_bytes_drawn(rs, si, frac, sbr, sidx)
        return running, rs, waiting, blocked, filling, dt, links, tg, lvl, fetching

    # --- 3, 4. solve rates, then the horizon: time to the next event ----------------------------
    def _solve(self, t: float, dt: float, running: list[int], rs: list[int], links: list[tuple[int, int]],
               tg: list[int | None], lvl: list[float], fetching: bool):
        """Rates (op → fraction/cycle), their limiting reasons (op → name), each stream's inflow, and the
        time to the next event: the first smallest non-negative candidate after ``dt`` (from `_survey`),
        as min() over them all would pick (every candidate is >= 0)."""
        frac, sidx, sbr, fetched = self.frac, self.sidx, self.sbr, self.fetched
        s_capb, full, start, nstr = self.s_capb, self.full, self.start, self.nstr
        if fetching or links or rs:
            rate, why, share = self._rates(t, running, links, lvl, tg, start, frac, fetched)
        else:  # no stream, no FIFO: the fixed point is one round of water-filling (see _rates)
            rate, why, share = {}, {}, self.zeros_s
            if running:
                xops = [p for p in running if self.xfer[p] > 0]
                got = []
                if xops:  # (water-filling memoised on its exact inputs)
                    key = (tuple([self.xkey[p] for p in xops]), ())
                    got = self.wf_memo.get(key) or self._fill(key, xops, [])
                self._share_rates(running, got, rate, why)
        if self.k < self.n and self.blocker < 0 and self.next_issue > t + FRACTION_EPS:
            c = self.next_issue - t
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
                    if out > inflow * (1 + 1e-12) and avail > BYTES_EPS:
                        c = avail / (out - inflow)
                        if c >= 0 and c < dt:
                            dt = c
        if fetching:
            for si in range(nstr):
                p = tg[si]
                if p is None or not (f := share[si]) > 0:
                    continue
                c = (sbr[p] - fetched[p]) / f
                if c >= 0 and c < dt:
                    dt = c
                cons = stream_draw_rate(rs, si, rate, sbr, sidx)
                room = s_capb[si] - lvl[si]
                if f > cons * (1 + 1e-12) and room > BYTES_EPS:
                    c = room / (f - cons)
                    if c >= 0 and c < dt:
                        dt = c
        for pr, c in links:
            gap = frac[pr] - frac[c]
            rc, rp = rate.get(c, 0.0), rate.get(pr, 0.0)
            if rc > rp and gap > FRACTION_EPS:
                d = gap / (rc - rp)
                if d >= 0 and d < dt:
                    dt = d
            if rp > rc and full[c] - gap > FRACTION_EPS and start[c] <= t:
                d = (full[c] - gap) / (rp - rc)
                if d >= 0 and d < dt:
                    dt = d
        return rate, why, share, dt

    # --- 5. advance and attribute -----------------------------------------------------------------
    def _advance(self, t: float, dt: float, running: list[int], rs: list[int], tg: list[int | None],
                 fetching: bool, rate: dict[int, float], share: list[float]) -> None:
        """Progress, fetched bytes, resource bytes and the usage / buffer-level samples over [t, t+dt)."""
        nstr, frac, sbr, sidx = self.nstr, self.frac, self.sbr, self.sidx
        nres, xfer, rpath, prog_end = self.nres, self.xfer, self.rpath, self.prog_end
        res_bytes, upath, s_fetched, s_consumed = self.res_bytes, self.upath, self.s_fetched, self.s_consumed
        if running or fetching:
            used = [0.0] * nres
            for p in running:
                r = rate[p]
                f = frac[p] + r * dt
                if not f < 1.0:  # min(1.0, f)
                    f = 1.0
                if f >= 1 - FRACTION_EPS:
                    frac[p], prog_end[p] = 1.0, t + dt
                else:
                    frac[p] = f
                if xfer[p] > 0:
                    for ri in rpath[p]:
                        used[ri] += r * xfer[p]
            if fetching:
                fetched, fetch_t0, s_rpath, fmoved = self.fetched, self.fetch_t0, self.s_rpath, self.fmoved
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
            used = self.zeros_r
        if self.last_used != used:  # samples kept raw here, made dicts at the end
            self.usage.append((t, used))
            self.last_used = used
        if nstr:
            if nstr == 1:  # (`stream_bytes_drawn` inline for one running op)
                drawn = (frac[rs[0]] * sbr[rs[0]] if len(rs) == 1
                         else stream_bytes_drawn(rs, 0, frac, sbr, sidx))
                self.levels.append((t, s_fetched[0] - s_consumed[0] - drawn))
            else:
                self.levels.append((t, tuple([
                    s_fetched[si] - s_consumed[si] - stream_bytes_drawn(rs, si, frac, sbr, sidx)
                    for si in range(nstr)])))

    def _attribute(self, dt: float, running: list[int], waiting: list[int], blocked: list[int],
                   filling: list[int], rate: dict[int, float], why: dict[int, str]) -> None:
        """Each engine's and op's share of [t, t+dt): busy, idle, or a named stall (each figure is its
        own: any engine order will do)."""
        e_idle, e_busy, e_stalls, ostall = self.e_idle, self.e_busy, self.e_stalls, self.ostall
        busy, eng, nominal, dead = self.busy, self.eng, self.nominal, self.dead
        cur, deps, dptr, end = self.cur, self.deps, self.dptr, self.end
        dep_why, gated = self.dep_why, self.gated
        for e in dead:
            e_idle[e] += dt
        if waiting:
            reason = "sync" if self.blocker >= 0 else "issue"
            for e in waiting:
                st = e_stalls[e]
                st[reason] = st.get(reason, 0.0) + dt
        if blocked:
            for e in blocked:
                p = cur[e]
                reason = "issue"
                d = deps[p]
                if d:
                    i, dn = dptr[p], len(d)
                    while i < dn and end[d[i]] != _INF:
                        i += 1
                    dptr[p] = i
                    if i < dn:
                        reason = dep_why[d[i]]
                if reason == "issue" and gated:  # no hazard left: a token to pop
                    reason = self._token_why(p)
                st = e_stalls[e]
                st[reason] = st.get(reason, 0.0) + dt
                st = ostall[p]
                st[reason] = st.get(reason, 0.0) + dt
        if gated and self.pushing:  # heads done but for a push to a full queue: stalled, not busy
            for p in [p for p in filling if p in self.pushing]:
                reason = self._token_why(p)
                for st in (e_stalls[eng[p]], ostall[p]):
                    st[reason] = st.get(reason, 0.0) + dt
            filling = [p for p in filling if p not in self.pushing]
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
