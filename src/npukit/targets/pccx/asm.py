"""pccx assembly text, program files and the docs table, all derived from the spec in ``isa.py``.

Syntax, one instruction per line (``;`` or ``#`` start a comment)::

    gemv   dest=0x100 src=0x0 flags=findemax|w_scale size=1 shape=2 lanes=0
    memcpy from=host to=npu dest=0x0 src=0 aux=0x10 shape=3 async
    memset cache=fmap slot=2 a=2048 b=1 c=2048
    cvo.exp src=0x10 dst=0x20 len=256 flags=sub_emax
    .word 0x4000000000000040            ; a raw word, emitted unchecked

Keys are the ``asm`` names of the spec's fields; a missing key is 0; ``async`` alone sets the bit.
Program files: ``bin`` = little-endian 64-bit words back to back; ``hex`` = Verilog ``$readmemh``
text, one 16-digit word per line (``//`` comments allowed).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import DecodeError, FormatError
from npukit.targets.pccx.isa import (
    SPEC,
    STRICT_CVO,
    AsmError,
    CvoFlag,
    CvoFunc,
    DestCache,
    Device,
    GemvFlag,
    Instr,
    Op,
    decode,
    encode,
)

CVO_DOC = {
    CvoFunc.EXP: "exp(x), or exp(x − e_max) with `sub_emax`",
    CvoFunc.SQRT: "sqrt(x)",
    CvoFunc.GELU: "tanh-form GELU (gelu_pytorch_tanh)",
    CvoFunc.SIN: "sin(x)",
    CvoFunc.COS: "cos(x)",
    CvoFunc.REDUCE_SUM: "serial float32 sum → one word at dst (element 0); also loads S",
    CvoFunc.SCALE: "x · S, or x / S with `recip_scale` (S = 0 gives 0)",
    CvoFunc.RECIP: "1 / x (±0 gives ±inf)",
    CvoFunc.TANH: "tanh(x)",
    CvoFunc.MUL: "dst ← src · dst, elementwise",
    CvoFunc.ADD: "dst ← src + dst, elementwise",
    CvoFunc.RELU_BIAS: "max(x − S, 0): the bias-and-clip front end",
    CvoFunc.RSQRT: "1 / sqrt(x)",
    CvoFunc.SQUARE: "x²",
    CvoFunc.REDUCE_MAX: "max(x) → one word at dst; also sets e_max",
    CvoFunc.LOAD_SCALAR: "S ← element len − 1 of src (no dst write)",
}

_OPNAMES = {"gemv": Op.GEMV, "gemm": Op.GEMM, "memcpy": Op.MEMCPY, "memset": Op.MEMSET}
_FLAG_TYPES = {Op.GEMV: GemvFlag, Op.GEMM: GemvFlag, Op.CVO: CvoFlag}
_ENUMS = {"device": Device, "cache": DestCache}


def _mnemonic(ins: Instr) -> str:
    if ins.op == Op.CVO:
        return f"cvo.{ins.cvo_func.name.lower()}"
    return ins.op.name.lower()


@functools.cache
def _enum_text(kind: str, v: int) -> str:
    names = {int(m): m.name.lower() for m in _ENUMS[kind]}
    return names.get(v, str(v))


@functools.cache
def _flag_text(v: int, tp: type) -> str:
    names = [m.name.lower() for m in sorted(tp, key=lambda m: -int(m)) if v & int(m)]
    rest = v & ~sum(int(m) for m in tp)
    if rest:
        names.append(f"0x{rest:X}")
    return "|".join(names) or "0"


def format_instr(ins: Instr) -> str:
    """Canonical text of one instruction."""
    parts = [_mnemonic(ins)]
    for f in SPEC[ins.op]:
        if f.kind in ("reserved", "func"):
            continue
        v = getattr(ins, f.name)
        if f.kind == "async":
            if v:
                parts.append("async")
            continue
        if f.kind == "flags":
            text = _flag_text(int(v), _FLAG_TYPES[ins.op])
        elif f.kind in _ENUMS:
            text = _enum_text(f.kind, int(v))
        elif f.kind in ("l2", "aux") or (ins.op == Op.MEMSET and ins.dest_cache == DestCache.SREG
                                         and f.name == "a_value"):
            text = f"0x{int(v):X}"
        else:
            text = str(int(v))
        parts.append(f"{f.asm}={text}")
    return " ".join(parts)


def disassemble(words: Any, profile: str = "extended", hw: Any = None, addresses: bool = False) -> str:
    """Words -> text; an invalid word becomes ``.word 0x…  ; invalid: reason`` so it round-trips."""
    lines = []
    for i, w in enumerate(_as_word_list(words)):
        try:
            text = format_instr(decode(w, profile, hw))
        except DecodeError as exc:
            text = f".word 0x{w:016X}  ; invalid: {exc.reason}"
        lines.append(f"{text}  ; {i:04d}" if addresses and not text.startswith(".word") else text)
    return "\n".join(lines) + ("\n" if lines else "")


def _as_word_list(words: Any) -> list[int]:
    if isinstance(words, np.ndarray):
        return [int(w) for w in words.astype(np.uint64).ravel()]
    return [int(w) for w in words]


def _parse_int(text: str, where: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise AsmError(f"{where}: {text!r} is not an integer") from None


def _parse_value(f, op: Op, text: str, where: str) -> int:
    low = text.lower()
    if f.kind == "flags":
        tp = _FLAG_TYPES[op]
        total = 0
        for part in filter(None, low.split("|")):
            member = tp.__members__.get(part.upper())
            total |= int(member) if member is not None else _parse_int(part, where)
        return total
    if f.kind in _ENUMS:
        member = _ENUMS[f.kind].__members__.get(low.upper())
        return int(member) if member is not None else _parse_int(low, where)
    return _parse_int(low, where)


def assemble_line(line: str, profile: str = "extended", hw: Any = None, where: str = "line") -> int | None:
    """One line -> word (None for blank/comment lines)."""
    text = re.split(r"[;#]", line, maxsplit=1)[0].strip()
    if not text:
        return None
    head, *args = text.split()
    head = head.lower()
    if head == ".word":
        if len(args) != 1:
            raise AsmError(f"{where}: .word takes one value")
        v = _parse_int(args[0], where)
        if not 0 <= v < 1 << 64:
            raise AsmError(f"{where}: .word value does not fit in 64 bits")
        return v
    values: dict[str, int] = {}
    if head.startswith("cvo."):
        func = CvoFunc.__members__.get(head[4:].upper())
        if func is None:
            raise AsmError(f"{where}: unknown CVO function {head[4:]!r}")
        op = Op.CVO
        values["cvo_func"] = int(func)
    elif head in _OPNAMES:
        op = _OPNAMES[head]
    else:
        raise AsmError(f"{where}: unknown mnemonic {head!r}")
    by_key = {f.asm: f for f in SPEC[op] if f.asm}
    for arg in args:
        key, eq, val = arg.partition("=")
        key = key.lower()
        f = by_key.get(key)
        if f is None:
            raise AsmError(f"{where}: {head} has no operand {key!r} (known: {', '.join(by_key)})")
        if f.kind == "async" and not eq:
            values[f.name] = 1
            continue
        if not eq:
            raise AsmError(f"{where}: operand {key!r} needs a value")
        if f.name in values:
            raise AsmError(f"{where}: operand {key!r} given twice")
        values[f.name] = _parse_value(f, op, val, where)
    word = int(op) << 60
    for f in SPEC[op]:
        v = values.get(f.name, 0)
        if not 0 <= v <= f.mask:
            raise AsmError(f"{where}: {f.asm or f.name}={v} does not fit in {f.width} bits")
        word |= v << f.lo
    try:
        decode(word, profile, hw)
    except DecodeError as exc:
        raise AsmError(f"{where}: {exc.reason}") from None
    return word


def assemble(text: str, profile: str = "extended", hw: Any = None) -> list[int]:
    """Assembly text -> list of 64-bit words; errors name the line."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        w = assemble_line(line, profile, hw, where=f"line {n}")
        if w is not None:
            out.append(w)
    return out


def encode_program(instrs: list[Instr], profile: str = "extended", hw: Any = None) -> list[int]:
    return [encode(i, profile, hw) for i in instrs]


# --- program files ---------------------------------------------------------------------------------

def to_bytes(words: Any) -> bytes:
    return np.asarray(_as_word_list(words), dtype="<u8").tobytes()


def from_bytes(data: bytes) -> list[int]:
    if len(data) % 8:
        raise FormatError(f"binary program of {len(data)} bytes is not a whole number of 64-bit words")
    return [int(w) for w in np.frombuffer(data, dtype="<u8")]


def to_hex(words: Any) -> str:
    return "".join(f"{w:016x}\n" for w in _as_word_list(words))


def from_hex(text: str) -> list[int]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        s = line.split("//", 1)[0].strip()
        if not s:
            continue
        if s.startswith("@") or not re.fullmatch(r"[0-9a-fA-F_]{1,16}", s):
            raise FormatError(f"hex program line {n}: expected one 64-bit hex word, got {s!r}")
        out.append(int(s.replace("_", ""), 16))
    return out


def read_program(path: str | Path, fmt: str | None = None) -> list[int]:
    p = Path(path)
    fmt = fmt or ("hex" if p.suffix.lower() in (".hex", ".mem") else "bin")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise FormatError(f"cannot read {p}: {exc.strerror}") from None
    if fmt == "hex":
        try:
            return from_hex(data.decode("ascii"))
        except UnicodeDecodeError:
            raise FormatError(f"{p} is not a text $readmemh file") from None
    return from_bytes(data)


def write_program(path: str | Path, words: Any, fmt: str = "bin") -> None:
    p = Path(path)
    if fmt == "hex":
        p.write_text(to_hex(words))
    elif fmt == "bin":
        p.write_bytes(to_bytes(words))
    else:
        raise FormatError(f"unknown program format {fmt!r} (bin or hex)")


# --- the docs table --------------------------------------------------------------------------------

def isa_table_markdown() -> str:
    """The field table and the CVO function table for docs/targets/pccx.md, rendered from the spec."""
    rows = ["| opcode | field | bits | width | asm | meaning | profile |",
            "|---|---|---|---|---|---|---|"]
    for op, fields in SPEC.items():
        for f in fields:
            bits = f"[{f.hi}]" if f.hi == f.lo else f"[{f.hi}:{f.lo}]"
            name = "async" if f.name == "async_" else f.name
            prof = "extended (npukit)" if f.ext else "v002"
            rows.append(f"| {op.name} = 0x{int(op):X} | `{name}` | {bits} | {f.width} | "
                        f"{('`' + f.asm + '`') if f.asm else ''} | {f.doc} | {prof} |")
    rows += ["", "| cvo_func | mnemonic | result (BF16, one rounding unless noted) | profile |",
             "|---|---|---|---|"]
    for fn in CvoFunc:
        prof = "v002" if fn in STRICT_CVO else "extended (npukit)"
        rows.append(f"| 0x{int(fn):X} | `cvo.{fn.name.lower()}` | {CVO_DOC[fn]} | {prof} |")
    return "\n".join(rows) + "\n"
