"""Soundness of the verifier's abstract arithmetic: every concrete result lies in the abstract one.

Random abstract scalars (ranges, constants, known bits) and random members of them; each ALU
operation is computed concretely by RFC 9669's arithmetic (``semantics.alu_value``, the interpreters'
tables, themselves held to the conformance corpus) and must be a member of the abstract result.
"""

from __future__ import annotations

import random

import pytest

from npukit.targets.ebpf import absval as V
from npukit.targets.ebpf import isa
from npukit.targets.ebpf import semantics as S
from npukit.targets.ebpf.analysis_alu import scalar_op
from npukit.targets.ebpf.isa import AluOp

OPS = [AluOp.ADD, AluOp.SUB, AluOp.MUL, AluOp.DIV, AluOp.MOD, AluOp.OR, AluOp.AND, AluOp.XOR,
       AluOp.LSH, AluOp.RSH, AluOp.ARSH]
EDGES = (0, 1, 2, 3, 31, 32, 63, 64, 255, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32,
         (1 << 63) - 1, 1 << 63, (1 << 64) - 1)


def member(v: int, s: V.Scalar) -> bool:
    return (s.umin <= v <= s.umax and s.smin <= V.to_signed(v) <= s.smax
            and (v & ~s.tmask) & V.U64 == s.tval)


def abstract(rng: random.Random) -> tuple[V.Scalar, list[int]]:
    """An abstract scalar and some of its members."""
    kind = rng.randrange(4)
    if kind == 0:
        c = rng.choice(EDGES) if rng.random() < 0.5 else rng.getrandbits(64)
        return V.const(c), [c]
    if kind == 1:
        lo = rng.choice(EDGES[:12]) if rng.random() < 0.5 else rng.getrandbits(rng.choice((8, 32, 64)))
        hi = min(V.U64, lo + rng.choice((0, 1, 7, 100, 1 << 20, 1 << 40)))
        s = V.with_bounds(V.Scalar(), umin=lo, umax=hi)
        return s, [lo, hi, rng.randint(lo, hi)]
    if kind == 2:
        bits = rng.choice((8, 16, 32))
        return V.unknown(bits), [0, (1 << bits) - 1, rng.getrandbits(bits)]
    mask = rng.getrandbits(64) & rng.getrandbits(64)
    val = rng.getrandbits(64) & ~mask
    s = V.normalize(V.Scalar(tval=val, tmask=mask)) or V.Scalar()
    return s, [val, val | mask, val | (rng.getrandbits(64) & mask)]


@pytest.mark.parametrize("cls", [isa.ALU64, isa.ALU])
def test_abstract_alu_contains_every_concrete_result(cls: int) -> None:
    rng = random.Random(cls)
    checked = 0
    for _ in range(3000):
        a, xs = abstract(rng)
        b, ys = abstract(rng)
        op = rng.choice(OPS)
        off = 1 if op in (AluOp.DIV, AluOp.MOD) and rng.random() < 0.3 else 0
        if cls == isa.ALU64:
            out = scalar_op(op, off, a, b, 63)
        else:
            out = V.truncate32(scalar_op(op, off, V.truncate32(a), V.truncate32(b), 31))
        for x in xs:
            for y in ys:
                assert member(x, a) and member(y, b)
                got = S.alu_value(cls, op, off, x, y)
                assert member(got, out), (op.name, off, hex(x), hex(y), hex(got), out)
                checked += 1
    assert checked > 10_000


def test_shifting_by_a_small_constant_keeps_the_facts_and_the_link() -> None:
    s = V.Scalar(umin=4, umax=10, smin=4, smax=10, tval=0, tmask=15, len_le=3, link=(7, 2))
    t = V.shift_const(V.normalize(s), 5)
    assert (t.umin, t.umax, t.len_le, t.link) == (9, 15, -2, (7, 7))
    wrapped = V.shift_const(V.normalize(s), -5)  # may go below 0: the length fact is dropped
    assert wrapped.len_le is None and wrapped.link == (7, -3)


@pytest.mark.parametrize("wide", [True, False])
def test_branch_refinement_keeps_every_value_that_takes_the_branch(wide: bool) -> None:
    from npukit.targets.ebpf.absstate import UNINIT, compare, negate, new_state
    from npukit.targets.ebpf.isa import JmpOp

    st = new_state([UNINIT] * 11, V.unknown(32))
    rng = random.Random(int(wide))
    checked = 0
    for _ in range(3000):
        a, xs = abstract(rng)
        b, ys = abstract(rng)
        op = rng.choice([o for o in JmpOp if o not in (JmpOp.JA, JmpOp.CALL, JmpOp.EXIT)])
        for x in xs:
            for y in ys:
                mask = V.U64 if wide else V.U32
                signed = V.to_signed if wide else S.s32
                taken = S.COMPARE[op](x & mask, y & mask, signed)
                cond = op if taken else negate(op)
                if cond is None:  # JSET's fall-through is not refined
                    continue
                refined = compare(cond, a, b, wide, st)
                assert refined is not None, (op.name, taken, hex(x), hex(y), a, b)
                assert member(x, refined[0]) and member(y, refined[1]), (op.name, taken, hex(x), hex(y))
                checked += 1
    assert checked > 10_000
