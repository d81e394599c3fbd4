"""Text from a spec: assembler and disassembler drivers with a pluggable syntax, program files of any
word width, and the markdown field table for the docs.

The drivers own what every target shares (comments, ``.word`` raw words, ``line N:`` in errors,
multi-word instructions, invalid words disassembled as ``.word`` so text round-trips); a `Syntax`
owns how one instruction looks. `KeyValueSyntax` is the default one::

    gemv dest=0x100 src=0 flags=findemax|w_scale async     ; mnemonic, then key=value operands
    cvo.exp src=0x10 len=8                                   ; <format>.<member> of a mnemonic_field

A target with its own syntax (eBPF's ``mov %r0, 1``) implements `Syntax` and reuses the rest.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from npukit.errors import DecodeError, FormatError
from npukit.isa.spec import AsmError, BoundField, BoundFormat, BoundSpec

_COMMENT = re.compile(r"[;#]")


class Syntax(Protocol):
    """How one instruction is written. ``parse`` returns (format, field values by name)."""

    def format(self, spec: BoundSpec, ins: Any) -> str: ...

    def parse(self, spec: BoundSpec, text: str, where: str) -> tuple[BoundFormat, dict[str, int]]: ...


def parse_int(text: str, where: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise AsmError(f"{where}: {text!r} is not an integer") from None


# --- the key=value syntax ---------------------------------------------------------------------------

ValueText = Callable[[Any, BoundField, Any], str | None]


@dataclass
class KeyValueSyntax:
    """``mnemonic key=value ...``: mnemonic = the format name in lower case (or ``name.member`` for a
    format with a ``mnemonic_field``), keys = the fields' ``asm`` names, a missing key is 0, a bool
    field may stand alone (``async``). ``value_text(ins, field, value)`` may override how a value is
    shown (return None for the default)."""

    value_text: ValueText | None = None

    def mnemonics(self, spec: BoundSpec) -> dict[str, BoundFormat]:
        key = ("kv-mnemonics", id(self))
        hit = spec.cache.get(key)
        if hit is None:
            hit = spec.cache[key] = {f.name.lower(): f for f in spec.formats}
        return hit

    def mnemonic(self, fmt: BoundFormat, ins: Any) -> str:
        v = getattr(ins, fmt.mnemonic_field) if fmt.mnemonic_field is not None else None
        key = (fmt, v)
        hit = _MNEMONIC.get(key)
        if hit is None:
            hit = fmt.name.lower()
            if fmt.mnemonic_field is not None:
                hit += f".{v.name.lower() if isinstance(v, enum.Enum) else v}"
            _MNEMONIC[key] = hit
        return hit

    def _plan(self, spec: BoundSpec, fmt: BoundFormat) -> tuple:
        """Per format: (shown fields as (name, asm, how, field), operand keys -> field)."""
        hit = spec.cache.get(fmt)
        if hit is None:
            keyed = [bf for bf in fmt.values if bf.asm and bf.name != fmt.mnemonic_field]
            hit = spec.cache[fmt] = (tuple((bf.name, bf.asm, _how(bf), bf) for bf in keyed),
                                     {bf.asm: bf for bf in keyed})
        return hit

    def format(self, spec: BoundSpec, ins: Any) -> str:
        fmt = spec.format_of(ins)
        parts = [self.mnemonic(fmt, ins)]
        hook = self.value_text
        for name, asm, how, bf in self._plan(spec, fmt)[0]:
            v = getattr(ins, name)
            if how == "bool":
                if v:
                    parts.append(asm)
                continue
            text = hook(ins, bf, v) if hook is not None else None
            if text is None:
                if how == "dec":
                    text = str(int(v))
                elif how == "hex":
                    text = f"0x{int(v):X}"
                else:
                    text = value_text(bf, v)
            parts.append(f"{asm}={text}")
        return " ".join(parts)

    def parse(self, spec: BoundSpec, text: str, where: str) -> tuple[BoundFormat, dict[str, int]]:
        head, *args = text.split()
        head = head.lower()
        values: dict[str, int] = {}
        mnemonics = self.mnemonics(spec)
        fmt = mnemonics.get(head)
        if fmt is None:
            base, dot, member = head.partition(".")
            fmt = mnemonics.get(base) if dot else None
            if fmt is None or fmt.mnemonic_field is None:
                raise AsmError(f"{where}: unknown mnemonic {head!r}")
            tp = fmt.field(fmt.mnemonic_field).enum
            m = tp.__members__.get(member.upper()) if tp is not None else None
            if m is None:
                raise AsmError(f"{where}: unknown {fmt.name} function {member!r}")
            values[fmt.mnemonic_field] = int(m)
        elif fmt.mnemonic_field is not None:
            raise AsmError(f"{where}: unknown mnemonic {head!r}")
        by_key = self._plan(spec, fmt)[1]
        for arg in args:
            key, eq, val = arg.partition("=")
            key = key.lower()
            bf = by_key.get(key)
            if bf is None:
                raise AsmError(f"{where}: {head} has no operand {key!r} (known: {', '.join(by_key)})")
            if bf.enum is bool and not eq:
                values[bf.name] = 1
                continue
            if not eq:
                raise AsmError(f"{where}: operand {key!r} needs a value")
            if bf.name in values:
                raise AsmError(f"{where}: operand {key!r} given twice")
            values[bf.name] = parse_value(bf, val, where)
        return fmt, values


_FLAG_TEXT: dict[tuple[type, int], str] = {}
_ENUM_TEXT: dict[tuple[type, int], str] = {}
_MNEMONIC: dict[tuple[BoundFormat, Any], str] = {}


def _how(bf: BoundField) -> str:
    if bf.enum is bool:
        return "bool"
    if bf.enum is not None:
        return "enum"
    return "hex" if bf.fmt == "hex" else "dec"


def value_text(bf: BoundField, v: Any) -> str:
    """Default text of a field value: enum member names in lower case, flags joined by ``|``."""
    tp = bf.enum
    if tp is None:
        return f"0x{int(v):X}" if bf.fmt == "hex" else str(int(v))
    if tp is bool:
        return str(int(v))
    key = (tp, int(v))
    hit = _ENUM_TEXT.get(key)
    if hit is None:
        if issubclass(tp, enum.Flag):
            hit = flag_text(tp, key[1])
        else:
            member = tp._value2member_map_.get(key[1])
            hit = member.name.lower() if member is not None else str(key[1])
        _ENUM_TEXT[key] = hit
    return hit


def flag_text(tp: type, v: int) -> str:
    key = (tp, v)
    hit = _FLAG_TEXT.get(key)
    if hit is None:
        names = [m.name.lower() for m in sorted(tp, key=lambda m: -int(m)) if v & int(m)]
        rest = v & ~sum(int(m) for m in tp)
        if rest:
            names.append(f"0x{rest:X}")
        hit = _FLAG_TEXT[key] = "|".join(names) or "0"
    return hit


def parse_value(bf: BoundField, text: str, where: str) -> int:
    """An operand value: enum/flag member names (case-insensitive) or integers in any base."""
    low = text.lower()
    tp = bf.enum
    if tp is not None and tp is not bool and issubclass(tp, enum.Flag):
        total = 0
        for part in filter(None, low.split("|")):
            member = tp.__members__.get(part.upper())
            total |= int(member) if member is not None else parse_int(part, where)
        return total
    if tp is not None and tp is not bool:
        member = tp.__members__.get(low.upper())
        return int(member) if member is not None else parse_int(low, where)
    return parse_int(low, where)


# --- drivers ---------------------------------------------------------------------------------------

def strip_comment(line: str) -> str:
    return _COMMENT.split(line, maxsplit=1)[0].strip()


def assemble_line(spec: BoundSpec, syntax: Syntax, line: str, where: str = "line") -> list[int]:
    """One line -> its words ([] for a blank or comment line). ``.word V`` emits V unchecked."""
    text = strip_comment(line)
    if not text:
        return []
    head, *args = text.split()
    if head.lower() == ".word":
        if len(args) != 1:
            raise AsmError(f"{where}: .word takes one value")
        v = parse_int(args[0], where)
        if not 0 <= v <= spec.word_mask:
            raise AsmError(f"{where}: .word value does not fit in {spec.word_bits} bits")
        return [v]
    fmt, values = syntax.parse(spec, text, where)
    wide = spec.pack(fmt, values, where=where, key="asm")
    hit = spec.decode_or_reason(wide) if fmt.words == 1 else spec.decode_as(fmt, wide)
    if isinstance(hit, str):
        raise AsmError(f"{where}: {hit}")
    return spec.split(wide, fmt.words)


def assemble(spec: BoundSpec, syntax: Syntax, text: str) -> list[int]:
    """Assembly text -> words; errors name the line."""
    out: list[int] = []
    for n, line in enumerate(text.splitlines(), 1):
        out.extend(assemble_line(spec, syntax, line, where=f"line {n}"))
    return out


class Row(NamedTuple):
    """One disassembled instruction: where it starts, its words, its text (``.word 0x…`` when invalid)
    and the reason it is invalid (None when valid)."""

    index: int
    words: tuple[int, ...]
    text: str
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None

    def line(self, addresses: bool = False) -> str:
        if self.error is not None:
            return f"{self.text}  ; invalid: {self.error}"
        return f"{self.text}  ; {self.index:04d}" if addresses else self.text


def listing(spec: BoundSpec, syntax: Syntax, words: Sequence[int]) -> list[Row]:
    """Words -> one `Row` per instruction; an invalid word is a one-word row with its reason."""
    words = [int(w) for w in words]
    digits = -(-spec.word_bits // 4)
    rows, i = [], 0
    while i < len(words):
        try:
            ins, n = spec.decode_at(words, i)
            rows.append(Row(i, tuple(words[i:i + n]), syntax.format(spec, ins)))
        except DecodeError as exc:
            n = 1
            rows.append(Row(i, (words[i],), f".word 0x{words[i]:0{digits}X}", exc.reason))
        i += n
    return rows


def disassemble(spec: BoundSpec, syntax: Syntax, words: Sequence[int], addresses: bool = False) -> str:
    """Words -> text; an invalid word becomes ``.word 0x…  ; invalid: reason`` so it round-trips."""
    lines = [row.line(addresses) for row in listing(spec, syntax, words)]
    return "\n".join(lines) + ("\n" if lines else "")


# --- program files ---------------------------------------------------------------------------------

_NUMPY_WORDS = {8: "<u1", 16: "<u2", 32: "<u4", 64: "<u8"}

def to_bytes(words: Sequence[int], word_bits: int) -> bytes:
    """Little-endian words back to back."""
    if word_bits in _NUMPY_WORDS:
        return np.asarray([int(w) for w in words], dtype=_NUMPY_WORDS[word_bits]).tobytes()
    nbytes = word_bits // 8
    return b"".join(int(w).to_bytes(nbytes, "little") for w in words)


def from_bytes(data: bytes, word_bits: int) -> list[int]:
    nbytes = word_bits // 8
    if len(data) % nbytes:
        raise FormatError(f"binary program of {len(data)} bytes is not a whole number of "
                          f"{word_bits}-bit words")
    if word_bits in _NUMPY_WORDS:
        return np.frombuffer(data, dtype=_NUMPY_WORDS[word_bits]).tolist()
    return [int.from_bytes(data[i:i + nbytes], "little") for i in range(0, len(data), nbytes)]


def to_hex(words: Sequence[int], word_bits: int) -> str:
    """Verilog ``$readmemh`` text: one word per line, zero-padded."""
    digits = -(-word_bits // 4)
    return "".join(f"{int(w):0{digits}x}\n" for w in words)


def from_hex(text: str, word_bits: int) -> list[int]:
    digits = -(-word_bits // 4)
    pattern = re.compile(rf"[0-9a-fA-F_]{{1,{digits}}}")
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        s = line.split("//", 1)[0].strip()
        if not s:
            continue
        if s.startswith("@") or not pattern.fullmatch(s) or not s.strip("_"):
            raise FormatError(f"hex program line {n}: expected one {word_bits}-bit hex word, got {s!r}")
        out.append(int(s.replace("_", ""), 16))
    return out


def program_format(path: str | Path, fmt: str | None = None) -> str:
    """``hex`` for .hex/.mem files, else ``bin`` (unless ``fmt`` says)."""
    return fmt or ("hex" if Path(path).suffix.lower() in (".hex", ".mem") else "bin")


def read_program(path: str | Path, word_bits: int, fmt: str | None = None) -> list[int]:
    p = Path(path)
    fmt = program_format(p, fmt)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise FormatError(f"cannot read {p}: {exc.strerror}") from None
    if fmt == "hex":
        try:
            return from_hex(data.decode("ascii"), word_bits)
        except UnicodeDecodeError:
            raise FormatError(f"{p} is not a text $readmemh file") from None
    return from_bytes(data, word_bits)


def write_program(path: str | Path, words: Sequence[int], word_bits: int, fmt: str = "bin") -> None:
    p = Path(path)
    if fmt == "hex":
        p.write_text(to_hex(words, word_bits))
    elif fmt == "bin":
        p.write_bytes(to_bytes(words, word_bits))
    else:
        raise FormatError(f"unknown program format {fmt!r} (bin or hex)")


# --- the docs table --------------------------------------------------------------------------------

Column = tuple[str, Callable[[BoundFormat, BoundField], str]]


def default_columns(spec: BoundSpec) -> list[Column]:
    def bits_of(fmt: BoundFormat, bf: BoundField) -> str:
        return bf.bits_text(spec.word_bits, fmt.words)

    def meaning(fmt: BoundFormat, bf: BoundField) -> str:
        if bf.const is not None:
            return f"= 0x{bf.const:X}" + (f" ({bf.doc})" if bf.doc else "")
        extra = []
        if bf.reserved:
            extra.append("must be 0")
        if bf.signed:
            extra.append("signed")
        if bf.enum not in (None, bool):
            extra.append(", ".join(f"{int(m)} = {m.name.lower()}" for m in bf.enum))
        return "; ".join(x for x in [bf.doc, *extra] if x)

    return [
        ("format", lambda fmt, bf: f"`{fmt.name}`"),
        ("field", lambda fmt, bf: f"`{bf.name}`"),
        ("bits", bits_of),
        ("width", lambda fmt, bf: str(bf.width)),
        ("asm", lambda fmt, bf: f"`{bf.asm}`" if bf.asm and bf.const is None and not bf.reserved else ""),
        ("meaning", meaning),
    ]


def markdown_table(spec: BoundSpec, columns: Sequence[Column] | None = None,
                   include: Callable[[BoundFormat, BoundField], bool] | None = None) -> str:
    """One row per (format, field), rendered from the bound spec (widths as derived for its hw)."""
    cols = list(columns) if columns is not None else default_columns(spec)
    rows = ["| " + " | ".join(h for h, _ in cols) + " |", "|" + "---|" * len(cols)]
    for fmt in spec.formats:
        for bf in fmt.fields:
            if include is None or include(fmt, bf):
                rows.append("| " + " | ".join(fn(fmt, bf) for _, fn in cols) + " |")
    return "\n".join(rows) + "\n"
