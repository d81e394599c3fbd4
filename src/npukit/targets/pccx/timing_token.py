"""Timing every program run of the driver (a decode token, a prefill chunk) on the compiled event loop.

A token's Work records are mostly the very objects of the previous token of the same program length
(the fast executor keeps a binding's Work until its descriptors change; the attention spans and the
sparse W_down rows change every token). So `TokenTimer` keeps the previous run's op columns per
program length, finds the positions whose Work object changed (an identity test per op), rewrites
only those rows (each Work's row cached by identity) and recomputes the GEMV→SFU FIFO links (a
sequential rule, compiled) before running `npukit.sim.timing_fast.schedule`. The cycles come back at
once; the `TimingResult` (trace, utilisation) is built only for the runs that ask for it
(`TimedRun.result`), from `to_ops` on the kept Works — the same records the readable path times, so
both give the same schedule bit for bit (`tests/targets/pccx/test_timing_token.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from operator import attrgetter
from typing import Any

import numba as nb
import numpy as np

from npukit.sim import compile_report, timing_fast, timing_job
from npukit.sim.timing import TimingResult
from npukit.sim.work import Work
from npukit.targets.pccx.hw import PccxHw
from npukit.targets.pccx.timing import _OpRecord, machine, simulate_works, to_ops

compile_report.install()  # first-run compiles are announced, never silent

_MAT, _SFU, _OTHER = 0, 1, 2
_MAX_ROWS = 1 << 17  # Work rows kept (by identity); cleared when exceeded


class TimedRun:
    """One program run on the timing model: its ``cycles`` (waited for while its schedule still runs on
    the timing thread), its full `TimingResult` on request (``result``; built once, then kept)."""

    __slots__ = ("_cycles", "_make", "_pending", "_result", "background_cpu_s", "background_s")

    def __init__(self, cycles: float | None = None, result: TimingResult | None = None,
                 make: Callable[..., TimingResult] | None = None, pending: tuple | None = None) -> None:
        self._cycles, self._result, self._make, self._pending = cycles, result, make, pending
        self.background_s = 0.0  # seconds its compiled loop took on the timing thread (0: in line)
        self.background_cpu_s = 0.0  # and that thread's CPU seconds

    @property
    def cycles(self) -> float:
        if self._pending is not None:
            future, job, label = self._pending
            future.result()
            self._pending = None
            self.background_s, self.background_cpu_s = job.loop_s, job.loop_cpu_s
            sched = job.done(label)  # (a TimingError is raised here)
            self._cycles, make = sched.cycles, self._make
            self._make = lambda: make(sched)  # type: ignore[misc]
        return self._cycles  # type: ignore[return-value]

    def result(self) -> TimingResult:
        if self._result is None:
            _ = self.cycles  # the schedule, if still on the timing thread
            self._result = self._make()  # type: ignore[misc]
            self._make = None
        return self._result


@nb.njit(cache=True, nogil=True)
def _link_fifos(kind, isasync, rd, nrd, wr, nwr, sfu_elems, fifo, fifo_elems):  # pragma: no cover - numba
    """`to_ops`'s FIFO rule: an SFU op reading what the latest async GEMV/GEMM wrote (not yet linked,
    not overwritten since by another engine) takes it over the direct FIFO."""
    last, linked = -1, False
    for p in range(kind.shape[0]):
        fifo[p], fifo_elems[p] = -1, 0.0
        if kind[p] == _MAT:
            last, linked = p, False
        elif kind[p] == _SFU and last >= 0 and not linked and isasync[last]:
            meet = False
            for a in range(nwr[last]):
                for b in range(nrd[p]):
                    if wr[last, a, 0] < rd[p, b, 1] and rd[p, b, 0] < wr[last, a, 1]:
                        meet = True
            if meet:
                fifo[p], fifo_elems[p] = last, float(max(sfu_elems[p], 1))
                linked = True
        if kind[p] != _SFU and last >= 0 and last != p:
            for a in range(nwr[last]):
                for b in range(nwr[p]):
                    if wr[last, a, 0] < wr[p, b, 1] and wr[p, b, 0] < wr[last, a, 1]:
                        last = -1
                        break
                if last < 0:
                    break


class _Program:
    """The columns of the last run of one program length, and the Works they were made from."""

    def __init__(self, works: list[Work], cols: timing_fast.Columns, kind: np.ndarray,
                 sfu: np.ndarray) -> None:
        self.works, self.cols, self.kind, self.sfu = works, cols, kind, sfu
        self.job: timing_job.Job | None = None  # the loop's tables and buffers, kept between runs
        self.ids = np.fromiter(map(id, works), np.int64, len(works))  # the Works' identities


# The Work fields an op's numbers (`to_ops`: engine, cycles, path, bytes, stream, ...) are made from: a
# row is cached by their values. `to_ops` reads only these and UNKEYED (the ranges, kept per Work; the
# index and label, for error text and records), and tests/targets/pccx/test_timing_token.py fails the
# day it reads another field (a key missing a field would hand one Work another's numbers).
KEY_FIELDS = ("engine", "macs", "sfu_elems", "weight_bytes", "ddr_read_bytes", "ddr_write_bytes",
              "onchip_read_bytes", "onchip_write_bytes", "lanes", "is_async")
UNKEYED = ("index", "label", "reads", "writes")
_content = attrgetter(*KEY_FIELDS)


class TokenTimer:
    """Times the driver's program runs on ``hw``: `time(works)` → `TimedRun`."""

    def __init__(self, hw: PccxHw, background: bool = True) -> None:
        self.hw = hw
        self.plan = timing_fast.Plan.of(machine(hw)) if timing_fast.enabled() else None
        self._rows_by_id: dict[int, tuple[Work, tuple]] = {}
        # a row less its ranges, by the Work fields `to_ops` derives it from: a span-grown GEMV or
        # softmax step is a new Work each token, but its heads (and the layers) repeat its numbers
        self._by_content: dict[tuple, tuple] = {}
        self._programs: dict[int, _Program] = {}
        self._sfu_depth = float(hw.sfu.fifo_depth)
        # the compiled loop releases the GIL: on a thread of its own it runs beside the next program
        # run (the executor's Python leaves a core free), instead of in line after this one
        self.background = background
        self._thread: ThreadPoolExecutor | None = None
        self._last: TimedRun | None = None  # a schedule that may still be running on that thread

    def time(self, works: Sequence[Work]) -> TimedRun:
        if self.plan is None:  # the readable loop (numba missing, or NPUKIT_TIMING=python)
            res = simulate_works(self.hw, works, renumber=True)
            return TimedRun(res.cycles, res)
        self.settle()  # its columns are patched next: the last schedule must be done reading them
        works = list(works)
        prog = self._programs.get(len(works))
        if prog is None:
            prog = self._programs[len(works)] = self._build(works)
        else:
            self._patch(prog, works)
        c = prog.cols
        _link_fifos(prog.kind, c.isasync, c.rd, c.nrd, c.wr, c.nwr, prog.sfu, c.fifo, c.fifo_elems)
        hw = self.hw

        def label(p: int) -> str:
            return f"{p} ({works[p].label or works[p].engine})"

        def make(sched: timing_fast.Schedule) -> TimingResult:
            if timing_job.stale(sched):  # its program ran again since: the buffers hold that run
                return simulate_works(hw, works, renumber=True)
            return sched.result(to_ops(hw, works, _OpRecord, renumber=True))

        job = prog.job
        if job is None or job.cols is not c:
            job = prog.job = timing_job.Job(self.plan, c)
        else:
            job.refresh()  # its tables here: the thread runs the compiled loop only
        if not self.background:
            job.loop()
            sched = job.done(label)
            return TimedRun(sched.cycles, make=lambda: make(sched))
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="npukit-pccx-timing")
        run = self._last = TimedRun(make=make, pending=(self._thread.submit(job.loop), job, label))
        return run

    def settle(self) -> None:
        """Wait for the schedule still running on the timing thread, if any (its cycles are then known)."""
        last, self._last = self._last, None
        if last is not None:
            _ = last.cycles

    def close(self) -> None:
        """Settle and stop the timing thread (a later `time` starts another)."""
        self.settle()
        if self._thread is not None:
            self._thread.shutdown()
            self._thread = None

    def remember(self, works: Sequence[Work]) -> None:
        """Make the rows of Work records a later run will hold (a program built ahead of its switch),
        so that run's `time` finds them cached."""
        if self.plan is not None and works:
            self._rows(list(works))

    # ---- rows -------------------------------------------------------------------------------------
    def _row(self, w: Work) -> tuple:
        """(engine, cycles, latency, tail, path id, xfer, stream, stream bytes, async, fifo depth, kind,
        sfu elems, reads, writes) of one Work already cached by `_rows`."""
        return self._rows_by_id[id(w)][1]

    def _remember(self, w: Work, o: Any) -> tuple:
        """The row of Work ``w`` from its op record ``o`` (its FIFO fields are ignored: `_link_fifos`)."""
        plan = self.plan
        kind = _MAT if o.engine in ("gemv", "gemm") else _SFU if o.engine == "sfu" else _OTHER
        row = (plan.eix[o.engine], o.cycles, o.latency, o.tail, plan.path_id(o.path), o.xfer_bytes,
               -1 if o.stream is None else plan.six[o.stream], o.stream_bytes, o.is_async,
               self._sfu_depth if kind == _SFU else 0.0, kind, w.sfu_elems, o.reads, o.writes)
        self._rows_by_id[id(w)] = (w, row)  # (the Work is kept alive with its row: its id stays its own)
        return row

    def _rows(self, works: list[Work]) -> None:
        """Cache the rows of the Works not seen yet (by identity), with one `to_ops` over them all."""
        rows = self._rows_by_id
        new = [w for w in works if (hit := rows.get(id(w))) is None or hit[0] is not w]
        if new and len(rows) + len(new) > _MAX_ROWS:
            # full: start over with this batch, never part-way through it (its rows are looked up next)
            rows.clear()
            new = works
        if not new:
            return
        by_content, misses = self._by_content, []
        for w in new:  # an op's numbers are a function of these fields (the FIFO link is `_link_fifos`')
            head = by_content.get(_content(w))
            if head is None:
                misses.append(w)
            else:
                rows[id(w)] = (w, (*head, tuple(w.reads), tuple(w.writes)))
        if misses:
            if len(by_content) > _MAX_ROWS:
                by_content.clear()
            for w, o in zip(misses, to_ops(self.hw, misses, _OpRecord), strict=True):
                by_content[_content(w)] = self._remember(w, o)[:12]

    def _build(self, works: list[Work]) -> _Program:
        self._rows(works)
        rows = [self._row(w) for w in works]
        n = len(rows)
        f64 = np.float64
        cols = timing_fast.Columns(
            np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], f64),
            np.array([r[2] for r in rows], f64), np.array([r[3] for r in rows], f64),
            np.array([r[5] for r in rows], f64), np.array([r[4] for r in rows], np.int64),
            np.array([r[6] for r in rows], np.int64), np.array([r[7] for r in rows], f64),
            np.full(n, -1, np.int64), np.array([r[9] for r in rows], f64), np.zeros(n),
            np.array([r[8] for r in rows], np.bool_),
            *timing_fast.range_columns([r[12] for r in rows], max((len(r[12]) for r in rows), default=0)),
            *timing_fast.range_columns([r[13] for r in rows], max((len(r[13]) for r in rows), default=0)))
        return _Program(works, cols, np.array([r[10] for r in rows], np.int64),
                        np.array([r[11] for r in rows], np.int64))

    def _patch(self, prog: _Program, works: list[Work]) -> None:
        """Rewrite the rows whose Work changed since this program length's last run (a few hundred of
        thousands: the attention's spans, the sparse rows): found by identity, written as columns."""
        ids = np.fromiter(map(id, works), np.int64, len(works))
        # (the old Works are alive in prog.works, so an equal id is the same object)
        changed = np.flatnonzero(ids != prog.ids)
        prog.works, prog.ids = works, ids
        if not changed.size:
            return
        new = [works[i] for i in changed.tolist()]
        self._rows(new)
        rows = [self._row(w) for w in new]
        c = prog.cols
        if max(len(r[12]) for r in rows) > c.rd.shape[1] or max(len(r[13]) for r in rows) > c.wr.shape[1]:
            fresh = self._build(works)  # wider ranges: start over
            prog.cols, prog.kind, prog.sfu = fresh.cols, fresh.kind, fresh.sfu
            return
        eng, cyc, lat, tail, path, xfer, sidx, sbr, isasync, depth, kind, sfu, rd, wr = zip(*rows,
                                                                                        strict=True)
        c.eng[changed], c.cycles[changed], c.lat[changed], c.tail[changed] = eng, cyc, lat, tail
        c.path[changed], c.xfer[changed], c.sidx[changed], c.sbr[changed] = path, xfer, sidx, sbr
        c.isasync[changed], c.fifo_depth[changed] = isasync, depth
        prog.kind[changed], prog.sfu[changed] = kind, sfu
        c.rd[changed], c.nrd[changed] = timing_fast.range_columns(rd, c.rd.shape[1])
        c.wr[changed], c.nwr[changed] = timing_fast.range_columns(wr, c.wr.shape[1])
