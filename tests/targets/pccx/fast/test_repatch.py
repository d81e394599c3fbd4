"""Fused runs made on first call (`fastrun._Repatch`): prefill chunks that reuse one chunk program at
new positions (its span words patched) give the reference simulator's logits and Work records and
the same cycles (the oracle: `npukit.targets.pccx.sim.Simulator`, the ISA's definition), while only
the fused runs the executor reaches are ever patched or built."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.fast import fastcvo, fastrun
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.gemma3n_quant import Int4Store

from .tiny_gemma3n import CFG

WIDE = {**CFG, "sliding_window": 32}  # chunks of 4 tokens up to position 32: one program per span bucket
PROMPT = [3, 9, 1, 4, 7, 2, 8, 5, 6, 11, 10, 12, 13, 14]  # chunks at 0, 4, 8 (bucket 16 twice), 12


def _driver(executor: str, store: Int4Store) -> PccxDriver:
    return PccxDriver(executor=executor, prefill_chunk=4).open().load(store).kv_init("fp16", 64).start()


def test_patched_chunk_programs_follow_the_reference_and_patch_only_runs_called(monkeypatch):
    made, patched = [0], [0]
    real_init, real_patched = fastrun._Repatch.__init__, fastrun._FusedRun.patched

    def counted_init(self, *args, **kw):
        made[0] += 1
        real_init(self, *args, **kw)

    def counted_patched(self, *args, **kw):
        patched[0] += 1
        return real_patched(self, *args, **kw)

    monkeypatch.setattr(fastrun._Repatch, "__init__", counted_init)
    monkeypatch.setattr(fastrun._FusedRun, "patched", counted_patched)
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(WIDE), seed=3))
    ref, fast = _driver("reference", store), _driver("fast", store)
    runs: list[list] = []
    for drv in (ref, fast):
        logits = [drv.prefill(PROMPT[i:i + 4]) for i in range(0, len(PROMPT), 4)]
        runs.append([np.asarray(x, np.float32).view(np.uint32) for x in logits])
    assert all(np.array_equal(a, b) for a, b in zip(*runs, strict=True))
    assert [(r.position, r.tokens) for r in fast.records] == [(0, 4), (4, 4), (8, 4), (12, 2)]
    keys = [k for k in fast.variants if k[0] == "prefill"]
    assert len(keys) < 4, "two chunks must share a program (its span words patched)"
    assert [r.cycles for r in fast.records] == [r.cycles for r in ref.records]
    assert fast.last_works == ref.last_works
    assert made[0] > 0 and patched[0] < made[0], "runs the loop never reaches must not be patched"


def test_fastcvo_still_exports_the_fused_runs_for_its_callers():
    for name in ("fuse_groups", "repatch_groups", "int4_row", "_FusedRun", "_Repatch", "_Resume", "_Table"):
        assert getattr(fastcvo, name) is getattr(fastrun, name), name


@pytest.mark.skipif(not kx.HAVE_NUMBA, reason="fused runs are a numba-backend path")
def test_a_run_made_later_patches_its_base_as_it_was_before_an_in_place_patch():
    """A copy made on first call (`fastrun._Repatch`) patches the run it was made from as that run
    was then: the base slot's own run, patched in place afterwards (a decode token's span words),
    must not leak those rows into the copy (the MEMSETs' values are what the constant caches show)."""
    from npukit.targets.pccx import asm
    from npukit.targets.pccx.fast.fastsim import FastSimulator
    from npukit.targets.pccx.isa import DestCache

    def program(values: list[int]) -> list[int]:
        lines = [f"memset cache=fmap slot={i} a={v} b=2 c=3" for i, v in enumerate(values)]
        return asm.assemble("\n".join(lines))

    sim, fmap = FastSimulator(backend="numba"), int(DestCache.FMAP)
    sim.load_program(program([1] * 8), tag="a")
    sim.run()
    sim.load_program(program([1, 1, 1, 5, 1, 1, 1, 1]), tag="a", dirty=[3])  # slot a's own copy
    sim.run()
    slot = sim._tagged["a"]
    wanted = [1, 1, 1, 5, 1, 1, 7, 1]  # another program, one word apart, its run made from slot a's
    plan = list(slot.plan)
    plan[6] = sim._compile(6, program(wanted)[6])
    groups = fastrun.fuse_groups(sim, plan, slot.groups, frozenset([6]))
    assert isinstance(groups[0][1], fastrun._Repatch) and groups[0][1].made is None
    sim.load_program(program([9, 1, 1, 5, 1, 1, 1, 1]), tag="a", dirty=[0])  # slot a patched again
    sim.run()
    assert [int(sim.cc[fmap, i, 0]) for i in range(8)] == [9, 1, 1, 5, 1, 1, 1, 1]
    assert len(groups[0][1]()) == 8  # the other program's run, made now: one compiled call
    assert [int(sim.cc[fmap, i, 0]) for i in range(8)] == wanted


@pytest.mark.skipif(not kx.HAVE_NUMBA, reason="fused runs are a numba-backend path")
def test_span_memsets_patch_a_private_run_in_place_as_a_fresh_build_and_the_reference(monkeypatch):
    """A decode token's span words are MEMSETs: a slot's own (private) run takes them in its own table
    (`_FusedRun._memsets_in_place`, no copies), which then holds what building the run afresh gives,
    and runs to the reference simulator's constant caches and Work records."""
    from npukit.targets.pccx import asm
    from npukit.targets.pccx.fast.fastsim import FastSimulator
    from npukit.targets.pccx.sim import Simulator

    def program(values: list[int]) -> list[int]:
        lines = [f"memset cache=fmap slot={i} a={v} b={i + 2} c=3" for i, v in enumerate(values)]
        return asm.assemble("\n".join(lines))

    sim, ref = FastSimulator(backend="numba"), Simulator()
    in_place = []
    real = fastrun._FusedRun._memsets_in_place

    def counted(self, *args):
        in_place.append(self)
        return real(self, *args)

    monkeypatch.setattr(fastrun._FusedRun, "_memsets_in_place", counted)
    for n, values in enumerate(([1] * 6, [1, 4, 1, 1, 1, 1], [1, 5, 1, 1, 9, 1], [2, 6, 1, 1, 9, 1])):
        words = program(values)
        sim.load_program(words, tag="a", dirty=[0, 1, 4] if n else None)
        ref.load_program(words)
        assert sim.run() == ref.run()
        assert np.array_equal(sim.cc, ref.cc)
        run = sim._tagged["a"].groups[0][1].resolve()
        fresh = run._build()
        assert np.array_equal(run.table.tab, fresh.tab) and run.table.works == fresh.works
        assert run.table.items == list(zip(fresh.ins, fresh.works, strict=True))
    assert len(in_place) == 2 and in_place[0] is in_place[1]  # (the first patch copies a shared run)
