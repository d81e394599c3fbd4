"""The verifier's abstract scalar: unsigned and signed ranges, a tnum, and facts about the input length.

A `Scalar` over-approximates one 64-bit register value: ``umin..umax`` (unsigned), ``smin..smax``
(signed), and a tnum (``value``/``mask``: bits where ``mask`` is 0 are known to equal ``value``), as
the Linux verifier keeps them. Two relational facts make bounds on the input buffer provable:

* ``len_off`` — the value is exactly ``LEN + len_off`` (``LEN`` the ABI's input length register);
* ``len_le`` — the value is at most ``LEN - len_le`` (as mathematical integers).

``link`` = (id, delta) says the value equals origin ``id`` plus ``delta``; a comparison that refines
one register refines every register linked to the same origin (clang tests ``i + 4 <= len`` in one
register and then loads through ``i`` in another). Arithmetic here is sound, not exact: when an
operation may wrap, the result widens to the full range.
"""

from __future__ import annotations

from typing import Any, NamedTuple

U64 = (1 << 64) - 1
U32 = (1 << 32) - 1
S64_MIN, S64_MAX = -(1 << 63), (1 << 63) - 1


def to_signed(x: int) -> int:
    return x - (1 << 64) if x >> 63 else x


def replace(value: Any, **fields: Any) -> Any:
    """A copy of an abstract value (a NamedTuple: fast, immutable, compared by value) with ``fields``."""
    return value._replace(**fields)


class Scalar(NamedTuple):
    umin: int = 0
    umax: int = U64
    smin: int = S64_MIN
    smax: int = S64_MAX
    tval: int = 0
    tmask: int = U64
    len_off: int | None = None
    len_le: int | None = None
    link: tuple[int, int] | None = None

    @property
    def const(self) -> int | None:
        return self.tval if self.tmask == 0 else None

    def describe(self) -> str:
        if self.const is not None:
            return f"{self.const}"
        text = f"[{self.umin}, {self.umax}]" if self.umax < 1 << 63 else "unbounded"
        if self.len_off is not None:
            return f"len{self.len_off:+d}" if self.len_off else "len"
        if self.len_le is not None:
            text += f", <= len{-self.len_le:+d}" if self.len_le else ", <= len"
        return text

    def unlinked(self) -> Scalar:
        return replace(self, link=None)


def const(value: int) -> Scalar:
    value &= U64
    return Scalar(value, value, to_signed(value), to_signed(value), value, 0)


def unknown(bits: int = 64, signed_load: bool = False) -> Scalar:
    """Any value of ``bits`` bits, zero-extended (or sign-extended for a signed load)."""
    if bits >= 64:
        return Scalar()
    if signed_load:
        return Scalar(smin=-(1 << (bits - 1)), smax=(1 << (bits - 1)) - 1)
    top = (1 << bits) - 1
    return Scalar(0, top, 0, top, 0, top)


def normalize(s: Scalar) -> Scalar | None:
    """Tighten the three views against each other; None when they are contradictory (dead path)."""
    umin, umax, smin, smax = max(s.umin, s.tval), min(s.umax, s.tval | s.tmask), s.smin, s.smax
    if smin >= 0:
        umin, umax = max(umin, smin), min(umax, smax)
    elif smax < 0:
        umin, umax = max(umin, smin + (1 << 64)), min(umax, smax + (1 << 64))
    if umin > umax:
        return None
    if umax <= S64_MAX:
        smin, smax = max(smin, umin), min(smax, umax)
    elif umin > S64_MAX:
        smin, smax = max(smin, to_signed(umin)), min(smax, to_signed(umax))
    if smin > smax:
        return None
    tval, tmask = s.tval, s.tmask
    if umin == umax:
        if (umin & ~tmask) != tval:
            return None
        tval, tmask = umin, 0
    else:  # the known high bits of a range: the common prefix of umin and umax
        prefix = U64 ^ ((1 << (umin ^ umax).bit_length()) - 1)
        if (umin & prefix & ~tmask) != (tval & prefix & ~tmask):
            return None
        tval, tmask = (tval & ~prefix) | (umin & prefix), tmask & ~prefix
    return replace(s, umin=umin, umax=umax, smin=smin, smax=smax, tval=tval & ~tmask, tmask=tmask)


def _made(umin: int, umax: int, smin: int, smax: int, tval: int, tmask: int) -> Scalar:
    out = normalize(Scalar(umin, umax, smin, smax, tval, tmask))
    return out if out is not None else Scalar()


def join(a: Scalar, b: Scalar) -> Scalar:
    mu = a.tmask | b.tmask | (a.tval ^ b.tval)
    return Scalar(
        min(a.umin, b.umin),
        max(a.umax, b.umax),
        min(a.smin, b.smin),
        max(a.smax, b.smax),
        a.tval & ~mu,
        mu,
        a.len_off if a.len_off == b.len_off else None,
        None if a.len_le is None or b.len_le is None else min(a.len_le, b.len_le),
        a.link if a.link == b.link else None,
    )


def widen(old: Scalar, new: Scalar) -> Scalar:
    """``new`` (already joined with ``old``) with every bound that moved pushed to its extreme; a tnum
    that keeps losing bits keeps only its known low bits."""
    tmask = new.tmask
    if tmask != old.tmask:
        low = (tmask & -tmask) - 1 if tmask else U64
        tmask = U64 & ~low
    out = normalize(
        replace(
            new,
            umin=new.umin if new.umin >= old.umin else 0,
            umax=new.umax if new.umax <= old.umax else U64,
            smin=new.smin if new.smin >= old.smin else S64_MIN,
            smax=new.smax if new.smax <= old.smax else S64_MAX,
            tval=new.tval & ~tmask,
            tmask=tmask,
        )
    )
    keep = old.len_le is not None and new.len_le == old.len_le
    return replace(out or Scalar(), len_le=new.len_le if keep else None, len_off=new.len_off, link=new.link)


def tighten(s: Scalar, length: Scalar) -> Scalar:
    """Ranges implied by the length facts: ``len + c`` lies in the length's range shifted by c; a value
    at most ``len - k`` is at most ``max(len) - k``."""
    umin, umax = s.umin, s.umax
    if s.len_off is not None:
        umin, umax = max(umin, length.umin + s.len_off), min(umax, length.umax + s.len_off)
    if s.len_le is not None:
        umax = min(umax, length.umax - s.len_le)
    if (umin, umax) == (s.umin, s.umax) or umin > umax or umax < 0:
        return s
    return normalize(replace(s, umin=max(umin, 0), umax=umax)) or s


def shift_const(s: Scalar, c: int) -> Scalar:
    """``s + c`` (mod 2**64) for a small signed constant. The length facts survive when nothing wraps
    unsigned; the link always does (it is modular)."""
    wraps = s.umin + c < 0 or s.umax + c > U64
    umin, umax = (0, U64) if wraps else (s.umin + c, s.umax + c)
    smin, smax = s.smin + c, s.smax + c
    if smin < S64_MIN or smax > S64_MAX:
        smin, smax = S64_MIN, S64_MAX
    tv, tm = _tnum_add(s.tval, s.tmask, c & U64, 0)
    out = normalize(Scalar(umin, umax, smin, smax, tv, tm))
    if out is None:
        return Scalar()
    return replace(
        out,
        len_off=None if s.len_off is None or wraps else s.len_off + c,
        len_le=None if s.len_le is None or wraps else s.len_le - c,
        link=None if s.link is None else (s.link[0], s.link[1] + c),
    )


def _tnum_add(av: int, am: int, bv: int, bm: int) -> tuple[int, int]:
    sm, sv = (am + bm) & U64, (av + bv) & U64
    sigma = (sm + sv) & U64
    chi = sigma ^ sv
    mu = chi | am | bm
    return sv & ~mu & U64, mu & U64


def _tnum_sub(av: int, am: int, bv: int, bm: int) -> tuple[int, int]:
    dv = (av - bv) & U64
    alpha, beta = (dv + am) & U64, (dv - bm) & U64
    mu = (alpha ^ beta) | am | bm
    return dv & ~mu & U64, mu & U64


def _small(s: Scalar) -> int | None:
    """The value of a constant that fits 33 signed bits (an immediate or a small offset), else None."""
    c = s.const
    if c is None:
        return None
    c = to_signed(c)
    return c if -(1 << 32) <= c <= 1 << 32 else None


def add(a: Scalar, b: Scalar) -> Scalar:
    if (c := _small(b)) is not None:
        return shift_const(a, c)
    if (c := _small(a)) is not None:
        return shift_const(b, c)
    umin, umax = (a.umin + b.umin, a.umax + b.umax) if a.umax + b.umax <= U64 else (0, U64)
    smin, smax = a.smin + b.smin, a.smax + b.smax
    if smin < S64_MIN or smax > S64_MAX:
        smin, smax = S64_MIN, S64_MAX
    return _made(umin, umax, smin, smax, *_tnum_add(a.tval, a.tmask, b.tval, b.tmask))


def sub(a: Scalar, b: Scalar) -> Scalar:
    if (c := _small(b)) is not None:
        return shift_const(a, -c)
    umin, umax = (a.umin - b.umax, a.umax - b.umin) if a.umin >= b.umax else (0, U64)
    smin, smax = a.smin - b.smax, a.smax - b.smin
    if smin < S64_MIN or smax > S64_MAX:
        smin, smax = S64_MIN, S64_MAX
    return _made(umin, umax, smin, smax, *_tnum_sub(a.tval, a.tmask, b.tval, b.tmask))


def mul(a: Scalar, b: Scalar) -> Scalar:
    if a.umax * b.umax <= S64_MAX:
        return _made(a.umin * b.umin, a.umax * b.umax, a.umin * b.umin, a.umax * b.umax, 0, U64)
    return Scalar()


def bit_and(a: Scalar, b: Scalar) -> Scalar:
    mu = (a.tmask | a.tval) & (b.tmask | b.tval)
    v = a.tval & b.tval
    return _made(0, min(a.umax, b.umax), S64_MIN, S64_MAX, v, mu & ~v)


def bit_or(a: Scalar, b: Scalar) -> Scalar:
    v = a.tval | b.tval
    mu = (a.tmask | b.tmask) & ~v
    return _made(max(a.umin, b.umin), U64, S64_MIN, S64_MAX, v, mu)


def bit_xor(a: Scalar, b: Scalar) -> Scalar:
    mu = a.tmask | b.tmask
    return _made(0, U64, S64_MIN, S64_MAX, (a.tval ^ b.tval) & ~mu, mu)


def lsh(a: Scalar, k: int) -> Scalar:
    if (a.umax << k) <= U64:
        return _made(a.umin << k, a.umax << k, S64_MIN, S64_MAX, (a.tval << k) & U64, (a.tmask << k) & U64)
    return _made(0, U64, S64_MIN, S64_MAX, (a.tval << k) & U64, (a.tmask << k) & U64)


def rsh(a: Scalar, k: int) -> Scalar:
    return _made(a.umin >> k, a.umax >> k, S64_MIN, S64_MAX, a.tval >> k, a.tmask >> k)


def arsh(a: Scalar, k: int) -> Scalar:
    return _made(0, U64, a.smin >> k, a.smax >> k, 0, U64)


def udiv(a: Scalar, b: Scalar) -> Scalar:
    if b.const:
        return _made(a.umin // b.const, a.umax // b.const, S64_MIN, S64_MAX, 0, U64)
    return _made(0, a.umax, S64_MIN, S64_MAX, 0, U64)


def umod(a: Scalar, b: Scalar) -> Scalar:
    top = a.umax if b.umin == 0 else min(a.umax, b.umax - 1)
    return _made(0, top, S64_MIN, S64_MAX, 0, U64)


def truncate32(s: Scalar) -> Scalar:
    """The low 32 bits, zero-extended (the result of every 32-bit ALU operation)."""
    if s.umax <= U32:
        return s
    return _made(0, U32, 0, U32, s.tval & U32, s.tmask & U32)


def meet(a: Scalar, b: Scalar) -> Scalar | None:
    """Values in both (the equal branch of ``jeq``); relational facts of either side carry over."""
    if (a.tval ^ b.tval) & ~(a.tmask | b.tmask):
        return None
    out = normalize(
        Scalar(
            max(a.umin, b.umin),
            min(a.umax, b.umax),
            max(a.smin, b.smin),
            min(a.smax, b.smax),
            (a.tval | b.tval) & ~(a.tmask & b.tmask),
            a.tmask & b.tmask,
        )
    )
    if out is None:
        return None
    le = [x for x in (a.len_le, b.len_le) if x is not None]
    return replace(
        out,
        len_off=a.len_off if a.len_off is not None else b.len_off,
        len_le=max(le) if le else None,
        link=a.link,
    )


def with_bounds(s: Scalar, **bounds: int) -> Scalar | None:
    return normalize(replace(s, **bounds))
