"""``npukit bpf asm|disasm|run``: the eBPF firmware VM (RFC 9669, uBPF text syntax, clang ELF objects).

``npukit bpf run PROGRAM`` takes an ELF ``.o``, a ``.s`` in uBPF/conformance syntax or raw little-endian
slots; ``--mem`` reads hex bytes as the bpf_conformance corpus writes them. A fault or budget stop is
one ``npukit: error:`` line and exit status 2. Imports stay light (no NumPy) so a run starts fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from npukit.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bpf", help="eBPF VM: assemble, disassemble and run programs (uBPF / Alkali firmware)")
    bsub = p.add_subparsers(dest="bpf_command", metavar="ACTION")
    a = bsub.add_parser("asm", help="assemble uBPF-syntax text into 8-byte slots")
    a.add_argument("file")
    a.add_argument("-o", "--output", help="write raw little-endian bytes here (default: hex bytes on stdout)")
    a.add_argument("--json", action="store_true", help="print one JSON object (slots as hex)")
    a.set_defaults(func=run_asm)
    d = bsub.add_parser("disasm", help="disassemble an ELF object, raw slots or hex into uBPF syntax")
    d.add_argument("file")
    d.add_argument("--section", help="ELF program section (default: the first executable one)")
    d.add_argument("--no-labels", action="store_true", help="numeric jump offsets instead of labels")
    d.add_argument("--json", action="store_true", help="print one JSON object (text, helper calls)")
    d.set_defaults(func=run_disasm)
    _add_run(bsub)
    _add_verify(bsub)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


def _add_run(bsub: argparse._SubParsersAction) -> None:
    r = bsub.add_parser("run", help="run a program and print r0, the output buffer and printed strings")
    r.add_argument("program", help="ELF .o, uBPF .s, raw little-endian slots or hex text")
    r.add_argument(
        "--mem", metavar="HEXFILE", help="input memory as hex bytes (aa bb 11 cc), the corpus's -- mem"
    )
    r.add_argument("--input", metavar="FILE", help="input memory as a binary file")
    r.add_argument("--output-size", type=int, default=0, metavar="N", help="output buffer bytes (Alkali ABI)")
    r.add_argument("--abi", choices=("ubpf", "alkali"), help="entry ABI (default: alkali for ELF, else ubpf)")
    r.add_argument(
        "--helpers",
        choices=("alkali", "conformance"),
        help="helper set (default: alkali with --abi alkali, else conformance)",
    )
    r.add_argument("--section", help="ELF program section (default: the first executable one)")
    r.add_argument(
        "--legacy-relocations",
        action="store_true",
        help="reproduce the Alkali uBPF fork: R_BPF_64_64 addends ignored (strings all point at "
        "the start of .rodata)",
    )
    r.add_argument(
        "--profile",
        choices=("rfc9669", "alkali-fork"),
        default="rfc9669",
        help="rfc9669: the whole ISA (default); alkali-fork: refuse at load what the Alkali board's "
        "uBPF fork lacks (JMP32, local calls, atomics, v4 ops) and stop on division by zero",
    )
    r.add_argument(
        "--div-by-zero",
        choices=("rfc", "fault"),
        default=None,
        help="rfc: x/0 = 0, x%%0 = x; fault: stop like the Alkali fork "
        "(default: fault with --profile alkali-fork, else rfc)",
    )
    r.add_argument(
        "--budget", type=int, default=None, metavar="N", help="instruction budget (default 50,000,000)"
    )
    r.add_argument(
        "--engine",
        choices=("jit", "fast", "interp"),
        default=None,
        help="jit: LLVM native code (default where llvmlite loads); fast: translated Python; "
        "interp: reference interpreter",
    )
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.set_defaults(func=run_run)


def _add_verify(bsub: argparse._SubParsersAction) -> None:
    v = bsub.add_parser(
        "verify",
        help="prove a program safe before it loads (exit 0 accept, 1 reject with every reason, 2 bad input)",
    )
    v.add_argument("program", help="ELF .o, uBPF .s, raw little-endian slots or hex text")
    v.add_argument("--abi", choices=("ubpf", "alkali"), help="entry ABI (default: alkali for ELF, else ubpf)")
    v.add_argument(
        "--helpers", choices=("alkali", "conformance"), help="helper set (default: follows --abi as for run)"
    )
    v.add_argument("--section", help="ELF program section (default: the first executable one)")
    v.add_argument(
        "--output-size",
        type=int,
        default=None,
        metavar="N",
        help="output buffer bytes (Alkali ABI; default: the Alkali device's 64 MiB, inputs up to 64 MiB)",
    )
    v.add_argument(
        "--profile", choices=("rfc9669", "alkali-fork"), default="rfc9669", help="rules, as for run"
    )
    v.add_argument("--json", action="store_true", help='print {"verdict", "errors": [{"pc", "message"}]}')
    v.set_defaults(func=run_verify)


def run_asm(args: argparse.Namespace) -> int:
    from npukit.targets.ebpf.asm import assemble_bytes

    path = Path(args.file)
    if not path.is_file():
        raise ConfigError(f"no such file {args.file!r}")
    data = assemble_bytes(path.read_text(errors="replace"))
    if args.output:
        try:
            Path(args.output).write_bytes(data)
        except OSError as exc:
            raise ConfigError(f"cannot write {args.output!r}: {exc.strerror}") from None
    if getattr(args, "json", False):
        from npukit.cli import ui

        ui.emit_json({"file": args.file, "slots": len(data) // 8, "output": args.output,
                      "hex": [data[i : i + 8].hex() for i in range(0, len(data), 8)]})
    elif not args.output:
        for i in range(0, len(data), 8):
            print(" ".join(f"{b:02x}" for b in data[i : i + 8]))
    return 0


def run_disasm(args: argparse.Namespace) -> int:
    from npukit.targets.ebpf.asm import disassemble
    from npukit.targets.ebpf.load import read_program

    loaded = read_program(args.file, section=args.section, keep_unknown_helpers=True)
    notes = {pc: f"helper {name}" for pc, name in loaded.helper_calls.items()}
    text = disassemble(loaded.program, labels=not args.no_labels, notes=notes)
    if getattr(args, "json", False):
        from npukit.cli import ui

        ui.emit_json({"file": args.file, "kind": loaded.kind, "section": loaded.section_name,
                      "slots": len(loaded.program), "helper_calls": {str(k): v for k, v in
                                                                     loaded.helper_calls.items()},
                      "text": text})
        return 0
    sys.stdout.write(text)
    return 0


def _input_bytes(args: argparse.Namespace) -> bytes:
    from npukit.targets.ebpf.load import parse_hex_bytes

    if args.mem and args.input:
        raise ConfigError("give --mem or --input, not both")
    for name, is_hex in ((args.mem, True), (args.input, False)):
        if name:
            path = Path(name)
            if not path.is_file():
                raise ConfigError(f"no such file {name!r}")
            return parse_hex_bytes(path.read_text(errors="replace"), name) if is_hex else path.read_bytes()
    return b""


def run_run(args: argparse.Namespace) -> int:
    from npukit.targets.ebpf.helpers import REGISTRIES
    from npukit.targets.ebpf.load import program_from_bytes
    from npukit.targets.ebpf.vm import DEFAULT_BUDGET, Machine, default_engine

    if args.output_size < 0 or (args.budget is not None and args.budget <= 0):
        raise ConfigError("--output-size must be >= 0 and --budget > 0")
    data = _input_bytes(args)
    path = Path(args.program)
    if not path.is_file():
        raise ConfigError(f"no such program file {args.program!r}")
    raw = path.read_bytes()
    is_elf = raw[:4] == b"\x7fELF"
    abi = args.abi or ("alkali" if is_elf else "ubpf")
    helpers = REGISTRIES[args.helpers or ("alkali" if abi == "alkali" else "conformance")]()
    loaded = program_from_bytes(
        raw,
        section=args.section,
        legacy_relocations=args.legacy_relocations,
        helper_names={name: i for i, name in helpers.names().items()},
    )
    machine = Machine(
        loaded.program,
        helpers,
        loaded.sections,
        entry=loaded.entry,
        div_by_zero=args.div_by_zero,
        profile=args.profile,
    )
    engine = args.engine or default_engine()
    result = machine.run(data, args.output_size, abi, budget=args.budget or DEFAULT_BUDGET, engine=engine)
    if args.json:
        print(json.dumps(result.to_json()))
        return 0
    for line in result.printed:
        print(f"printed: {line.rstrip(chr(10))}")
    print(f"r0 = {result.r0} (0x{result.r0:x})")
    if result.output:
        print(f"output ({len(result.output)} bytes): {result.output.hex(' ')}")
    print(f"instructions: {result.instructions}")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from npukit.targets.ebpf.analysis import Options, analyze
    from npukit.targets.ebpf.helpers import REGISTRIES
    from npukit.targets.ebpf.load import program_from_bytes

    if args.output_size is not None and args.output_size < 0:
        raise ConfigError("--output-size must be >= 0")
    path = Path(args.program)
    if not path.is_file():
        raise ConfigError(f"no such program file {args.program!r}")
    raw = path.read_bytes()
    abi = args.abi or ("alkali" if raw[:4] == b"\x7fELF" else "ubpf")
    helpers = REGISTRIES[args.helpers or ("alkali" if abi == "alkali" else "conformance")]()
    loaded = program_from_bytes(
        raw, section=args.section, helper_names={name: i for i, name in helpers.names().items()}
    )
    output_size, max_input = args.output_size or 0, Options.max_input
    if abi == "alkali":  # what the device passes its verifier at upload
        from npukit.devices.alkali.accelerator import AcceleratorConfig

        device = AcceleratorConfig()
        output_size = device.output_size if args.output_size is None else args.output_size
        max_input = device.input_size
    options = Options(
        abi=abi, output_size=output_size, max_input=max_input, profile=args.profile, entry=loaded.entry
    )
    verdict = analyze(loaded.program, helpers, loaded.sections, options)
    if args.json:
        print(json.dumps(verdict.to_json()))
    else:
        for finding in verdict.errors:
            print(f"pc {finding.pc}: {finding.message}")
        count = len(verdict.errors)
        print("accept" if verdict.accepted else f"reject ({count} reason{'s' if count != 1 else ''})")
    return 0 if verdict.accepted else 1
