"""A tagged program slot of `FastSimulator` built ahead of its first load, a slice per call.

The driver switches programs when the attention span enters a new power-of-two bucket. The two
programs share most instructions, but the on-chip layout moves with the span, so about half their
words differ and each differing word is a step to decode and bind (~25 µs each in Python): tens of
milliseconds in the one token that crosses the bucket. `prepare` builds the new slot's plan from the
current one (changed steps only, the same diff `FastSimulator.load_program` makes) in slices of
``limit`` steps, so the driver can spread that work over the tokens before the switch; the switch
itself then finds the slot and rechecks only the span-patched words. A step's closure depends only on
its word and index (never on device state), so a plan built ahead equals the one built at the switch.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from npukit.sim.work import Work
from npukit.targets.pccx.fast.fastcvo import fuse_groups


@dataclass(eq=False)
class PlanJob:
    """A slot under construction: its words, its plan so far, the indices still to compile."""

    words: list[int]
    plan: list[Callable[[], Work] | None]
    todo: list[int]
    done: int
    old_groups: list | None


def prepare(sim: Any, words: Sequence[int], tag: Hashable, base: Hashable | None = None,
            limit: int | None = None, works: list[Work] | None = None) -> int:
    """Advance the build of ``sim``'s tagged slot ``tag`` for ``words`` by at most ``limit`` steps
    (None: to the end), diffing against slot ``base`` when it has the same length; the steps compiled
    (0: the slot was ready). A finished slot is what `FastSimulator.load_program(words, tag, dirty)`
    then takes without recompiling. ``works``: gets the Work records of the steps compiled whose record
    is fixed at load time (CVO, MEMSET), for the timing model to take in early."""
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
    if end < len(job.todo):
        return compiled
    del sim._preparing[tag]
    groups = fuse_groups(sim, job.plan, job.old_groups, frozenset(job.todo))
    sim._tagged[tag] = sim._slot(job.words, job.plan, groups)
    return compiled
