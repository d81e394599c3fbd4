"""The eBPF target's entry points in the registry's shapes (programs as 64-bit little-endian slots)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from npukit.targets.ebpf import isa
from npukit.targets.ebpf.asm import assemble as _assemble
from npukit.targets.ebpf.asm import disassemble as _disassemble
from npukit.targets.ebpf.helpers import REGISTRIES
from npukit.targets.ebpf.load import read_program
from npukit.targets.ebpf.vm import DEFAULT_BUDGET, Machine, RunResult


def assemble(text: str, hw: Any = None) -> list[int]:
    return isa.bytes_to_words(isa.encode(_assemble(text)))


def disassemble(words: list[int], hw: Any = None) -> str:
    return _disassemble(isa.decode(isa.words_to_bytes(words)))


def load_program(path: str | Path, hw: Any = None) -> list[int]:
    """Slots of a program file (ELF objects relocated with the Alkali helper names)."""
    names = {n: i for i, n in REGISTRIES["alkali"]().names().items()}
    return isa.bytes_to_words(read_program(path, helper_names=names).program.encode())


def simulate(
    words: list[int],
    hw: Any = None,
    *,
    input: bytes = b"",
    output_size: int = 0,
    abi: str = "ubpf",
    helpers: str = "conformance",
    budget: int = DEFAULT_BUDGET,
    engine: str = "fast",
) -> RunResult:
    machine = Machine(isa.decode(isa.words_to_bytes(words)), REGISTRIES[helpers]())
    return machine.run(input, output_size, abi, budget=budget, engine=engine)
