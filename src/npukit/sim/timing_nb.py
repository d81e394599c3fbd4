"""The timing event loop compiled with numba: the model, arithmetic and event order of
`npukit.sim.timing_state.Sim` (the readable definition) for machines without token queues, command
queues or engine pools (pccx and tern time every token this way). `npukit.sim.timing_fast` prepares
the columns, calls `run` and builds the `TimingResult`; this module holds only the compiled phases.

Every float operation is the one the Python loop performs, in its order (no fastmath, IEEE division),
so schedules are bit-identical (`tests/sim/test_timing_fast.py` compares both on random machines and
on real pccx tokens). Python's ``min(a, b)`` is written ``b if b < a else a`` (it keeps the first of
equals); its sums start from 0 and add left to right, as CPython 3.11's ``sum`` does. Its rate dicts
hold exactly the running ops, so they become arrays plus a per-event mark; its lists of ops become
index arrays with counts (``cnt``).

State travels in tuples of arrays, unpacked whole at the top of each phase (as the Python phases
unpack their ``b_<phase>`` tuples), and two scalar arrays: ``iv`` (ints, `_K` …) and ``fv`` (floats).
"""

from __future__ import annotations

import numba as nb
import numpy as np

_OPTS = {"cache": True, "error_model": "numpy", "nogil": True}
_EPS = 1e-9  # npukit.sim.timing._EPS and _BEPS (a test checks they agree)
_BEPS = 1e-6
_INF = np.inf

# iv: int scalars
(_K, _BLOCKER, _UNSTARTED, _NDONE, _WIN, _EVENT, _NUSAGE, _NLEVEL, _INFL, _ACT, _DEPN, _STAMP,
 _LAST_USAGE) = range(13)
IV_SIZE = 13
# fv: float scalars
_T, _NEXT_ISSUE, _IC = range(3)
FV_SIZE = 3
# cnt: list lengths of one event
_NRUN, _NRS, _NWAIT, _NBLOCK, _NFILL, _NLINK, _FETCHING = range(7)
# status codes (worded by the Python side)
OK, DEADLOCK, NO_PROGRESS, NO_RATE, FULL = 0, 1, 2, 3, 4


@nb.njit(**_OPTS)
def waterfill(caps, fpath, fplen, nf, capacity, rate):
    """Max-min fair rates (into ``rate[:nf]``) for flows with caps over shared resources; False where
    a flow has neither a cap nor a resource (`npukit.sim.timing._waterfill`, step for step)."""
    nres = capacity.shape[0]
    frozen = np.zeros(nf, np.bool_)
    left = capacity.copy()
    for i in range(nf):
        rate[i] = 0.0
    nfrozen = 0
    while nfrozen < nf:
        level = _INF
        for i in range(nf):
            if not frozen[i]:
                x = caps[i] - rate[i]
                if x < level:
                    level = x
        for r in range(nres):
            users = 0
            for i in range(nf):
                if not frozen[i]:
                    for j in range(fplen[i]):
                        if fpath[i, j] == r:
                            users += 1
                            break
            if users:
                x = left[r] / users
                if x < level:
                    level = x
        if level == _INF or level == -_INF:
            return False
        for i in range(nf):
            if not frozen[i]:
                rate[i] += level
                for j in range(fplen[i]):
                    left[fpath[i, j]] -= level
        for i in range(nf):
            if frozen[i]:
                continue
            stop = rate[i] >= caps[i] * (1 - _EPS)
            if not stop:
                for j in range(fplen[i]):
                    r = fpath[i, j]
                    if left[r] <= capacity[r] * _EPS:
                        stop = True
                        break
            if stop:
                frozen[i] = True
                nfrozen += 1
    return True


@nb.njit(**_OPTS)
def _overlaps(rd, nrd, wr, nwr, q, p):
    """RAW/WAW: q's writes against p's reads and writes; WAR: q's reads against p's writes."""
    for a in range(nwr[q]):
        x0, x1 = wr[q, a, 0], wr[q, a, 1]
        for b in range(nrd[p]):
            if x0 < rd[p, b, 1] and rd[p, b, 0] < x1:
                return True
        for b in range(nwr[p]):
            if x0 < wr[p, b, 1] and wr[p, b, 0] < x1:
                return True
    for a in range(nrd[q]):
        x0, x1 = rd[q, a, 0], rd[q, a, 1]
        for b in range(nwr[p]):
            if x0 < wr[p, b, 1] and wr[p, b, 0] < x1:
                return True
    return False


@nb.njit(**_OPTS)
def _issue(C, S, iv, fv):
    """Issue ops in program order while the issuer is free, the window has room and it is time; an
    op's hazards are the ops in flight (program order) whose ranges meet its own."""
    (eng, cap, lat, tail, xfer, xcap, xlow, nominal, path, plen, sidx, sbr, sb, fifo, link, full, isasync,
     haswork, rd, nrd, wr, nwr) = C
    (issue, start, end, frac, prog_end, fetched, fetch_t0, fetch_t1, busy, dep_off, dep_len, dptr, dep_buf,
     infl, act) = S
    n = eng.shape[0]
    t = fv[_T]
    while (iv[_K] < n and iv[_BLOCKER] < 0 and iv[_UNSTARTED] < iv[_WIN]
           and t >= fv[_NEXT_ISSUE] - _EPS):
        p = iv[_K]
        issue[p] = t
        fv[_NEXT_ISSUE] = t + fv[_IC]
        if not isasync[p]:
            iv[_BLOCKER] = p
        iv[_K] += 1
        iv[_UNSTARTED] += 1
        if nrd[p] or nwr[p]:
            m = 0  # the in-flight list is compacted (finished ops leave it) while it is scanned
            dep_off[p] = iv[_DEPN]
            for j in range(iv[_INFL]):
                q = infl[j]
                if end[q] != _INF:
                    continue
                infl[m] = q
                m += 1
                if _overlaps(rd, nrd, wr, nwr, q, p) and not (q == fifo[p] and isasync[q]):
                    if iv[_DEPN] >= dep_buf.shape[0]:
                        return False
                    dep_buf[iv[_DEPN]] = q
                    iv[_DEPN] += 1
            iv[_INFL] = m
            dep_len[p] = iv[_DEPN] - dep_off[p]
        infl[iv[_INFL]] = p
        iv[_INFL] += 1
        if link[p] >= 0:
            act[iv[_ACT]] = p
            iv[_ACT] += 1
    return True


@nb.njit(**_OPTS)
def _first_hazard(S, p):
    """Skip p's hazards that have finished; True while one is left (it blocks p)."""
    (issue, start, end, frac, prog_end, fetched, fetch_t0, fetch_t1, busy, dep_off, dep_len, dptr, dep_buf,
     infl, act) = S
    i, dn, off = dptr[p], dep_len[p], dep_off[p]
    while i < dn and end[dep_buf[off + i]] != _INF:
        i += 1
    dptr[p] = i
    return i < dn


@nb.njit(**_OPTS)
def _settle(C, S, E, R, iv, fv):
    """Issue, start and complete at t until nothing changes (the Python `_settle` without tokens and
    pools), then note the prefetches that completed. Returns False where a buffer is too small."""
    (eng, cap, lat, tail, xfer, xcap, xlow, nominal, path, plen, sidx, sbr, sb, fifo, link, full, isasync,
     haswork, rd, nrd, wr, nwr) = C
    (issue, start, end, frac, prog_end, fetched, fetch_t0, fetch_t1, busy, dep_off, dep_len, dptr, dep_buf,
     infl, act) = S
    q_ops, q_off, q_len, head, cur = E
    s_ops, s_off, s_len, s_cur, s_next, s_prev, s_fetched, s_consumed, s_capb, s_bpc, s_path, s_plen, \
        fmoved = R
    n, ne = eng.shape[0], cur.shape[0]
    t = fv[_T]
    changed = True
    while changed:
        if (iv[_K] < n and iv[_BLOCKER] < 0 and iv[_UNSTARTED] < iv[_WIN] and t >= fv[_NEXT_ISSUE] - _EPS
                and not _issue(C, S, iv, fv)):
            return False
        k = iv[_K]
        done_any = started_any = blocked_any = False
        for e in range(ne):
            p = cur[e]
            if p < 0:
                continue
            while p < k:
                if start[p] == _INF:
                    if _first_hazard(S, p):
                        blocked_any = True
                        break
                    start[p] = t
                    iv[_UNSTARTED] -= 1
                    started_any = True
                elif frac[p] < 1 - _EPS and haswork[p]:
                    break
                if t < start[p] + lat[p] - _EPS:
                    break
                if frac[p] < 1 - _EPS:
                    if haswork[p]:
                        break
                    frac[p], prog_end[p] = 1.0, t
                if not t >= prog_end[p] + tail[p] - _EPS:
                    break
                end[p], frac[p] = t, 1.0
                iv[_NDONE] += 1
                if sidx[p] >= 0:
                    s_consumed[sidx[p]] += sb[p]
                if iv[_BLOCKER] == p:
                    iv[_BLOCKER] = -1
                    fv[_NEXT_ISSUE] = t + fv[_IC]
                done_any = True
                h = head[e] = head[e] + 1
                if h >= q_len[e]:
                    cur[e] = -1
                    break
                p = cur[e] = q_ops[q_off[e] + h]
        changed = (done_any and blocked_any) or ((done_any or started_any) and iv[_K] < n
                                                 and iv[_BLOCKER] < 0 and iv[_UNSTARTED] < iv[_WIN]
                                                 and t >= fv[_NEXT_ISSUE] - _EPS)
    for si in range(s_cur.shape[0]):  # prefetches whose bytes have all arrived
        if not fmoved[si]:
            continue
        fmoved[si] = False
        i, ln, off = s_cur[si], s_len[si], s_off[si]
        while i < ln and fetched[s_ops[off + i]] >= sb[s_ops[off + i]] - _BEPS:
            p = s_ops[off + i]
            s_fetched[si] += sb[p] - fetched[p]
            fetched[p] = sb[p]
            if t < fetch_t1[p]:
                fetch_t1[p] = t
            if t < fetch_t0[p]:
                fetch_t0[p] = t
            i += 1
            s_cur[si] = i
            s_next[si] = s_ops[off + i] if i < ln else -1
            s_prev[si] = p
    return True


@nb.njit(**_OPTS)
def _drawn(W, cnt, C, S, si, use_rate):
    """Bytes drawn so far (``use_rate`` False) or bytes per cycle drawn now (True) from stream ``si``
    by the running stream ops: Python's sum() over them (0 for none)."""
    running, rs, waiting, blocked, filling, lk_pr, lk_c, tg, lvl, rate, why, rmark, share, used = W
    sidx, sbr = C[10], C[11]
    frac = S[3]
    acc = 0.0
    for j in range(cnt[_NRS]):
        p = rs[j]
        if sidx[p] == si:
            acc += (rate[p] if use_rate else frac[p]) * sbr[p]
    return acc


@nb.njit(**_OPTS)
def _survey(C, S, E, R, W, cnt, iv, fv):
    """Classify each engine's head (running, setting up or draining, blocked, not issued), collect the
    FIFO couplings, what each stream fetches for and its level; returns the first event candidate."""
    (eng, cap, lat, tail, xfer, xcap, xlow, nominal, path, plen, sidx, sbr, sb, fifo, link, full, isasync,
     haswork, rd, nrd, wr, nwr) = C
    (issue, start, end, frac, prog_end, fetched, fetch_t0, fetch_t1, busy, dep_off, dep_len, dptr, dep_buf,
     infl, act) = S
    q_ops, q_off, q_len, head, cur = E
    s_ops, s_off, s_len, s_cur, s_next, s_prev, s_fetched, s_consumed, s_capb, s_bpc, s_path, s_plen, \
        fmoved = R
    running, rs, waiting, blocked, filling, lk_pr, lk_c, tg, lvl, rate, why, rmark, share, used = W
    t, k = fv[_T], iv[_K]
    for j in range(cnt.shape[0]):
        cnt[j] = 0
    iv[_STAMP] += 1
    stamp = iv[_STAMP]
    dt = _INF
    for e in range(cur.shape[0]):
        p = cur[e]
        if p < 0:
            continue
        if p >= k:
            waiting[cnt[_NWAIT]] = e
            cnt[_NWAIT] += 1
            continue
        s0 = start[p]
        if s0 == _INF:
            blocked[cnt[_NBLOCK]] = e
            cnt[_NBLOCK] += 1
            continue
        lat_end = s0 + lat[p]
        if lat_end > t + _EPS:
            c = lat_end - t
            if c < dt:
                dt = c
            filling[cnt[_NFILL]] = p
            cnt[_NFILL] += 1
        elif s0 <= t and frac[p] < 1:
            running[cnt[_NRUN]] = p
            cnt[_NRUN] += 1
            rmark[p] = stamp
            if sidx[p] >= 0:
                rs[cnt[_NRS]] = p
                cnt[_NRS] += 1
        else:
            filling[cnt[_NFILL]] = p
            cnt[_NFILL] += 1
        tail_end = prog_end[p] + tail[p]
        if t + _EPS < tail_end < _INF:
            c = tail_end - t
            if c < dt:
                dt = c
    m = 0
    for j in range(iv[_ACT]):  # consumers with a FIFO producer: coupled while both run
        c = act[j]
        if end[c] != _INF:
            continue
        act[m] = c
        m += 1
        pr = link[c]
        if end[pr] == _INF:
            lk_pr[cnt[_NLINK]], lk_c[cnt[_NLINK]] = pr, c
            cnt[_NLINK] += 1
    iv[_ACT] = m
    for si in range(tg.shape[0]):
        tg[si] = -1
        lvl[si] = 0.0
        p = s_next[si]  # fetched once issued and the stream's previous op has started
        if 0 <= p < k and start[s_prev[si]] <= t:
            tg[si] = p
            cnt[_FETCHING] = 1
            lvl[si] = s_fetched[si] - s_consumed[si] - _drawn(W, cnt, C, S, si, False)
    return dt


@nb.njit(**_OPTS)
def _share_rates(C, W, cnt, got):
    """Each running op's rate from its water-filled share (``got``, in the order of the running ops that
    transfer): min(engine rate, share / bytes), "bandwidth" (code -2) where the share binds."""
    cap, xfer, xlow = C[1], C[4], C[6]
    running, rs, waiting, blocked, filling, lk_pr, lk_c, tg, lvl, rate, why, rmark, share, used = W
    i = 0
    for j in range(cnt[_NRUN]):
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


@nb.njit(**_OPTS)
def _rates(C, S, R, W, F, K, cnt, capacity, t, stamp):
    """Progress rates (into ``rate``/``why``) and each stream's inflow (``share``): water-filling, then
    stream arrival and FIFO coupling, iterated until the stream caps repeat (the Python `_rates`)."""
    (eng, cap, lat, tail, xfer, xcap, xlow, nominal, path, plen, sidx, sbr, sb, fifo, link, full, isasync,
     haswork, rd, nrd, wr, nwr) = C
    start, frac, fetched = S[1], S[3], S[5]
    s_ops, s_off, s_len, s_cur, s_next, s_prev, s_fetched, s_consumed, s_capb, s_bpc, s_path, s_plen, \
        fmoved = R
    running, rs, waiting, blocked, filling, lk_pr, lk_c, tg, lvl, rate, why, rmark, share, used = W
    fcaps, fpath, fplen, got, scap_si, scap_c, nscap_c = F
    s_why, dep_code, wait_code, base = K
    ns = 0
    for si in range(tg.shape[0]):
        if tg[si] >= 0:
            scap_si[ns], scap_c[ns] = si, s_bpc[si]
            ns += 1
    nx = 0
    for j in range(cnt[_NRUN]):
        p = running[j]
        if xfer[p] > 0:
            fcaps[nx] = xcap[p]
            fplen[nx] = plen[p]
            for a in range(plen[p]):
                fpath[nx, a] = path[p, a]
            nx += 1
    for j in range(ns):
        fplen[nx + j] = s_plen[scap_si[j]]
        for a in range(s_plen[scap_si[j]]):
            fpath[nx + j, a] = s_path[scap_si[j], a]
    nl = cnt[_NLINK]
    for _ in range(12):
        for j in range(ns):
            fcaps[nx + j] = scap_c[j]
        if not waterfill(fcaps, fpath, fplen, nx + ns, capacity, got):
            return False
        for si in range(share.shape[0]):
            share[si] = 0.0
        for j in range(ns):
            share[scap_si[j]] = got[nx + j]
        _share_rates(C, W, cnt, got)
        for j in range(cnt[_NRUN]):  # weights must have arrived
            p = running[j]
            if not (sbr[p] > 0 and sidx[p] >= 0):
                continue
            b = sbr[p]
            avail = fetched[p] - frac[p] * b
            if avail <= _BEPS and fetched[p] < b - _BEPS:
                si = sidx[p]
                inflow = share[si] if tg[si] == p else 0.0
                lim = inflow / b
                if lim < rate[p]:
                    rate[p], why[p] = lim, s_why[si]
        for jj in range(2 * nl):  # the FIFO couplings, forward then backward
            j = jj if jj < nl else 2 * nl - 1 - jj
            pr, c = lk_pr[j], lk_c[j]
            gap = frac[pr] - frac[c]
            c_in, pr_in = rmark[c] == stamp, rmark[pr] == stamp
            rc = rate[c] if c_in else 0.0
            rp = rate[pr] if pr_in else 0.0
            if gap <= _EPS and c_in and rp < rc:  # FIFO empty: the consumer follows
                rate[c], why[c] = rp, wait_code[eng[pr]]
            if gap >= full[c] - _EPS and pr_in and rc < rp and start[c] <= t:  # full: the producer waits
                rate[pr], why[pr] = rc, wait_code[eng[c]]
        stable = True
        for j in range(ns):
            si = scap_si[j]
            c = s_bpc[si]
            if lvl[si] >= s_capb[si] - _BEPS:
                c = _drawn(W, cnt, C, S, si, True)
            nscap_c[j] = c
            if c != scap_c[j]:
                stable = False
        for j in range(ns):
            scap_c[j] = nscap_c[j]
        if stable:
            break
    return True


@nb.njit(**_OPTS)
def _horizon(C, S, R, W, cnt, iv, fv, dt):
    """The time to the next event: the first smallest non-negative candidate after ``dt``, as min()
    over them all would pick (an op or a prefetch finishing, a buffer filling or draining, a FIFO
    emptying or filling, the issuer going on)."""
    (eng, cap, lat, tail, xfer, xcap, xlow, nominal, path, plen, sidx, sbr, sb, fifo, link, full, isasync,
     haswork, rd, nrd, wr, nwr) = C
    start, frac, fetched = S[1], S[3], S[5]
    s_capb = R[8]
    running, rs, waiting, blocked, filling, lk_pr, lk_c, tg, lvl, rate, why, rmark, share, used = W
    t, stamp = fv[_T], iv[_STAMP]
    if iv[_K] < eng.shape[0] and iv[_BLOCKER] < 0 and fv[_NEXT_ISSUE] > t + _EPS:
        c = fv[_NEXT_ISSUE] - t
        if c >= 0 and c < dt:
            dt = c
    for j in range(cnt[_NRUN]):
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
                if out > inflow * (1 + 1e-12) and avail > _BEPS:
                    c = avail / (out - inflow)
                    if c >= 0 and c < dt:
                        dt = c
    if cnt[_FETCHING]:
        for si in range(tg.shape[0]):
            p = tg[si]
            f = share[si]
            if p < 0 or not f > 0:
                continue
            c = (sbr[p] - fetched[p]) / f
            if c >= 0 and c < dt:
                dt = c
            cons = _drawn(W, cnt, C, S, si, True)
            room = s_capb[si] - lvl[si]
            if f > cons * (1 + 1e-12) and room > _BEPS:
                c = room / (f - cons)
                if c >= 0 and c < dt:
                    dt = c
    for j in range(cnt[_NLINK]):
        pr, c = lk_pr[j], lk_c[j]
        gap = frac[pr] - frac[c]
        rc = rate[c] if rmark[c] == stamp else 0.0
        rp = rate[pr] if rmark[pr] == stamp else 0.0
        if rc > rp and gap > _EPS:
            d = gap / (rc - rp)
            if d >= 0 and d < dt:
                dt = d
        if rp > rc and full[c] - gap > _EPS and start[c] <= t:
            d = (full[c] - gap) / (rp - rc)
            if d >= 0 and d < dt:
                dt = d
    return dt


@nb.njit(**_OPTS)
def _advance(C, S, R, W, O, cnt, iv, fv, dt, res_bytes):
    """Progress, fetched bytes, resource bytes and the usage / buffer-level samples over [t, t+dt);
    False where a sample buffer is full."""
    (eng, cap, lat, tail, xfer, xcap, xlow, nominal, path, plen, sidx, sbr, sb, fifo, link, full, isasync,
     haswork, rd, nrd, wr, nwr) = C
    frac, prog_end, fetched, fetch_t0 = S[3], S[4], S[5], S[6]
    s_ops, s_off, s_len, s_cur, s_next, s_prev, s_fetched, s_consumed, s_capb, s_bpc, s_path, s_plen, \
        fmoved = R
    running, rs, waiting, blocked, filling, lk_pr, lk_c, tg, lvl, rate, why, rmark, share, used = W
    u_t, u_v, l_t, l_v = O
    t, nres, nstr = fv[_T], used.shape[0], tg.shape[0]
    for ri in range(nres):
        used[ri] = 0.0
    for j in range(cnt[_NRUN]):
        p = running[j]
        r = rate[p]
        f = frac[p] + r * dt
        if not f < 1.0:
            f = 1.0
        if f >= 1 - _EPS:
            frac[p], prog_end[p] = 1.0, t + dt
        else:
            frac[p] = f
        if xfer[p] > 0:
            for a in range(plen[p]):
                used[path[p, a]] += r * xfer[p]
    if cnt[_FETCHING]:
        for si in range(nstr):
            p = tg[si]
            if p < 0:
                continue
            f = share[si]
            if f > 0:
                if t < fetch_t0[p]:
                    fetch_t0[p] = t
                fmoved[si] = True
                x = fetched[p] + f * dt
                got = (x if x < sbr[p] else sbr[p]) - fetched[p]
                fetched[p] += got
                s_fetched[si] += got
                for a in range(s_plen[si]):
                    used[s_path[si, a]] += f
    for ri in range(nres):  # (an untouched resource adds 0.0: no change)
        res_bytes[ri] += used[ri] * dt
    last = iv[_LAST_USAGE]
    same = last >= 0
    if same:
        for ri in range(nres):
            if u_v[last, ri] != used[ri]:
                same = False
                break
    if not same:
        j = iv[_NUSAGE]
        if j >= u_t.shape[0]:
            return False
        u_t[j] = t
        for ri in range(nres):
            u_v[j, ri] = used[ri]
        iv[_NUSAGE] = j + 1
        iv[_LAST_USAGE] = j
    if nstr:
        j = iv[_NLEVEL]
        if j >= l_t.shape[0]:
            return False
        l_t[j] = t
        for si in range(nstr):
            l_v[j, si] = s_fetched[si] - s_consumed[si] - _drawn(W, cnt, C, S, si, False)
        iv[_NLEVEL] = j + 1
    return True


@nb.njit(**_OPTS)
def _stall(st, first, row, reason, amount, event):
    """st[row, reason] += amount, noting the event that first touched it (the dicts' key order)."""
    if first[row, reason] < 0:
        first[row, reason] = event
    st[row, reason] += amount


@nb.njit(**_OPTS)
def _attribute(C, S, E, W, K, A, cnt, iv, dt):
    """Each engine's and op's share of [t, t+dt): busy, idle, or a named stall."""
    eng, nominal = C[0], C[7]
    busy = S[8]
    q_ops, q_off, q_len, head, cur = E
    running, rs, waiting, blocked, filling, lk_pr, lk_c, tg, lvl, rate, why, rmark, share, used = W
    s_why, dep_code, wait_code, base = K
    e_busy, e_idle, e_st, e_first, o_st, o_first = A
    dep_buf, dep_off, dptr = S[12], S[9], S[11]
    ev = iv[_EVENT]
    for e in range(cur.shape[0]):  # drained engines idle
        if cur[e] < 0 and q_len[e] > 0:
            e_idle[e] += dt
    reason = base[0] if iv[_BLOCKER] >= 0 else base[1]  # sync / issue
    for j in range(cnt[_NWAIT]):
        _stall(e_st, e_first, waiting[j], reason, dt, ev)
    for j in range(cnt[_NBLOCK]):
        e = blocked[j]
        p = cur[e]
        reason = base[1]
        if _first_hazard(S, p):
            reason = dep_code[eng[dep_buf[dep_off[p] + dptr[p]]]]
        _stall(e_st, e_first, e, reason, dt, ev)
        _stall(o_st, o_first, p, reason, dt, ev)
    for j in range(cnt[_NFILL]):  # pipeline fill, drain and setup latency count as busy
        p = filling[j]
        e_busy[eng[p]] += dt
        busy[p] += dt
    for j in range(cnt[_NRUN]):
        p = running[j]
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
        w = why[p]
        reason = base[2] if w < 0 else w  # "" → bandwidth
        dt_s = dt * (1 - fr)
        _stall(e_st, e_first, e, reason, dt_s, ev)
        _stall(o_st, o_first, p, reason, dt_s, ev)


@nb.njit(**_OPTS)
def run(C, S, E, R, W, F, K, A, O, iv, fv, cnt, capacity, res_bytes):
    """The event loop: settle at t, survey, solve the rates, the horizon, advance and attribute; returns
    a status (OK, or the failure the Python side words) with t in ``fv[_T]``."""
    n = C[0].shape[0]
    stuck = 0
    while iv[_NDONE] < n:
        if not _settle(C, S, E, R, iv, fv):
            return FULL
        if iv[_NDONE] >= n:
            break
        dt = _survey(C, S, E, R, W, cnt, iv, fv)
        if not _rates(C, S, R, W, F, K, cnt, capacity, fv[_T], iv[_STAMP]):
            return NO_RATE
        dt = _horizon(C, S, R, W, cnt, iv, fv, dt)
        if dt == _INF:
            return DEADLOCK
        stuck = stuck + 1 if dt <= 0 else 0
        if stuck > 10 * n + 100:
            return NO_PROGRESS
        if dt <= 0:
            continue
        if not _advance(C, S, R, W, O, cnt, iv, fv, dt, res_bytes):
            return FULL
        _attribute(C, S, E, W, K, A, cnt, iv, dt)
        iv[_EVENT] += 1
        fv[_T] += dt
    return OK
