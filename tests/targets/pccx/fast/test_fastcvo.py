"""`npukit.targets.pccx.fast.fastcvo.compile_cvo`: a CVO that runs as a row of the fused runs gets its
closure (L2 views, kernels) on its first call as a single step, not when its program is compiled; run
step by step, every one equals the reference Simulator (the definition) bit for bit."""

import pytest

from npukit.sim.work import Work, make_work
from npukit.targets.pccx import asm
from npukit.targets.pccx.fast import fastcvo, kernels
from npukit.targets.pccx.fast.fastsim import FastSimulator
from npukit.targets.pccx.sim import Simulator

from .test_fastsim import _assert_same, _setup, _state

LINES = ["cvo.square src=0x10 dst=0x20 len=40 flags=0",
         "cvo.reduce_sum src=0x20 dst=0x30 len=40 flags=0",
         "cvo.scale src=0x10 dst=0x11 len=37 flags=recip_scale",  # shifted overlap
         "cvo.reduce_sum src=0x11 dst=0x31 len=33 flags=accm",
         "cvo.load_scalar src=0x12 dst=0x12 len=5 flags=0",
         "cvo.relu_bias src=0x50 dst=0x51 len=30 flags=accm",
         "cvo.reduce_max src=0x70 dst=0x70 len=9 flags=0",  # no row: made when compiled
         "cvo.exp src=0x10 dst=0x20 len=24 flags=sub_emax",
         "cvo.exp src=0x10 dst=0x28 len=24 flags=accm",  # no row (the exponent's row has no accm)
         "cvo.gelu src=0x40 dst=0x48 len=30 flags=0",
         "cvo.tanh src=0x40 dst=0x50 len=30 flags=accm",
         "cvo.mul src=0x60 dst=0x61 len=25 flags=0",
         "cvo.rsqrt src=0x62 dst=0x64 len=12 flags=0"]


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="fused runs are a numba-backend path")
def test_fused_cvos_get_their_closure_on_their_first_single_call(monkeypatch):
    made = []  # the CVOs whose closure was made (`_Operands.of`: its L2 views)
    of = fastcvo._Operands.of
    monkeypatch.setattr(fastcvo._Operands, "of",
                        classmethod(lambda cls, sim, ins, work: made.append(ins) or of(sim, ins, work)))
    words = asm.assemble("\n".join(LINES))
    ref, fast = Simulator(), FastSimulator(backend="numba")
    for sim in (ref, fast):
        _setup(sim, 5, [])
        sim.load_program(words)
    rows = [getattr(step, "fuse", None) is not None for step in fast._plan]
    assert rows.count(False) == 2 and not rows[6] and not rows[8]  # reduce_max, accm exp
    assert len(made) == 2  # compiled: only the two without a row have their closure
    for _ in LINES:
        assert fast.step() == ref.step()
        _assert_same(_state(fast), _state(ref))
    assert len(made) == len(LINES)  # each of the others by its first single call
    for sim in (ref, fast):
        sim.load_program(words)
    assert fast.run() == ref.run()  # again, as a fused run (its closures made)
    _assert_same(_state(fast), _state(ref))
    assert len(made) == len(LINES)


def test_fused_cvo_steps_are_records_traced_like_the_reference():
    """A CVO with a fused-run row is a `FusedCvoStep` (no closure pair); called as single steps after a
    run, its Work and trace entries equal the reference's, and the same object runs both times."""
    words = asm.assemble("\n".join(LINES))
    ref, fast = Simulator(), FastSimulator(backend="numba" if kernels.HAVE_NUMBA else "numpy")
    for sim in (ref, fast):
        _setup(sim, 7, [])
        sim.load_program(words)
    records = [isinstance(step, fastcvo.FusedCvoStep) for step in fast._plan]
    assert records.count(True) == (len(LINES) - 2 if kernels.HAVE_NUMBA else 0)
    assert fast.run() == ref.run()
    for sim in (ref, fast):
        sim.load_program(words)
    plan = list(fast._plan)
    for _ in LINES:
        assert fast.step() == ref.step()
    assert fast._plan == plan
    _assert_same(_state(fast), _state(ref))


MEMSETS = ["memset cache=fmap slot=3 a=7 b=0 c=9", "cvo.square src=0x10 dst=0x20 len=8 flags=0",
           "memset cache=fmap slot=3 a=7 b=0 c=9", "memset cache=sreg slot=1 a=0x3F80",
           "memset cache=fmap slot=3 a=7 b=0 c=9", "memset cache=sreg slot=1 a=0x3F80"]


def test_memset_work_records_made_once_per_instruction_equal_the_reference():
    """`work_like`: the MEMSETs repeated at several indices share one decoded instruction and so one
    memoised set of Work fields; each record still equals the reference simulator's, field by field,
    with its own index (and `new_work` equals the dataclass's own constructor)."""
    words = asm.assemble("\n".join(MEMSETS))
    ref, fast = Simulator(), FastSimulator()
    for sim in (ref, fast):
        _setup(sim, 3, [])
        sim.load_program(words)
    for idx in range(len(MEMSETS)):
        got, want = fast.step(), ref.step()
        assert got == want and vars(got) == vars(want) and got.index == idx
    assert fast._plan[0].work is not fast._plan[2].work
    kw = dict(ddr_read_bytes=64, onchip_write_bytes=64, writes=((3, 5),), is_async=True)
    assert vars(make_work(4, "dma", "x", **kw)) == vars(Work(4, "dma", "x", **kw))
    assert make_work(4, "dma", "x", **kw) == Work(4, "dma", "x", **kw)


def _reference_row(spec, ins):
    """`fastcvo._fused_row` as it was written before the shape memo (10c2c24), the definition here."""
    from npukit.targets.pccx import numerics as nx
    from npukit.targets.pccx.cvo import CvoForm
    from npukit.targets.pccx.isa import cvo_out_elems

    n, s0, d0, flags = ins.length, ins.src_addr * 8, ins.dst_addr * 8, int(ins.flags)
    accm, same = int(bool(flags & 4)), cvo_out_elems(ins.cvo_func, n) == n
    if fastcvo._is_arith(spec):
        fixed = fastcvo._ARITH.get(spec.numerics)
        sop = -3 if spec.form is CvoForm.BIAS else (-2 if flags & 8 else -1)
        return (0, sop if fixed is None else fixed, s0, n, d0, accm, 0) if same else None
    if spec.core is not None:
        sub = bool(flags & 16)
        if spec.core is nx.exp_core and not accm and same:
            return (8, int(sub), s0, n, d0, 0, 0)
        if not sub and same and (row := fastcvo.tabled(spec.core)) >= 0:
            return (12, row, s0, n, d0, accm, 0)
        return None
    if spec.form is CvoForm.REDUCE_SUM:
        return (1, 0, s0, n, d0, accm, 0)
    if spec.form is CvoForm.LOAD_SCALAR:
        return (2, 0, s0, n, 0, 0, 0)
    return None


def test_cvo_fields_and_rows_from_the_shape_memo_equal_the_plain_definitions():
    # `_memo` makes a CVO's Work fields and row from its shape (function, length, flags, asynchrony),
    # memoised, and its addresses: many instructions of each shape at other addresses (the first one
    # fills the memo) against `_cvo_fields` and the row as defined before the memo
    import itertools

    import numpy as np

    from npukit.targets.pccx.cvo import CVO
    from npukit.targets.pccx.isa import Cvo, CvoFlag, CvoFunc

    rng = np.random.default_rng(7)
    fastcvo._SHAPES.clear()
    checked = 0
    for fn, bits, n, asy in itertools.product(CvoFunc, range(0, 32, 4), (1, 7, 8, 9, 40, 64), (False, True)):
        for _ in range(3):
            s, d = (int(x) for x in rng.integers(0, 1 << 12, 2))
            ins = Cvo(fn, s, d if rng.random() < 0.8 else s, n, CvoFlag(bits), asy)
            _, fields, spec, row = fastcvo._memo(ins)
            assert spec is CVO[fn]
            assert fields == fastcvo._cvo_fields(ins)
            assert row == _reference_row(spec, ins) == fastcvo._fused_row("numba", spec, ins)
            checked += 1
    assert checked == len(CvoFunc) * 8 * 6 * 2 * 3 and len(fastcvo._SHAPES) == len(CvoFunc) * 8 * 6 * 2
