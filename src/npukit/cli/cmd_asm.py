"""``npukit asm``: assemble pccx assembly text into a program file (raw little-endian words or hex)."""

from __future__ import annotations

import argparse
from pathlib import Path

from npukit.cli import ui
from npukit.errors import FormatError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("asm", help="assemble pccx assembly text into a program (bin or $readmemh hex)")
    p.add_argument("src", help="assembly source file ('-' for stdin)")
    p.add_argument("-o", "--output", required=True, help="program file to write")
    p.add_argument("--format", choices=["bin", "hex"], help="bin = little-endian 64-bit words, "
                   "hex = $readmemh text (default: from the output suffix, .hex/.mem -> hex)")
    p.add_argument("--profile", choices=["strict", "extended"], default="extended",
                   help="strict = exactly pccx v002; extended = npukit's documented additions")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _read_text(src: str) -> str:
    if src == "-":
        import sys

        return sys.stdin.read()
    try:
        return Path(src).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"cannot read {src}: {getattr(exc, 'strerror', None) or exc}") from None


def run(args: argparse.Namespace) -> int:
    from npukit.targets.pccx import asm

    words = asm.assemble(_read_text(args.src), args.profile)
    out = Path(args.output)
    fmt = args.format or ("hex" if out.suffix.lower() in (".hex", ".mem") else "bin")
    try:
        asm.write_program(out, words, fmt)
    except OSError as exc:
        raise FormatError(f"cannot write {out}: {exc.strerror}") from None
    summary = {"source": args.src, "output": str(out), "format": fmt, "profile": args.profile,
               "words": len(words)}
    if args.json:
        ui.emit_json(summary)
    else:
        ui.table([[k, v] for k, v in summary.items()], ["field", "value"])
    return 0
