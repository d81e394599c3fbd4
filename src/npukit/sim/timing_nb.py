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

The loop is `run`; its phases are the functions of `npukit.sim.timing_nb_phases`, named as the
Python phases (`timing_phases`): settle (`issue`, `heads`, `fetches_done`), `survey`, `solve_rates`
(water-filling, stream arrival, FIFO coupling), `horizon`, `advance`, `attribute`. They are inlined
into `run` by numba (``inline="always"``): as separate calls, numba's reference counting of every
array passed measured 70 % of a pccx token's time (perf: NRT_incref / NRT_decref).
"""

from __future__ import annotations

from collections import namedtuple

import numba as nb
import numpy as np

from npukit.sim import compile_report
from npukit.sim import timing_nb_phases as ph
from npukit.sim.timing_types import BYTES_EPS, FRACTION_EPS  # noqa: F401 (compile-time constants; tests read them)

compile_report.install()  # first-run compiles are announced, never silent

_OPTS = {"cache": True, "error_model": "numpy", "nogil": True}
_INF = np.inf

# iv (ints in/out): the issue window in, the counts of samples out
_WIN, _NUSAGE, _NLEVEL = range(3)
IV_SIZE = 3
# fv (floats in/out): issue cycles in, t out
_IC, _T = range(2)
FV_SIZE = 2
# status codes (worded by the Python side)
OK, DEADLOCK, NO_PROGRESS, NO_RATE, FULL = 0, 1, 2, 3, 4

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
    O: `Samples`), one pass of the phases (`timing_nb_phases`) per event; returns a status, t in ``fv[_T]``."""
    n = C.eng.shape[0]
    win, ic = iv[_WIN], fv[_IC]
    k, blocker, unstarted, n_done, next_issue = 0, -1, 0, 0, 0.0
    n_infl = n_act = n_dep = 0
    stamp = event = n_usage = n_level = 0
    last_usage = -1
    t, stuck = 0.0, 0
    status = OK
    while n_done < n:
        changed = True  # settle: issue, start and complete at t until nothing changes
        while changed:
            k, blocker, unstarted, next_issue, n_infl, n_act, n_dep, overflow = ph.issue(
                C, S, t, k, blocker, unstarted, next_issue, n_infl, n_act, n_dep, win, ic)
            if overflow:
                return FULL
            blocker, unstarted, n_done, next_issue, done_any, started_any, blocked_any = ph.heads(
                C, S, E, R, t, k, blocker, unstarted, n_done, next_issue, ic)
            changed = (done_any and blocked_any) or ((done_any or started_any) and k < n and blocker < 0
                                                     and unstarted < win and t >= next_issue - FRACTION_EPS)
        ph.fetches_done(C, S, R, t)
        if n_done >= n:
            break
        stamp += 1
        n_run, n_rs, n_wait, n_block, n_fill, n_link, n_act, fetching, dt = ph.survey(
            C, S, E, R, W, t, k, n_act, stamp)
        if not ph.solve_rates(C, S, R, W, F, K, t, n_run, n_rs, n_link, stamp, capacity):
            return NO_RATE
        dt = ph.horizon(C, S, W, R, t, dt, k, blocker, next_issue, n_run, n_rs, n_link, fetching, stamp)
        if dt == _INF:
            status = DEADLOCK
            break
        stuck = stuck + 1 if dt <= 0 else 0
        if stuck > 10 * n + 100:
            status = NO_PROGRESS
            break
        if dt <= 0:
            continue
        n_usage, n_level, last_usage, overflow = ph.advance(
            C, S, R, W, O, t, dt, n_run, n_rs, fetching, res_bytes, n_usage, n_level, last_usage)
        if overflow:
            return FULL
        ph.attribute(C, S, E, W, K, A, dt, blocker, n_run, n_wait, n_block, n_fill, event)
        event += 1
        t += dt
    fv[_T] = t
    iv[_NUSAGE], iv[_NLEVEL] = n_usage, n_level
    return status
