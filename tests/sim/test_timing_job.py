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

from npukit.sim import timing_fast, timing_job
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
    job, last = None, None
    for ops in series(data, m, 4):
        try:
            want = dump(Sim(m, ops).run())
        except TimingError:
            continue  # (errors: `Pending.done`'s, unchanged; tests/sim/test_timing_fast.py words them)
        fresh = columns(plan, ops)
        if job is None:
            job = timing_job.Job(plan, fresh)
        else:
            for f in dataclasses.fields(fresh):  # the run's columns written over the kept ones
                np.copyto(getattr(job.cols, f.name), getattr(fresh, f.name))
            job.refresh()
        job.loop()
        sched = job.done()
        assert dump(sched.result(ops)) == want
        if last is not None:
            assert timing_job.stale(last)  # its buffers now hold this run
        assert not timing_job.stale(sched)
        last = sched
