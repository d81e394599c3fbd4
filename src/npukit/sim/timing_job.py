"""The compiled loop's tables and buffers kept between runs of one program (`Job`).

A decode token re-runs the program of the token before it with a few rows changed (the attention
spans, the sparse rows: ~50 of ~2,100 on the embedded Gemma 3n). `timing_fast.Pending` derives every
per-op table and allocates every state and scratch array for each run; a `Job` keeps them: each run
re-derives the per-op tables over the (patched in place) `Columns` in one compiled pass, rebuilds the
engine and stream queues only when an op changed engine or stream membership, and puts every state
array back to the value `timing_fast._setup` gives it. The loop then runs on exactly what a fresh
`Pending` would hand it, so the schedules are the same bit for bit (`tests/sim/test_timing_job.py`).

A lean job also resumes: the loop's state before it issues op X depends only on ops before X (their
rows, FIFO links and derived tables; the queues; no queued op the prefetch walk could take as fetched
unissued, `_derive`'s TINY). So a run pauses before the first op whose row changed since the last run
(`refresh(first)`), the state is kept (`_keep`), and the runs after it, while no row before X changes,
start from that state instead of `_setup`'s: the same loop on the same state, so the same schedule
(`tests/sim/test_timing_job.py` runs both over a decode window's tokens).

A `Schedule` made from a job reads the job's buffers: it is ``stale`` once the job runs again (its
cycles were read at once; its full `TimingResult` must then be made afresh, `TokenTimer` does so).
"""

from __future__ import annotations

import time
from typing import Any

import numba as nb
import numpy as np

from npukit.sim import compile_report
from npukit.sim import timing_nb as nbl
from npukit.sim.timing_fast import Columns, Pending, Plan, Schedule, _pad
from npukit.sim.timing_types import BYTES_EPS

compile_report.install()  # first-run compiles are announced, never silent

_INF = np.inf
_LOW = 1 - 1e-6  # `timing_fast._static`'s bandwidth-bound threshold factor (the same double)
MOVED, TINY = 1, 2  # `_derive`'s flags: an op changed engine or stream queue; a queued op has ~0 bytes
MIN_PAUSE = 64  # the fewest ops before the first changed one worth a pause (the state's copy: ~50 µs)


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _derive(cycles, xfer, pid, narrow, rows, lens, sidx, sbr, fifo, isasync, depth, elems,
            cap, xcap, xlow, nominal, path, plen, sb, link, full, haswork, eng, eng_was,
            stream_was):  # pragma: no cover - numba
    """`timing_fast._static`'s per-op tables, written in place (the same IEEE operations per op), and
    flags: MOVED, an op moved to another engine or stream queue since ``eng_was`` and ``stream_was``
    (`_stream_of` as the job's queues were built); TINY, a queued op's bytes are within BYTES_EPS of 0
    (the loop's prefetch walk takes such an op as fetched before its issue: its row then matters
    earlier than its issue, and a paused state is not kept)."""
    flags = 0
    for p in range(cycles.shape[0]):
        c = _INF
        if cycles[p] > 0:
            c = 1.0 / cycles[p]
        cap[p] = c
        xc = c * xfer[p]
        xcap[p], xlow[p] = xc, xc * _LOW
        if xfer[p] > 0:
            v = narrow[pid[p]] / xfer[p]
            nominal[p] = v if v < c else c
        else:
            nominal[p] = c
        for a in range(path.shape[1]):
            path[p, a] = rows[pid[p], a]
        plen[p] = lens[pid[p]]
        s = sbr[p] if sidx[p] >= 0 else 0.0
        sb[p] = s
        lk, fl = -1, 0.0
        pr = fifo[p]
        if pr >= 0 and isasync[pr] and elems[p] > 0:
            lk, fl = pr, depth[p] / elems[p]
        link[p], full[p] = lk, fl
        haswork[p] = cycles[p] != 0 or xfer[p] != 0 or s != 0 or lk >= 0
        queue = sidx[p] if sidx[p] >= 0 and sbr[p] > 0 else -1
        if eng[p] != eng_was[p] or queue != stream_was[p]:
            flags |= MOVED
        if queue >= 0 and s <= BYTES_EPS:
            flags |= TINY
    return flags


class Job(Pending):
    """`Pending` for a program run again and again: `refresh` after its `Columns` were patched in
    place, then `loop` (any thread) and `done`, as for `Pending`."""

    # The compiled pass `refresh` calls, ``fn(*prefix, *`_derive`'s arguments)`` → `_derive`'s flags. A
    # caller with a compiled pass of its own to run on the columns first (pccx's FIFO links) sets one
    # that runs both in one call, `_derive` compiled into it: one function loaded from numba's cache
    # in a process instead of two (~4 ms each, the first time), and one call a run instead of two.
    # The prefix's pass must run over no op for empty prefix arrays (`refresh` calls it alone so
    # before a rebuild, with `_derive`'s arguments empty).
    derive_pass: tuple[Any, tuple] = (_derive, ())

    def __init__(self, plan: Plan, c: Columns, events: int = 0, lean: bool = False) -> None:
        super().__init__(plan, c, events, lean)
        self.cols = c
        self.generation = 0
        self._paths = -1  # how many of the plan's paths the path tables hold
        self._entry: tuple[tuple, Any] | None = None  # (the args it was typed for, the compiled entry)
        self._derive_call: BoundCall | None = None  # `_derive` on this job's arrays (new path tables: anew)
        # the state kept at a pause before op ``_pause_at`` (array, its saved copy), and whether the
        # next `loop` pauses (`refresh`)
        self._image: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._pause_at = -1
        self._snapshot()

    def loop(self) -> None:
        """`Pending.loop` through the compiled entry point of this job's argument types, found once:
        the dispatcher types the ~100 arrays of the loop's argument tuples on every call (~0.7 ms
        holding the GIL, on the timing thread: the executor's thread waits for it meanwhile). The
        arrays are the same objects from run to run (`refresh` writes them in place); `_rebuild`
        makes new ones, and so a new lookup. A run that pauses (`refresh`) has its state kept
        (`_keep`) and goes on from there."""
        t0, c0 = time.perf_counter(), time.thread_time()
        status = self._call()
        if status == nbl.PAUSED:
            self._keep()
            status = self._call()
        self.status = status
        self.loop_s, self.loop_cpu_s = time.perf_counter() - t0, time.thread_time() - c0

    def _call(self) -> int:
        args, got = self.args, self._entry
        if got is None or got[0] is not args:
            got = self._entry = (args, _entry_point(args))
        if got[1] is None:
            self._entry = None  # (compiled by this call: looked up next time)
            return int(nbl.run(*args))
        return int(got[1](*args))

    def _keep(self) -> None:
        """Keep the state of a run paused before op ``_pause_at`` (every state array, the hazards
        found so far, the saved scalars), and set it to resume."""
        iv, dep_buf = self.args[9], self.args[1].dep_buf
        n_dep = int(iv[nbl.IV_SAVE + 6])  # (the count saved at the pause: `timing_nb.run`)
        arrays = [a for a, _, _ in self._state] + [dep_buf[:n_dep]]
        self._image = [(a, a.copy()) for a in arrays]
        iv[nbl.IV_RESUME], iv[nbl.IV_PAUSE] = 1, -1

    def _snapshot(self) -> None:
        """Remember each state array's value as `_setup` made it (the loop's inputs, not its tables;
        the hazard buffer and the samples are written before they are read and are left as they are,
        as are the busy and stall sums in a lean job). Left out too: the queues and stream tables,
        which the loop never writes, and the event scratch it writes before it reads each event (the
        flows; the head lists, FIFO pairs, stream targets and levels from 0 or for every stream; an
        op's rate and reason only for ops running this event), but not ``rmark``: its stamps restart
        at 0 in a fresh run, so a mark left by another run could match."""
        C, S, E, R, W, F, _, A, _, iv, fv, _, res_bytes = self.args
        skip = {id(S.dep_buf), *map(id, F), *(id(a) for a in W if a is not W.rmark)}
        skip |= {id(a) for a in (E.q_ops, E.q_off, E.q_len, R.s_ops, R.s_off, R.s_len, R.s_capb, R.s_bpc,
                                 R.s_path, R.s_plen)}
        if self.lean:  # the sums a lean run never touches keep `_setup`'s values
            skip |= {id(a) for a in (*A, S.busy, res_bytes)}
        arrays = [*S, *E, *R, *W, *F, *A, iv, fv, res_bytes]
        self._state = []
        for a in arrays:
            if id(a) in skip:
                continue
            first = a.flat[0] if a.size else None
            if a.size and (a == first).all():
                self._state.append((a, first, None))
            else:
                self._state.append((a, None, a.copy()))
        self._eng = C.eng.copy()
        self._streams = _stream_of(C)

    def _derive_args(self, narrow: np.ndarray, rows: np.ndarray, lens: np.ndarray) -> tuple:
        """`_derive`'s arguments: the columns it reads, the path tables given, the per-op tables it
        writes."""
        c, C = self.cols, self.C
        return (c.cycles, c.xfer, c.path, narrow, rows, lens, c.sidx, c.sbr, c.fifo, c.isasync,
                c.fifo_depth, c.fifo_elems, C.cap, C.xcap, C.xlow, C.nominal, C.path, C.plen, C.sb,
                C.link, C.full, C.haswork, C.eng, self._eng, self._streams)

    def refresh(self, first: int = 0) -> None:
        """Ready the job for a run of its patched columns (as a new `Pending` on them would be), whose
        rows before ``first`` are as in its last run: from the state kept at a pause (`loop`) where
        that pause came before ``first``; else from `_setup`'s, pausing before ``first``."""
        C = self.C
        plan = self.plan
        # paths registered since: the padded tables again, of the paths registered in full (a refresh
        # may run on the timing thread while the executor's thread registers another: `Plan.path_id`
        # appends its row, then its capacity, and never changes one registered)
        n = min(len(plan.path_rows), len(plan.narrow))
        if n != self._paths:
            rows = plan.path_rows[:n]
            self._rows = _pad(rows)
            self._lens = np.array([len(r) for r in rows], np.int64)
            self._narrow = np.array(plan.narrow[:n], np.float64)
            self._paths = n
            self._derive_call = None
        fn, prefix = self.derive_pass
        if self._rows.shape[1] != C.path.shape[1]:  # a longer path than the tables were made for
            if prefix:  # (the prefix's pass alone, as the tables are made from what it writes)
                fn(*prefix, *(a[:0] for a in self._derive_args(self._narrow, self._rows, self._lens)))
            self._rebuild()
            return
        derive = self._derive_call
        if derive is None:
            args = self._derive_args(self._narrow, self._rows, self._lens)
            derive = self._derive_call = BoundCall(fn, (*prefix, *args))
        flags = derive()
        if flags & MOVED:
            self._rebuild()  # an op moved to another engine or stream: the queues again
            return
        self.generation += 1
        self.status = -1
        iv = self.args[9]
        if self._image is not None and first >= self._pause_at and not flags & TINY:
            for a, saved in self._image:  # the rows before the pause are those it was kept with
                np.copyto(a, saved)
            iv[nbl.IV_RESUME], iv[nbl.IV_PAUSE] = 1, -1
            return
        self._image = None
        for a, value, init in self._state:
            if init is None:
                a.fill(value)
            else:
                np.copyto(a, init)
        if self.lean and not flags & TINY and MIN_PAUSE <= first < self.n:
            iv[nbl.IV_PAUSE] = self._pause_at = first

    def _rebuild(self, events: int = 0) -> None:
        gen = self.generation
        Job.__init__(self, self.plan, self.cols, events, self.lean)
        self.generation = gen + 1

    def done(self, label: Any = None) -> Schedule:
        full = self.status == nbl.FULL
        sched = super().done(label)
        if full:  # its buffers proved too small (the rerun's are its own): the next run gets that room
            self._rebuild(sched.events)
        else:
            sched.owner, sched.generation = self, self.generation
        return sched


def _entry_point(args: tuple) -> Any:
    """`timing_nb.run`'s compiled entry point for ``args``' types (`entry_of`)."""
    return entry_of(nbl.run, args)


def entry_of(fn: Any, args: tuple) -> Any:
    """Compiled function ``fn``'s entry point for ``args``' types (what its dispatcher would pick: the
    overload of exactly those types), or None when none is compiled yet. The entry point unboxes its
    arguments as that overload's types and releases the GIL as the dispatcher's call does. Found once
    per array layout (`_layout`): numba's typing of the loop's ~100 arrays costs ~1 ms, a new program's
    job (and its FIFO-link and table passes) would pay it on every new span bucket."""
    if not hasattr(fn, "overloads"):  # (a plain function: numba's JIT disabled)
        return None
    layout = _layout(args)
    if layout is not None and (hit := _entries.get((fn, layout))) is not None:
        return hit
    got = fn.overloads.get(_types_of(fn, args, layout))
    if got is None:
        return None
    if layout is not None:
        _entries[(fn, layout)] = got.entry_point
    return got.entry_point


_entries: dict[tuple[Any, tuple], Any] = {}  # (function, `_layout` of its arguments) → entry point
_types: dict[tuple, Any] = {}  # numba's type of an argument, by its `_layout`


def _types_of(fn: Any, args: tuple, layout: tuple | None) -> tuple:
    """numba's types of ``args`` (``fn.typeof_pyval``'s), each typed once per `_layout` in a process:
    the loop's first lookup with a compiled overload (the first decode token) then reuses the types
    of the lookup that found none (the prompt's run, which loads the loop), not typing its ~100
    arrays again (~1 ms)."""
    if layout is None:
        return tuple(fn.typeof_pyval(a) for a in args)
    out = []
    for a, key in zip(args, layout, strict=True):
        ty = _types.get(key)
        if ty is None:
            ty = _types[key] = fn.typeof_pyval(a)
        out.append(ty)
    return tuple(out)


def _layout(args: tuple) -> tuple | None:
    """What numba's type of each argument is made from, for arguments that are arrays or named tuples
    of arrays (None: another kind, typed by numba each time): an array's dtype, dimensions, layout
    (numba's: C where C-contiguous, else F where F-contiguous, else A), writability and alignment
    (`numba.typeof`'s Array fields); a tuple's class and its arrays'."""
    out: list = []
    for a in args:
        if type(a) is np.ndarray:
            out.append(_array_layout(a))
        elif isinstance(a, tuple) and all(type(x) is np.ndarray for x in a):
            out.append((type(a), *map(_array_layout, a)))
        else:
            return None
    return tuple(out)


def _array_layout(a: np.ndarray) -> tuple:
    f = a.flags
    return a.dtype, a.ndim, "C" if f.c_contiguous else "F" if f.f_contiguous else "A", f.writeable, f.aligned


class BoundCall:
    """Compiled function ``fn`` called again and again on one tuple of arrays (written in place between
    calls) through the entry point of their types, found once: the dispatcher types every array on
    every call (~2 µs each, holding the GIL; `_derive`'s 25 arrays cost 60 µs a decode token on the
    timing thread). Until ``fn`` has an overload for them, the dispatcher (which compiles it)."""

    __slots__ = ("args", "entry", "fn")

    def __init__(self, fn: Any, args: tuple) -> None:
        self.fn, self.args, self.entry = fn, args, entry_of(fn, args)

    def __call__(self) -> Any:
        if self.entry is None:
            out = self.fn(*self.args)
            self.entry = entry_of(self.fn, self.args)
            return out
        return self.entry(*self.args)


def _stream_of(C: nbl.OpTable) -> np.ndarray:
    """Each op's stream queue (`timing_fast._setup`: an op with stream bytes), -1: none."""
    return np.where((C.sidx >= 0) & (C.sbr > 0), C.sidx, -1)


def stale(sched: Schedule) -> bool:
    """Whether ``sched``'s `TimingResult` must be made afresh: a lean run's (times only), or one that
    reads the buffers of a `Job` that has run again since."""
    owner = sched.owner
    return sched.times_only or (owner is not None and owner.generation != sched.generation)

