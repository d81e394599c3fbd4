"""The eBPF target's entry points in the registry's shapes (programs as 64-bit little-endian slots).

``npukit asm|disasm|sim --target ebpf`` call these; ``npukit bpf`` is the full interface (ELF data
sections, Alkali helpers, legacy relocations). The ``--bpf-*`` flags of ``npukit sim`` come from
`add_arguments`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from npukit.errors import ConfigError
from npukit.targets.ebpf import isa
from npukit.targets.ebpf.asm import assemble as _assemble
from npukit.targets.ebpf.asm import disassemble as _disassemble
from npukit.targets.ebpf.helpers import REGISTRIES
from npukit.targets.ebpf.load import parse_hex_bytes, read_program
from npukit.targets.ebpf.vm import DEFAULT_BUDGET, Machine


def assemble(text: str, hw: Any = None) -> list[int]:
    return isa.bytes_to_words(isa.encode(_assemble(text)))


def disassemble(words: list[int], hw: Any = None) -> str:
    return _disassemble(isa.decode(isa.words_to_bytes(words)))


def load_program(path: str | Path, hw: Any = None, fmt: str | None = None) -> list[int]:
    """Slots of a program file (ELF objects relocated with the Alkali helper names; their data
    sections are not carried by plain words: run ELF firmware with ``npukit bpf run``)."""
    names = {n: i for i, n in REGISTRIES["alkali"]().names().items()}
    return isa.bytes_to_words(read_program(path, helper_names=names).program.encode())


def add_arguments(group: argparse._ArgumentGroup, command: str) -> None:
    if command != "sim":
        return
    group.add_argument("--bpf-mem", metavar="HEXFILE", help="input memory as hex bytes (aa bb 11 cc)")
    group.add_argument("--bpf-abi", choices=("ubpf", "alkali"), default="ubpf", help="entry ABI")
    group.add_argument("--bpf-helpers", choices=("conformance", "alkali"), default="conformance")
    group.add_argument("--bpf-output-size", type=int, default=0, metavar="N", help="output buffer bytes")
    group.add_argument(
        "--bpf-budget", type=int, default=DEFAULT_BUDGET, metavar="N", help="instruction budget"
    )


def simulate(
    words: list[int],
    hw: Any = None,
    *,
    bpf_mem: str | None = None,
    bpf_abi: str = "ubpf",
    bpf_helpers: str = "conformance",
    bpf_output_size: int = 0,
    bpf_budget: int = DEFAULT_BUDGET,
    engine: str = "fast",
    input: bytes = b"",
) -> dict[str, Any]:
    """Run the program; the ``npukit bpf run --json`` object (r0, output hex, printed, instructions)."""
    if bpf_mem:
        path = Path(bpf_mem)
        if not path.is_file():
            raise ConfigError(f"no such file {bpf_mem!r}")
        input = parse_hex_bytes(path.read_text(errors="replace"), bpf_mem)
    machine = Machine(isa.decode(isa.words_to_bytes(words)), REGISTRIES[bpf_helpers]())
    result = machine.run(input, bpf_output_size, bpf_abi, budget=bpf_budget, engine=engine)
    return result.to_json()


def run_firmware(
    elf: bytes,
    input: bytes,
    output_size: int,
    *,
    tflite: Any = None,
    legacy_relocations: bool = False,
    profile: str = "rfc9669",
    section: str | None = None,
    budget: int = DEFAULT_BUDGET,
) -> Any:
    """What the Alkali APU does with a firmware object: load it (Alkali helpers; ``tflite`` injects the
    TFLite engine), run it with the Alkali ABI on ``input``, return the `RunResult` (r0, output, printed)."""
    from npukit.targets.ebpf.helpers import alkali_helpers
    from npukit.targets.ebpf.load import program_from_bytes

    helpers = alkali_helpers(tflite=tflite)
    loaded = program_from_bytes(
        elf,
        section=section,
        legacy_relocations=legacy_relocations,
        helper_names={n: i for i, n in helpers.names().items()},
    )
    machine = Machine(loaded.program, helpers, loaded.sections, entry=loaded.entry, profile=profile)
    return machine.run(input, output_size, "alkali", budget=budget)
