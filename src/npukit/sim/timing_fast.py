"""The compiled timing loop (`npukit.sim.timing_nb`) behind `npukit.sim.timing.simulate`.

`Plan` holds what a `Machine` contributes (engines, resources, streams, stall names as codes), once
per machine. `Columns` holds a program's ops as arrays (program order), built from `Op` records
(`Columns.from_ops`) or by a target adapter that keeps them between runs (pccx: `TokenTimer`).
`schedule(plan, cols)` runs the loop and returns a `Schedule`: ``cycles`` at once, the full
`TimingResult` on request (`Schedule.result`, given the op records for labels and args).

The compiled loop covers machines without token queues, command queues or engine pools; `simulate`
runs the others, or everything when ``NPUKIT_TIMING=python``, on the readable loop
(`npukit.sim.timing_state.Sim`), which is the model's definition. Both give bit-identical schedules.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from npukit.sim.timing_tokens import check_tokens
from npukit.sim.timing_types import (
    EngineStats,
    Fetch,
    Machine,
    Op,
    OpTiming,
    TimingError,
    TimingResult,
    validate_program,
)
from npukit.sim.trace import gc_paused

try:
    from npukit.sim import timing_nb as nbl
except ImportError:  # pragma: no cover - numba missing: the readable loop runs
    nbl = None  # type: ignore[assignment]

_INF = float("inf")


def enabled() -> bool:
    """The compiled loop is importable and not switched off (``NPUKIT_TIMING=python``)."""
    return nbl is not None and os.environ.get("NPUKIT_TIMING", "").lower() != "python"


class Plan:
    """A machine as the compiled loop sees it; `Plan.of` returns None for machines it does not cover."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.cores = tuple(machine.engines)  # (plain names only: see `of`)
        self.eix = {e: i for i, e in enumerate(self.cores)}
        self.capacity = {r.name: r.bytes_per_cycle for r in machine.resources}
        self.rnames = list(self.capacity)
        self.rix = {r: i for i, r in enumerate(self.rnames)}
        self.cap_arr = np.array([self.capacity[r] for r in self.rnames], np.float64)
        self.snames = [s.name for s in machine.streams]
        self.six = {s: i for i, s in enumerate(self.snames)}
        # stall names as codes, one per distinct name (a stream named like a stall shares its sums)
        names: dict[str, int] = {}

        def code(name: str) -> int:
            return names.setdefault(name, len(names))

        self.base = np.array([code("sync"), code("issue"), code("bandwidth")], np.int64)
        self.s_why = np.array([code(s) for s in self.snames], np.int64)
        self.dep_code = np.array([code(f"dep_{e}") for e in self.cores], np.int64)
        self.wait_code = np.array([code(f"wait_{e}") for e in self.cores], np.int64)
        self.reasons = list(names)
        self.paths: dict[tuple, int] = {}  # distinct op paths → id (grows as programs bring new ones)
        self.path_rows: list[tuple[int, ...]] = []
        self.narrow: list[float] = []
        s_paths = [tuple(self.rix[r] for r in s.path) for s in machine.streams]
        self.s_plen = np.array([len(p) for p in s_paths], np.int64)
        self.s_path = _pad(s_paths)
        self.s_capb = np.array([s.capacity_bytes for s in machine.streams], np.float64)
        self.s_bpc = np.array([s.bytes_per_cycle for s in machine.streams], np.float64)

    @staticmethod
    def of(machine: Machine) -> Plan | None:
        if machine.queues or machine.command_depth is not None:
            return None
        if not all(isinstance(e, str) for e in machine.engines) or len(set(machine.engines)) != len(
                machine.engines):
            return None
        if any(r not in {x.name for x in machine.resources} for s in machine.streams for r in s.path):
            return None  # (the readable loop words the error)
        return Plan(machine)

    def path_id(self, path: tuple[str, ...]) -> int:
        """The id of an op's path (resource names), registered on first sight."""
        i = self.paths.get(path)
        if i is None:
            rows = tuple(self.rix[r] for r in path)
            i = self.paths[path] = len(self.path_rows)
            self.path_rows.append(rows)
            self.narrow.append(min(self.capacity[r] for r in path) if path else _INF)
        return i


def _pad(rows: Sequence[tuple[int, ...]]) -> np.ndarray:
    width = max((len(r) for r in rows), default=0) or 1
    out = np.full((len(rows), width), -1, np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def range_columns(seq: Sequence[tuple], width: int) -> tuple[np.ndarray, np.ndarray]:
    """[n, width, 2] int64 ranges and their counts (raises TypeError/OverflowError/ValueError for ranges
    that are not pairs of integers)."""
    n = len(seq)
    arr = np.zeros((n, max(width, 1), 2), np.int64)
    cnt = np.fromiter(map(len, seq), np.int64, n)
    pairs = [pair for rs in seq for pair in rs]
    if not pairs:
        return arr, cnt
    if set(map(len, pairs)) != {2}:
        raise ValueError("a range is a (start, end) pair")
    ends = [x for pair in pairs for x in pair]
    if not all(issubclass(t, int | np.integer) and t is not bool for t in set(map(type, ends))):
        raise TypeError("ranges must be integers")
    row = np.repeat(np.arange(n), cnt)  # each range's op, and its place among that op's ranges
    col = np.arange(len(pairs)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    arr[row, col] = np.array(ends, np.int64).reshape(-1, 2)
    return arr, cnt


@dataclass
class Columns:
    """A program's ops as arrays in program order (what the compiled loop reads)."""

    eng: np.ndarray  # int64 engine ordinal
    cycles: np.ndarray  # float64 …
    lat: np.ndarray
    tail: np.ndarray
    xfer: np.ndarray
    path: np.ndarray  # int64 path id (`Plan.path_id`)
    sidx: np.ndarray  # int64 stream ordinal, -1: none
    sbr: np.ndarray  # float64 stream bytes as given
    fifo: np.ndarray  # int64 FIFO producer position, -1: none
    fifo_depth: np.ndarray
    fifo_elems: np.ndarray
    isasync: np.ndarray  # bool
    rd: np.ndarray  # int64 [n, R, 2]
    nrd: np.ndarray
    wr: np.ndarray
    nwr: np.ndarray

    @property
    def n(self) -> int:
        return int(self.eng.shape[0])

    @staticmethod
    def from_ops(plan: Plan, ops: Sequence[Op]) -> Columns:
        col = {a: list(map(attrgetter(a), ops)) for a in (
            "engine", "cycles", "latency", "tail", "path", "xfer_bytes", "stream", "stream_bytes",
            "fifo_from", "fifo_depth", "fifo_elems", "is_async", "reads", "writes")}
        f64 = np.float64
        reads, writes = col["reads"], col["writes"]
        rd, nrd = range_columns(reads, max(map(len, reads), default=0))
        wr, nwr = range_columns(writes, max(map(len, writes), default=0))
        return Columns(
            np.array([plan.eix[e] for e in col["engine"]], np.int64), np.array(col["cycles"], f64),
            np.array(col["latency"], f64), np.array(col["tail"], f64), np.array(col["xfer_bytes"], f64),
            np.array([plan.path_id(tuple(p)) for p in col["path"]], np.int64),
            np.array([-1 if s is None else plan.six[s] for s in col["stream"]], np.int64),
            np.array(col["stream_bytes"], f64),
            np.array([-1 if f is None else f for f in col["fifo_from"]], np.int64),
            np.array(col["fifo_depth"], f64), np.array(col["fifo_elems"], f64),
            np.array(col["is_async"], np.bool_), rd, nrd, wr, nwr)


def _static(plan: Plan, c: Columns) -> nbl.OpTable:
    """The loop's per-op tables, derived as `Sim.__init__` derives them (same float operations)."""
    n = c.n
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = np.full(n, _INF)
        np.divide(1.0, c.cycles, out=cap, where=c.cycles > 0)
        xcap = cap * c.xfer
        xlow = xcap * (1 - 1e-6)
        narrow = np.array(plan.narrow, np.float64)[c.path] if n else np.zeros(0)
        v = np.full(n, _INF)
        np.divide(narrow, c.xfer, out=v, where=c.xfer > 0)
        nominal = np.where(c.xfer > 0, np.where(v < cap, v, cap), cap)
    rows = _pad(plan.path_rows)
    path = rows[c.path] if n else np.zeros((0, 1), np.int64)
    plen = np.array([len(r) for r in plan.path_rows], np.int64)[c.path] if n else np.zeros(0, np.int64)
    sb = np.where(c.sidx >= 0, c.sbr, 0.0)
    link = np.full(n, -1, np.int64)
    full = np.zeros(n)
    for p in np.flatnonzero(c.fifo >= 0):
        pr = c.fifo[p]
        if c.isasync[pr] and c.fifo_elems[p] > 0:
            link[p] = pr
            full[p] = c.fifo_depth[p] / c.fifo_elems[p]
    haswork = (c.cycles != 0) | (c.xfer != 0) | (sb != 0) | (link >= 0)
    return nbl.OpTable(eng=c.eng, cap=cap, lat=c.lat, tail=c.tail, xfer=c.xfer, xcap=xcap, xlow=xlow,
                       nominal=nominal, path=path, plen=plen, sidx=c.sidx, sbr=c.sbr, sb=sb, fifo=c.fifo,
                       link=link, full=full, isasync=c.isasync, haswork=haswork, rd=c.rd, nrd=c.nrd, wr=c.wr,
                       nwr=c.nwr)


class Schedule:
    """One program's schedule from the compiled loop: ``cycles`` now, `result` on request."""

    def __init__(self, plan: Plan, arrays: dict[str, Any], t: float, events: int = 0,
                 times_only: bool = False) -> None:
        self.plan, self.a, self.t = plan, arrays, t
        self.events = events  # the sample and hazard room the loop ran with
        self.times_only = times_only  # a lean run: its times (and cycles) only, no `result`
        self.owner: Any = None  # a `timing_job.Job` whose buffers ``a`` are, and its run then
        self.generation = 0
        end = arrays["end"]
        self.cycles = float(end.max()) if end.shape[0] else 0.0

    def result(self, ops: Sequence[Any]) -> TimingResult:
        """The `TimingResult` the readable loop returns for ``ops`` (the records this schedule was made
        from, for indices, engines, labels, streams and args)."""
        if self.times_only:
            raise ValueError("a lean run's schedule holds its times only: run it again in full")
        with gc_paused():
            return self._result(ops)

    def engines(self) -> dict[str, EngineStats]:
        """The per-engine figures of `result` alone (busy, idle, stalls): they need no op records."""
        if self.times_only:
            raise ValueError("a lean run's schedule holds its times only: run it again in full")
        plan, a, t, total = self.plan, self.a, self.t, self.cycles
        e_busy, e_idle = a["e_busy"].tolist(), a["e_idle"].tolist()
        q_len = a["q_len"]
        for e in range(len(plan.cores)):
            if q_len[e] == 0:  # idle at every step: the same sums, in the same order, as t itself
                e_idle[e] = t
        estall = _stall_dicts(a["e_st"], a["e_first"], plan.reasons)
        return {name: EngineStats(name, e_busy[e], e_idle[e] + max(0.0, total - t), estall[e])
                for e, name in enumerate(plan.cores)}

    def _result(self, ops: Sequence[Any]) -> TimingResult:
        plan, a, total = self.plan, self.a, self.cycles
        reasons = plan.reasons
        issue, start, end, busy = (a[k].tolist() for k in ("issue", "start", "end", "busy"))
        ostall = _stall_dicts(a["o_st"], a["o_first"], reasons)
        res = [OpTiming(o.index, o.engine, o.label, issue[p], start[p], end[p], busy[p], ostall[p],
                        dict(o.args)) for p, o in enumerate(ops)]
        engines = self.engines()
        t0, t1 = a["fetch_t0"].tolist(), a["fetch_t1"].tolist()
        fetches = [Fetch(o.stream, o.index, t0[p], t1[p], o.stream_bytes)
                   for p, o in enumerate(ops) if o.stream is not None and o.stream_bytes > 0]
        rnames = plan.rnames
        nu = a["n_usage"]
        usage = [(ut, dict(zip(rnames, uv, strict=True)))
                 for ut, uv in zip(a["u_t"][:nu].tolist(), a["u_v"][:nu].tolist(), strict=True)]
        usage.append((total, dict.fromkeys(rnames, 0.0)))
        nl, snames = a["n_level"], plan.snames
        lt, lv = a["l_t"][:nl].tolist(), a["l_v"][:nl].tolist()
        if len(snames) == 1:
            levels = [(x, {snames[0]: v[0]}) for x, v in zip(lt, lv, strict=True)]
        else:
            levels = [(x, dict(zip(snames, v, strict=True))) for x, v in zip(lt, lv, strict=True)]
        return TimingResult(total, plan.machine.clock_hz, res, engines, fetches,
                            dict(zip(rnames, a["res_bytes"].tolist(), strict=True)), usage, levels)


def _stall_dicts(st: np.ndarray, first: np.ndarray, reasons: list[str]) -> list[dict[str, float]]:
    """Per row, {reason: sum} in the order the reasons were first touched (as the dicts were filled)."""
    out: list[dict[str, float]] = [{} for _ in range(st.shape[0])]
    rows, cols = np.nonzero(first >= 0)
    if rows.size:
        order = np.lexsort((first[rows, cols], rows))
        vals = st[rows, cols].tolist()
        for j in order.tolist():
            out[rows[j]][reasons[cols[j]]] = vals[j]
    return out


def schedule(plan: Plan, c: Columns, label: Any = None) -> Schedule:
    """Run the compiled loop on ``c``; ``label(p)`` words op p in a deadlock error (default: position)."""
    job = Pending(plan, c)
    job.loop()
    return job.done(label)


class Pending:
    """`schedule` in three parts, so the compiled loop can run on another thread: the tables and
    buffers are made here (Python), `loop` runs the compiled loop alone (it touches no Python object
    and releases the GIL), `done` reads the results back (a buffer that proved too small: the loop
    runs again with room, in line) and raises the loop's errors."""

    def __init__(self, plan: Plan, c: Columns, events: int = 0, lean: bool = False) -> None:
        self.plan, self.n, self.lean = plan, c.n, lean  # lean: the times only (no sums or samples)
        self.C = _static(plan, c)
        self.events = max(events, 4 * self.n + 64)
        self.args, self._finish = _setup(plan, self.C, self.n, self.events, lean)
        self.status = -1
        self.loop_s = self.loop_cpu_s = 0.0  # seconds `loop` took, and its thread's CPU seconds

    def loop(self) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        self.status = int(nbl.run(*self.args))
        self.loop_s, self.loop_cpu_s = time.perf_counter() - t0, time.thread_time() - c0

    def done(self, label: Any = None) -> Schedule:
        status = self.status
        arrays, t = self._finish()
        events = self.events
        while status == nbl.FULL:
            events *= 4  # a sample or hazard buffer was too small: again, with room
            status, arrays, t = _run(self.plan, self.C, self.n, events)
        if status == nbl.DEADLOCK:
            p = int(np.flatnonzero(arrays["end"] == _INF)[0])
            who = label(p) if label is not None else f"at position {p}"
            raise TimingError(f"deadlock at cycle {t:.0f}: op {who} can never finish")
        if status == nbl.NO_PROGRESS:
            raise TimingError(f"no progress at cycle {t:.0f}")
        if status == nbl.NO_RATE:
            raise TimingError("a transfer has neither a rate cap nor a bandwidth resource on its path")
        return Schedule(self.plan, arrays, t, events, self.lean and events == self.events)


def _queues(ids: np.ndarray, count: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Positions grouped by ordinal ``ids`` (stable), each group's offset and length, and its first
    position (-1: empty): an engine's or a stream's ops in program order."""
    ops = np.argsort(ids, kind="stable").astype(np.int64)
    length = np.bincount(ids, minlength=count).astype(np.int64) if ids.size else np.zeros(count, np.int64)
    off = np.concatenate(([0], np.cumsum(length)[:-1])).astype(np.int64) if count else np.zeros(0, np.int64)
    first = np.where(length > 0, ops[np.minimum(off, max(ids.size - 1, 0))] if ids.size else -1, -1)
    return ops, off, length, first.astype(np.int64)


def _run(plan: Plan, C: nbl.OpTable, n: int, events: int) -> tuple[int, dict[str, Any], float]:
    args, finish = _setup(plan, C, n, events)
    status = nbl.run(*args)
    return (int(status), *finish())


def _setup(plan: Plan, C: nbl.OpTable, n: int, events: int, lean: bool = False
           ) -> tuple[tuple, Callable[[], tuple[dict[str, Any], float]]]:
    """The compiled loop's arguments for ``C`` (its state and scratch, allocated here) and what reads
    its results back (the arrays `Schedule` takes, the final time) once it has run."""
    ne, nstr, nres = len(plan.cores), len(plan.snames), len(plan.rnames)
    q_ops, q_off, q_len, cur = _queues(C.eng, ne, n)
    E = nbl.EngineQueues(q_ops=q_ops, q_off=q_off, q_len=q_len, head=np.zeros(ne, np.int64), cur=cur)
    in_s = np.flatnonzero((C.sidx >= 0) & (C.sbr > 0))
    order, s_off, s_len, first = _queues(C.sidx[in_s], nstr, n)
    s_next = np.array([in_s[f] if f >= 0 else -1 for f in first.tolist()], np.int64)
    R = nbl.StreamTable(s_ops=in_s[order].astype(np.int64), s_off=s_off, s_len=s_len,
                        s_cur=np.zeros(nstr, np.int64), s_next=s_next, s_prev=np.full(nstr, n, np.int64),
                        s_fetched=np.zeros(nstr),
                        s_consumed=np.zeros(nstr), s_capb=plan.s_capb, s_bpc=plan.s_bpc, s_path=plan.s_path,
                        s_plen=plan.s_plen, fmoved=np.ones(nstr, np.bool_))
    start = np.full(n + 1, _INF)
    start[n] = -_INF  # (s_prev = n: no previous op)
    i64 = np.int64
    S = nbl.OpRun(issue=np.full(n, _INF), start=start, end=np.full(n, _INF), frac=np.zeros(n),
                  prog_end=np.full(n, _INF), fetched=np.zeros(n), fetch_t0=np.full(n, _INF),
                  fetch_t1=np.full(n, _INF), busy=np.zeros(n), dep_off=np.zeros(n, i64),
                  dep_len=np.zeros(n, i64), dptr=np.zeros(n, i64), dep_buf=np.zeros(events, i64),
                  infl=np.zeros(n + 1, i64), act=np.zeros(n + 1, i64))
    heads = ne + 1
    W = nbl.EventScratch(running=np.zeros(heads, i64), rs=np.zeros(heads, i64),
                         waiting=np.zeros(heads, i64), blocked=np.zeros(heads, i64),
                         filling=np.zeros(heads, i64), lk_pr=np.zeros(n + 1, i64), lk_c=np.zeros(n + 1, i64),
                         tg=np.full(nstr, -1, i64), lvl=np.zeros(nstr), rate=np.zeros(n),
                         why=np.zeros(n, i64), rmark=np.zeros(n, i64), share=np.zeros(nstr),
                         used=np.zeros(nres))
    nf, one = heads + nstr, max(nstr, 1)
    width = max(C.path.shape[1], plan.s_path.shape[1] if nstr else 1)
    F = nbl.FlowScratch(fcaps=np.zeros(nf), fpath=np.full((nf, width), -1, i64), fplen=np.zeros(nf, i64),
                        got=np.zeros(nf), scap_si=np.zeros(one, i64), scap_c=np.zeros(one),
                        nscap_c=np.zeros(one),
                        frozen=np.zeros(nf, np.bool_), left=np.zeros(max(nres, 1)),
                        users=np.zeros(max(nres, 1), i64))
    K = nbl.ReasonCodes(s_why=plan.s_why, dep_code=plan.dep_code, wait_code=plan.wait_code, base=plan.base)
    nr = len(plan.reasons)
    # a lean loop writes no per-op stall sums and no samples (`timing_nb.run`: all behind ``not lean``)
    # and a lean `Schedule` reads none: empty ones (the same array types: the same compiled loop)
    per_op, samples = (0, 0) if lean else (n, events)
    A = nbl.Accounts(e_busy=np.zeros(ne), e_idle=np.zeros(ne), e_st=np.zeros((ne, nr)),
                     e_first=np.full((ne, nr), -1, i64), o_st=np.zeros((per_op, nr)),
                     o_first=np.full((per_op, nr), -1, i64))
    O = nbl.Samples(u_t=np.zeros(samples), u_v=np.zeros((samples, nres)), l_t=np.zeros(samples),
                    l_v=np.zeros((samples, nstr)))
    iv = np.zeros(nbl.IV_SIZE, i64)
    m = plan.machine
    iv[nbl.IV_WIN] = n + 1 if m.issue_window is None else m.issue_window  # (n + 1: never the limit)
    iv[nbl.IV_LEAN], iv[nbl.IV_PAUSE] = int(lean), -1  # (no pause: `timing_job.Job` sets one)
    fv = np.zeros(nbl.FV_SIZE)
    fv[nbl.FV_IC] = m.issue_cycles
    res_bytes = np.zeros(nres)

    def finish() -> tuple[dict[str, Any], float]:
        arrays = {"issue": S.issue, "start": S.start[:n], "end": S.end, "busy": S.busy,
                  "fetch_t0": S.fetch_t0, "fetch_t1": S.fetch_t1, **A._asdict(), "q_len": q_len,
                  **O._asdict(), "res_bytes": res_bytes, "n_usage": int(iv[nbl.IV_NUSAGE]),
                  "n_level": int(iv[nbl.IV_NLEVEL])}
        return arrays, float(fv[nbl.FV_T])

    return (C, S, E, R, W, F, K, A, O, iv, fv, plan.cap_arr, res_bytes), finish


def try_simulate(machine: Machine, ops: Sequence[Op]) -> TimingResult | None:
    """`simulate` on the compiled loop, or None where it does not apply (the caller runs `Sim`)."""
    if not enabled():
        return None
    plan = Plan.of(machine)
    if plan is None:
        return None
    ops = list(ops)
    validate_program(machine, ops, plan.capacity, {s.name: s for s in machine.streams}, plan.cores)
    check_tokens(machine, ops)
    try:
        cols = Columns.from_ops(plan, ops)
    except (TypeError, OverflowError, ValueError):  # ranges that are not plain integers
        return None

    def label(p: int) -> str:
        return f"{ops[p].index} ({ops[p].label or ops[p].engine})"

    return schedule(plan, cols, label).result(ops)
