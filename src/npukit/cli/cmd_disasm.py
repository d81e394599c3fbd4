"""``npukit disasm``: print a pccx program file as assembly text (invalid words are flagged)."""

from __future__ import annotations

import argparse

from npukit.cli import ui
from npukit.errors import DecodeError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("disasm", help="disassemble a pccx program file (bin or $readmemh hex); "
                       "exit status 1 when a word would raise the error interrupt")
    p.add_argument("file", help="program file")
    p.add_argument("--format", choices=["bin", "hex"], help="default: from the suffix (.hex/.mem -> hex)")
    p.add_argument("--profile", choices=["strict", "extended"], default="extended")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from npukit.targets.pccx import asm, isa

    words = asm.read_program(args.file, args.format)
    rows = []
    for i, w in enumerate(words):
        try:
            text, err = asm.format_instr(isa.decode(w, args.profile)), None
        except DecodeError as exc:
            text, err = f".word 0x{w:016X}", exc.reason
        rows.append({"index": i, "word": f"0x{w:016X}", "text": text, "valid": err is None, "error": err})
    if args.json:
        ui.emit_json({"file": args.file, "profile": args.profile, "instructions": rows})
    else:
        for r in rows:
            note = f"  ; invalid: {r['error']}" if r["error"] else ""
            print(f"{r['text']}{note}  ; {r['index']:04d} {r['word']}")
    return 1 if any(not r["valid"] for r in rows) else 0
