"""TFLite's ``MultiplyByQuantizedMultiplier`` (double rounding) as a VTA ALU sequence, bit-exact.

VTA's ALU has 32-bit wrapping ADD/MUL, arithmetic SHR (negative = left), MIN and MAX, with 16-bit
immediates or accumulator operands. TFLite needs ``x·m`` with a 31-bit ``m`` (a 62-bit product),
gemmlowp's rounding doubling high multiply and a rounding right shift. With ``|x| < 2^30`` (the
layer's accumulator bound, known when the program is built) it decomposes into 15-bit limbs whose
partial products all fit in int32; the per-channel constants (limbs of m, shift amounts, rounding
thresholds) sit in accumulator rows and are read with a zero outer-loop factor, so one row serves
every output row.

With ``u = |x|``, ``neg = [x < 0]``, ``u = u1·2^15 + u0`` and ``m = m2·2^30 + m1·2^15 + m0``::

    SRDHM(x, m) = (1 − 2·neg) · ⌊(u·m + 2^30 − neg) / 2^31⌋                 (C truncation of the
                = (1 − 2·neg) · (A·2^14 + ⌊F / 2⌋)                          nudged product)
    A = u1·m2,  B = u1·m1 + u0·m2,  C1 = u1·m0,  C2 = u0·m1,  L = ⌊(u0·m0 − neg) / 2^15⌋
    E = C1 mod 2^15 + C2 mod 2^15 + L,  F = B + ⌊C1/2^15⌋ + ⌊C2/2^15⌋ + 1 + ⌊E/2^15⌋

then ``RoundingDivideByPOT(q, e) = ⌊q/2^e⌋ + [q mod 2^e > (2^e − 1) >> 1 + [q < 0]]``, the output
zero point and the clamp (immediates). "mod" and the comparisons are built from SHR, MUL by −1,
ADD, MIN and MAX.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npukit.targets.vta.isa import AluOp

N_REGS = 11  # scratch regions of one tile each (region 0 holds the accumulators)
CONSTS = ("M2", "M1", "M0", "E", "NE", "NTH", "LS")
LIMIT = 1 << 30  # |x · 2^left| must stay below this


@dataclass(frozen=True)
class Requant:
    """Per-channel (or per-tensor, broadcast) TFLite requantization done on VTA."""

    multipliers: np.ndarray  # int (N,), in [0, 2^31)
    shifts: np.ndarray  # int (N,), TFLite's signed shift
    zero_point: int
    act_min: int
    act_max: int

    def feasible(self, bound: int) -> bool:
        left = int(np.maximum(self.shifts, 0).max()) if self.shifts.size else 0
        return (bound << left) < LIMIT and int(np.maximum(-self.shifts, 0).max(initial=0)) <= 31

    def has_left(self) -> bool:
        return bool((self.shifts > 0).any())

    def constants(self, n_pad: int) -> np.ndarray:
        """(len(CONSTS), n_pad) int32 rows: limbs of m, shift e, −e, −((2^e − 1) >> 1), −left."""
        m = self.multipliers.astype(np.int64)
        right = np.maximum(-self.shifts.astype(np.int64), 0)
        left = np.maximum(self.shifts.astype(np.int64), 0)
        rows = np.zeros((len(CONSTS), n_pad), np.int64)
        n = m.size
        rows[0, :n], rows[1, :n], rows[2, :n] = m >> 30, (m >> 15) & 0x7FFF, m & 0x7FFF
        rows[3, :n], rows[4, :n] = right, -right
        rows[5, :n] = -(((1 << right) - 1) >> 1)
        rows[6, :n] = -left
        return rows.astype(np.int32)


def _sequence(has_left: bool, zp: int, lo: int, hi: int) -> list[tuple]:
    """The ALU program over registers (region numbers) and constants (names), as a list of
    ("copy", dst, src) / ("imm", dst, op, imm) / ("reg", dst, op, src) / ("const", dst, op, name)."""
    X, S, U, U1, U0, A, B, T, C1, C2, L = range(N_REGS)
    add, mul, shr, mn, mx = AluOp.ADD, AluOp.MUL, AluOp.SHR, AluOp.MIN, AluOp.MAX
    seq: list[tuple] = [("const", X, shr, "LS")] if has_left else []
    seq += [
        ("copy", S, X), ("imm", S, shr, 31),  # S = −neg
        ("copy", U, X), ("imm", U, mul, -1), ("reg", U, mx, X),  # u = |x|
        ("copy", U1, U), ("imm", U1, shr, 15),  # u1
        ("copy", U0, U1), ("imm", U0, shr, -15), ("imm", U0, mul, -1), ("reg", U0, add, U),  # u0
        ("copy", A, U1), ("const", A, mul, "M2"),
        ("copy", B, U1), ("const", B, mul, "M1"),
        ("copy", T, U0), ("const", T, mul, "M2"), ("reg", B, add, T),
        ("copy", C1, U1), ("const", C1, mul, "M0"),
        ("copy", C2, U0), ("const", C2, mul, "M1"),
        ("copy", L, U0), ("const", L, mul, "M0"), ("reg", L, add, S), ("imm", L, shr, 15),
    ]
    for c in (C1, C2):  # B += c >> 15; c := c mod 2^15
        seq += [("copy", T, c), ("imm", T, shr, 15), ("reg", B, add, T), ("imm", T, shr, -15),
                ("imm", T, mul, -1), ("reg", c, add, T)]
    seq += [
        ("reg", L, add, C1), ("reg", L, add, C2),  # E
        ("copy", T, L), ("imm", T, shr, 15), ("reg", B, add, T), ("imm", B, add, 1),  # F
        ("imm", B, shr, 1), ("imm", A, shr, -14), ("reg", A, add, B),  # |SRDHM|
        ("imm", S, mul, 2), ("imm", S, add, 1), ("reg", A, mul, S),  # signed SRDHM = q
        ("copy", U, A), ("const", U, shr, "E"),  # q >> e
        ("copy", U1, U), ("const", U1, shr, "NE"), ("imm", U1, mul, -1), ("reg", U1, add, A),  # q mod 2^e
        ("copy", U0, A), ("imm", U0, shr, 31), ("reg", U1, add, U0), ("const", U1, add, "NTH"),
        ("imm", U1, mx, 0), ("imm", U1, mn, 1), ("reg", U, add, U1),  # + round-up bit
        ("imm", U, add, zp), ("imm", U, mn, hi), ("imm", U, mx, lo),
    ]
    return seq


RESULT_REG = 2  # U


def emit_requant(e, base: int, mt: int, nt: int, const_base: int, req: Requant):
    """Emit the sequence for the ``mt × nt`` accumulator rows at ``base`` (region 0; regions follow
    it, constants at ``const_base``: row ``const_base + k·nt + n``). Returns (last instruction, the
    SRAM row of the int8 result region)."""
    count = mt * nt
    seq = _sequence(req.has_left(), req.zero_point, req.act_min, req.act_max)
    reg = [base + r * count for r in range(N_REGS)]
    uops: dict[tuple[int, int], int] = {}

    def uop(dst: int, src: int) -> int:
        return uops.setdefault((dst, src), len(uops))

    plan = []
    for item in seq:
        kind, dst = item[0], reg[item[1]]
        if kind == "copy":
            plan.append(("reset", uop(dst, 0)))
            plan.append(("reg", uop(dst, reg[item[2]]), AluOp.ADD))
        elif kind == "imm":
            plan.append(("imm", uop(dst, 0), item[2], item[3]))
        elif kind == "reg":
            plan.append(("reg", uop(dst, reg[item[3]]), item[2]))
        else:
            plan.append(("const", uop(dst, const_base + CONSTS.index(item[3]) * nt), item[2]))
    kernel = np.array([[d, s, 0] for d, s in uops], np.int64)
    e.uops(("requant", base, mt, nt, const_base, len(kernel)), kernel)
    rows = {"iter_out": count, "iter_in": 1, "dst_factor_out": 1}
    last = None
    for p in plan:
        at = {"uop_bgn": p[1], "uop_end": p[1] + 1}
        if p[0] == "reset":
            last = e.emit("GEMM", reset_reg=True, **at, **rows)
        elif p[0] == "imm":
            last = e.emit("ALU", alu_opcode=p[2], use_imm=True, imm=int(p[3]), **at, **rows)
        elif p[0] == "reg":
            last = e.emit("ALU", alu_opcode=p[2], src_factor_out=1, **at, **rows)
        else:  # per-channel constant: outer loop over rows (src factor 0), inner over output blocks
            last = e.emit("ALU", alu_opcode=p[2], iter_out=mt, iter_in=nt, dst_factor_out=nt, dst_factor_in=1,
                          src_factor_in=1, **at)
    return last, reg[RESULT_REG]
