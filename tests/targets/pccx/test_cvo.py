"""The CVO table (npukit.targets.pccx.cvo.CVO) is the one place a CVO function is defined.

The toy test adds a function by editing only the table and writing one numerics function, and shows
the assembler/disassembler, the reference simulator and the fast executor all run it. CvoFunc's 4-bit
code space is full (16 of 16 codes used), so the toy takes code 0x8's row (TANH) in the table for the
test's duration (pytest's monkeypatch.setitem; the dict is restored afterwards); the mnemonic stays
`cvo.tanh` because mnemonics name codes.
"""

import numpy as np
import pytest
import torch

from npukit.targets.pccx import asm, cvo, isa, ops
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.compile.lower import LoweringOps
from npukit.targets.pccx.cvo import CVO, CvoForm, CvoFunc, CvoSpec, Lowering
from npukit.targets.pccx.fast import kernels
from npukit.targets.pccx.fast.fastsim import FastSimulator
from npukit.targets.pccx.sim import Simulator

BACKENDS = ["numpy", *(["numba"] if kernels.HAVE_NUMBA else [])]


def _torch_bf16_bits(y: torch.Tensor) -> np.ndarray:
    """Round float64 values to BF16 with torch (RNE) and return the bit patterns."""
    return y.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(25)
    x = np.concatenate([rng.normal(0, 3, 200), [0.0, -0.0, 30.0, -30.0, np.inf, -np.inf, np.nan]])
    return nx.bf16(x.astype(np.float32))


def test_every_code_has_one_row_and_the_isa_sets_are_read_from_it():
    assert set(CVO) == set(CvoFunc) and len(CvoFunc) == 16
    assert {CvoFunc.REDUCE_SUM, CvoFunc.REDUCE_MAX} == isa.REDUCTIONS
    assert {CvoFunc.MUL, CvoFunc.ADD} == isa.BINARY
    assert {CvoFunc.MUL, CvoFunc.ADD, CvoFunc.REDUCE_MAX, CvoFunc.LOAD_SCALAR} == isa.NO_ACCM
    assert {f for f, s in CVO.items() if s.transcendental} == {
        CvoFunc.EXP, CvoFunc.GELU, CvoFunc.SIN, CvoFunc.COS, CvoFunc.TANH}


def test_operation_set_and_compiler_come_from_the_table():
    for spec in CVO.values():
        if spec.op_name:
            assert getattr(ops.PccxOps, spec.op_name) is spec.numerics
            assert spec.op_name in ops.DEVICE_OPS + ops.EXTENDED_OPS
        if spec.lowering is not Lowering.NONE:
            assert callable(getattr(LoweringOps, spec.op_name))


def test_gelu_against_torch_tanh_gelu():
    """The one GELU formula (numerics.gelu_core) against PyTorch's gelu(approximate='tanh') in float64."""
    x = _inputs()
    x64 = torch.from_numpy(x.astype(np.float64))
    want = _torch_bf16_bits(torch.nn.functional.gelu(x64, approximate="tanh"))
    got = nx.to_bits(nx.cvo_gelu(x))
    same = (got == want) | (np.isnan(nx.from_bits(got)) & np.isnan(nx.from_bits(want)))
    assert same.mean() >= 0.99  # float64 evaluation orders differ by ulps; BF16 rounding hides nearly all


@pytest.mark.parametrize("func", [f for f, s in CVO.items() if s.transcendental])
@pytest.mark.parametrize("backend", BACKENDS)
def test_fast_twin_equals_numerics(func, backend):
    """The fast executor's transcendental path (the table's float64 core + its own rounding) gives
    the numerics function's bits, GELU included."""
    x = _inputs()[:64]
    ref, fast = Simulator(), FastSimulator(backend=backend)
    words = asm.assemble(f"cvo.{func.name.lower()} src=0x10 dst=0x40 len=64")
    for sim in (ref, fast):
        sim.write_l2(0x10, x)
        sim.load_program(words)
        sim.run()
    want = nx.to_bits(CVO[func].numerics(x))
    assert np.array_equal(ref.read_l2_bits(0x40, 64), want)
    assert np.array_equal(fast.read_l2_bits(0x40, 64), want)


def _sigmoid_core(a: np.ndarray) -> np.ndarray:
    """The toy's numerics function: the logistic sigmoid in float64, in place."""
    np.negative(a, out=a)
    np.exp(a, out=a)
    a += 1.0
    return np.reciprocal(a, out=a)


@pytest.fixture
def toy_sigmoid(monkeypatch):
    spec = CvoSpec(CvoForm.UNARY, "toy: logistic sigmoid", nx.sfu_unary(_sigmoid_core), _sigmoid_core,
                   op_name="cvo_sigmoid")
    monkeypatch.setitem(cvo.CVO, CvoFunc.TANH, spec)
    return spec


@pytest.mark.parametrize("backend", BACKENDS)
def test_toy_function_runs_everywhere(toy_sigmoid, backend):
    x = _inputs()[:40]
    source = "cvo.tanh src=0x10 dst=0x40 len=40\ncvo.tanh src=0x10 dst=0x40 len=40 flags=accm\n"
    words = asm.assemble(source)
    rows = asm.disassemble_program(words)
    assert [r.error for r in rows] == [None, None] and all(r.text.startswith("cvo.tanh ") for r in rows)
    assert asm.assemble("\n".join(r.text for r in rows)) == words
    want1 = _torch_bf16_bits(torch.sigmoid(torch.from_numpy(x.astype(np.float64))))
    twice = torch.from_numpy(nx.from_bits(want1).astype(np.float64)) + torch.sigmoid(
        torch.from_numpy(x.astype(np.float64)))
    want2 = _torch_bf16_bits(twice)
    for sim in (Simulator(), FastSimulator(backend=backend)):
        sim.write_l2(0x10, x)
        sim.load_program(words[:1])
        sim.run()
        assert np.array_equal(sim.read_l2_bits(0x40, 40), want1)
        sim.load_program(words[1:])
        sim.run()
        assert np.array_equal(sim.read_l2_bits(0x40, 40), want2)
    assert "toy: logistic sigmoid" in asm.isa_table_markdown()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_fast_executor_follows_a_table_edit_after_running_the_function(monkeypatch, backend):
    """A process that ran `cvo.tanh` before the table's row changes (and after it is restored) runs the
    row in the table now, as the reference does: the fast executor's per-shape memo (`fastcvo._shape`)
    is keyed by the row's spec, not by the function code alone."""
    x = _inputs()[:40]
    words = asm.assemble("cvo.tanh src=0x10 dst=0x40 len=40")

    def outputs() -> tuple[np.ndarray, np.ndarray]:
        ref, fast = Simulator(), FastSimulator(backend=backend)
        for sim in (ref, fast):
            sim.write_l2(0x10, x)
            sim.load_program(words)
            sim.run()
        return ref.read_l2_bits(0x40, 40), fast.read_l2_bits(0x40, 40)

    tanh = nx.to_bits(CVO[CvoFunc.TANH].numerics(x))
    toy = CvoSpec(CvoForm.UNARY, "toy: logistic sigmoid", nx.sfu_unary(_sigmoid_core), _sigmoid_core,
                  op_name="cvo_sigmoid")
    sigmoid = nx.to_bits(toy.numerics(x))
    assert not np.array_equal(tanh, sigmoid)
    for want, row in ((tanh, None), (sigmoid, toy), (tanh, None)):
        if row is not None:
            monkeypatch.setitem(cvo.CVO, CvoFunc.TANH, row)
        else:
            monkeypatch.undo()
        ref_bits, fast_bits = outputs()
        assert np.array_equal(ref_bits, want) and np.array_equal(fast_bits, want)
