"""The timing event loop compiled with numba: the model, arithmetic and event order of
`npukit.sim.timing_state.Sim` (the readable definition) for machines without token queues, command
queues or engine pools (pccx and tern time every token this way). `npukit.sim.timing_fast` prepares
the columns, calls `run` and builds the `TimingResult`; this module holds only the compiled loop.

Every float operation is the one the Python loop performs, in its order (no fastmath, IEEE division),
so schedules are bit-identical (`tests/sim/test_timing_fast.py` compares both on random machines and
on real pccx tokens). Python's ``min(a, b)`` is written ``b if b < a else a`` (it keeps the first of
equals); its sums start from 0 and add left to right, as CPython 3.11's ``sum`` does. Its rate dicts
hold exactly the running ops, so they become arrays plus a per-event mark (``rmark == stamp``); its
lists of ops become index arrays with counts.

Why one long function: numba reference-counts every array a call passes, a tuple unpack binds or a
record field read yields (perf: NRT_incref / NRT_decref); split by phase into inlined functions, a
2,095-op decode token took 26.3 ms instead of 1.1 ms (commit "experiment: the compiled loop split by
phase", reverted). Every array is bound once, by name, before the loop; the loop body calls nothing
that takes an array. Its sections carry the Python phases' names (`timing_phases`): settle (issue,
heads, prefetches), survey, rates (water-filling, stream arrival, FIFO coupling), horizon, advance,
attribute. A run can pause before issuing a given op and resume from there (`timing_job.Job`).
"""

from __future__ import annotations

from collections import namedtuple

import numba as nb
import numpy as np

from npukit.sim import compile_report
from npukit.sim.timing_types import BYTES_EPS, FRACTION_EPS  # compile-time constants to numba

compile_report.install()  # first-run compiles are announced, never silent

_OPTS = {"cache": True, "error_model": "numpy", "nogil": True}
_INF = np.inf

# iv (ints in/out): the issue window, lean (1: times only), the op to pause before issuing (-1: none)
# and resume (1: from the scalars saved at a pause, IV_SAVE on) in, the counts of samples out
IV_WIN, IV_NUSAGE, IV_NLEVEL, IV_LEAN, IV_PAUSE, IV_RESUME, IV_SAVE, IV_SIZE = 0, 1, 2, 3, 4, 5, 6, 6 + 13
# fv (floats in/out): issue cycles in, t out, next issue and t saved at a pause
FV_IC, FV_T, FV_SAVE, FV_SIZE = 0, 1, 2, 4
# status codes (worded by the Python side; PAUSED: stopped before issuing op iv[IV_PAUSE])
OK, DEADLOCK, NO_PROGRESS, NO_RATE, FULL, PAUSED = 0, 1, 2, 3, 4, 5

# The loop's arrays, grouped in named records (numba compiles a namedtuple's fields to static offsets:
# `timing_fast` builds them by keyword, `run` reads them by name, so a field's place never matters).
# per op, static: engine ordinal, rate cap, latency, tail, transfer bytes and cap, bandwidth-bound
# threshold, nominal rate, resource path (padded) and its length, stream ordinal, stream bytes as given
# and as drawn, FIFO producer as given and as linked, FIFO fullness, async, has work, read/write ranges
OpTable = namedtuple("OpTable", "eng cap lat tail xfer xcap xlow nominal path plen sidx sbr sb fifo link "
                     "full isasync haswork rd nrd wr nwr")
# per op, as the run goes: times, progress, prefetch, busy; the hazards found at issue (offsets into
# dep_buf, counts, how many have finished); the in-flight list and the active FIFO consumers
OpRun = namedtuple("OpRun", "issue start end frac prog_end fetched fetch_t0 fetch_t1 busy dep_off dep_len "
                   "dptr dep_buf infl act")
# per engine: its ops (q_ops[q_off[e]:q_off[e] + q_len[e]]), its head index and head op
EngineQueues = namedtuple("EngineQueues", "q_ops q_off q_len head cur")
# per stream: its ops (as the engines'), the op fetched for, the one before it, bytes fetched and
# consumed, buffer capacity, rate, path, whether its bytes moved in the last interval
StreamTable = namedtuple("StreamTable", "s_ops s_off s_len s_cur s_next s_prev s_fetched s_consumed s_capb "
                         "s_bpc s_path s_plen fmoved")
# one event's survey and rates: the head lists, FIFO pairs, stream targets and levels, per-op rate,
# its limiting reason and the event stamp marking the running ops, stream inflows, resource use
EventScratch = namedtuple("EventScratch", "running rs waiting blocked filling lk_pr lk_c tg lvl rate why "
                          "rmark share used")
# water-filling's flows (caps, paths) and state, the stream caps of the rate fixed point
FlowScratch = namedtuple("FlowScratch", "fcaps fpath fplen got scap_si scap_c nscap_c frozen left users")
# stall-name codes: per stream, per engine (dep_, wait_), and sync / issue / bandwidth
ReasonCodes = namedtuple("ReasonCodes", "s_why dep_code wait_code base")
# busy / idle / stall sums per engine and op, with the event that first touched each stall (key order)
Accounts = namedtuple("Accounts", "e_busy e_idle e_st e_first o_st o_first")
# usage samples (t, bytes/cycle per resource) and buffer-level samples (t, bytes per stream)
Samples = namedtuple("Samples", "u_t u_v l_t l_v")


@nb.njit(**_OPTS)
def run(C, S, E, R, W, F, K, A, O, iv, fv, capacity, res_bytes):
    """The event loop over the records `timing_fast._run` builds (C: `OpTable`, S: `OpRun`, E:
    `EngineQueues`, R: `StreamTable`, W: `EventScratch`, F: `FlowScratch`, K: `ReasonCodes`, A: `Accounts`,
    O: `Samples`); returns a status, t in ``fv[FV_T]``."""
    eng, cap, lat, tail, xfer, xcap, xlow = C.eng, C.cap, C.lat, C.tail, C.xfer, C.xcap, C.xlow
    nominal, path, plen, sidx, sbr, sb = C.nominal, C.path, C.plen, C.sidx, C.sbr, C.sb
    fifo, link, full, isasync, haswork = C.fifo, C.link, C.full, C.isasync, C.haswork
    rd, nrd, wr, nwr = C.rd, C.nrd, C.wr, C.nwr
    issue, start, end, frac, prog_end, busy = S.issue, S.start, S.end, S.frac, S.prog_end, S.busy
    fetched, fetch_t0, fetch_t1 = S.fetched, S.fetch_t0, S.fetch_t1
    dep_off, dep_len, dptr, dep_buf, infl, act = S.dep_off, S.dep_len, S.dptr, S.dep_buf, S.infl, S.act
    q_ops, q_off, q_len, head, cur = E.q_ops, E.q_off, E.q_len, E.head, E.cur
    s_ops, s_off, s_len, s_cur, s_next, s_prev = R.s_ops, R.s_off, R.s_len, R.s_cur, R.s_next, R.s_prev
    s_fetched, s_consumed, s_capb, s_bpc = R.s_fetched, R.s_consumed, R.s_capb, R.s_bpc
    s_path, s_plen, fmoved = R.s_path, R.s_plen, R.fmoved
    running, rs, waiting, blocked, filling = W.running, W.rs, W.waiting, W.blocked, W.filling
    lk_pr, lk_c, tg, lvl, rate, why, rmark, share, used = W.lk_pr, W.lk_c, W.tg, W.lvl, W.rate, W.why, \
        W.rmark, W.share, W.used
    fcaps, fpath, fplen, got = F.fcaps, F.fpath, F.fplen, F.got
    frozen, left, users = F.frozen, F.left, F.users
    scap_si, scap_c, nscap_c = F.scap_si, F.scap_c, F.nscap_c
    s_why, dep_code, wait_code, base = K.s_why, K.dep_code, K.wait_code, K.base
    e_busy, e_idle, e_st, e_first, o_st, o_first = A.e_busy, A.e_idle, A.e_st, A.e_first, A.o_st, A.o_first
    u_t, u_v, l_t, l_v = O.u_t, O.u_v, O.l_t, O.l_v
    n, ne, nstr, nres = eng.shape[0], cur.shape[0], tg.shape[0], capacity.shape[0]
    win, ic = iv[IV_WIN], fv[FV_IC]
    lean = iv[IV_LEAN] != 0  # times only: no resource bytes, samples, busy or stall sums
    k, blocker, unstarted, n_done, next_issue, n_infl, n_act, n_dep = 0, -1, 0, 0, 0.0, 0, 0, 0
    stamp = event = n_usage = n_level = 0
    last_usage, t, stuck = -1, 0.0, 0
    status, pause, sv = OK, iv[IV_PAUSE], IV_SAVE
    if iv[IV_RESUME] != 0:  # the state arrays hold a paused run's: its scalars back (saved below)
        k, blocker, unstarted, n_done, n_infl, n_act, n_dep = iv[sv:sv + 7]
        stamp, event, n_usage, n_level, last_usage, stuck = iv[sv + 7:sv + 13]
        next_issue, t = fv[FV_SAVE], fv[FV_SAVE + 1]
    while n_done < n:
        # ---- settle: issue, start and complete at t until nothing changes ---------------------------
        changed = True
        while changed:
            while k < n and blocker < 0 and unstarted < win and t >= next_issue - FRACTION_EPS:  # issue
                p = k
                if p == pause:  # (re-entered here on resume, the same state takes the same path)
                    iv[sv:sv + 7] = k, blocker, unstarted, n_done, n_infl, n_act, n_dep
                    iv[sv + 7:sv + 13] = stamp, event, n_usage, n_level, last_usage, stuck
                    fv[FV_SAVE], fv[FV_SAVE + 1] = next_issue, t
                    return PAUSED
                issue[p] = t
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
                        for a in range(nwr[q]):  # (the first meeting pair decides: no float involved)
                            x0, x1 = wr[q, a, 0], wr[q, a, 1]
                            for b in range(nrd[p]):
                                if x0 < rd[p, b, 1] and rd[p, b, 0] < x1:
                                    hit = True
                                    break
                            for b in range(0 if hit else nwr[p]):
                                if x0 < wr[p, b, 1] and wr[p, b, 0] < x1:
                                    hit = True
                                    break
                            if hit:
                                break
                        for a in range(0 if hit else nrd[q]):
                            x0, x1 = rd[q, a, 0], rd[q, a, 1]
                            for b in range(nwr[p]):
                                if x0 < wr[p, b, 1] and wr[p, b, 0] < x1:
                                    hit = True
                            if hit:
                                break
                        if hit and not (q == fifo[p] and isasync[q]):
                            if n_dep >= dep_buf.shape[0]:
                                return FULL
                            dep_buf[n_dep] = q
                            n_dep += 1
                    n_infl = m
                    dep_len[p] = n_dep - dep_off[p]
                infl[n_infl] = p
                n_infl += 1
                if link[p] >= 0:
                    act[n_act] = p
                    n_act += 1
            done_any = started_any = blocked_any = False
            for e in range(ne):  # each head, and the next one whenever a head completes
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
                        s_consumed[sidx[p]] += sb[p]
                    if blocker == p:
                        blocker, next_issue = -1, t + ic
                    done_any = True
                    h = head[e] = head[e] + 1
                    if h >= q_len[e]:
                        cur[e] = -1
                        break
                    p = cur[e] = q_ops[q_off[e] + h]
            changed = (done_any and blocked_any) or ((done_any or started_any) and k < n and blocker < 0
                                                     and unstarted < win and t >= next_issue - FRACTION_EPS)
        for si in range(nstr):  # prefetches whose bytes have all arrived
            if not fmoved[si]:
                continue
            fmoved[si] = False
            i, ln, off = s_cur[si], s_len[si], s_off[si]
            while i < ln and fetched[s_ops[off + i]] >= sb[s_ops[off + i]] - BYTES_EPS:
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
        if n_done >= n:
            break
        # ---- survey: what each head does, the FIFO couplings, stream targets and levels ----------------
        n_run = n_rs = n_wait = n_block = n_fill = n_link = 0
        fetching = False
        stamp += 1
        dt = _INF
        for e in range(ne):
            p = cur[e]
            if p < 0:
                continue
            if p >= k:
                waiting[n_wait] = e
                n_wait += 1
                continue
            s0 = start[p]
            if s0 == _INF:
                blocked[n_block] = e
                n_block += 1
                continue
            lat_end = s0 + lat[p]
            if lat_end > t + FRACTION_EPS:
                c = lat_end - t
                if c < dt:
                    dt = c
                filling[n_fill] = p
                n_fill += 1
            elif s0 <= t and frac[p] < 1:
                running[n_run] = p
                n_run += 1
                rmark[p] = stamp
                if sidx[p] >= 0:
                    rs[n_rs] = p
                    n_rs += 1
            else:
                filling[n_fill] = p
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
                lk_pr[n_link], lk_c[n_link] = pr, c
                n_link += 1
        n_act = m
        for si in range(nstr):
            tg[si] = -1
            lvl[si] = 0.0
            p = s_next[si]  # fetched once issued and the stream's previous op has started
            if 0 <= p < k and start[s_prev[si]] <= t:
                tg[si] = p
                fetching = True
                drawn = 0.0
                for j in range(n_rs):
                    q = rs[j]
                    if sidx[q] == si:
                        drawn += frac[q] * sbr[q]
                lvl[si] = s_fetched[si] - s_consumed[si] - drawn
        # ---- rates: water-filling, then stream arrival and FIFO coupling, until stream caps repeat ------
        ns = 0
        for si in range(nstr):
            if tg[si] >= 0:
                scap_si[ns], scap_c[ns] = si, s_bpc[si]
                ns += 1
        nx = 0
        for j in range(n_run):
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
        nf = nx + ns
        for _ in range(12):
            for j in range(ns):
                fcaps[nx + j] = scap_c[j]
            # max-min fair shares (`timing.waterfill`, step for step)
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
                    return NO_RATE
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
            for si in range(nstr):
                share[si] = 0.0
            for j in range(ns):
                share[scap_si[j]] = got[nx + j]
            i = 0  # each running op: min(engine rate, share / bytes); "bandwidth" (-2) where the share binds
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
                        rate[p], why[p] = lim, s_why[si]
            for jj in range(2 * n_link):  # the FIFO couplings, forward then backward
                j = jj if jj < n_link else 2 * n_link - 1 - jj
                pr, c = lk_pr[j], lk_c[j]
                gap = frac[pr] - frac[c]
                c_in, pr_in = rmark[c] == stamp, rmark[pr] == stamp
                rc = rate[c] if c_in else 0.0
                rp = rate[pr] if pr_in else 0.0
                if gap <= FRACTION_EPS and c_in and rp < rc:  # FIFO empty: the consumer follows
                    rate[c], why[c] = rp, wait_code[eng[pr]]
                if gap >= full[c] - FRACTION_EPS and pr_in and rc < rp and start[c] <= t:  # full: pr waits
                    rate[pr], why[pr] = rc, wait_code[eng[c]]
            stable = True
            for j in range(ns):
                si = scap_si[j]
                c = s_bpc[si]
                if lvl[si] >= s_capb[si] - BYTES_EPS:  # a full buffer fetches as fast as it is drained
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
        # ---- horizon: the first smallest non-negative time to the next event -------------------------
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
            for si in range(nstr):
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
                room = s_capb[si] - lvl[si]
                if f > cons * (1 + 1e-12) and room > BYTES_EPS:
                    c = room / (f - cons)
                    if c >= 0 and c < dt:
                        dt = c
        for j in range(n_link):
            pr, c = lk_pr[j], lk_c[j]
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
        if dt == _INF:
            status = DEADLOCK
            break
        stuck = stuck + 1 if dt <= 0 else 0
        if stuck > 10 * n + 100:
            status = NO_PROGRESS
            break
        if dt <= 0:
            continue
        # ---- advance: progress, fetched bytes, resource bytes, samples over [t, t+dt) ------------------
        if not lean:  # (the resource bytes: only a full `TimingResult` reads them)
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
            if xfer[p] > 0 and not lean:
                for a in range(plen[p]):
                    used[path[p, a]] += r * xfer[p]
        if fetching:
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
                    g = (x if x < sbr[p] else sbr[p]) - fetched[p]
                    fetched[p] += g
                    s_fetched[si] += g
                    for a in range(0 if lean else s_plen[si]):
                        used[s_path[si, a]] += f
        if not lean:  # the sums and samples only a full `TimingResult` reads (never the schedule's times)
            for r in range(nres):  # (an untouched resource adds 0.0: no change)
                res_bytes[r] += used[r] * dt
            same = last_usage >= 0
            if same:
                for r in range(nres):
                    if u_v[last_usage, r] != used[r]:
                        same = False
            if not same:
                if n_usage >= u_t.shape[0]:
                    return FULL
                u_t[n_usage] = t
                for r in range(nres):
                    u_v[n_usage, r] = used[r]
                last_usage = n_usage
                n_usage += 1
            if nstr:
                if n_level >= l_t.shape[0]:
                    return FULL
                l_t[n_level] = t
                for si in range(nstr):
                    drawn = 0.0
                    for j in range(n_rs):
                        q = rs[j]
                        if sidx[q] == si:
                            drawn += frac[q] * sbr[q]
                    l_v[n_level, si] = s_fetched[si] - s_consumed[si] - drawn
                n_level += 1
            # ---- attribute: busy, idle or a named stall, per engine and op (first touch kept: key order) -
            for e in range(ne):  # drained engines idle
                if cur[e] < 0 and q_len[e] > 0:
                    e_idle[e] += dt
            reason = base[0] if blocker >= 0 else base[1]  # sync / issue
            for j in range(n_wait):
                e = waiting[j]
                if e_first[e, reason] < 0:
                    e_first[e, reason] = event
                e_st[e, reason] += dt
            for j in range(n_block):
                e = blocked[j]
                p = cur[e]
                reason = base[1]
                i, dn, off = dptr[p], dep_len[p], dep_off[p]
                while i < dn and end[dep_buf[off + i]] != _INF:
                    i += 1
                dptr[p] = i
                if i < dn:
                    reason = dep_code[eng[dep_buf[off + i]]]
                if e_first[e, reason] < 0:
                    e_first[e, reason] = event
                e_st[e, reason] += dt
                if o_first[p, reason] < 0:
                    o_first[p, reason] = event
                o_st[p, reason] += dt
            for j in range(n_fill):  # pipeline fill, drain and setup latency count as busy
                p = filling[j]
                e_busy[eng[p]] += dt
                busy[p] += dt
            for j in range(n_run):
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
                reason = base[2] if why[p] < 0 else why[p]  # "" → bandwidth
                dt_s = dt * (1 - fr)
                if e_first[e, reason] < 0:
                    e_first[e, reason] = event
                e_st[e, reason] += dt_s
                if o_first[p, reason] < 0:
                    o_first[p, reason] = event
                o_st[p, reason] += dt_s
        event += 1
        t += dt
    fv[FV_T] = t
    iv[IV_NUSAGE], iv[IV_NLEVEL] = n_usage, n_level
    return status
