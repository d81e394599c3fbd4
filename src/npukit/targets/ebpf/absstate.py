"""The verifier's abstract state: typed registers, stack frames with initialised bytes, the input length.

A register holds `UNINIT`, a `Scalar` (``absval``) or a `Pointer` into one region (``stack`` of a given
frame, ``input``, ``output`` or an ELF data section by name) with a scalar offset. Each frame keeps its
512 stack bytes as an initialisation bitmask plus the register values spilled to 8-byte slots (so a
pointer survives a spill and fill). ``length`` is the range of the ABI's input length. States join at
control-flow merges and widen at loop heads; `refine` narrows both sides of a conditional jump.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from npukit.targets.ebpf import absval as V
from npukit.targets.ebpf.absval import Scalar, replace
from npukit.targets.ebpf.isa import JmpOp
from npukit.targets.ebpf.memory import FRAME_SIZE


class Uninit:
    def __repr__(self) -> str:
        return "UNINIT"


UNINIT = Uninit()


class Pointer(NamedTuple):
    region: str
    off: Scalar
    frame: int = 0


Value = Scalar | Pointer | Uninit


@dataclass
class Frame:
    regs: list[Value]
    slots: dict[int, Value] = field(default_factory=dict)  # 8-byte spills by offset from the frame top
    init: int = 0  # bit i: byte at offset i - FRAME_SIZE is initialised
    return_pc: int = -1

    def copy(self) -> Frame:
        return Frame(list(self.regs), dict(self.slots), self.init, self.return_pc)

    def key(self) -> tuple:
        return (tuple(self.regs), tuple(sorted(self.slots.items())), self.init, self.return_pc)


@dataclass
class State:
    frames: list[Frame]
    length: Scalar

    @property
    def top(self) -> Frame:
        return self.frames[-1]

    def copy(self) -> State:
        return State([f.copy() for f in self.frames], self.length)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, State)
            and self.length == other.length
            and [f.key() for f in self.frames] == [f.key() for f in other.frames]
        )

    def values(self):
        for f in self.frames:
            yield from f.regs
            yield from f.slots.values()

    def map_values(self, fn) -> None:
        """Apply ``fn`` to every register and spilled value, in place (callers may hold the lists)."""
        for f in self.frames:
            f.regs[:] = [fn(v) for v in f.regs]
            for k, v in f.slots.items():
                f.slots[k] = fn(v)

    def unlink(self, origin: int) -> None:
        """A new value takes link id ``origin``: values still carrying it no longer relate to it."""

        def cut(v: Value) -> Value:
            if isinstance(v, Scalar) and v.link and v.link[0] == origin:
                return v.unlinked()
            if isinstance(v, Pointer) and v.off.link and v.off.link[0] == origin:
                return replace(v, off=v.off.unlinked())
            return v

        self.map_values(cut)

    def effective_le(self, s: Scalar) -> int | None:
        """The best k with ``s <= LEN - k`` from the relation or from the ranges."""
        from_range = self.length.umin - s.umax
        best = from_range if from_range > -(1 << 40) else None
        if s.len_le is not None:
            best = s.len_le if best is None else max(best, s.len_le)
        if s.len_off is not None:
            best = -s.len_off if best is None else max(best, -s.len_off)
        return best


def _join_value(a: Value, b: Value, sa: State, sb: State) -> Value:
    if a == b:
        return a
    if isinstance(a, Uninit) or isinstance(b, Uninit):
        return UNINIT
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        return _join_scalar(a, b, sa, sb)
    if isinstance(a, Pointer) and isinstance(b, Pointer) and (a.region, a.frame) == (b.region, b.frame):
        return Pointer(a.region, _join_scalar(a.off, b.off, sa, sb), a.frame)
    return Scalar()


def _join_scalar(a: Scalar, b: Scalar, sa: State, sb: State) -> Scalar:
    ka, kb = sa.effective_le(a), sb.effective_le(b)
    out = V.join(replace(a, len_le=None), replace(b, len_le=None))
    return replace(out, len_le=None if ka is None or kb is None else min(ka, kb))


def join(a: State, b: State) -> State:
    frames = []
    for fa, fb in zip(a.frames, b.frames, strict=True):
        regs = [_join_value(x, y, a, b) for x, y in zip(fa.regs, fb.regs, strict=True)]
        slots = {k: _join_value(v, fb.slots[k], a, b) for k, v in fa.slots.items() if k in fb.slots}
        frames.append(Frame(regs, slots, fa.init & fb.init, fa.return_pc))
    out = State(frames, V.join(a.length, b.length))
    _relink(out, a, b)
    tighten(out)
    return out


def _positions(st: State) -> list[tuple[int, str, int]]:
    return [(i, "r", r) for i, f in enumerate(st.frames) for r in range(11)] + [
        (i, "s", k) for i, f in enumerate(st.frames) for k in sorted(f.slots)
    ]


def _at(st: State, pos: tuple[int, str, int]) -> Scalar | None:
    frame, kind, key = pos
    f = st.frames[frame]
    v = f.regs[key] if kind == "r" else f.slots.get(key)
    s = v.off if isinstance(v, Pointer) else v
    return s if isinstance(s, Scalar) else None


def _difference(x: Scalar | None, y: Scalar | None) -> int | None:
    """y - x when the state knows it: same link origin, or two constants."""
    if x is None or y is None:
        return None
    if x.link is not None and y.link is not None and x.link[0] == y.link[0]:
        return y.link[1] - x.link[1]
    if x.const is not None and y.const is not None:
        return y.const - x.const
    return None


def _relink(out: State, a: State, b: State) -> None:
    """Links of the joined state: values whose difference is the same known number on both sides
    (linked there, or equal constants) get a common origin, numbered by the first one's position."""
    positions = [p for p in _positions(out) if _at(out, p) is not None]
    group: dict[tuple[int, str, int], tuple[int, int]] = {}
    for n, p in enumerate(positions):
        if p in group:
            continue
        origin = -(n + 1)
        for q in positions[n + 1 :]:
            if q in group:
                continue
            d = _difference(_at(a, p), _at(a, q))
            if d is not None and d == _difference(_at(b, p), _at(b, q)):
                group[q] = (origin, d)
                group.setdefault(p, (origin, 0))

    def put(pos: tuple[int, str, int]) -> None:
        frame, kind, key = pos
        f = out.frames[frame]
        v = f.regs[key] if kind == "r" else f.slots[key]
        link = group.get(pos)
        if (v.off if isinstance(v, Pointer) else v).link == link:
            return
        nv = replace(v.off, link=link) if isinstance(v, Pointer) else replace(v, link=link)
        nv = replace(v, off=nv) if isinstance(v, Pointer) else nv
        if kind == "r":
            f.regs[key] = nv
        else:
            f.slots[key] = nv

    for pos in positions:
        put(pos)


def widen(old: State, new: State) -> State:
    def w(o: Value, n: Value) -> Value:
        if isinstance(o, Scalar) and isinstance(n, Scalar):
            return V.widen(o, n)
        if isinstance(o, Pointer) and isinstance(n, Pointer) and o.region == n.region:
            return replace(n, off=V.widen(o.off, n.off))
        return n

    out = new.copy()
    for fo, fn in zip(old.frames, out.frames, strict=True):
        fn.regs = [w(o, n) for o, n in zip(fo.regs, fn.regs, strict=True)]
        fn.slots = {k: w(fo.slots.get(k, v), v) for k, v in fn.slots.items()}
    out.length = V.widen(old.length, new.length)
    tighten(out)
    return out


def tighten(st: State) -> None:
    """Every value's range narrowed by its facts about the input length."""

    def t(v: Value) -> Value:
        if isinstance(v, Scalar):
            return V.tighten(v, st.length)
        if isinstance(v, Pointer):
            return replace(v, off=V.tighten(v.off, st.length))
        return v

    st.map_values(t)


def new_state(regs: list[Value], length: Scalar) -> State:
    return State([Frame(regs)], length)


FULL_INIT = (1 << FRAME_SIZE) - 1

# -------------------------------------------------------------------------------- conditional jumps

# The comparison that holds on the taken branch, and its negation (the fall-through branch).
NEGATION = {
    JmpOp.JEQ: JmpOp.JNE, JmpOp.JNE: JmpOp.JEQ,
    JmpOp.JGT: JmpOp.JLE, JmpOp.JLE: JmpOp.JGT, JmpOp.JGE: JmpOp.JLT, JmpOp.JLT: JmpOp.JGE,
    JmpOp.JSGT: JmpOp.JSLE, JmpOp.JSLE: JmpOp.JSGT, JmpOp.JSGE: JmpOp.JSLT, JmpOp.JSLT: JmpOp.JSGE,
}
SWAPPED = {
    JmpOp.JEQ: JmpOp.JEQ, JmpOp.JNE: JmpOp.JNE,
    JmpOp.JGT: JmpOp.JLT, JmpOp.JLT: JmpOp.JGT, JmpOp.JGE: JmpOp.JLE, JmpOp.JLE: JmpOp.JGE,
    JmpOp.JSGT: JmpOp.JSLT, JmpOp.JSLT: JmpOp.JSGT, JmpOp.JSGE: JmpOp.JSLE, JmpOp.JSLE: JmpOp.JSGE,
}


def _less(a: Scalar, b: Scalar, strict: bool, signed: bool, st: State) -> tuple[Scalar, Scalar] | None:
    """Refine a and b under ``a < b`` (strict) or ``a <= b``; None when impossible."""
    d = 1 if strict else 0
    if signed:
        na = V.with_bounds(a, smax=min(a.smax, b.smax - d))
        nb = V.with_bounds(b, smin=max(b.smin, a.smin + d))
    else:
        na = V.with_bounds(a, umax=min(a.umax, b.umax - d)) if b.umax - d >= 0 else None
        nb = V.with_bounds(b, umin=max(b.umin, a.umin + d))
    if na is None or nb is None:
        return None
    if not signed or (a.smin >= 0 and b.smin >= 0):  # a <= b - d, as integers
        kb = st.effective_le(b)
        if kb is not None:
            ka = st.effective_le(na)
            na = replace(na, len_le=kb + d if ka is None else max(ka, kb + d))
    return na, nb


def _compare(op: JmpOp, a: Scalar, b: Scalar, st: State) -> tuple[Scalar, Scalar] | None:
    if op == JmpOp.JEQ:
        m = V.meet(a, b)
        return None if m is None else (m, replace(m, link=b.link))
    if op == JmpOp.JNE:
        return _not_equal(a, b, st)
    if op in (JmpOp.JLT, JmpOp.JLE, JmpOp.JSLT, JmpOp.JSLE):
        return _less(a, b, op in (JmpOp.JLT, JmpOp.JSLT), op in (JmpOp.JSLT, JmpOp.JSLE), st)
    r = _compare(SWAPPED[op], b, a, st)
    return None if r is None else (r[1], r[0])


def _not_equal(a: Scalar, b: Scalar, st: State) -> tuple[Scalar, Scalar] | None:
    if a.const is not None and a.const == b.const:
        return None
    a = _excluding(a, b, st)
    return a, _excluding(b, a, st)


def _excluding(x: Scalar, y: Scalar, st: State) -> Scalar:
    """x refined by ``x != y``: a constant at either end of x's range is cut off; x <= len + c and
    x != len + c give x <= len + c - 1."""
    c = y.const
    if c is not None:
        if x.umin == c:
            x = V.with_bounds(x, umin=c + 1) or x
        elif x.umax == c:
            x = V.with_bounds(x, umax=c - 1) or x
    kx = st.effective_le(x)
    if y.len_off is not None and kx is not None and kx == -y.len_off:
        x = replace(x, len_le=kx + 1)
    return x


def compare(op: JmpOp, a: Scalar, b: Scalar, wide: bool, st: State) -> tuple[Scalar, Scalar] | None:
    """Both operands refined under ``a op b`` (JSET: unchanged); 32-bit compares refine only values
    that fit 32 bits (then the low halves are the values)."""
    if op == JmpOp.JSET:
        return (a, b) if (a.tval | a.tmask) & (b.tval | b.tmask) else None
    if not wide and (a.umax > V.U32 or b.umax > V.U32):
        return a, b
    signed = op in (JmpOp.JSGT, JmpOp.JSGE, JmpOp.JSLT, JmpOp.JSLE)
    if not wide and signed and (a.umax >= 1 << 31 or b.umax >= 1 << 31):
        return a, b
    return _compare(op, a, b, st)


def negate(op: JmpOp) -> JmpOp | None:
    return NEGATION.get(op)
