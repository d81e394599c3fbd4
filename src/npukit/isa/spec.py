"""Instruction sets as data: fields -> formats -> a spec; bound to a hardware description it encodes,
decodes and validates fixed-width instruction words of any size.

* A `Field` is a name, a bit range (``lo`` and ``width``; either may be a callable of the hardware
  description, or a dotted attribute name of it, so widths follow log2 parameters as in TVM's VTA),
  and what its bits mean: signed, an enum (``IntEnum``/``IntFlag``, or ``bool``), reserved-must-be-zero,
  a constant (the opcode bits that select the format), doc text, the assembly key. ``lo=None`` packs a
  field right above the previous one (LSB first, VTA's layout rule; with ``Format.pack_unit=64`` a
  field that would straddle a 64-bit unit starts the next one, as C ``uint64_t`` bitfields do).
  ``pieces`` splits one value over several bit ranges (RISC-V immediates, eBPF ``lddw``'s halves).
* A `Format` is one instruction layout: its fields (constants included), its word count (multi-word
  instructions are the words concatenated little-end first: word ``i`` holds bits ``[i*W, (i+1)*W)``),
  the class decoded instructions are built as (a frozen dataclass is generated when none is given) and
  an optional semantic ``check(instr, hw) -> reason | None``.
* A `Spec` is a word width and formats. ``spec.bind(hw)`` derives every width and position once per
  description (cached) and returns a `BoundSpec`, which encodes, decodes and validates.

Every failure is one line: `DecodeError` (word + reason) on decode, `AsmError` on encode.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from npukit.errors import ConfigError, DecodeError, NpukitError

Derived = int | str | Callable[[Any], int]  # a number, a dotted hw attribute, or a function of hw


class AsmError(NpukitError, ValueError):
    """An instruction that cannot be encoded or a line that cannot be assembled."""


@dataclass(frozen=True)
class Field:
    name: str
    width: Derived
    lo: Derived | None = None  # None: right above the previous field of the format (LSB first)
    signed: bool = False
    enum: type | None = None  # IntEnum / IntFlag / bool: decoded values are typed
    strict_enum: bool = True  # an unknown enum value is a decode error (False: kept as a raw int)
    reserved: bool = False  # must be zero
    const: int | None = None  # fixed bits that select the format (opcode)
    doc: str = ""
    asm: str | None = None  # key in key=value assembly text; None = the name, "" = not written
    kind: str = ""  # free tag for the target (pccx: l2, slot, ...)
    fmt: str = "dec"  # how text shows the value: dec | hex
    tags: frozenset[str] = frozenset()
    pieces: tuple[tuple[Derived, Derived], ...] = ()  # split value: (lo, width) ranges, LSB first
    limit: Derived | None = None  # values must be below this (e.g. a buffer depth from the description)


def bits(name: str, hi: int, lo: int, **kw: Any) -> Field:
    """A field at the fixed bit range ``[hi:lo]`` (inclusive, as in Verilog)."""
    return Field(name, hi - lo + 1, lo, **kw)


def const(name: str, hi: int, lo: int, value: int, **kw: Any) -> Field:
    """Fixed bits ``[hi:lo] = value`` that select a format (an opcode)."""
    return Field(name, hi - lo + 1, lo, const=value, **kw)


@dataclass(frozen=True)
class Format:
    name: str
    fields: tuple[Field, ...]
    words: int = 1
    cls: type | None = None
    doc: str = ""
    check: Callable[[Any, Any], str | None] | None = None
    mnemonic_field: str | None = None  # text: ``<name>.<member>`` names this enum field's value
    tags: frozenset[str] = frozenset()
    gaps: str = "zero"  # bits no field covers: "zero" (must be 0, so text round-trips) or "ignore"
    pack_unit: int = 0  # packed fields never straddle a unit of this many bits (C bitfields: 64)


@dataclass(frozen=True)
class Spec:
    name: str
    word_bits: int
    formats: tuple[Format, ...]
    check: Callable[[Any, Any], str | None] | None = None  # spec-wide, after the format's own check
    memo: int = 0  # decode results kept per bound spec (decode is a pure function of the word)
    _bound: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    def bind(self, hw: Any = None) -> BoundSpec:
        """The concrete spec for ``hw`` (widths and positions derived once per description)."""
        try:
            hit = self._bound.get(hw)
        except TypeError:  # an unhashable description: derive every time
            return BoundSpec(self, hw)
        if hit is None:
            hit = self._bound[hw] = BoundSpec(self, hw)
        return hit


# --- the concrete (bound) form ---------------------------------------------------------------------

@dataclass(frozen=True)
class BoundField:
    name: str
    lo: int
    width: int
    signed: bool
    enum: type | None
    strict_enum: bool
    reserved: bool
    const: int | None
    doc: str
    asm: str
    kind: str
    fmt: str
    tags: frozenset[str]
    pieces: tuple[tuple[int, int], ...]  # () for a contiguous field
    limit: int | None = None

    @property
    def hi(self) -> int:
        return self.lo + self.width - 1

    @property
    def mask(self) -> int:
        return (1 << self.width) - 1

    def ranges(self) -> tuple[tuple[int, int], ...]:
        """(lo, width) bit ranges, LSB of the value first."""
        return self.pieces or ((self.lo, self.width),)

    def bits_text(self, word_bits: int = 0, words: int = 1) -> str:
        """``[hi:lo]``; a range in a later word of a multi-word format as ``w1[hi:lo]``."""
        return ", ".join(reversed([_range_text(lo, width, word_bits, words) for lo, width in self.ranges()]))


def _range_text(lo: int, width: int, word_bits: int = 0, words: int = 1) -> str:
    slot, lo_in = divmod(lo, word_bits) if word_bits and words > 1 else (0, lo)
    hi_in = lo_in + width - 1
    rng = f"[{hi_in}]" if width == 1 else f"[{hi_in}:{lo_in}]"
    return f"w{slot}{rng}" if words > 1 else rng


def _derive(value: Derived, hw: Any, what: str) -> int:
    if isinstance(value, int):
        return value
    try:
        if isinstance(value, str):
            obj = hw
            for part in value.split("."):
                obj = getattr(obj, part)
            got = obj
        else:
            got = value(hw)
    except Exception as exc:  # a description without the parameter the spec needs
        raise ConfigError(f"{what}: cannot derive from the hardware description: {exc}") from None
    if isinstance(got, bool) or not isinstance(got, int) or got < 0:
        raise ConfigError(f"{what}: derived {got!r}, not a non-negative integer")
    return got


def _bind_field(f: Field, hw: Any, next_lo: int, where: str) -> BoundField:
    width = _derive(f.width, hw, f"{where}.{f.name} width")
    if f.pieces:
        pieces = tuple((_derive(lo, hw, f"{where}.{f.name} lo"), _derive(w, hw, f"{where}.{f.name} width"))
                       for lo, w in f.pieces)
        width = sum(w for _, w in pieces)
        lo = pieces[0][0]
    else:
        pieces = ()
        lo = next_lo if f.lo is None else _derive(f.lo, hw, f"{where}.{f.name} lo")
    if width < 1:
        raise ConfigError(f"{where}.{f.name}: width {width} < 1")
    if f.const is not None and not 0 <= f.const < 1 << width:
        raise ConfigError(f"{where}.{f.name}: constant {f.const} does not fit in {width} bits")
    asm = f.name if f.asm is None else f.asm
    limit = None if f.limit is None else _derive(f.limit, hw, f"{where}.{f.name} limit")
    return BoundField(f.name, lo, width, f.signed, f.enum, f.strict_enum, f.reserved, f.const, f.doc,
                      asm, f.kind, f.fmt, f.tags, pieces, limit)


class BoundFormat:
    """One format with concrete positions, its match bits and its decode plan."""

    def __init__(self, fmt: Format, hw: Any, word_bits: int, spec_name: str) -> None:
        where = f"{spec_name}.{fmt.name}"
        self.name, self.words, self.doc, self.check = fmt.name, fmt.words, fmt.doc, fmt.check
        self.mnemonic_field, self.tags = fmt.mnemonic_field, fmt.tags
        self.total_bits = word_bits * fmt.words
        bound, next_lo = [], 0
        for f in fmt.fields:
            if f.lo is None and not f.pieces and fmt.pack_unit:
                width = _derive(f.width, hw, f"{where}.{f.name} width")
                if next_lo // fmt.pack_unit != (next_lo + width - 1) // fmt.pack_unit:
                    next_lo = -(-next_lo // fmt.pack_unit) * fmt.pack_unit  # C: start the next unit
            bf = _bind_field(f, hw, next_lo, where)
            bound.append(bf)
            next_lo = max(lo + w for lo, w in bf.ranges())
        self.fields: tuple[BoundField, ...] = tuple(bound)
        used = self._check_layout(where)
        if fmt.gaps not in ("zero", "ignore"):
            raise ConfigError(f"{where}: gaps must be 'zero' or 'ignore', not {fmt.gaps!r}")
        gap = ((1 << self.total_bits) - 1) & ~used if fmt.gaps == "zero" else 0
        self.gap_mask = gap
        self.gap_ranges = tuple((m, _range_text(lo, hi - lo + 1, word_bits, fmt.words))
                                for m, hi, lo in _ranges_of(gap))
        self.match_mask = self.match_value = 0
        for bf in self.fields:
            if bf.const is not None:
                self.match_mask |= bf.mask << bf.lo
                self.match_value |= bf.const << bf.lo
        self.values = tuple(bf for bf in self.fields if bf.const is None and not bf.reserved)
        consts = {bf.name: bf.const for bf in self.fields if bf.const is not None}
        self.cls = fmt.cls or _make_class(fmt.name, self.values, consts)
        self.by_name = {bf.name: bf for bf in self.fields}
        if self.mnemonic_field is not None and self.mnemonic_field not in self.by_name:
            raise ConfigError(f"{where}: mnemonic_field {self.mnemonic_field!r} is not a field")
        # plan: (name, lo, mask, width, signed, enum table or None, strict, reserved, pieces, enum type)
        self.plan = tuple(_plan(bf, word_bits, fmt.words) for bf in self.fields if bf.const is None)
        self.pack_plan = tuple(
            (bf.name, bf.lo, -(1 << (bf.width - 1)) if bf.signed else 0,
             (1 << (bf.width - 1)) - 1 if bf.signed else bf.mask, bf.mask, bf.pieces, bf)
            for bf in self.fields if bf.const is None)

    def _check_layout(self, where: str) -> int:
        used = 0
        for bf in self.fields:
            for lo, width in bf.ranges():
                m = ((1 << width) - 1) << lo
                if lo + width > self.total_bits:
                    raise ConfigError(f"{where}.{bf.name}: bits up to {lo + width - 1} exceed the "
                                      f"{self.total_bits}-bit instruction")
                if used & m:
                    raise ConfigError(f"{where}.{bf.name}: overlaps another field")
                used |= m
        return used

    def field(self, name: str) -> BoundField:
        return self.by_name[name]


def _where(fmt: BoundFormat, where: str) -> str:
    return f"{where}: " if where else f"{fmt.name} field "


def _label(bf: BoundField, key: str) -> str:
    return (bf.asm or bf.name) if key == "asm" else bf.name


def _ranges_of(mask: int) -> tuple[tuple[int, int, int], ...]:
    """The runs of set bits of ``mask`` as (mask of the run, hi, lo), highest first."""
    out, lo = [], 0
    while mask >> lo:
        if not (mask >> lo) & 1:
            lo += 1
            continue
        hi = lo
        while (mask >> (hi + 1)) & 1:
            hi += 1
        out.append((((1 << (hi - lo + 1)) - 1) << lo, hi, lo))
        lo = hi + 1
    return tuple(reversed(out))


def _make_class(name: str, values: Sequence[BoundField], consts: dict[str, int]) -> type:
    """The record class of a format: its value fields, and its constant fields (the opcode bits) as
    class attributes, so a simulator dispatches on ``ins.opcode`` rather than on the class's name."""
    cls_name = "".join(p.capitalize() for p in name.replace(".", "_").split("_")) or "Instr"
    spec = [(bf.name, bf.enum or int, dataclasses.field(default=_zero(bf))) for bf in values]
    return dataclasses.make_dataclass(cls_name, spec, frozen=True, namespace=dict(consts))


def _zero(bf: BoundField) -> Any:
    if bf.enum is bool:
        return False
    if bf.enum is not None:
        try:
            return bf.enum(0)
        except ValueError:
            return 0
    return 0


class _EnumTable(dict):
    """int -> member, filled on demand (an IntFlag has up to 2**width members)."""

    def __init__(self, tp: type) -> None:
        super().__init__()
        self.tp = tp
        self.flag = issubclass(tp, enum.Flag)
        self.known = 0
        for m in tp:
            self[int(m)] = m
            self.known |= int(m)

    def __missing__(self, raw: int) -> Any:
        if not self.flag:
            return None
        member = self[raw] = self.tp(raw)
        return member


def _plan(bf: BoundField, word_bits: int, words: int) -> tuple:
    table = None if bf.enum in (None, bool) else _EnumTable(bf.enum)
    return (bf.name, bf.lo, bf.mask, bf.width, bf.signed, table, bf.strict_enum, bf.reserved,
            bf.pieces, bf.enum, bf.bits_text(word_bits, words), bf.limit)


# --- the bound spec --------------------------------------------------------------------------------

class BoundSpec:
    """A spec with every width derived from one hardware description: encode, decode, validate."""

    def __init__(self, spec: Spec, hw: Any = None) -> None:
        self.spec, self.hw, self.name = spec, hw, spec.name
        self.word_bits = spec.word_bits
        self.word_mask = (1 << spec.word_bits) - 1
        self.formats = tuple(BoundFormat(f, hw, spec.word_bits, spec.name) for f in spec.formats)
        self.by_name = {f.name: f for f in self.formats}
        self.by_class: dict[type, BoundFormat] = {}
        for f in self.formats:
            self.by_class.setdefault(f.cls, f)
        if len(self.by_name) != len(self.formats):
            raise ConfigError(f"{spec.name}: two formats share a name")
        self._dispatch = _dispatch_table(self.formats, self.word_mask, spec.name)
        self._unmatched = _unmatched_reason(self.formats, self.word_mask)
        self._memo: dict[int, Any] = {}
        self.cache: dict[Any, Any] = {}  # what text layers derive from this bound spec
        self._memo_max = spec.memo

    # decoding -------------------------------------------------------------------------------------

    def match(self, word: int) -> BoundFormat | None:
        """The format whose constant bits (in the first word) match ``word``."""
        for mask, table in self._dispatch:
            fmt = table.get(word & mask)
            if fmt is not None:
                return fmt
        return None

    def decode_or_reason(self, word: int) -> Any:
        """One single-word instruction, or the one-line reason ``word`` is invalid (no exception)."""
        memo = self._memo
        hit = memo.get(word)
        if hit is None:
            fmt = self.match(word)
            if fmt is None:
                hit = self._unmatched(word)
            elif fmt.words != 1:
                hit = f"{fmt.name} takes {fmt.words} words"
            else:
                hit = self.decode_as(fmt, word)
            if self._memo_max:
                if len(memo) >= self._memo_max:
                    memo.clear()
                memo[word] = hit
        return hit

    def decode(self, word: int) -> Any:
        """One single-word instruction; `DecodeError` with the reason when it is invalid."""
        w = self._word(word)
        hit = self.decode_or_reason(w)
        if isinstance(hit, str):
            raise DecodeError(w, hit, self.word_bits)
        return hit

    def decode_at(self, words: Sequence[int], i: int = 0) -> tuple[Any, int]:
        """The instruction starting at ``words[i]`` and how many words it takes."""
        w = self._word(words[i])
        fmt = self.match(w)
        if fmt is None or fmt.words == 1:
            hit = self.decode_or_reason(w)
            if isinstance(hit, str):
                raise DecodeError(w, hit, self.word_bits)
            return hit, 1
        if i + fmt.words > len(words):
            raise DecodeError(w, f"{fmt.name} takes {fmt.words} words; the program ends", self.word_bits)
        wide = 0
        for k in range(fmt.words):
            wide |= self._word(words[i + k]) << (k * self.word_bits)
        hit = self.decode_as(fmt, wide)
        if isinstance(hit, str):
            raise DecodeError(wide, hit, self.word_bits * fmt.words)
        return hit, fmt.words

    def decode_program(self, words: Sequence[int]) -> list[Any]:
        out, i = [], 0
        words = list(words)
        while i < len(words):
            ins, n = self.decode_at(words, i)
            out.append(ins)
            i += n
        return out

    def _word(self, word: Any) -> int:
        try:
            w = int(word)
        except (TypeError, ValueError):
            raise DecodeError(0, f"not an integer word: {word!r}", self.word_bits) from None
        if not 0 <= w <= self.word_mask:
            raise DecodeError(w & self.word_mask, f"word does not fit in {self.word_bits} bits",
                              self.word_bits)
        return w

    def decode_as(self, fmt: BoundFormat, w: int) -> Any:
        """The instruction of format ``fmt`` held in ``w`` (all its words), or the reason it is invalid."""
        if w & fmt.gap_mask:
            for m, rng in fmt.gap_ranges:
                if w & m:
                    return f"unassigned bits {rng} are nonzero"
        kw: dict[str, Any] = {}
        for name, lo, mask, width, signed, table, strict, reserved, pieces, tp, rng, limit in fmt.plan:
            if pieces:
                raw, shift = 0, 0
                for plo, pw in pieces:
                    raw |= ((w >> plo) & ((1 << pw) - 1)) << shift
                    shift += pw
            else:
                raw = (w >> lo) & mask
            if reserved:
                if raw:
                    return f"reserved bits {rng} are nonzero"
                continue
            if table is not None:
                member = table[raw]
                if member is None or (strict and table.flag and raw & ~table.known):
                    if strict:
                        return f"{name} {raw:#x} is not a known {tp.__name__}"
                    member = raw
                kw[name] = member
            elif tp is bool:
                kw[name] = bool(raw)
            else:
                if signed and raw >> (width - 1):
                    raw -= 1 << width
                if limit is not None and raw >= limit:
                    return f"{name} {raw} is out of range (max {limit - 1})"
                kw[name] = raw
        ins = fmt.cls(**kw)
        reason = fmt.check(ins, self.hw) if fmt.check is not None else None
        if reason is None and self.spec.check is not None:
            reason = self.spec.check(ins, self.hw)
        return reason or ins

    # encoding -------------------------------------------------------------------------------------

    def format_of(self, ins: Any) -> BoundFormat:
        fmt = self.by_class.get(type(ins))
        if fmt is None:
            raise AsmError(f"not a {self.name} instruction: {ins!r}")
        return fmt

    def pack(self, fmt: BoundFormat | str, values: dict[str, Any] | Any, *, where: str = "",
             key: str = "name") -> int:
        """Field values (a mapping, or an instruction's attributes) -> the instruction as one integer
        (all its words); missing values are 0. Range errors are `AsmError`s naming the field by its
        ``key`` (``name`` or ``asm``), prefixed with ``where``; no semantic validation."""
        if isinstance(fmt, str):
            fmt = self.format(fmt)
        is_map = isinstance(values, dict)
        w = fmt.match_value
        for name, lo, lo_ok, hi_ok, mask, pieces, bf in fmt.pack_plan:
            v = values.get(name, 0) if is_map else getattr(values, name, 0)
            if v.__class__ is not int:
                try:
                    v = int(v)
                except (TypeError, ValueError):
                    what = f"{_where(fmt, where)}{_label(bf, key)}"
                    raise AsmError(f"{what} is not an integer: {v!r}") from None
            if not lo_ok <= v <= hi_ok:
                what = f"{_where(fmt, where)}{_label(bf, key)}={v}"
                raise AsmError(f"{what} does not fit in {bf.width} bits{' (signed)' if bf.signed else ''}")
            if pieces:
                v &= mask
                for plo, pw in pieces:
                    w |= (v & ((1 << pw) - 1)) << plo
                    v >>= pw
            else:
                w |= (v & mask) << lo
        return w

    def encode(self, ins: Any, *, validate: bool = True) -> int:
        """Instruction -> its bits as one integer (a multi-word instruction: words little-end first).
        Out-of-range fields raise `AsmError`; with ``validate`` an invalid instruction raises
        `DecodeError`, by decoding the result (one validation path: what the device checks)."""
        fmt = self.format_of(ins)
        w = self.pack(fmt, ins)
        if validate:
            hit = self.decode_or_reason(w) if fmt.words == 1 else self.decode_as(fmt, w)
            if isinstance(hit, str):
                raise DecodeError(w, hit, self.word_bits * fmt.words)
        return w

    def encode_words(self, ins: Any, *, validate: bool = True) -> list[int]:
        """Instruction -> its words (one list entry per word)."""
        fmt = self.format_of(ins)
        return self.split(self.encode(ins, validate=validate), fmt.words)

    def encode_program(self, instrs: Iterable[Any]) -> list[int]:
        out: list[int] = []
        for ins in instrs:
            out.extend(self.encode_words(ins))
        return out

    def split(self, wide: int, n: int) -> list[int]:
        return [(wide >> (k * self.word_bits)) & self.word_mask for k in range(n)]

    def validate(self, ins: Any) -> str | None:
        """The reason an instruction is invalid (range or semantics), or None."""
        try:
            self.encode(ins)
        except (AsmError, DecodeError) as exc:
            return getattr(exc, "reason", None) or str(exc)
        return None

    def format(self, name: str) -> BoundFormat:
        try:
            return self.by_name[name]
        except KeyError:
            raise AsmError(f"{self.name} has no format {name!r}") from None

    def make(self, name: str, **values: Any) -> Any:
        """An instruction of format ``name`` (missing fields 0)."""
        fmt = self.format(name)
        return fmt.cls(**values)


def _dispatch_table(formats: Sequence[BoundFormat], word_mask: int, name: str) -> list[tuple[int, dict]]:
    """Formats grouped by their first-word match mask, most specific mask first."""
    groups: dict[int, dict[int, BoundFormat]] = {}
    for f in formats:
        mask, value = f.match_mask & word_mask, f.match_value & word_mask
        if f.match_mask & ~word_mask:
            raise ConfigError(f"{name}.{f.name}: constant bits must sit in the first word")
        table = groups.setdefault(mask, {})
        if value in table:
            raise ConfigError(f"{name}: formats {table[value].name} and {f.name} have the same match bits")
        table[value] = f
    return sorted(groups.items(), key=lambda kv: -kv[0].bit_count())


def _unmatched_reason(formats: Sequence[BoundFormat], word_mask: int) -> Callable[[int], str]:
    """'unknown opcode 0x5' when every format selects on the same constant field; else a generic line."""
    keys = {tuple((bf.name, bf.lo, bf.width) for bf in f.fields if bf.const is not None) for f in formats}
    if len(keys) == 1:
        (key,) = keys
        if len(key) == 1:
            fname, lo, width = key[0]
            mask = (1 << width) - 1
            return lambda w: f"unknown {fname} 0x{(w >> lo) & mask:X}"
    return lambda w: "no instruction format matches"
