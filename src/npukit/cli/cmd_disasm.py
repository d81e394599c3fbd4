"""``npukit disasm``: print a target's program file as assembly text (invalid words are flagged)."""

from __future__ import annotations

import argparse

from npukit.cli import ui
from npukit.cli.cmd_asm import add_target_arguments, call, read_words, resolve_target, word_bits


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("disasm", help="disassemble a target's program file (bin or $readmemh hex); "
                       "exit status 1 when a word would raise the error interrupt")
    p.add_argument("file", help="program file")
    p.add_argument("--format", choices=["bin", "hex"], help="default: from the suffix (.hex/.mem -> hex)")
    add_target_arguments(p, "disasm")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    target, hw, _, options = resolve_target(args, "disassemble")
    words = read_words(target, args.file, hw, args.format, options)
    listing = call(target.resolve("disassemble"), words, hw, **options)
    if isinstance(listing, str):  # a target that returns plain text
        if args.json:
            ui.emit_json({"file": args.file, "target": target.name, **options, "text": listing})
        else:
            print(listing, end="" if listing.endswith("\n") else "\n")
        return 0
    digits = -(-word_bits(target) // 4)
    rows = [{"index": r.index, "word": " ".join(f"0x{w:0{digits}X}" for w in r.words), "text": r.text,
             "valid": r.error is None, "error": r.error} for r in listing]
    if args.json:
        ui.emit_json({"file": args.file, "target": target.name, **options, "instructions": rows})
    else:
        for r in rows:
            note = f"  ; invalid: {r['error']}" if r["error"] else ""
            print(f"{r['text']}{note}  ; {r['index']:04d} {r['word']}")
    return 1 if any(not r["valid"] for r in rows) else 0

