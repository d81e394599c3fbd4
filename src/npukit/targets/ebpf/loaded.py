"""A program as read from a file: its instructions, the form it came in and, for ELF objects, the data
sections, entry, symbols and helper call sites. The readers (`load`, `elf`) both build it."""

from __future__ import annotations

from dataclasses import dataclass, field

from npukit.targets.ebpf import isa
from npukit.targets.ebpf.memory import Region


@dataclass
class LoadedProgram:
    program: isa.Program
    kind: str  # elf | raw | hex-words | hex-bytes | asm
    sections: list[Region] = field(default_factory=list)
    entry: int = 0
    section_name: str = ""
    symbols: dict[int, str] = field(default_factory=dict)
    helper_calls: dict[int, str] = field(default_factory=dict)  # ELF: slot -> called helper's name
