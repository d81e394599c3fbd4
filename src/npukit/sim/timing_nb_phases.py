"""The phases of the compiled timing loop (`npukit.sim.timing_nb.run` calls them in order, once per event).

Each phase is the section of the same name in the readable loop (`npukit.sim.timing_phases`), over
the named records of `timing_nb` (C: `OpTable`, S: `OpRun`, E: `EngineQueues`, R: `StreamTable`,
W: `EventScratch`, F: `FlowScratch`, K: `ReasonCodes`, A: `Accounts`, O: `Samples`). Scalars that
outlive a phase go in and come back as return values.

Why ``inline="always"``: numba reference-counts every array a call passes or a record field binds,
with an atomic instruction each; called as separate functions, the phases spent 70 % of a pccx token's
time there (perf: NRT_incref / NRT_decref). Inlined at numba's IR level they compile into `run`'s one
body, as the single long function did, while each is read and named on its own.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from npukit.sim.timing_types import BYTES_EPS, FRACTION_EPS  # compile-time constants to numba

_INF = np.inf
_PHASE = {"inline": "always", "error_model": "numpy", "nogil": True}
NO_RATE, FULL = 3, 4  # (status codes shared with `timing_nb`)


@nb.njit(**_PHASE)
def issue(C, S, t, k, blocker, unstarted, next_issue, n_infl, n_act, n_dep, win, ic):
    """Issue ops in program order while the issuer may, finding each one's hazards among the ops in
    flight; returns the issuer's state and whether the hazard buffer overflowed."""
    n = C.eng.shape[0]
    nrd, nwr, rd, wr, fifo, isasync, link = C.nrd, C.nwr, C.rd, C.wr, C.fifo, C.isasync, C.link
    end, infl, dep_buf, dep_off, dep_len, act = S.end, S.infl, S.dep_buf, S.dep_off, S.dep_len, S.act
    while k < n and blocker < 0 and unstarted < win and t >= next_issue - FRACTION_EPS:
        p = k
        S.issue[p] = t
        next_issue = t + ic
        if not isasync[p]:
            blocker = p
        k += 1
        unstarted += 1
        if nrd[p] or nwr[p]:  # hazards: in-flight ops (program order) whose ranges meet p's
            m = 0  # (the in-flight list is compacted while it is scanned)
            dep_off[p] = n_dep
            for j in range(n_infl):
                q = infl[j]
                if end[q] != _INF:
                    continue
                infl[m] = q
                m += 1
                hit = False  # RAW/WAW: q's writes against p's reads and writes; WAR: q's reads
                for a in range(nwr[q]):
                    x0, x1 = wr[q, a, 0], wr[q, a, 1]
                    for b in range(nrd[p]):
                        if x0 < rd[p, b, 1] and rd[p, b, 0] < x1:
                            hit = True
                    for b in range(nwr[p]):
                        if x0 < wr[p, b, 1] and wr[p, b, 0] < x1:
                            hit = True
                for a in range(nrd[q]):
                    x0, x1 = rd[q, a, 0], rd[q, a, 1]
                    for b in range(nwr[p]):
                        if x0 < wr[p, b, 1] and wr[p, b, 0] < x1:
                            hit = True
                if hit and not (q == fifo[p] and isasync[q]):
                    if n_dep >= dep_buf.shape[0]:
                        return k, blocker, unstarted, next_issue, n_infl, n_act, n_dep, True
                    dep_buf[n_dep] = q
                    n_dep += 1
            n_infl = m
            dep_len[p] = n_dep - dep_off[p]
        infl[n_infl] = p
        n_infl += 1
        if link[p] >= 0:
            act[n_act] = p
            n_act += 1
    return k, blocker, unstarted, next_issue, n_infl, n_act, n_dep, False


@nb.njit(**_PHASE)
def heads(C, S, E, R, t, k, blocker, unstarted, n_done, next_issue, ic):
    """Start and complete each engine's heads at ``t``, the next one whenever a head completes; returns
    the issuer's and the run's state and whether anything completed, started or stayed blocked."""
    lat, tail, haswork, sidx, sb = C.lat, C.tail, C.haswork, C.sidx, C.sb
    start, end, frac, prog_end = S.start, S.end, S.frac, S.prog_end
    dptr, dep_len, dep_off, dep_buf = S.dptr, S.dep_len, S.dep_off, S.dep_buf
    cur, head, q_len, q_ops, q_off = E.cur, E.head, E.q_len, E.q_ops, E.q_off
    done_any = started_any = blocked_any = False
    for e in range(cur.shape[0]):
        p = cur[e]
        if p < 0:
            continue
        while p < k:
            if start[p] == _INF:
                i, dn, off = dptr[p], dep_len[p], dep_off[p]
                while i < dn and end[dep_buf[off + i]] != _INF:
                    i += 1
                dptr[p] = i
                if i < dn:  # an unfinished hazard blocks the start
                    blocked_any = True
                    break
                start[p] = t
                unstarted -= 1
                started_any = True
            elif frac[p] < 1 - FRACTION_EPS and haswork[p]:
                break
            if t < start[p] + lat[p] - FRACTION_EPS:
                break
            if frac[p] < 1 - FRACTION_EPS:
                if haswork[p]:
                    break
                frac[p], prog_end[p] = 1.0, t
            if not t >= prog_end[p] + tail[p] - FRACTION_EPS:
                break
            end[p], frac[p] = t, 1.0
            n_done += 1
            if sidx[p] >= 0:
                R.s_consumed[sidx[p]] += sb[p]
            if blocker == p:
                blocker, next_issue = -1, t + ic
            done_any = True
            h = head[e] = head[e] + 1
            if h >= q_len[e]:
                cur[e] = -1
                break
            p = cur[e] = q_ops[q_off[e] + h]
    return blocker, unstarted, n_done, next_issue, done_any, started_any, blocked_any


@nb.njit(**_PHASE)
def fetches_done(C, S, R, t):
    """Prefetches whose bytes have all arrived (only `advance` moves them)."""
    sb, fetched, fetch_t0, fetch_t1 = C.sb, S.fetched, S.fetch_t0, S.fetch_t1
    s_ops, s_cur, s_len, s_off, fmoved = R.s_ops, R.s_cur, R.s_len, R.s_off, R.fmoved
    for si in range(s_len.shape[0]):
        if not fmoved[si]:
            continue
        fmoved[si] = False
        i, ln, off = s_cur[si], s_len[si], s_off[si]
        while i < ln and fetched[s_ops[off + i]] >= sb[s_ops[off + i]] - BYTES_EPS:
            p = s_ops[off + i]
            R.s_fetched[si] += sb[p] - fetched[p]
            fetched[p] = sb[p]
            if t < fetch_t1[p]:
                fetch_t1[p] = t
            if t < fetch_t0[p]:
                fetch_t0[p] = t
            i += 1
            s_cur[si] = i
            R.s_next[si] = s_ops[off + i] if i < ln else -1
            R.s_prev[si] = p


@nb.njit(**_PHASE)
def survey(C, S, E, R, W, t, k, n_act, stamp):
    """Classify each head, collect the FIFO couplings, stream targets and levels; returns the counts of
    running (and stream-drawing) ops, waiting and blocked engines, filling heads, coupled pairs, the
    active consumers kept, whether any stream fetches, and the first event candidate."""
    lat, tail, sidx, sbr, link = C.lat, C.tail, C.sidx, C.sbr, C.link
    start, frac, prog_end, end, act = S.start, S.frac, S.prog_end, S.end, S.act
    running, rs, rmark, tg, lvl = W.running, W.rs, W.rmark, W.tg, W.lvl
    cur = E.cur
    n_run = n_rs = n_wait = n_block = n_fill = n_link = 0
    dt = _INF
    for e in range(cur.shape[0]):
        p = cur[e]
        if p < 0:
            continue
        if p >= k:
            W.waiting[n_wait] = e
            n_wait += 1
            continue
        s0 = start[p]
        if s0 == _INF:
            W.blocked[n_block] = e
            n_block += 1
            continue
        lat_end = s0 + lat[p]
        if lat_end > t + FRACTION_EPS:
            c = lat_end - t
            if c < dt:
                dt = c
            W.filling[n_fill] = p
            n_fill += 1
        elif s0 <= t and frac[p] < 1:
            running[n_run] = p
            n_run += 1
            rmark[p] = stamp
            if sidx[p] >= 0:
                rs[n_rs] = p
                n_rs += 1
        else:
            W.filling[n_fill] = p
            n_fill += 1
        tail_end = prog_end[p] + tail[p]
        if t + FRACTION_EPS < tail_end < _INF:
            c = tail_end - t
            if c < dt:
                dt = c
    m = 0
    for j in range(n_act):  # consumers with a FIFO producer: coupled while both run
        c = act[j]
        if end[c] != _INF:
            continue
        act[m] = c
        m += 1
        pr = link[c]
        if end[pr] == _INF:
            W.lk_pr[n_link], W.lk_c[n_link] = pr, c
            n_link += 1
    fetching = False
    for si in range(tg.shape[0]):
        tg[si] = -1
        lvl[si] = 0.0
        p = R.s_next[si]  # fetched once issued and the stream's previous op has started
        if 0 <= p < k and start[R.s_prev[si]] <= t:
            tg[si] = p
            fetching = True
            drawn = 0.0
            for j in range(n_rs):
                q = rs[j]
                if sidx[q] == si:
                    drawn += frac[q] * sbr[q]
            lvl[si] = R.s_fetched[si] - R.s_consumed[si] - drawn
    return n_run, n_rs, n_wait, n_block, n_fill, n_link, m, fetching, dt


@nb.njit(**_PHASE)
def waterfill(F, capacity, nf):
    """Max-min fair shares of the ``nf`` flows in F (`timing_types.waterfill`, step for step) into
    ``F.got``; False where a flow has neither a cap nor a resource."""
    fcaps, fpath, fplen, got, frozen, left, users = F.fcaps, F.fpath, F.fplen, F.got, F.frozen, F.left, F.users
    nres = capacity.shape[0]
    for r in range(nres):
        left[r] = capacity[r]
    for i in range(nf):
        got[i] = 0.0
        frozen[i] = False
    nfrozen = 0
    while nfrozen < nf:
        level = _INF
        for i in range(nf):
            if not frozen[i]:
                x = fcaps[i] - got[i]
                if x < level:
                    level = x
        for r in range(nres):
            users[r] = 0
        for i in range(nf):  # each unfrozen flow counts once on each resource of its path
            if not frozen[i]:
                for a in range(fplen[i]):
                    r = fpath[i, a]
                    seen = False
                    for b in range(a):
                        if fpath[i, b] == r:
                            seen = True
                    if not seen:
                        users[r] += 1
        for r in range(nres):
            if users[r]:
                x = left[r] / users[r]
                if x < level:
                    level = x
        if level == _INF or level == -_INF:
            return False
        for i in range(nf):
            if not frozen[i]:
                got[i] += level
                for a in range(fplen[i]):
                    left[fpath[i, a]] -= level
        for i in range(nf):
            if frozen[i]:
                continue
            stop = got[i] >= fcaps[i] * (1 - FRACTION_EPS)
            for a in range(fplen[i]):
                if left[fpath[i, a]] <= capacity[fpath[i, a]] * FRACTION_EPS:
                    stop = True
            if stop:
                frozen[i] = True
                nfrozen += 1
    return True


@nb.njit(**_PHASE)
def flows(C, R, W, F, n_run):
    """The water-filling flows of this event: each running transfer (cap, path), then each fetching
    stream (path; its cap is set per round); returns (transfers, streams)."""
    xfer, xcap, plen, path = C.xfer, C.xcap, C.plen, C.path
    fcaps, fpath, fplen, scap_si, scap_c = F.fcaps, F.fpath, F.fplen, F.scap_si, F.scap_c
    ns = 0
    for si in range(W.tg.shape[0]):
        if W.tg[si] >= 0:
            scap_si[ns], scap_c[ns] = si, R.s_bpc[si]
            ns += 1
    nx = 0
    for j in range(n_run):
        p = W.running[j]
        if xfer[p] > 0:
            fcaps[nx] = xcap[p]
            fplen[nx] = plen[p]
            for a in range(plen[p]):
                fpath[nx, a] = path[p, a]
            nx += 1
    for j in range(ns):
        fplen[nx + j] = R.s_plen[scap_si[j]]
        for a in range(R.s_plen[scap_si[j]]):
            fpath[nx + j, a] = R.s_path[scap_si[j], a]
    return nx, ns


@nb.njit(**_PHASE)
def limit_rates(C, S, W, K, t, n_run, n_link, stamp, got):
    """One round's rates from the shares ``got``: min(engine rate, share / bytes) ("bandwidth", -2, where
    the share binds), then weights that have not arrived, then the FIFO couplings forward and back."""
    eng, cap, xfer, xlow, sbr, sidx, full = C.eng, C.cap, C.xfer, C.xlow, C.sbr, C.sidx, C.full
    frac, fetched, start = S.frac, S.fetched, S.start
    running, rate, why, rmark, share, tg = W.running, W.rate, W.why, W.rmark, W.share, W.tg
    i = 0
    for j in range(n_run):
        p = running[j]
        c = cap[p]
        if xfer[p] > 0:
            g = got[i]
            i += 1
            r = g / xfer[p]
            rate[p] = r if r < c else c
            why[p] = -2 if g < xlow[p] else -1
        else:
            rate[p], why[p] = c, -1
    for j in range(n_run):  # weights must have arrived
        p = running[j]
        if not (sbr[p] > 0 and sidx[p] >= 0):
            continue
        b = sbr[p]
        avail = fetched[p] - frac[p] * b
        if avail <= BYTES_EPS and fetched[p] < b - BYTES_EPS:
            si = sidx[p]
            inflow = share[si] if tg[si] == p else 0.0
            lim = inflow / b
            if lim < rate[p]:
                rate[p], why[p] = lim, K.s_why[si]
    for jj in range(2 * n_link):  # the FIFO couplings, forward then backward
        j = jj if jj < n_link else 2 * n_link - 1 - jj
        pr, c = W.lk_pr[j], W.lk_c[j]
        gap = frac[pr] - frac[c]
        c_in, pr_in = rmark[c] == stamp, rmark[pr] == stamp
        rc = rate[c] if c_in else 0.0
        rp = rate[pr] if pr_in else 0.0
        if gap <= FRACTION_EPS and c_in and rp < rc:  # FIFO empty: the consumer follows
            rate[c], why[c] = rp, K.wait_code[eng[pr]]
        if gap >= full[c] - FRACTION_EPS and pr_in and rc < rp and start[c] <= t:  # full: pr waits
            rate[pr], why[pr] = rc, K.wait_code[eng[c]]


@nb.njit(**_PHASE)
def solve_rates(C, S, R, W, F, K, t, n_run, n_rs, n_link, stamp, capacity):
    """Every running op's rate (``W.rate``, reason ``W.why``) and each stream's inflow (``W.share``): a
    fixed point on the stream caps, as a full buffer fetches only as fast as it is drained; False where
    water-filling finds a flow with neither a cap nor a resource."""
    sidx, sbr = C.sidx, C.sbr
    rate, rs, share, lvl = W.rate, W.rs, W.share, W.lvl
    fcaps, scap_si, scap_c, nscap_c = F.fcaps, F.scap_si, F.scap_c, F.nscap_c
    nx, ns = flows(C, R, W, F, n_run)
    for _ in range(12):
        for j in range(ns):
            fcaps[nx + j] = scap_c[j]
        if not waterfill(F, capacity, nx + ns):
            return False
        for si in range(share.shape[0]):
            share[si] = 0.0
        for j in range(ns):
            share[scap_si[j]] = F.got[nx + j]
        limit_rates(C, S, W, K, t, n_run, n_link, stamp, F.got)
        stable = True
        for j in range(ns):
            si = scap_si[j]
            c = R.s_bpc[si]
            if lvl[si] >= R.s_capb[si] - BYTES_EPS:  # a full buffer fetches as fast as it is drained
                c = 0.0
                for a in range(n_rs):
                    q = rs[a]
                    if sidx[q] == si:
                        c += rate[q] * sbr[q]
            nscap_c[j] = c
            if c != scap_c[j]:
                stable = False
        for j in range(ns):
            scap_c[j] = nscap_c[j]
        if stable:
            break
    return True


@nb.njit(**_PHASE)
def horizon(C, S, W, R, t, dt, k, blocker, next_issue, n_run, n_rs, n_link, fetching, stamp):
    """The first smallest non-negative time to the next event after the survey's candidate ``dt``."""
    n = C.eng.shape[0]
    sidx, sbr, full = C.sidx, C.sbr, C.full
    frac, fetched, start = S.frac, S.fetched, S.start
    running, rs, rate, rmark, share, tg, lvl = W.running, W.rs, W.rate, W.rmark, W.share, W.tg, W.lvl
    if k < n and blocker < 0 and next_issue > t + FRACTION_EPS:
        c = next_issue - t
        if c >= 0 and c < dt:
            dt = c
    for j in range(n_run):
        p = running[j]
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
        for si in range(tg.shape[0]):
            p = tg[si]
            f = share[si]
            if p < 0 or not f > 0:
                continue
            c = (sbr[p] - fetched[p]) / f
            if c >= 0 and c < dt:
                dt = c
            cons = 0.0
            for a in range(n_rs):
                q = rs[a]
                if sidx[q] == si:
                    cons += rate[q] * sbr[q]
            room = R.s_capb[si] - lvl[si]
            if f > cons * (1 + 1e-12) and room > BYTES_EPS:
                c = room / (f - cons)
                if c >= 0 and c < dt:
                    dt = c
    for j in range(n_link):
        pr, c = W.lk_pr[j], W.lk_c[j]
        gap = frac[pr] - frac[c]
        rc = rate[c] if rmark[c] == stamp else 0.0
        rp = rate[pr] if rmark[pr] == stamp else 0.0
        if rc > rp and gap > FRACTION_EPS:
            d = gap / (rc - rp)
            if d >= 0 and d < dt:
                dt = d
        if rp > rc and full[c] - gap > FRACTION_EPS and start[c] <= t:
            d = (full[c] - gap) / (rp - rc)
            if d >= 0 and d < dt:
                dt = d
    return dt


@nb.njit(**_PHASE)
def advance(C, S, R, W, O, t, dt, n_run, n_rs, fetching, res_bytes, n_usage, n_level, last_usage):
    """Progress, fetched bytes, resource bytes and the samples over [t, t+dt); returns the sample counts,
    the last usage sample and whether a sample buffer overflowed."""
    xfer, plen, path, sidx, sbr = C.xfer, C.plen, C.path, C.sidx, C.sbr
    frac, prog_end, fetched = S.frac, S.prog_end, S.fetched
    running, rs, rate, used, tg, share = W.running, W.rs, W.rate, W.used, W.tg, W.share
    u_t, u_v, l_t, l_v = O.u_t, O.u_v, O.l_t, O.l_v
    nres, nstr = used.shape[0], tg.shape[0]
    for r in range(nres):
        used[r] = 0.0
    for j in range(n_run):
        p = running[j]
        r = rate[p]
        f = frac[p] + r * dt
        if not f < 1.0:
            f = 1.0
        if f >= 1 - FRACTION_EPS:
            frac[p], prog_end[p] = 1.0, t + dt
        else:
            frac[p] = f
        if xfer[p] > 0:
            for a in range(plen[p]):
                used[path[p, a]] += r * xfer[p]
    if fetching:
        for si in range(nstr):
            p = tg[si]
            if p < 0:
                continue
            f = share[si]
            if f > 0:
                if t < S.fetch_t0[p]:
                    S.fetch_t0[p] = t
                R.fmoved[si] = True
                x = fetched[p] + f * dt
                g = (x if x < sbr[p] else sbr[p]) - fetched[p]
                fetched[p] += g
                R.s_fetched[si] += g
                for a in range(R.s_plen[si]):
                    used[R.s_path[si, a]] += f
    for r in range(nres):  # (an untouched resource adds 0.0: no change)
        res_bytes[r] += used[r] * dt
    same = last_usage >= 0
    if same:
        for r in range(nres):
            if u_v[last_usage, r] != used[r]:
                same = False
    if not same:
        if n_usage >= u_t.shape[0]:
            return n_usage, n_level, last_usage, True
        u_t[n_usage] = t
        for r in range(nres):
            u_v[n_usage, r] = used[r]
        last_usage = n_usage
        n_usage += 1
    if nstr:
        if n_level >= l_t.shape[0]:
            return n_usage, n_level, last_usage, True
        l_t[n_level] = t
        for si in range(nstr):
            drawn = 0.0
            for j in range(n_rs):
                q = rs[j]
                if sidx[q] == si:
                    drawn += frac[q] * sbr[q]
            l_v[n_level, si] = R.s_fetched[si] - R.s_consumed[si] - drawn
        n_level += 1
    return n_usage, n_level, last_usage, False


@nb.njit(**_PHASE)
def _book(st, first, row, reason, event, dt):
    """Add ``dt`` to stall ``reason`` of ``row``, noting the event that first touched it (key order)."""
    if first[row, reason] < 0:
        first[row, reason] = event
    st[row, reason] += dt


@nb.njit(**_PHASE)
def attribute(C, S, E, W, K, A, dt, blocker, n_run, n_wait, n_block, n_fill, event):
    """Each engine's and op's share of [t, t+dt): busy, idle or a named stall."""
    eng, nominal = C.eng, C.nominal
    end, busy, dptr, dep_len, dep_off, dep_buf = S.end, S.busy, S.dptr, S.dep_len, S.dep_off, S.dep_buf
    cur, q_len = E.cur, E.q_len
    rate, why, base = W.rate, W.why, K.base
    e_busy, e_st, e_first, o_st, o_first = A.e_busy, A.e_st, A.e_first, A.o_st, A.o_first
    for e in range(cur.shape[0]):  # drained engines idle
        if cur[e] < 0 and q_len[e] > 0:
            A.e_idle[e] += dt
    reason = base[0] if blocker >= 0 else base[1]  # sync / issue
    for j in range(n_wait):
        _book(e_st, e_first, W.waiting[j], reason, event, dt)
    for j in range(n_block):
        e = W.blocked[j]
        p = cur[e]
        reason = base[1]
        i, dn, off = dptr[p], dep_len[p], dep_off[p]
        while i < dn and end[dep_buf[off + i]] != _INF:
            i += 1
        dptr[p] = i
        if i < dn:
            reason = K.dep_code[eng[dep_buf[off + i]]]
        _book(e_st, e_first, e, reason, event, dt)
        _book(o_st, o_first, p, reason, event, dt)
    for j in range(n_fill):  # pipeline fill, drain and setup latency count as busy
        p = W.filling[j]
        e_busy[eng[p]] += dt
        busy[p] += dt
    for j in range(n_run):
        p = W.running[j]
        e = eng[p]
        nom = nominal[p]
        fr = 1.0
        if nom > 0:
            fr = rate[p] / nom
            if not fr < 1.0:
                fr = 1.0
        e_busy[e] += dt * fr
        busy[p] += dt * fr
        if fr >= 1 - 1e-9:
            continue
        reason = base[2] if why[p] < 0 else why[p]  # "" → bandwidth
        dt_s = dt * (1 - fr)
        _book(e_st, e_first, e, reason, event, dt_s)
        _book(o_st, o_first, p, reason, event, dt_s)
