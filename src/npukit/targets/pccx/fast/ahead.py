"""A tagged program slot of `FastSimulator` built ahead of its first load, a slice per call.

The driver switches programs when the attention span enters a new power-of-two bucket. The two
programs differ only in the words that name a span buffer (7-11 % of a hidden-1024 decode program,
`npukit.targets.pccx.switch`), and each differing word is a step to decode and bind (~25 µs each in
Python) and its fused run's rows to lower again: milliseconds in the one token that crosses the bucket.
`prepare` builds the new slot's plan from the current one (changed steps only, the same diff
`FastSimulator.load_program` makes) in slices of ``limit`` steps, so the driver can spread that work
over the tokens before the switch; the switch itself then finds the slot and rechecks only the
span-patched words. A step's closure depends only on
its word and index (never on device state), so a plan built ahead equals the one built at the switch.
A finished slot's fused runs are lowered and its GEMV/GEMM steps bound too (`build_tables`, for the
constant caches predicted at each step; the rows and steps check the real entries when they run,
and rebind if they differ), so the switch neither lowers tables nor runs its fused steps one by one
(so it calls no single-step kernel that numba would load from its cache then).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from npukit.sim.work import Work
from npukit.targets.pccx.fast import fastrun
from npukit.targets.pccx.fast.fastcvo import FusedCvoStep, fuse_groups

# the Work records `build_tables` makes in about the time one step compiles (measured at hidden 2048:
# ~3.5 µs a record against ~45 µs a step), so a call's count of steps is about its time
_WORKS_PER_STEP = 12
# the table rows that run a GEMV step's work themselves (FP16 kinds 7 and 9, INT4 kinds 10, 11 and 14;
# not a `_YIELD`, whose step the caller runs): `build_tables` binds no step such a row covers
_RUN_IN_TABLE = frozenset((7, 9, *fastrun._BY_ADDRESS))


class PlanJob:
    """A slot under construction: its words, its plan so far, the indices still to compile. (A plain
    class, not a dataclass: this module is imported on a fresh process's first decode token, and a
    dataclass's generated methods are compiled at import: 0.42 -> 0.17-0.35 ms, from .pyc files.)"""

    __slots__ = ("done", "old_groups", "plan", "todo", "words")

    def __init__(self, words: list[int], plan: list[Callable[[], Work] | None], todo: list[int], done: int,
                 old_groups: list | None) -> None:
        self.words, self.plan, self.todo, self.done, self.old_groups = words, plan, todo, done, old_groups


def prepare(sim: Any, words: Sequence[int], tag: Hashable, base: Hashable | None = None,
            limit: int | None = None, works: list[Work] | None = None) -> int:
    """Advance the build of ``sim``'s tagged slot ``tag`` for ``words`` by at most ``limit`` steps
    (None: to the end), diffing against slot ``base`` when it has the same length; the steps compiled
    (0: the slot was ready), the fused runs' tables counted as steps too (`_WORKS_PER_STEP`); with a
    ``limit``, the tables wait for the next call when this one compiled over half of it. A finished
    slot is what `FastSimulator.load_program(words, tag, dirty)` then takes without recompiling.
    ``works``: gets the Work records of the steps compiled whose record is fixed at load time (CVO,
    MEMSET), for the timing model to take in early."""
    if tag in sim._tagged:
        return 0
    job = sim._preparing.get(tag)
    if job is None:
        new = [int(w) for w in words]
        src = sim._tagged.get(base) if base is not None else None
        if src is not None and len(src.words) == len(new):
            todo = [i for i, (w, old) in enumerate(zip(new, src.words, strict=True)) if w != old]
            job = PlanJob(new, list(src.plan), todo, 0, src.groups)
        else:
            job = PlanJob(new, [None] * len(new), list(range(len(new))), 0, None)
        sim._preparing[tag] = job
    end = len(job.todo) if limit is None else min(len(job.todo), job.done + max(1, limit))
    for i in job.todo[job.done:end]:
        step = job.plan[i] = sim._compile(i, job.words[i])
        if works is not None and hasattr(step, "work"):
            works.append(step.work)
    compiled, job.done = end - job.done, end
    if end < len(job.todo) or (limit is not None and 2 * compiled > limit):
        return compiled  # (a slice that used over half its steps leaves the tables to the next one)
    del sim._preparing[tag]
    groups = fuse_groups(sim, job.plan, job.old_groups, frozenset(job.todo))
    made = build_tables(sim, job.plan, groups, _carried(sim, tag), tag)
    if works is not None:
        works.extend(made)
    sim._tagged[tag] = sim._slot(job.words, job.plan, groups)
    return compiled + len(made) // _WORKS_PER_STEP


def _carried(sim: Any, tag: Hashable) -> np.ndarray:
    """The constant caches predicted at the start of slot ``tag``: for a driver's (program, segment j)
    tag, the prediction at the end of segment j - 1 of the same program when that was built ahead
    (segments run in order, so an entry set in one is read in a later one), else the device's now."""
    carry = getattr(sim, "_ahead_cc", None)
    if isinstance(tag, tuple) and len(tag) == 2 and carry is not None and carry[0] == (tag[0], tag[1] - 1):
        return carry[1]
    return sim.cc


def build_tables(sim: Any, plan: list, groups: list, start: np.ndarray | None = None,
                 tag: Hashable = None) -> list[Work]:
    """Lower now the fused runs (`fastcvo._FusedRun`) that the switching token would lower on their
    first call, each for the constant caches predicted at its start: ``start`` (default: the
    device's entries now) with the MEMSETs of the plan's steps before it applied, and bind each
    GEMV/GEMM step (``prebind``) for the entries predicted at it; the prediction at the end is kept
    for the slot after ``tag`` (`_carried`). Exact whatever the prediction: a GEMV/GEMM step rebinds
    when its entries differ at run time, as it does every time they change, and a copy row
    holds the shape entry it was bound for and an FP16 GEMV row reads its shape and address when it
    runs, and a row whose entries differ then is left to the single step (and the table made again),
    as for any table. A table that stopped at a row it could not bind is dropped (its run is lowered
    on its first call, as before). The Work records the tables and bindings hold (for the timing model)."""
    cc = (sim.cc if start is None else start).copy()
    works: list[Work] = []
    at, covered = 0, []  # the last table lowered here: its first step, which of its rows run a GEMV
    for i, step in enumerate(plan):
        g = groups[i]
        run = g[1] if g is not None else None
        if run is not None and _lowers_ahead(run):
            builds = run.builds
            table = run._build(cc)
            run.builds = builds
            if table is not None and not table.retry:
                run.table = table
                works.extend(filter(None, table.works))  # (a Work is never false: the Nones dropped in C)
                at, covered = i, [k in _RUN_IN_TABLE for k in table.tab[:, 0].tolist()]
        if type(step) is FusedCvoStep:  # (most steps: a CVO neither binds nor sets an entry)
            continue
        prebind = getattr(step, "prebind", None)
        if prebind is not None and (i - at >= len(covered) or not covered[i - at]):
            # a GEMV/GEMM bound for the entries predicted here, unless a GEMV row of a table lowered
            # here covers it: its step runs only where the table stops before it (then it binds as any
            # step does). An INT4 row holds the same Work (`fastmat._mat_work`'s memo), taken above; an
            # FP16 row's Work is made from the shape it runs with, which for the attention's products
            # is the span's then, not the predicted one (counted at hidden 1024, positions 4-35: 9 of
            # 288 such prebinds gave a Work any token used)
            work = prebind(cc)
            if work is not None:
                works.append(work)
        fixed = getattr(step, "fuse", None)
        if isinstance(fixed, tuple) and fixed[0][0] == 6:  # a MEMSET of entry (cache, slot)
            cc[fixed[0][1], fixed[0][2]] = fixed[0][3:6]
    sim._ahead_cc = (tag, cc)
    return works


def _lowers_ahead(run: Any) -> bool:
    """Whether `build_tables` lowers ``run``'s table now: a run with none yet, or a patched copy of
    the running program's run (`fastrun._Repatch`), whose rows relowered at the patch read the
    device's constant caches of the token that built it, not those predicted at the run (measured:
    such a table stopped at its first row on the switching token, so that token and the next one
    lowered the runs again)."""
    if isinstance(run, fastrun._Repatch):
        if run.made is None:  # lowered whole below: made as a new run, not patched first for nothing
            run.base = None
        return not run.dead
    return getattr(run, "table", True) is None and not run.dead
