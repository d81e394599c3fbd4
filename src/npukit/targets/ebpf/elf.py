"""Loading clang's BPF ELF objects (pyelftools): program section, data sections, relocations.

* ELF64, little-endian, relocatable (``ET_REL``), machine ``EM_BPF`` (247) or ``EM_NONE``.
* Program: an executable ``PROGBITS`` section (``--section NAME``; default the first one, ``.text``).
  Entry: the first global function symbol in it (offset 0 if none). Other executable sections that it
  calls (``R_BPF_64_32`` to a function there) are appended after it.
* Data: every allocated non-executable section (``.rodata*``, ``.data``, ``.bss``) becomes a region,
  read-only unless the section is writable.
* Relocations: ``R_BPF_64_64`` (1) on an ``lddw`` → region base + symbol value + the implicit addend
  already in the lddw immediate; ``R_BPF_64_ABS64`` (2) / ``R_BPF_64_ABS32`` (3) in data sections;
  ``R_BPF_64_32`` (10) on a call → a helper by symbol name (``src = 0``, ``imm`` = index) or a local
  function (``src = 1``, relative ``imm``). Anything else is an `ElfError`.
* ``legacy_relocations=True`` reproduces the Alkali uBPF fork (antmicro/ubpf@61725ce): the only data
  section is the string-merge ``.rodata.str1.1`` and ``R_BPF_64_64`` ignores the addend, so every string
  literal points at the first string.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

from npukit.targets.ebpf import isa
from npukit.targets.ebpf.errors import ElfError
from npukit.targets.ebpf.loaded import LoadedProgram
from npukit.targets.ebpf.memory import SECTION_BASE, SECTION_STRIDE, Region

EM_BPF = 247
R_BPF_NONE, R_BPF_64_64, R_BPF_64_ABS64, R_BPF_64_ABS32, R_BPF_64_NODYLD32, R_BPF_64_32 = 0, 1, 2, 3, 4, 10
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4


@dataclass
class _Code:
    index: int
    name: str
    data: bytearray
    start: int  # byte offset in the combined program


def _open(data: bytes):
    try:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile
    except ImportError:
        raise ElfError("reading ELF objects needs pyelftools (pip install pyelftools==0.33)") from None
    try:
        elf = ELFFile(io.BytesIO(data))
        header = elf.header
        if elf.elfclass != 64 or not elf.little_endian:
            raise ElfError(
                f"ELF{elf.elfclass} {'LE' if elf.little_endian else 'BE'} object: "
                "only 64-bit little-endian BPF objects run here"
            )
        if header.e_machine not in ("EM_BPF", "EM_NONE", EM_BPF):
            raise ElfError(f"ELF machine {header.e_machine} is not BPF (EM_BPF = 247)")
        if header.e_type != "ET_REL":
            raise ElfError(f"ELF type {header.e_type}: expected a relocatable object (clang -c)")
        sections = list(elf.iter_sections())
        return elf, sections, ELFError
    except ElfError:
        raise
    except Exception as exc:  # pyelftools raises assorted errors on truncated or corrupt input
        raise ElfError(f"not a readable ELF object: {exc}") from None


def load_elf(
    data: bytes,
    *,
    section: str | None = None,
    legacy_relocations: bool = False,
    helper_names: dict[str, int] | None = None,
    keep_unknown_helpers: bool = False,
) -> LoadedProgram:
    """Load an ELF object's program. A call to a helper not in ``helper_names`` is an error, unless
    ``keep_unknown_helpers`` (a disassembler needs no helper table): the call is kept with its
    immediate as the object has it and its name goes to ``LoadedProgram.helper_calls``."""
    elf, sections, elftools_error = _open(data)
    try:
        loader = _Loader(elf, sections, helper_names or {}, legacy_relocations)
        loader.keep_unknown = keep_unknown_helpers
        return loader.load(section)
    except ElfError:
        raise
    except (elftools_error, struct.error, KeyError, IndexError, ValueError) as exc:
        raise ElfError(f"malformed ELF object: {exc}") from None


class _Loader:
    def __init__(self, elf, sections, helper_names: dict[str, int], legacy: bool) -> None:
        self.elf, self.sections, self.helper_names, self.legacy = elf, sections, helper_names, legacy
        self.keep_unknown = False
        self.helper_calls: dict[int, str] = {}  # slot -> helper name, for every relocated helper call
        self.symtab = elf.get_section_by_name(".symtab")

    def executable(self) -> list[int]:
        return [
            i
            for i, s in enumerate(self.sections)
            if s["sh_type"] == "SHT_PROGBITS" and s["sh_flags"] & SHF_EXECINSTR and s["sh_size"]
        ]

    def load(self, wanted: str | None) -> LoadedProgram:
        execs = self.executable()
        if not execs:
            raise ElfError("no executable section (.text) in the object")
        if wanted is None:
            main = execs[0]
        else:
            named = [i for i in execs if self.sections[i].name == wanted]
            if not named:
                have = ", ".join(self.sections[i].name for i in execs)
                raise ElfError(f"no executable section {wanted!r} (have: {have})")
            main = named[0]
        regions, bases = self.data_regions()
        code = [_Code(main, self.sections[main].name, bytearray(self.sections[main].data()), 0)]
        done = 0
        while done < len(code):  # append executable sections the program calls into
            for target in self.called_sections(code[done].index):
                if all(c.index != target for c in code):
                    start = sum(len(c.data) for c in code)
                    code.append(
                        _Code(
                            target, self.sections[target].name, bytearray(self.sections[target].data()), start
                        )
                    )
            done += 1
        starts = {c.index: c.start for c in code}
        for c in code:
            self.relocate(c, starts, bases)
        program = isa.decode(bytes(b"".join(bytes(c.data) for c in code)))
        symbols = self.function_symbols(starts)
        entry = next(
            (pc for pc, (name, glob) in sorted(symbols.items()) if glob and pc < len(code[0].data) // 8), 0
        )
        return LoadedProgram(
            program,
            "elf",
            regions,
            entry,
            self.sections[main].name,
            {pc: name for pc, (name, _) in symbols.items()},
            dict(self.helper_calls),
        )

    def data_regions(self) -> tuple[list[Region], dict[int, int]]:
        regions: list[Region] = []
        bases: dict[int, int] = {}
        for i, s in enumerate(self.sections):
            flags = s["sh_flags"]
            if (
                not flags & SHF_ALLOC
                or flags & SHF_EXECINSTR
                or s["sh_type"] not in ("SHT_PROGBITS", "SHT_NOBITS")
            ):
                continue
            if self.legacy and not (
                s["sh_type"] == "SHT_PROGBITS" and flags & 0x30 == 0x30 and not flags & SHF_WRITE
            ):
                continue  # the fork maps only the string-merge rodata section
            if self.legacy and regions:
                continue  # ... and only the first one
            base = SECTION_BASE + len(regions) * SECTION_STRIDE
            body = bytearray(s["sh_size"]) if s["sh_type"] == "SHT_NOBITS" else bytearray(s.data())
            regions.append(Region(s.name, base, body, bool(flags & SHF_WRITE)))
            bases[i] = base
        return regions, bases

    def relocations_for(self, index: int):
        for s in self.sections:
            if s["sh_type"] == "SHT_RELA" and s["sh_info"] == index:
                raise ElfError(f"RELA relocations ({s.name}) are not used by BPF objects")
            if s["sh_type"] == "SHT_REL" and s["sh_info"] == index:
                symtab = self.sections[s["sh_link"]]
                for rel in s.iter_relocations():
                    yield rel, symtab.get_symbol(rel["r_info_sym"])

    def called_sections(self, index: int) -> list[int]:
        out = []
        for rel, sym in self.relocations_for(index):
            shndx = sym["st_shndx"]
            if rel["r_info_type"] == R_BPF_64_32 and isinstance(shndx, int) and shndx in self.executable():
                out.append(shndx)
        return out

    def relocate(self, code: _Code, starts: dict[int, int], bases: dict[int, int]) -> None:
        for rel, sym in self.relocations_for(code.index):
            kind, offset = rel["r_info_type"], rel["r_offset"]
            name = sym.name
            if not name and isinstance(sym["st_shndx"], int):
                name = self.sections[sym["st_shndx"]].name
            if offset + 8 > len(code.data):
                raise ElfError(f"relocation at 0x{offset:x} lies outside section {code.name}")
            if kind == R_BPF_64_64:
                self.relocate_lddw(code, offset, sym, name, bases)
            elif kind == R_BPF_64_32:
                self.relocate_call(code, offset, sym, name, starts)
            elif kind == R_BPF_NONE:
                continue
            else:
                raise ElfError(
                    f"unsupported relocation type {kind} at {code.name}+0x{offset:x} "
                    f"(symbol {name!r}); supported: R_BPF_64_64 (1), R_BPF_64_32 (10)"
                )

    def relocate_lddw(self, code: _Code, offset: int, sym, name: str, bases: dict[int, int]) -> None:
        if code.data[offset] != isa.LDDW or offset + 16 > len(code.data):
            raise ElfError(f"R_BPF_64_64 at {code.name}+0x{offset:x} is not on an lddw")
        shndx = sym["st_shndx"]
        if self.legacy:
            if not bases:
                raise ElfError("legacy relocations: the object has no string-merge .rodata section")
            target = next(iter(bases.values())) + sym["st_value"]  # fork: rodata + st_value, no addend
        else:
            if not isinstance(shndx, int) or shndx not in bases:
                where = "undefined" if shndx == "SHN_UNDEF" else f"section {shndx}"
                raise ElfError(f"R_BPF_64_64 against {name!r} ({where}): not a data section of this object")
            addend = struct.unpack_from("<I", code.data, offset + 4)[0]
            target = bases[shndx] + sym["st_value"] + addend
        struct.pack_into("<I", code.data, offset + 4, target & 0xFFFFFFFF)
        struct.pack_into("<I", code.data, offset + 12, target >> 32)

    def relocate_call(self, code: _Code, offset: int, sym, name: str, starts: dict[int, int]) -> None:
        if code.data[offset] != isa.OP_CALL:
            raise ElfError(f"R_BPF_64_32 at {code.name}+0x{offset:x} is not on a call")
        shndx = sym["st_shndx"]
        if shndx == "SHN_UNDEF":
            self.helper_calls[(code.start + offset) // 8] = name
            if name not in self.helper_names and self.keep_unknown:
                code.data[offset + 1] &= 0x0F  # src = 0: a helper call, its number unknown here
                return
            if name not in self.helper_names:
                known = ", ".join(
                    f"{n} ({i})" for n, i in sorted(self.helper_names.items(), key=lambda x: x[1])
                )
                raise ElfError(
                    f"call to unknown helper {name!r} at {code.name}+0x{offset:x} (known: {known or 'none'})"
                )
            code.data[offset + 1] &= 0x0F  # src = 0: helper call
            struct.pack_into("<i", code.data, offset + 4, self.helper_names[name])
            return
        if not isinstance(shndx, int) or shndx not in starts:
            raise ElfError(f"call to {name!r} at {code.name}+0x{offset:x}: target is not executable code")
        implicit = struct.unpack_from("<i", code.data, offset + 4)[0]
        value = sym["st_value"] if sym["st_info"]["type"] == "STT_FUNC" else (implicit + 1) * 8
        target = (starts[shndx] + value) // 8
        here = (code.start + offset) // 8
        code.data[offset + 1] = (code.data[offset + 1] & 0x0F) | (isa.CALL_LOCAL << 4)
        struct.pack_into("<i", code.data, offset + 4, target - here - 1)

    def function_symbols(self, starts: dict[int, int]) -> dict[int, tuple[str, bool]]:
        out: dict[int, tuple[str, bool]] = {}
        if self.symtab is None:
            return out
        for sym in self.symtab.iter_symbols():
            shndx = sym["st_shndx"]
            if sym["st_info"]["type"] == "STT_FUNC" and isinstance(shndx, int) and shndx in starts:
                out[(starts[shndx] + sym["st_value"]) // 8] = (
                    sym.name,
                    sym["st_info"]["bind"] == "STB_GLOBAL",
                )
        return out
