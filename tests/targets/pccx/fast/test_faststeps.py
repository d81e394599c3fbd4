"""`npukit.targets.pccx.fast.faststeps`: copy, GEMV and MEMSET steps as records. What they compute is
checked against the reference simulator by `test_fastsim` (random programs of every opcode, both
backends); here, the attributes the fused runs and `fast.ahead` read, and that a plan's records free
without the garbage collector (no reference cycle: the decode loop defers full collections)."""

import gc

import pytest

from npukit.targets.pccx import asm
from npukit.targets.pccx.fast import faststeps, kernels
from npukit.targets.pccx.fast.fastsim import FastSimulator

LINES = ["memset cache=fmap slot=12 a=4 b=0 c=16",
         "memcpy from=host to=npu dest=0x40 aux=0x0 shape=12",
         "memcpy from=npu to=host src=0x40 aux=0x0 shape=12",
         "memcpy from=npu to=npu dest=0x80 src=0x40 shape=12 async",
         "memset cache=sreg slot=1 a=0x3F80",
         "gemv dest=0x100 src=0x40 flags=0 size=8 shape=0 lanes=0"]


@pytest.mark.parametrize("backend", kernels.BACKENDS)
def test_step_records_carry_the_closures_attributes(backend):
    sim = FastSimulator(backend=backend)
    sim.load_program(asm.assemble("\n".join(LINES)))
    cache_set, h2n, n2h, n2n, sreg, gemv = sim._plan
    numba = backend == "numba"
    assert type(cache_set) is faststeps.CacheSet and type(sreg) is faststeps.SregSet
    assert type(gemv) is faststeps.MatStep and {type(s) for s in (h2n, n2h, n2n)} == {faststeps.CopyStep}
    # a MEMSET's Work is fixed at load time (`fast.ahead` hands it to the timing model); its row is a tuple
    assert cache_set.work.index == 0 and sreg.work.index == 4
    row = ((6, 0, 12, 4, 0, 16), cache_set.work)
    assert (cache_set.fuse == row) if numba else not hasattr(cache_set, "fuse")
    assert (sreg.fuse[0] == (3, 1, 0, 0, 0, 0, 0x3F80)) if numba else not hasattr(sreg, "fuse")
    # a copy or GEMV has no fixed Work; a row maker where it can be a row (a copy to host never is)
    for step in (h2n, n2h, n2n, gemv):
        assert not hasattr(step, "work")
    assert callable(getattr(h2n, "fuse", None)) == numba and callable(getattr(n2n, "fuse", None)) == numba
    assert not hasattr(n2h, "fuse") and getattr(n2h, "fuse_may_end", False) is False
    assert callable(getattr(gemv, "fuse", None)) == numba and getattr(gemv, "fuse_may_end", False) == numba
    assert callable(gemv.prebind) and not hasattr(h2n, "prebind")
    if numba:
        assert h2n.fuse_ins is h2n.copy.ins and gemv.fuse_ins is gemv.ins


def test_a_plans_records_free_without_the_collector():
    """Dropping a plan frees its step records by reference counting alone (no cycle among them): with the
    collector off, none of them is left among the objects it tracks. (Counted by record type, before and
    after: other garbage, e.g. a kernel loaded on first use, is not the plan's.)"""
    sim = FastSimulator()
    words = asm.assemble("\n".join(LINES))
    kinds = (faststeps.CopyStep, faststeps.MatStep, faststeps.SregSet, faststeps.CacheSet,
             faststeps._Copy, faststeps._MatRow)

    def records() -> int:
        return sum(type(o) in kinds for o in gc.get_objects())

    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        before = records()
        steps = [sim._compile(i, w) for i, w in enumerate(words)]
        assert len(steps) == len(LINES) and records() > before
        del steps
        assert records() == before
    finally:
        if was:
            gc.enable()
