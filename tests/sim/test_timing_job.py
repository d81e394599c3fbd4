"""`timing_job.Job` (the compiled loop's tables and buffers kept between runs of a program whose columns
are patched in place) against the readable loop (`timing_state.Sim`, the model's definition) on each
program of a random series of the same length: every schedule bit for bit, engines, streams, paths and
FIFO links changing between runs, and a schedule read after its job ran again marked stale."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npukit.sim import timing_fast, timing_job, timing_nb
from npukit.sim.timing import TimingError
from npukit.sim.timing_state import Sim

from .test_timing_fast import dump, machines, programs

WIDTH = 2  # the programs' most ranges per op (`programs`): every run's columns share one shape


def columns(plan: timing_fast.Plan, ops: list) -> timing_fast.Columns:
    c = timing_fast.Columns.from_ops(plan, ops)
    rd, nrd = timing_fast.range_columns([o.reads for o in ops], WIDTH)
    wr, nwr = timing_fast.range_columns([o.writes for o in ops], WIDTH)
    return dataclasses.replace(c, rd=rd, nrd=nrd, wr=wr, nwr=nwr)


def series(data, m, runs: int) -> list[list]:
    """``runs`` random programs cut to the shortest one's length (a FIFO producer precedes its consumer,
    so a cut program stays whole)."""
    progs = [data.draw(programs(m)) for _ in range(runs)]
    n = min(map(len, progs))
    return [ops[:n] for ops in progs]


@pytest.mark.slow  # (about 8 s)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_kept_job_schedules_each_patched_run_as_the_readable_loop(data):
    m = data.draw(machines())
    plan = timing_fast.Plan.of(m)
    if plan is None:
        return
    job, lean, last = None, None, None
    for ops in series(data, m, 4):
        try:
            want = dump(Sim(m, ops).run())
        except TimingError:
            continue  # (errors: `Pending.done`'s, unchanged; tests/sim/test_timing_fast.py words them)
        fresh = columns(plan, ops)
        if job is None:
            job, lean = timing_job.Job(plan, fresh), timing_job.Job(plan, columns(plan, ops), lean=True)
        else:
            for f in dataclasses.fields(fresh):  # the run's columns written over the kept ones
                np.copyto(getattr(job.cols, f.name), getattr(fresh, f.name))
                np.copyto(getattr(lean.cols, f.name), getattr(fresh, f.name))
            job.refresh()
            lean.refresh()
        job.loop()
        sched = job.done()
        assert dump(sched.result(ops)) == want
        lean.loop()
        times = lean.done()  # a lean run: the same times, no sums or samples, its result made afresh
        assert times.cycles == sched.cycles and timing_job.stale(times)
        for k in ("issue", "start", "end", "fetch_t0", "fetch_t1"):
            assert np.array_equal(times.a[k], sched.a[k]), k
        if last is not None:
            assert timing_job.stale(last)  # its buffers now hold this run
        assert not timing_job.stale(sched)
        last = sched


def test_a_job_whose_buffers_were_too_small_grows_them_and_stays_exact():
    """The loop's sample and hazard buffers start at 4·n + 64 entries; a run that fills them is rerun
    with room (`Pending.done`), its schedule owns that rerun's arrays, and the job keeps the room."""
    from .test_timing_fast import Machine, Op, Resource, Stream

    m = Machine(engines=("a", "b"), resources=(Resource("r", 1.0),),
                streams=(Stream("s", ("r",), 64.0),), issue_window=None)
    ops = [Op(index=i, engine="ab"[i % 2], label="", cycles=7.0 + i, path=("r",), xfer_bytes=3.0 + i,
              stream="s" if i % 3 == 0 else None, stream_bytes=50.0 if i % 3 == 0 else 0.0,
              is_async=True, reads=((i, i + 2),), writes=((i + 1, i + 3),)) for i in range(12)]
    plan = timing_fast.Plan.of(m)
    job = timing_job.Job(plan, columns(plan, ops))
    job.events = 1  # room for one sample and one hazard: the first run fills them
    job.args, job._finish = timing_fast._setup(plan, job.C, job.n, job.events)
    job._snapshot()
    want = dump(Sim(m, ops).run())
    job.loop()
    assert job.status == timing_nb.FULL
    first = job.done()
    assert dump(first.result(ops)) == want and not timing_job.stale(first)
    assert job.events > 1
    job.refresh()
    job.loop()
    assert job.status == timing_nb.OK
    assert dump(job.done().result(ops)) == want


def test_a_job_loops_through_the_entry_point_typed_for_its_arguments(monkeypatch):
    """`Job.loop` types its ~100 argument arrays once, then calls the compiled overload's entry point
    (the dispatcher typed them on every call, holding the GIL): the same schedule as the readable
    loop, run after run, and a new lookup once `_rebuild` has made new arrays."""
    from .test_timing_fast import Machine, Op, Resource, Stream

    m = Machine(engines=("a", "b"), resources=(Resource("r", 1.0),),
                streams=(Stream("s", ("r",), 64.0),), issue_window=None)
    ops = [Op(index=i, engine="ab"[i % 2], label="", cycles=5.0 + i, path=("r",), xfer_bytes=2.0 + i,
              stream="s" if i % 4 == 0 else None, stream_bytes=40.0 if i % 4 == 0 else 0.0,
              is_async=i % 2 == 0, reads=((i, i + 2),), writes=((i + 1, i + 3),)) for i in range(10)]
    plan = timing_fast.Plan.of(m)
    want = dump(Sim(m, ops).run())
    lookups = []
    real = timing_job._entry_point
    monkeypatch.setattr(timing_job, "_entry_point", lambda args: lookups.append(args) or real(args))
    job = timing_job.Job(plan, columns(plan, ops))
    for run in range(3):
        if run:
            job.refresh()
        job.loop()
        assert dump(job.done().result(ops)) == want
    typed = [timing_nb.run.typeof_pyval(a) for a in job.args]
    assert job._entry is not None and job._entry[1] is timing_nb.run.overloads[tuple(typed)].entry_point
    assert len(lookups) <= 2  # (the first call may find nothing compiled yet: the dispatcher compiles)
    before = len(lookups)
    job._rebuild()
    job.loop()
    assert len(lookups) == before + 1 and job._entry[0] is job.args
    assert dump(job.done().result(ops)) == want


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_refresh_takes_only_paths_registered_in_full(data):
    """A refresh may run on the timing thread while the executor's thread registers a path
    (`Plan.path_id`: its row appended, then its capacity): the job's path tables then cover the paths
    registered in full, and the half-registered one once it is whole."""
    m = data.draw(machines())
    plan = timing_fast.Plan.of(m)
    if plan is None:
        return
    ops = data.draw(programs(m))
    job = timing_job.Job(plan, columns(plan, ops))
    whole = len(plan.path_rows)
    plan.path_rows.append(plan.path_rows[0] if whole else ())  # a path half-way through its registration
    job.refresh()
    assert job._paths == whole and job._rows.shape[0] == whole and job._narrow.shape[0] == whole
    plan.narrow.append(plan.narrow[0] if whole else float("inf"))
    job.refresh()
    assert job._paths == whole + 1 and job._narrow.shape[0] == whole + 1 and len(job._lens) == whole + 1


def _nine_ops(*extra: tuple[str, float]) -> tuple:
    """A two-engine machine (resource "r", plus ``extra`` resources) and nine ops on it, every third
    streamed, every other async, each reading and writing its own small range."""
    from .test_timing_fast import Machine, Op, Resource, Stream

    m = Machine(engines=("a", "b"), resources=(Resource("r", 1.0), *(Resource(n, w) for n, w in extra)),
                streams=(Stream("s", ("r",), 64.0),), issue_window=None)
    ops = [Op(index=i, engine="ab"[i % 2], label="", cycles=4.0 + i, path=("r",), xfer_bytes=1.0 + i,
              stream="s" if i % 3 == 0 else None, stream_bytes=30.0 if i % 3 == 0 else 0.0,
              is_async=i % 2 == 1, reads=((i, i + 2),), writes=((i + 1, i + 3),)) for i in range(9)]
    return m, ops


def test_refresh_rebuilds_the_queues_when_an_op_changes_engine_or_stream(monkeypatch):
    """`_derive` says whether an op moved to another engine or stream queue (its compiled pass compares
    each op with the queues the job was built for): the job is then rebuilt, else it is not, and either
    way the schedule is the readable loop's."""
    from .test_timing_fast import Machine, Op, Resource, Stream

    m = Machine(engines=("a", "b"), resources=(Resource("r", 1.0),),
                streams=(Stream("s", ("r",), 64.0),), issue_window=None)

    def program(moved: str, streamed: int) -> list:
        return [Op(index=i, engine=moved if i == 3 else "ab"[i % 2], label="", cycles=3.0 + i, path=("r",),
                   xfer_bytes=1.0 + i, stream="s" if i % 4 == streamed else None,
                   stream_bytes=20.0 if i % 4 == streamed else 0.0, is_async=i % 2 == 0,
                   reads=((i, i + 2),), writes=((i + 1, i + 3),)) for i in range(8)]

    plan = timing_fast.Plan.of(m)
    job = timing_job.Job(plan, columns(plan, program("b", 0)))
    job.loop()
    job.done()
    rebuilt = []
    real = timing_job.Job._rebuild
    monkeypatch.setattr(timing_job.Job, "_rebuild", lambda self, *a: rebuilt.append(1) or real(self, *a))
    for moved, streamed, rebuilds in (("b", 0, 0), ("a", 0, 1), ("a", 0, 1), ("a", 1, 2), ("a", 1, 2)):
        ops = program(moved, streamed)
        fresh = columns(plan, ops)
        for f in dataclasses.fields(fresh):
            np.copyto(getattr(job.cols, f.name), getattr(fresh, f.name))
        job.refresh()
        assert len(rebuilt) == rebuilds, (moved, streamed)
        job.loop()
        assert dump(job.done().result(ops)) == dump(Sim(m, ops).run())


def test_a_bound_call_goes_through_the_entry_point_once_compiled():
    """`BoundCall` calls the dispatcher until an overload for its arguments exists, then that overload's
    entry point, with the same result."""
    out = np.zeros(3)
    call = timing_job.BoundCall(timing_job._derive, ())  # (no overload of an empty signature)
    assert call.entry is None
    ops = [np.ones(3), np.ones(3), np.zeros(3, np.int64), np.ones(1), np.zeros((1, 1), np.int64),
           np.ones(1, np.int64), np.full(3, -1, np.int64), np.zeros(3), np.full(3, -1, np.int64),
           np.zeros(3, np.bool_), np.zeros(3), np.zeros(3)]
    tables = [out, np.zeros(3), np.zeros(3), np.zeros(3), np.zeros((3, 1), np.int64), np.zeros(3, np.int64),
              np.zeros(3), np.zeros(3, np.int64), np.zeros(3), np.zeros(3, np.bool_)]
    same = [np.zeros(3, np.int64), np.zeros(3, np.int64), np.full(3, -1, np.int64)]
    call = timing_job.BoundCall(timing_job._derive, (*ops, *tables, *same))
    first = call()
    assert call.entry is not None and call.entry is timing_job.entry_of(timing_job._derive, call.args)
    assert first == 0 and call() == 0 and np.array_equal(out, np.ones(3))  # (`_derive`'s flags: none)
    same[1][2] = 1  # op 2 was on engine 1
    assert call() == timing_job.MOVED


def test_entry_points_found_by_array_layout_are_the_ones_numba_types_for():
    """`entry_of` keeps what it found per layout of the arguments (`_layout`): each answer is still the
    overload numba's own typing picks, for arguments that differ only in contiguity, writability or the
    named tuple's class, and None where that exact overload is not compiled."""
    import collections

    import numba as nb

    @nb.njit
    def first(t, b):  # pragma: no cover - numba
        return t[0][0] + b[0]

    pair, other = collections.namedtuple("pair", "a b"), collections.namedtuple("other", "a b")

    def typed_entry(args):
        hit = first.overloads.get(tuple(first.typeof_pyval(a) for a in args))
        return None if hit is None else hit.entry_point

    c = np.arange(8.0)
    strided = np.arange(16.0)[::2]
    frozen = np.arange(8.0)
    frozen.flags.writeable = False
    cases = [(pair(c, c), c), (pair(strided, c), c), (pair(c, c), frozen), (other(c, c), c),
             (pair(c, c.astype(np.int64)), c)]
    first(*cases[0])
    for args in cases:  # before and after each is compiled
        assert timing_job.entry_of(first, args) is typed_entry(args)
    assert all(timing_job.entry_of(first, args) is None for args in cases[1:])
    for args in cases[1:]:
        first(*args)
    got = [timing_job.entry_of(first, args) for args in cases]
    assert got == [typed_entry(args) for args in cases] and len(set(got)) == len(cases)


def resumes(job: timing_job.Job) -> bool:
    """Whether the job's next loop starts from a kept state (`refresh` set it to)."""
    return bool(job.args[9][timing_nb.IV_RESUME])


@pytest.mark.slow  # (about 6 s)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_lean_job_resumed_from_a_kept_state_gives_the_fresh_runs_times(data):
    """Runs that keep a prefix of the last run's ops (the rest changed) pause before the first changed
    op and resume later runs from there: every run's times are a fresh lean `Pending`'s on its ops."""
    m = data.draw(machines())
    plan = timing_fast.Plan.of(m)
    if plan is None:
        return
    first_ops = data.draw(programs(m))
    runs, prev = [first_ops], first_ops
    for _ in range(5):  # each run: the last one's first j ops, then another program's
        other = data.draw(programs(m))
        n = min(len(prev), len(other))
        j = data.draw(st.integers(0, n))
        prev = [*prev[:j], *other[j:n]]
        runs.append(prev)
    n = min(map(len, runs))
    runs = [ops[:n] for ops in runs]
    job, last = None, None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(timing_job, "MIN_PAUSE", 1)  # (the drawn programs are short)
        for ops in runs:
            fresh = timing_fast.Pending(plan, columns(plan, ops), lean=True)
            fresh.loop()
            try:
                want = fresh.done()
            except TimingError:
                job = None  # (errors: `Pending.done`'s; a job starts again after one)
                continue
            if job is None:
                job = timing_job.Job(plan, columns(plan, ops), lean=True)
            else:
                _reload(job, plan, ops, next((p for p, (a, b) in enumerate(zip(ops, last, strict=True))
                                              if a != b), n))
            job.loop()
            got = job.done()
            assert got.cycles == want.cycles
            for k in ("issue", "start", "end", "fetch_t0", "fetch_t1"):
                assert np.array_equal(got.a[k], want.a[k]), k
            last = ops


def _reload(job, plan, ops, first):
    """The job's columns rewritten in place with ``ops``' (as a program's next run patches them), then
    refreshed from ``first``, the first op whose row changed."""
    cols = columns(plan, ops)
    for f in dataclasses.fields(cols):
        np.copyto(getattr(job.cols, f.name), getattr(cols, f.name))
    job.refresh(first)


def test_a_long_program_resumes_where_its_rows_change_and_stays_exact():
    """A pccx-shaped 600-op program whose ops from 300 on change between runs (as a decode token's
    attention rows do): the second run pauses before op 300 and keeps that state, later runs resume
    from it; a run that changes an op before 300 starts over. Every run: a fresh lean run's times."""
    from .test_timing_fast import pccx_like

    m, base = pccx_like()
    plan = timing_fast.Plan.of(m)
    job = None
    kept = []
    real_keep = timing_job.Job._keep
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(timing_job.Job, "_keep", lambda self: kept.append(self._pause_at) or real_keep(self))
        plan_runs = [(None, 0.0), (300, 1.0), (300, 2.0), (310, 3.0), (120, 4.0), (200, 5.0), (400, 6.0)]
        resumed = []
        for first, extra in plan_runs:
            ops = [dataclasses.replace(o, cycles=o.cycles + extra) if first is not None and p >= first
                   and o.engine == "gemv" else o for p, o in enumerate(base)]
            fresh = timing_fast.Pending(plan, columns(plan, ops), lean=True)
            fresh.loop()
            want = fresh.done()
            if job is None:
                job = timing_job.Job(plan, columns(plan, ops), lean=True)
            else:
                _reload(job, plan, ops, first)
                resumed.append(resumes(job))
            job.loop()
            got = job.done()
            assert got.cycles == want.cycles
            for k in ("issue", "start", "end", "fetch_t0", "fetch_t1"):
                assert np.array_equal(got.a[k], want.a[k]), k
    # run 2 pauses at 300 (kept); 3 and 4 resume (300, 310 >= 300); 5 changes op 120: starts over,
    # pausing there; 6 (200 >= 120) and 7 resume
    assert kept == [300, 120] and resumed == [False, True, True, False, True, True]


def test_a_derive_pass_with_a_prefix_runs_it_first_and_alone_before_a_rebuild():
    """`Job.derive_pass`: `refresh` calls ``fn(*prefix, *`_derive`'s arguments)`` (a caller's own pass on
    the columns, then the tables, in one call) and the schedule is the readable loop's; where the path
    tables widen (a rebuild, no tables derived), it calls the prefix's pass alone, `_derive`'s arrays
    empty."""
    m, ops = _nine_ops(("q", 2.0))
    plan = timing_fast.Plan.of(m)
    job = timing_job.Job(plan, columns(plan, ops))
    seen: list[tuple[int, int]] = []
    marker = np.zeros(1)

    def both(mark, *args):
        seen.append((len(mark), len(args[0])))  # (the prefix's ops, the tables' ops)
        return timing_job._derive(*args)

    job.derive_pass = (both, (marker,))
    job.refresh()
    job.loop()
    assert seen == [(1, 9)] and dump(job.done().result(ops)) == dump(Sim(m, ops).run())
    plan.path_id(("r", "q"))  # a longer path registered: the path tables widen, the job is rebuilt
    job.refresh()
    job.loop()
    assert seen[1:] == [(1, 0)] and job.derive_pass[0] is both  # (a rebuild keeps the job's pass)
    assert dump(job.done().result(ops)) == dump(Sim(m, ops).run())
