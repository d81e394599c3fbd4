"""RFC 9669 arithmetic on unsigned register values (Python ints in [0, 2**64)).

Shared by the reference interpreter and the translated fast path, so both compute the same thing.
Division by zero gives 0, modulo by zero leaves the dividend (zero-extended for 32-bit ops); signed
division truncates toward zero and INT_MIN / -1 wraps to INT_MIN (remainder 0); shift amounts are
masked to the operand width.
"""

from __future__ import annotations

from collections.abc import Callable

from npukit.targets.ebpf.isa import ALU, ALU64, OP_BE, OP_BSWAP, OP_LE, AluOp, JmpOp

M64 = 0xFFFFFFFFFFFFFFFF
M32 = 0xFFFFFFFF


def s64(x: int) -> int:
    return x - (1 << 64) if x >> 63 else x


def s32(x: int) -> int:
    x &= M32
    return x - (1 << 32) if x >> 31 else x


def sext(x: int, bits: int) -> int:
    """Sign-extend the low ``bits`` of x to an unsigned 64-bit value."""
    x &= (1 << bits) - 1
    return (x - (1 << bits)) & M64 if x >> (bits - 1) else x


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def _tmod(a: int, b: int) -> int:
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def div64(a: int, b: int) -> int:
    return a // b if b else 0


def mod64(a: int, b: int) -> int:
    return a % b if b else a


def div32(a: int, b: int) -> int:
    a, b = a & M32, b & M32
    return a // b if b else 0


def mod32(a: int, b: int) -> int:
    a, b = a & M32, b & M32
    return a % b if b else a


def sdiv64(a: int, b: int) -> int:
    return _tdiv(s64(a), s64(b)) & M64 if b else 0


def smod64(a: int, b: int) -> int:
    return _tmod(s64(a), s64(b)) & M64 if b else a


def sdiv32(a: int, b: int) -> int:
    return _tdiv(s32(a), s32(b)) & M32 if b & M32 else 0


def smod32(a: int, b: int) -> int:
    return _tmod(s32(a), s32(b)) & M32 if b & M32 else a & M32


def arsh64(a: int, n: int) -> int:
    return (s64(a) >> (n & 63)) & M64


def arsh32(a: int, n: int) -> int:
    return (s32(a) >> (n & 31)) & M32


def bswap(x: int, width: int) -> int:
    nbytes = width // 8
    return int.from_bytes((x & ((1 << width) - 1)).to_bytes(nbytes, "little"), "big")


def to_le(x: int, width: int) -> int:
    return x & ((1 << width) - 1)


def to_be(x: int, width: int) -> int:
    return bswap(x, width)  # the VM is a little-endian machine


ENDIAN = {OP_LE: to_le, OP_BE: to_be, OP_BSWAP: bswap}

# ALU operations on (dst, src) already masked to the operand width; the result is masked again
BINARY64: dict[AluOp, Callable[[int, int], int]] = {
    AluOp.ADD: lambda a, b: (a + b) & M64,
    AluOp.SUB: lambda a, b: (a - b) & M64,
    AluOp.MUL: lambda a, b: (a * b) & M64,
    AluOp.OR: lambda a, b: a | b,
    AluOp.AND: lambda a, b: a & b,
    AluOp.LSH: lambda a, b: (a << (b & 63)) & M64,
    AluOp.RSH: lambda a, b: a >> (b & 63),
    AluOp.XOR: lambda a, b: a ^ b,
    AluOp.MOV: lambda a, b: b,
    AluOp.ARSH: arsh64,
}
BINARY32: dict[AluOp, Callable[[int, int], int]] = {
    AluOp.ADD: lambda a, b: (a + b) & M32,
    AluOp.SUB: lambda a, b: (a - b) & M32,
    AluOp.MUL: lambda a, b: (a * b) & M32,
    AluOp.OR: lambda a, b: (a | b) & M32,
    AluOp.AND: lambda a, b: a & b & M32,
    AluOp.LSH: lambda a, b: (a << (b & 31)) & M32,
    AluOp.RSH: lambda a, b: (a & M32) >> (b & 31),
    AluOp.XOR: lambda a, b: (a ^ b) & M32,
    AluOp.MOV: lambda a, b: b & M32,
    AluOp.ARSH: arsh32,
}
# (class, operation, offset): offset 1 selects the signed variant
DIVISION: dict[tuple[int, AluOp, int], Callable[[int, int], int]] = {
    (ALU64, AluOp.DIV, 0): div64,
    (ALU64, AluOp.MOD, 0): mod64,
    (ALU64, AluOp.DIV, 1): sdiv64,
    (ALU64, AluOp.MOD, 1): smod64,
    (ALU, AluOp.DIV, 0): div32,
    (ALU, AluOp.MOD, 0): mod32,
    (ALU, AluOp.DIV, 1): sdiv32,
    (ALU, AluOp.MOD, 1): smod32,
}
# conditional jumps on (dst, src) masked to the width; ``s`` reads a value as signed
COMPARE: dict[JmpOp, Callable[[int, int, Callable[[int], int]], bool]] = {
    JmpOp.JEQ: lambda a, b, s: a == b,
    JmpOp.JGT: lambda a, b, s: a > b,
    JmpOp.JGE: lambda a, b, s: a >= b,
    JmpOp.JSET: lambda a, b, s: bool(a & b),
    JmpOp.JNE: lambda a, b, s: a != b,
    JmpOp.JSGT: lambda a, b, s: s(a) > s(b),
    JmpOp.JSGE: lambda a, b, s: s(a) >= s(b),
    JmpOp.JLT: lambda a, b, s: a < b,
    JmpOp.JLE: lambda a, b, s: a <= b,
    JmpOp.JSLT: lambda a, b, s: s(a) < s(b),
    JmpOp.JSLE: lambda a, b, s: s(a) <= s(b),
}


def alu_value(cls: int, code: AluOp, off: int, dst: int, src: int, imm_op: bool = False) -> int:
    """The RFC 9669 result of one ALU/ALU64 operation (not END/NEG) on register values.

    ``src`` is the source register's value or the immediate already sign-extended to 64 bits."""
    wide = cls == ALU64
    mask = M64 if wide else M32
    src &= mask
    if code == AluOp.MOV and off:  # movsx
        return sext(src, off) & mask
    if code in (AluOp.DIV, AluOp.MOD):
        return DIVISION[(cls, code, off)](dst, src)
    return (BINARY64 if wide else BINARY32)[code](dst, src)
