"""RFC 9669 arithmetic on unsigned register values (Python ints in [0, 2**64)).

Shared by the reference interpreter and the translated fast path, so both compute the same thing.
Division by zero gives 0, modulo by zero leaves the dividend (zero-extended for 32-bit ops); signed
division truncates toward zero and INT_MIN / -1 wraps to INT_MIN (remainder 0); shift amounts are
masked to the operand width.
"""

from __future__ import annotations

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


ENDIAN = {0xD4: to_le, 0xDC: to_be, 0xD7: bswap}
