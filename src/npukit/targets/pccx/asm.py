"""pccx assembly text, program files and the docs table, all derived from the spec in ``isa.py``
through the shared toolkit's text layer (`npukit.isa.text`, key=value syntax).

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

from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError, FormatError
from npukit.isa import text
from npukit.isa.spec import BoundField, BoundFormat
from npukit.targets.pccx.cvo import CVO, STRICT_CVO
from npukit.targets.pccx.isa import PROFILES, DestCache, Instr, Op, bound, encode


def _value_text(ins: Instr, f: BoundField, v: Any) -> str | None:
    if f.name == "a_value" and ins.dest_cache == DestCache.SREG:  # only MEMSET has a_value
        return f"0x{int(v):X}"  # an SFU register value is a BF16 bit pattern
    return None


SYNTAX = text.KeyValueSyntax(value_text=_value_text)
_TEXT_SPEC = bound("extended")  # formatting depends on no limits


_TEXT: dict[Instr, str] = {}  # a program switch re-labels every instruction; almost all were seen before


def format_instr(ins: Instr) -> str:
    """Canonical text of one instruction (memoised: instructions are immutable)."""
    t = _TEXT.get(ins)
    if t is None:
        if len(_TEXT) >= 1 << 18:  # a prefill chunk program has ~100 k distinct instructions
            _TEXT.clear()
        t = _TEXT[ins] = SYNTAX.format(_TEXT_SPEC, ins)
    return t


def disassemble(words: Any, profile: str = "extended", hw: Any = None, addresses: bool = False) -> str:
    """Words -> text; an invalid word becomes ``.word 0x…  ; invalid: reason`` so it round-trips."""
    return text.disassemble(bound(profile, hw), SYNTAX, as_word_list(words), addresses)


def as_word_list(words: Any) -> list[int]:
    if isinstance(words, np.ndarray):
        return [int(w) for w in words.astype(np.uint64).ravel()]
    return [int(w) for w in words]


def assemble_line(line: str, profile: str = "extended", hw: Any = None, where: str = "line") -> int | None:
    """One line -> word (None for blank/comment lines)."""
    words = text.assemble_line(bound(profile, hw), SYNTAX, line, where)
    return words[0] if words else None


def assemble(source: str, profile: str = "extended", hw: Any = None) -> list[int]:
    """Assembly text -> list of 64-bit words; errors name the line."""
    return text.assemble(bound(profile, hw), SYNTAX, source)


def encode_program(instrs: list[Instr], profile: str = "extended", hw: Any = None) -> list[int]:
    return [encode(i, profile, hw) for i in instrs]


# --- program files ---------------------------------------------------------------------------------

def to_bytes(words: Any) -> bytes:
    return text.to_bytes(as_word_list(words), 64)


def from_bytes(data: bytes) -> list[int]:
    return text.from_bytes(data, 64)


def to_hex(words: Any) -> str:
    return text.to_hex(as_word_list(words), 64)


def from_hex(source: str) -> list[int]:
    return text.from_hex(source, 64)


def read_program(path: str | Path, fmt: str | None = None) -> list[int]:
    return text.read_program(path, 64, fmt)


def write_program(path: str | Path, words: Any, fmt: str = "bin") -> None:
    text.write_program(path, as_word_list(words), 64, fmt)


# --- the docs table --------------------------------------------------------------------------------

def _profile_cell(fmt: BoundFormat, f: BoundField) -> str:
    return "extended (npukit)" if "ext" in f.tags else "v002"


_COLUMNS = [
    ("opcode", lambda fmt, f: f"{fmt.name} = 0x{int(Op[fmt.name]):X}"),
    ("field", lambda fmt, f: f"`{'async' if f.name == 'async_' else f.name}`"),
    ("bits", lambda fmt, f: f.bits_text()),
    ("width", lambda fmt, f: str(f.width)),
    ("asm", lambda fmt, f: f"`{f.asm}`" if f.asm else ""),
    ("meaning", lambda fmt, f: f.doc),
    ("profile", _profile_cell),
]


def isa_table_markdown() -> str:
    """The field table and the CVO function table for docs/targets/pccx.md, rendered from the spec."""
    rows = [text.markdown_table(_TEXT_SPEC, _COLUMNS, include=lambda fmt, f: f.const is None).rstrip("\n")]
    rows += ["", "The CVO functions, rendered from `npukit.targets.pccx.cvo.CVO` (operands: what the "
             "function reads; accm: whether the `accm` flag is legal; transcendental: the fast executor runs "
             "the numerics module's float64 kernel):", "",
             "| cvo_func | mnemonic | result (BF16, one rounding unless noted) | operands | reduces | accm "
             "| transcendental | profile |",
             "|---|---|---|---|---|---|---|---|"]
    yes = {True: "yes", False: "no"}
    for fn, spec in CVO.items():
        prof = "v002" if fn in STRICT_CVO else "extended (npukit)"
        facts = " | ".join(yes[v] for v in (spec.reduction, spec.accumulate, spec.transcendental))
        rows.append(f"| 0x{int(fn):X} | `cvo.{fn.name.lower()}` | {spec.doc} | `{spec.form.value}` "
                    f"| {facts} | {prof} |")
    return "\n".join(rows) + "\n"


# --- registry capabilities: what `npukit asm|disasm|sim --target pccx` call --------------------------

def add_cli_arguments(group: Any, command: str) -> None:
    """pccx's own flags on the asm/disasm/sim commands."""
    group.add_argument("--profile", choices=PROFILES, default="extended",
                       help="pccx ISA profile: strict = exactly v002; extended = npukit's additions")
    if command == "sim":
        group.add_argument("--ddr-image", action="append", default=[], metavar="FILE@ADDR",
                           help="pccx: preload host DDR with FILE's bytes at byte address ADDR (repeatable)")
        group.add_argument("--l2-image", action="append", default=[], metavar="FILE@WORD",
                           help="pccx: preload L2 with FILE's LE BF16 bits from word WORD (repeatable)")


def assemble_program(source: str, hw: Any = None, profile: str = "extended") -> list[int]:
    return assemble(source, profile, hw)


def disassemble_program(words: Any, hw: Any = None, profile: str = "extended") -> list[text.Row]:
    return text.listing(bound(profile, hw), SYNTAX, as_word_list(words))


def load_program(path: str | Path, hw: Any = None, fmt: str | None = None,
                 profile: str = "extended") -> list[int]:
    """Words of a program file: assembly (.s/.asm), $readmemh hex (.hex/.mem) or little-endian binary."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"no such program file {str(p)!r}")
    if fmt is None and p.suffix.lower() in (".s", ".asm"):
        try:
            source = p.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise FormatError(f"cannot read {p}: {getattr(exc, 'strerror', None) or exc}") from None
        return assemble(source, profile, hw)
    return read_program(p, fmt)
