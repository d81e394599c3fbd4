"""Timing every program run of the driver (a decode token, a prefill chunk) on the compiled event loop.

A token's Work records are mostly the very objects of the previous token of the same program length
(the fast executor keeps a binding's Work until its descriptors change; the attention spans and the
sparse W_down rows change every token). So `TokenTimer` keeps the previous run's op columns per
program length, finds the positions whose Work object changed (an identity test per op), rewrites
only those rows (each Work's row cached by identity) and recomputes the GEMV→SFU FIFO links (a
sequential rule, compiled) before running the compiled loop on the program's kept `timing_job.Job`,
which resumes from the state it kept before the first changed op where the rows before it are as in
its last run. A long program whose Works are mostly new (a prompt chunk's first run, or its run after a
span-bucket switch moved its layout) takes those rows from the Works themselves instead (`BULK_ROWS`).
All of it runs in line (the default) or on a timing thread beside the executor's next
run (``background``; `TokenTimer._timed`), the cycles then coming back when that is done. The
`TimingResult` (trace, utilisation) is built only for the runs
that ask for it (`TimedRun.result`), from `to_ops` on the kept Works — the same records the readable
path times, so both give the same schedule bit for bit (`tests/targets/pccx/test_timing_token.py`).
The end-of-run figures need only its per-engine sums (`TimedRun.engines`): the compiled loop runs the
last run's columns again in full, without the op records (~10 ms against ~0.1 s for a prompt chunk's
schedule).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import compress
from operator import attrgetter, is_not, itemgetter, not_
from typing import Any

import numba as nb
import numpy as np

from npukit.sim import compile_report, timing_fast, timing_job
from npukit.sim.timing import EngineStats, TimingResult
from npukit.sim.work import Work
from npukit.targets.pccx.hw import PccxHw
from npukit.targets.pccx.timing import _OpRecord, machine, simulate_works, to_ops

compile_report.install()  # first-run compiles are announced, never silent

_MAT, _SFU, _OTHER = 0, 1, 2
_MAX_ROWS = 1 << 17  # Work rows kept (by identity); cleared when exceeded
# A program of at least this many ops whose Works are mostly new — a prompt chunk's first run, or its
# run after a span-bucket switch moved its on-chip layout (60 000-80 000 of a 512-token prompt's
# 83 500-op chunks) — takes its rows straight from its Works (`TokenTimer._direct`: numbers by content,
# ranges packed in one pass), kept in no per-Work store: through the store (ids, slots, a range compare
# per Work, then a gather) such a run cost 0.34-0.64 s against ~0.15 (hidden 1024). A decode token's
# program (~2 600 ops) is below it: its Works recur (built ahead, `remember`), the store serves them.
BULK_ROWS = 4096


class TimedRun:
    """One program run on the timing model: its ``cycles`` (waited for while its schedule still runs on
    the timing thread), its full `TimingResult` on request (``result``; built once, then kept)."""

    __slots__ = ("_cycles", "_engines", "_make", "_make_engines", "_pending", "_result", "background_cpu_s",
                 "background_s")

    def __init__(self, cycles: float | None = None, result: TimingResult | None = None,
                 make: Callable[..., TimingResult] | None = None, pending: Future | None = None,
                 make_engines: Callable[..., dict[str, EngineStats] | None] | None = None) -> None:
        self._cycles, self._result, self._make, self._pending = cycles, result, make, pending
        self._make_engines = make_engines  # the engines alone, from the schedule (None: not possible now)
        self._engines: dict[str, EngineStats] | None = None
        self.background_s = 0.0  # seconds its timing took on the timing thread (0: in line): rows to done
        self.background_cpu_s = 0.0  # and that thread's CPU seconds

    @property
    def cycles(self) -> float:
        if self._pending is not None:
            sched, self.background_s, self.background_cpu_s = self._pending.result()  # (a TimingError: here)
            self._pending = None
            self._cycles, make, engines = sched.cycles, self._make, self._make_engines
            self._make = lambda: make(sched)  # type: ignore[misc]
            if engines is not None:
                self._make_engines = lambda: engines(sched)
        return self._cycles  # type: ignore[return-value]

    def engines(self) -> dict[str, EngineStats]:
        """The result's per-engine figures (what the utilisation figures read), without its op records
        where the timer can still make them from this run's columns (`TokenTimer.time`): the same
        compiled loop, in full, on the same columns, so the same sums bit for bit; else `result`'s."""
        if self._result is not None:
            return self._result.engines
        if self._engines is None:
            _ = self.cycles  # the schedule, if still on the timing thread
            got = self._make_engines() if self._make_engines is not None else None
            self._engines = got if got is not None else self.result().engines
        return self._engines

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


@nb.njit(cache=True, nogil=True)
def _link_derive(kind, isasync, rd, nrd, wr, nwr, sfu_elems, fifo, fifo_elems, cycles, xfer, pid, narrow,
                 rows, lens, sidx, sbr, fifo_, isasync_, depth, elems, cap, xcap, xlow, nominal, path, plen,
                 sb, link, full, haswork, eng, eng_was, stream_was):  # pragma: no cover - numba
    """`_link_fifos` over the first nine arrays, then `timing_job._derive` over the rest (its flags):
    each pass over no op where its arrays are empty. One compiled function for both, so that one
    function is loaded from numba's cache in a process (the first run's links), not two: the second
    (`_derive`, a program's second run) cost ~4-5 ms of loading on the first decode token. (numba keys
    this function's cache on this module's source only: a change to `timing_job._derive` needs this
    module's cache files deleted, as for every compiled callee in another module.)"""
    _link_fifos(kind, isasync, rd, nrd, wr, nwr, sfu_elems, fifo, fifo_elems)
    return timing_job._derive(cycles, xfer, pid, narrow, rows, lens, sidx, sbr, fifo_, isasync_, depth, elems,
                              cap, xcap, xlow, nominal, path, plen, sb, link, full, haswork, eng, eng_was,
                              stream_was)


def _empty(*kinds: tuple[type, int]) -> tuple[np.ndarray, ...]:
    """Arrays of no op: each (dtype, dimensions) as a C-contiguous, writable array."""
    return tuple(np.zeros((0, 1, 2)[:dims], dtype) for dtype, dims in kinds)


_I1, _F1, _B1, _I2, _I3 = (np.int64, 1), (np.float64, 1), (np.bool_, 1), (np.int64, 2), (np.int64, 3)
# `_link_derive`'s second half over no op (a new job's first run links alone): the arrays' types as
# `timing_job.Job`'s tables have them (one compiled overload for every call;
# tests/targets/pccx/test_timing_token.py checks the layouts against a job's)
NO_DERIVE = _empty(_F1, _F1, _I1, _F1, _I2, _I1, _I1, _F1, _I1, _B1, _F1, _F1, _F1, _F1, _F1, _F1, _I2, _I1,
                   _F1, _I1, _F1, _B1, _I1, _I1, _I1)


def _link_args(prog: _Program) -> tuple[np.ndarray, ...]:
    c = prog.cols
    return prog.kind, c.isasync, c.rd, c.nrd, c.wr, c.nwr, prog.sfu, c.fifo, c.fifo_elems


def _link(prog: _Program) -> None:
    """The FIFO links of a program's columns alone (a new job's: `Job.refresh` makes them with its
    tables for the runs after it, `Job.derive_pass`)."""
    c, call = prog.cols, prog.linker
    if call is None or call.args[0] is not prog.kind or call.args[8] is not c.fifo_elems \
            or call.args[7] is not c.fifo:  # (new columns: the entry point typed for them)
        call = prog.linker = timing_job.BoundCall(_link_derive, (*_link_args(prog), *NO_DERIVE))
    call()


def _run_job(prog: _Program, job: timing_job.Job, label: Callable[[int], str],
             patched: bool) -> timing_fast.Schedule:
    """A program's run on the timing model (`TokenTimer._timed`): for a patched program its FIFO links
    and its job's tables first (one compiled call, without the GIL: `_link_derive`), the loop, and the
    schedule's reading (`Job.done`)."""
    if patched:
        job.refresh(prog.first)
    job.loop()
    return job.done(label)


class _Program:
    """The columns of the last run of one program length, and the Works they were made from."""

    def __init__(self, works: list[Work], cols: timing_fast.Columns, kind: np.ndarray,
                 sfu: np.ndarray) -> None:
        self.works, self.cols, self.kind, self.sfu = works, cols, kind, sfu
        self.job: timing_job.Job | None = None  # the loop's tables and buffers, kept between runs
        self.linker: timing_job.BoundCall | None = None  # `_link_fifos` on these columns (`_link`)
        self.first = 0  # the first position whose row the last `_patch` rewrote (len(works): none)


# The Work fields an op's numbers (`to_ops`: engine, cycles, path, bytes, stream, ...) are made from: a
# row is cached by their values. `to_ops` reads only these and UNKEYED (the ranges, kept per Work; the
# index and label, for error text and records), and tests/targets/pccx/test_timing_token.py fails the
# day it reads another field (a key missing a field would hand one Work another's numbers).
KEY_FIELDS = ("engine", "macs", "sfu_elems", "weight_bytes", "ddr_read_bytes", "ddr_write_bytes",
              "onchip_read_bytes", "onchip_write_bytes", "lanes", "is_async")
UNKEYED = ("index", "label", "reads", "writes")
_content = attrgetter(*KEY_FIELDS)
_ranges = attrgetter("reads", "writes")
_reads, _writes, _slot_of = attrgetter("reads"), attrgetter("writes"), itemgetter(1)


class TokenTimer:
    """Times the driver's program runs on ``hw``: `time(works)` → `TimedRun`."""

    def __init__(self, hw: PccxHw, background: bool = False, lean: bool = True) -> None:
        self.hw = hw
        # lean: the loop computes the times only (the cycles); the few runs whose full schedule is
        # asked for (the figures' last token, a trace's last runs) are timed again in full then
        self.lean = lean
        self.plan = timing_fast.Plan.of(machine(hw)) if timing_fast.enabled() else None
        self._rows_by_id: dict[int, tuple[Work, int]] = {}  # a Work's row: its slot in the store
        self._store = _RowStore()
        # a row less its ranges (its place in ``_table``), by the Work fields `to_ops` derives it from: a
        # span-grown GEMV or softmax step is a new Work each token, but its heads (and the layers)
        # repeat its numbers
        self._by_content: dict[tuple, int] = {}
        self._table, self._table_n = np.zeros((0, 12)), 0
        self._programs: dict[int, _Program] = {}
        self._sfu_depth = float(hw.sfu.fifo_depth)
        # background: the rows' patch and the compiled loop (which releases the GIL) on a thread of
        # their own, beside the next program run, instead of in line after this one. In line by
        # default: on the 2-core host the thread cost the executor's thread more wall per decode token
        # than running it in line (10 of 10 interleaved A/B pairs at hidden 1024 and 2048, issue 29
        # ninth pass): the second core is the executor's OpenMP worker's and other processes', and the
        # patch's GIL pieces and pauses land on the executor's thread
        self.background = background
        self._thread: ThreadPoolExecutor | None = None
        self._last: TimedRun | None = None  # a schedule that may still be running on that thread
        self._lock = threading.Lock()  # the row caches: patched on that thread, remembered on the caller's

    def time(self, works: Sequence[Work]) -> TimedRun:
        if self.plan is None:  # the readable loop (numba missing, or NPUKIT_TIMING=python)
            res = simulate_works(self.hw, works, renumber=True)
            return TimedRun(res.cycles, res)
        self.settle()  # its columns are patched next: the last schedule must be done reading them
        works = list(works)
        prog = self._programs.get(len(works))
        built = prog is None
        if built:  # a new length (a new span bucket, a prefill chunk): gathered from the store
            with self._lock:
                prog = self._programs[len(works)] = self._build(works)
        hw = self.hw

        def label(p: int) -> str:
            return f"{p} ({works[p].label or works[p].engine})"

        def make(sched: timing_fast.Schedule) -> TimingResult:
            if timing_job.stale(sched):  # a lean run, or its program ran again since (the buffers moved on)
                return simulate_works(hw, works, renumber=True)
            return sched.result(to_ops(hw, works, _OpRecord, renumber=True))

        def engines(sched: timing_fast.Schedule) -> dict[str, EngineStats] | None:
            if not timing_job.stale(sched):
                return sched.engines()
            self.settle()  # (a later run of this length may still be patching or reading the columns)
            if prog.works is not works:  # the columns hold a later run's rows now
                return None
            return timing_fast.schedule(self.plan, prog.cols, label).engines()  # in full: the sums

        if not self.background:
            sched = self._timed(prog, works, label, built, False)[0]
            return TimedRun(sched.cycles, make=lambda: make(sched), make_engines=lambda: engines(sched))
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="npukit-pccx-timing")
        future = self._thread.submit(self._timed, prog, works, label, built, True)
        run = self._last = TimedRun(make=make, make_engines=engines, pending=future)
        return run

    def _timed(self, prog: _Program, works: list[Work], label: Callable[[int], str],
               built: bool, beside: bool) -> tuple[timing_fast.Schedule, float, float]:
        """Time ``works`` on ``prog`` (just ``built`` from them, or patched here): on the timing thread,
        or in line. The rows are patched here, not on the executor's thread: their Python (~0.5 ms a
        decode token at hidden 1024) then runs while that thread is inside its compiled calls (which
        release the GIL), not before its next one. `TokenTimer.settle` waits for all of it before the
        columns are patched again; the row caches are shared with `remember` (the executor's thread),
        under ``_lock``; ``beside``: on the timing thread (the patch pauses for the executor's thread
        between its pieces: `_pause`). Returns the schedule, and this call's wall and thread CPU seconds."""
        t0, c0 = time.perf_counter(), time.thread_time()
        if not built:
            with self._lock:
                self._patch(prog, works, _pause if beside else _go_on)
        c, job = prog.cols, prog.job
        fresh = job is None or job.cols is not c or job.lean != self.lean
        if fresh:
            _link(prog)
            job = prog.job = timing_job.Job(self.plan, c, lean=self.lean)
            job.derive_pass = (_link_derive, _link_args(prog))  # (`refresh` links the patched rows too)
        sched = _run_job(prog, job, label, not fresh)
        return sched, time.perf_counter() - t0, time.thread_time() - c0

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
        so that run's `time` finds them cached. A build hands a CVO's record twice (as compiled and in
        its fused table): each object's row is made once (a store slot and a content key per object)."""
        if self.plan is not None and works:
            with self._lock:  # (the timing thread may be patching a run's rows from the same caches)
                self._add_rows(works)

    # ---- rows -------------------------------------------------------------------------------------
    def _head(self, w: Work, o: Any) -> tuple:
        """The numbers of Work ``w``'s row from its op record ``o`` (`_NUM` order; its FIFO fields are
        ignored: `_link_fifos`)."""
        plan = self.plan
        kind = _MAT if o.engine in ("gemv", "gemm") else _SFU if o.engine == "sfu" else _OTHER
        return (plan.eix[o.engine], o.cycles, o.latency, o.tail, plan.path_id(o.path), o.xfer_bytes,
                -1 if o.stream is None else plan.six[o.stream], o.stream_bytes, o.is_async,
                self._sfu_depth if kind == _SFU else 0.0, kind, w.sfu_elems)

    def _rows(self, works: list[Work]) -> list[int]:
        """The store slots of ``works``' rows (`_add_rows` first)."""
        self._add_rows(works)
        return list(map(_slot_of, map(self._rows_by_id.__getitem__, map(id, works))))

    def _add_rows(self, works: Sequence[Work]) -> None:
        """Give the Works not seen yet (by identity; each object once) their rows, made with one `to_ops`
        over the ones whose numbers no earlier Work had (`_heads`). Every step is a C-level map over the
        batch (a build ahead hands ~1 300 Works a call): an id found in ``_rows_by_id`` is that very
        Work, kept alive there with its slot (no live object shares its id)."""
        rows = self._rows_by_id
        ids = list(map(id, works))
        known = list(map(rows.__contains__, ids))
        if all(known):
            return
        missing = dict(compress(zip(ids, works, strict=True), map(not_, known)))  # (a Work twice: once)
        if len(rows) + len(missing) > _MAX_ROWS:
            # full: start over with this batch, never part-way through it (its rows are looked up next)
            rows.clear()
            self._store.clear()
            missing = dict(zip(ids, works, strict=True))
        new = list(missing.values())
        first = self._store.add(self._heads(new), list(map(_reads, new)), list(map(_writes, new)))
        rows.update(zip(missing, zip(new, range(first, first + len(new)), strict=True), strict=True))

    def _heads(self, works: list[Work]) -> np.ndarray:
        """The numbers of ``works``' rows (`_head`; one row each, float64), by content: one `to_ops` over
        those no earlier Work had (`_content`). A content's row is kept once, in ``_table``; the
        per-Work work is two C-level maps and one gather."""
        by_content = self._by_content
        keys = list(map(_content, works))
        at = list(map(by_content.get, keys))
        if None in at:
            misses = _first_of(keys, works, at)  # one Work per new content (a layer's heads repeat theirs)
            if len(by_content) + len(misses) > _MAX_ROWS:  # full: start over with this batch's contents
                by_content.clear()
                self._table_n = 0
                misses = _first_of(keys, works, [None] * len(keys))
            rows = [self._head(w, o) for w, o in
                    zip(misses.values(), to_ops(self.hw, list(misses.values()), _OpRecord), strict=True)]
            first = self._table_n
            if first + len(rows) > self._table.shape[0]:
                self._table = _grown(self._table, max(2 * self._table.shape[0], first + len(rows), 1024))
            self._table[first:first + len(rows)] = rows
            self._table_n = first + len(rows)
            for i, k in enumerate(misses, first):
                by_content[k] = i
            at = list(map(by_content.get, keys))
        return self._table[np.array(at, np.int64)]

    def _build(self, works: list[Work]) -> _Program:
        n = len(works)
        if n >= BULK_ROWS and 2 * sum(map(self._rows_by_id.__contains__, map(id, works))) < n:
            heads, rd, nrd, wr, nwr = self._direct(works)
        else:
            heads, rd, nrd, wr, nwr = self._store.rows(np.array(self._rows(works), np.int64))
        num = np.ascontiguousarray(heads.T)  # (each column a contiguous array, as numba's loop takes)
        i64 = np.int64
        cols = timing_fast.Columns(
            num[0].astype(i64), num[1], num[2], num[3], num[5], num[4].astype(i64), num[6].astype(i64),
            num[7], np.full(n, -1, i64), num[9], np.zeros(n), num[8] != 0, rd, nrd, wr, nwr)
        return _Program(works, cols, num[10].astype(i64), num[11].astype(i64))

    def _direct(self, works: list[Work]) -> tuple[np.ndarray, ...]:
        """The rows of ``works`` made from the Works themselves (`BULK_ROWS`), in the store's layout: their
        numbers (`_heads`, by content) and their ranges padded to the store's widths, which widen to
        theirs (so later runs patched through the store keep these columns)."""
        reads, writes = list(map(_reads, works)), list(map(_writes, works))
        st = self._store
        st.widen(max(map(len, reads), default=0), max(map(len, writes), default=0))
        rd, nrd = timing_fast.range_columns(reads, st.rd.shape[1])
        wr, nwr = timing_fast.range_columns(writes, st.wr.shape[1])
        return self._heads(works), rd, nrd, wr, nwr

    def _patch(self, prog: _Program, works: list[Work], pause: Callable[[], None]) -> None:
        """Rewrite the rows whose Work changed since this program length's last run (a few hundred of
        thousands: the attention's spans, the sparse rows; at a span bucket switch most rows): found by
        identity, gathered from the store."""
        old = prog.works
        at = list(compress(range(len(works)), map(is_not, works, old)))  # (by identity, in C)
        prog.works, prog.first = works, at[0] if at else len(works)
        if not at:
            return
        pause()
        if len(at) >= BULK_ROWS and 2 * len(at) >= len(works):  # most rows new: from the Works themselves
            self._patch_bulk(prog, works, at)
            return
        # a Work not seen before with its position's ranges (a span-grown GEMV: a new record each token,
        # never seen again) takes only its numbers (by content); the others their rows (`_rows`)
        new, was = [works[i] for i in at], [old[i] for i in at]
        # the ranges compared only for the Works not known (an id kept there is that Work's): at a span
        # bucket switch ~1 900 rows change, every Work remembered by the build ahead, and each
        # comparison of their (reads, writes) was a deep tuple compare of cold objects
        unknown = list(compress(zip(at, new, was, strict=True),
                                map(not_, map(self._rows_by_id.__contains__, map(id, new)))))
        same = [i for i, w, v in unknown if _ranges(w) == _ranges(v)]  # (reads, writes) as before
        pause()
        if same:
            heads = self._heads(new if len(same) == len(at) else [works[i] for i in same])
            pause()
            _put_numbers(prog, np.array(same, np.int64), heads.T)
            if len(same) == len(at):
                return
            at = sorted(set(at).difference(same))
        slots = np.array(self._rows([works[i] for i in at]), np.int64)
        self._put_rows(prog, works, at, self._store.rows(slots))

    def _patch_bulk(self, prog: _Program, works: list[Work], at: list[int]) -> None:
        """`_patch` for a run whose Works are mostly new (`BULK_ROWS`): the rows at positions ``at`` made
        from their Works (`_direct`)."""
        self._put_rows(prog, works, at, self._direct([works[i] for i in at]))

    def _put_rows(self, prog: _Program, works: list[Work], at: list[int],
                  rows: tuple[np.ndarray, ...]) -> None:
        """Write ``rows`` (numbers, ranges and counts: `_RowStore.rows` or `_direct`) at positions ``at`` of
        ``prog``'s columns; where their range widths are not the columns' (the store's widened since the
        columns were made), the columns are made again from ``works`` instead."""
        heads, rd, nrd, wr, nwr = rows
        c = prog.cols
        if rd.shape[1] != c.rd.shape[1] or wr.shape[1] != c.wr.shape[1]:
            fresh = self._build(works)
            prog.cols, prog.kind, prog.sfu = fresh.cols, fresh.kind, fresh.sfu
            return
        changed = np.array(at, np.int64)
        _put_numbers(prog, changed, heads.T)
        c.rd[changed], c.nrd[changed], c.wr[changed], c.nwr[changed] = rd, nrd, wr, nwr


def _go_on() -> None:
    """`_patch` in line: no other thread of the timer's waits for the GIL (`_pause` would only sleep:
    `time.sleep(0)` is a timed sleep, ~55 µs of wall at the kernel's timer slack, more under load)."""


def _pause() -> None:
    """Let a thread waiting for the GIL take it (`_patch`, on the timing thread, holds it for ~0.75 ms a
    decode token at hidden 1024 in pieces of ~0.2: the executor's thread, back from a compiled call,
    would wait for all of it, up to the interpreter's 5 ms switch interval)."""
    time.sleep(0)


def _first_of(keys: list[tuple], works: list[Work], known: list) -> dict[tuple, Work]:
    """The first Work of each key not ``known`` (None), in order."""
    out: dict[tuple, Work] = {}
    for k, w, i in zip(keys, works, known, strict=True):
        if i is None:
            out.setdefault(k, w)
    return out


def _put_numbers(prog: _Program, changed: np.ndarray, num: np.ndarray) -> None:
    """Write rows' numbers (``num``: `TokenTimer._head`'s 12 columns, float64, one column per op) at
    positions ``changed`` of ``prog``'s columns."""
    c = prog.cols
    c.eng[changed], c.cycles[changed], c.lat[changed], c.tail[changed] = num[0], num[1], num[2], num[3]
    c.path[changed], c.xfer[changed], c.sidx[changed], c.sbr[changed] = num[4], num[5], num[6], num[7]
    c.isasync[changed], c.fifo_depth[changed] = num[8] != 0, num[9]
    prog.kind[changed], prog.sfu[changed] = num[10], num[11]


class _RowStore:
    """Rows as arrays, a slot each: the 12 numbers of `TokenTimer._head` (float64: integers and flags
    below 2**53 are exact) and the read/write ranges padded to the widest seen; grown by doubling."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.n = 0
        self.num = np.zeros((0, 12))
        self.rd, self.nrd = np.zeros((0, 1, 2), np.int64), np.zeros(0, np.int64)
        self.wr, self.nwr = np.zeros((0, 1, 2), np.int64), np.zeros(0, np.int64)

    def add(self, heads: np.ndarray, reads: list, writes: list) -> int:
        """Store rows (raises TypeError/ValueError for ranges that are not pairs of integers); the first
        one's slot."""
        k, first = len(heads), self.n
        rd, nrd = timing_fast.range_columns(reads, max(map(len, reads), default=0))
        wr, nwr = timing_fast.range_columns(writes, max(map(len, writes), default=0))
        if first + k > self.num.shape[0]:
            cap = max(2 * self.num.shape[0], first + k, 1024)
            self.num = _grown(self.num, cap)
            self.nrd, self.nwr = _grown(self.nrd, cap), _grown(self.nwr, cap)
            self.rd, self.wr = _grown(self.rd, cap), _grown(self.wr, cap)
        self.widen(rd.shape[1], wr.shape[1])
        self.num[first:first + k] = heads
        self.rd[first:first + k, :rd.shape[1]], self.nrd[first:first + k] = rd, nrd
        self.wr[first:first + k, :wr.shape[1]], self.nwr[first:first + k] = wr, nwr
        self.n = first + k
        return first

    def rows(self, slots: np.ndarray) -> tuple[np.ndarray, ...]:
        """The rows at ``slots``: numbers, read ranges and counts, write ranges and counts (copies)."""
        return self.num[slots], self.rd[slots], self.nrd[slots], self.wr[slots], self.nwr[slots]

    def widen(self, reads: int, writes: int) -> None:
        """Room for ``reads`` read and ``writes`` write ranges a row (the rows kept, zeros after them)."""
        if reads > self.rd.shape[1]:
            self.rd = _widened(self.rd, reads)
        if writes > self.wr.shape[1]:
            self.wr = _widened(self.wr, writes)


def _grown(a: np.ndarray, rows: int) -> np.ndarray:
    out = np.zeros((rows, *a.shape[1:]), a.dtype)
    out[:a.shape[0]] = a
    return out


def _widened(a: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros((a.shape[0], width, 2), a.dtype)
    out[:, :a.shape[1]] = a
    return out
