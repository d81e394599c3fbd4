"""Reading a program from a file whatever its form, and hex memory images.

A PROGRAM is an ELF object (``\\x7fELF``), raw little-endian 8-byte slots (binary: anything with a NUL
byte), hex text (``0x5566778800000018`` one 64-bit word per token, or bytes ``b7 00 00 00 ...`` as the
conformance corpus's ``-- raw`` sections write them) or assembler text in the uBPF syntax.
"""

from __future__ import annotations

import re
from pathlib import Path

from npukit.errors import ConfigError
from npukit.targets.ebpf import isa
from npukit.targets.ebpf.asm import assemble
from npukit.targets.ebpf.elf import load_elf
from npukit.targets.ebpf.loaded import LoadedProgram

_COMMENT = re.compile(r"(#|//).*$", re.M)
_BYTE = re.compile(r"[0-9a-fA-F]{2}")
_WORD = re.compile(r"0[xX][0-9a-fA-F]{1,16}|\d+")


def parse_hex_bytes(text: str, what: str = "hex data") -> bytes:
    """Hex bytes as the conformance corpus writes them: ``aa bb 11 cc`` (any whitespace, # comments)."""
    tokens = _COMMENT.sub("", text).split()
    out = bytearray()
    for tok in tokens:
        tok = tok[2:] if tok.lower().startswith("0x") else tok
        if not re.fullmatch(r"[0-9a-fA-F]+", tok) or len(tok) % 2:
            raise ConfigError(f"{what}: {tok!r} is not a hex byte")
        out += bytes.fromhex(tok)
    return bytes(out)


def classify_text(text: str) -> str:
    tokens = _COMMENT.sub("", text).split()
    if tokens and all(_BYTE.fullmatch(t) for t in tokens):
        return "hex-bytes"
    if tokens and all(_WORD.fullmatch(t) for t in tokens):
        return "hex-words"
    return "asm"


def program_from_bytes(
    data: bytes,
    *,
    section: str | None = None,
    legacy_relocations: bool = False,
    helper_names: dict[str, int] | None = None,
    keep_unknown_helpers: bool = False,
) -> LoadedProgram:
    if data[:4] == b"\x7fELF":
        return load_elf(
            data, section=section, legacy_relocations=legacy_relocations, helper_names=helper_names,
            keep_unknown_helpers=keep_unknown_helpers,
        )
    if section:
        raise ConfigError("--section applies to ELF objects only")
    if b"\0" in data or not data:
        return LoadedProgram(isa.decode(data), "raw")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return LoadedProgram(isa.decode(data), "raw")
    kind = classify_text(text)
    if kind == "hex-bytes":
        return LoadedProgram(isa.decode(parse_hex_bytes(text)), kind)
    if kind == "hex-words":
        words = [int(t, 0) for t in _COMMENT.sub("", text).split()]
        if any(w >> 64 for w in words):
            raise ConfigError("a raw program word does not fit 64 bits")
        return LoadedProgram(isa.decode(isa.words_to_bytes(words)), kind)
    return LoadedProgram(isa.decode(isa.encode(assemble(text))), "asm")


def read_program(path: str | Path, **options) -> LoadedProgram:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"no such program file {str(p)!r}")
    data = p.read_bytes()
    if p.suffix == ".o" and data[:4] != b"\x7fELF":  # not read as assembly text: say what it is not
        raise ConfigError(f"{p}: not an ELF object (no ELF magic); a .o must be clang's BPF object")
    return program_from_bytes(data, **options)
