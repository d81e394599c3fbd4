"""The pccx CVO (SFU) instruction family in one table: `CVO: dict[CvoFunc, CvoSpec]`.

Every fact about a CVO function lives in its row: the operands it reads (`CvoForm`), whether it
reduces to one word, whether the fast executor runs it as a float64 NumPy ufunc chain
(`transcendental`, with the `core` that `numerics.py` also rounds), whether the ``accm`` flag is legal,
the numerics function that is its meaning, the name `PccxOps` exposes it under and how the compiler
lowers it. The simulator (`sim.py`), the fast executor (`fast/fastcvo.py`), the ISA checks
(`isa.REDUCTIONS`/`BINARY`/`NO_ACCM`), the operation set (`ops.py`), the compiler (`compile/lower.py`)
and the documented ISA table (`asm.isa_table_markdown`) all read it. Adding a function means one row
here plus its numerics function (tests/targets/pccx/test_cvo_table.py does exactly that).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, IntEnum

import numpy as np

from npukit.targets.pccx import numerics as nx


class CvoFunc(IntEnum):
    """The 4-bit ``cvo_func`` field (0x0-0x7 pccx v002; 0x8-0xF npukit's extended profile)."""

    EXP = 0x0
    SQRT = 0x1
    GELU = 0x2
    SIN = 0x3
    COS = 0x4
    REDUCE_SUM = 0x5
    SCALE = 0x6
    RECIP = 0x7
    TANH = 0x8
    MUL = 0x9
    ADD = 0xA
    RELU_BIAS = 0xB
    RSQRT = 0xC
    SQUARE = 0xD
    REDUCE_MAX = 0xE
    LOAD_SCALAR = 0xF


class CvoForm(Enum):
    """Which operands the numerics function takes (the simulator has one step per form)."""

    UNARY = "f(x, dst=accm)"
    EXP = "f(x, e_max if sub_emax, dst=accm)"
    SCALE = "f(x, S, recip_scale, dst=accm)"
    BIAS = "f(x, S, dst=accm)"
    BINARY = "f(src, dst)"
    REDUCE_SUM = "f(x, dst[0]=accm) -> S"
    REDUCE_MAX = "f(x) -> e_max"
    LOAD_SCALAR = "S <- x[len - 1]"


class Lowering(Enum):
    """How `compile/lower.LoweringOps` emits the function."""

    UNARY = "generated cvo_<name>(x, dst=None) method"
    METHOD = "hand-written LoweringOps method (scalar, flags or KV operands)"
    NONE = "not emitted by the compiler"


@dataclass(frozen=True)
class CvoSpec:
    """One CVO function: its facts, its meaning and its lowering hint."""

    form: CvoForm
    doc: str  # the result, as the ISA table states it
    numerics: Callable[..., object] | None  # the bit-exact meaning (None: pure register move)
    core: Callable[[np.ndarray], np.ndarray] | None = None  # float64 in-place kernel (transcendental)
    accumulate: bool = True  # the ``accm`` flag is legal
    span_safe: bool = False  # may run over an attention-span bucket (its -inf tail gives exact zeros)
    lowering: Lowering = Lowering.UNARY
    op_name: str | None = None  # the `PccxOps` method; None: not in the operation set

    @property
    def arity(self) -> int:
        """Source operands: BINARY reads dst as its second operand."""
        return 2 if self.form is CvoForm.BINARY else 1

    @property
    def reduction(self) -> bool:
        return self.form in (CvoForm.REDUCE_SUM, CvoForm.REDUCE_MAX)

    @property
    def transcendental(self) -> bool:
        return self.core is not None


def _unary(doc: str, numerics: Callable[..., object], core: Callable[[np.ndarray], np.ndarray] | None = None,
           op_name: str = "") -> CvoSpec:
    return CvoSpec(CvoForm.UNARY, doc, numerics, core, op_name=op_name or numerics.__name__)


CVO: dict[CvoFunc, CvoSpec] = {
    CvoFunc.EXP: CvoSpec(CvoForm.EXP, "exp(x), or exp(x − e_max) with `sub_emax`", nx.cvo_exp, nx.exp_core,
                         span_safe=True, lowering=Lowering.METHOD, op_name="cvo_exp"),
    CvoFunc.SQRT: _unary("sqrt(x)", nx.cvo_sqrt),
    CvoFunc.GELU: _unary("tanh-form GELU (gelu_pytorch_tanh)", nx.cvo_gelu, nx.gelu_core),
    CvoFunc.SIN: _unary("sin(x)", nx.cvo_sin, nx.sin_core),
    CvoFunc.COS: _unary("cos(x)", nx.cvo_cos, nx.cos_core),
    CvoFunc.REDUCE_SUM: CvoSpec(CvoForm.REDUCE_SUM,
                                "serial float32 sum → one word at dst (element 0); also loads S",
                                nx.reduce_sum, span_safe=True, lowering=Lowering.METHOD,
                                op_name="reduce_sum"),
    CvoFunc.SCALE: CvoSpec(CvoForm.SCALE, "x · S, or x / S with `recip_scale` (S = 0 gives 0)", nx.cvo_scale,
                           span_safe=True, lowering=Lowering.METHOD, op_name="cvo_scale"),
    CvoFunc.RECIP: _unary("1 / x (±0 gives ±inf)", nx.cvo_recip),
    CvoFunc.TANH: _unary("tanh(x)", nx.cvo_tanh, nx.tanh_core),
    CvoFunc.MUL: CvoSpec(CvoForm.BINARY, "dst ← src · dst, elementwise", nx.cvo_mul, accumulate=False,
                         lowering=Lowering.METHOD, op_name="cvo_mul"),
    CvoFunc.ADD: CvoSpec(CvoForm.BINARY, "dst ← src + dst, elementwise", nx.cvo_add, accumulate=False,
                         lowering=Lowering.METHOD, op_name="cvo_add"),
    CvoFunc.RELU_BIAS: CvoSpec(CvoForm.BIAS, "max(x − S, 0): the bias-and-clip front end", nx.cvo_relu_bias,
                               lowering=Lowering.METHOD, op_name="cvo_relu_bias"),
    CvoFunc.RSQRT: _unary("1 / sqrt(x)", nx.cvo_rsqrt),
    CvoFunc.SQUARE: _unary("x²", nx.cvo_square),
    CvoFunc.REDUCE_MAX: CvoSpec(CvoForm.REDUCE_MAX, "max(x) → one word at dst; also sets e_max",
                                nx.reduce_max, accumulate=False, lowering=Lowering.NONE),
    CvoFunc.LOAD_SCALAR: CvoSpec(CvoForm.LOAD_SCALAR, "S ← element len − 1 of src (no dst write)", None,
                                 accumulate=False, lowering=Lowering.NONE),
}

STRICT_CVO = frozenset(f for f in CvoFunc if f < 0x8)  # pccx v002's eight; the rest are reserved codes there
