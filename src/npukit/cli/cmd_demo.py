"""``npukit demo``: the README's first command — the embedded Gemma 3n model on the best available
target (the simulated pccx NPU once it is registered, else the W4A8 quantized reference), then a short
evidence-tiered performance summary of full-size Gemma 3n E4B on the pccx v002 KV260 preset."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys

from npukit.cli import ui
from npukit.errors import NpukitError

PREFERRED_TARGETS = ("pccx", "quant", "golden")
SUMMARY_FIGURES = ("tokens_per_second", "bytes_per_token", "joules_per_token")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the embedded model on the simulated NPU, then a perf summary")
    p.add_argument("--prompt", default="def ", help="prompt text (default: 'def ')")
    p.add_argument("--max-new-tokens", type=int, default=48, metavar="N")
    p.add_argument("--target", default=None, help="override the target (default: best registered)")
    p.add_argument("--json", action="store_true",
                   help="print one object: {generation: <generate --json>, summary: <perf figures>}")
    p.set_defaults(func=run)


def best_target(targets: list[str]) -> str:
    for t in PREFERRED_TARGETS:
        if t in targets:
            return t
    raise NpukitError("no generation target is registered")


def run(args: argparse.Namespace) -> int:
    from npukit.cli.main import build_parser
    from npukit.runtime import backends

    target = args.target or best_target(backends.targets())
    parser = build_parser()
    if not args.json:
        print(f"npukit demo: embedded Gemma 3n model, target {target!r}, prompt {args.prompt!r}\n")
    argv = ["generate", "--prompt", args.prompt, "--max-new-tokens", str(args.max_new_tokens),
            "--target", target]
    if target == "pccx":  # the pre-decoded executor: bit-identical to the reference simulator
        argv += ["--executor", "fast"]
    if args.json:
        argv.append("--json")
    gen = parser.parse_args(argv)
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured) if args.json else contextlib.nullcontext():
        rc = gen.func(gen)
    if rc:
        return rc
    sys.stdout.flush()
    perf = parser.parse_args(["perf", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e4b", "--weights",
                              "int4", "--kv", "int4", "--context", "8192"])
    from npukit.cli.cmd_perf import compute

    res = compute(perf)
    led = res["ledger"]
    if args.json:
        ui.emit_json({"generation": json.loads(captured.getvalue()),
                      "summary": {"figures": {n: led[n].to_json() for n in SUMMARY_FIGURES if n in led},
                                  "bound": res["analysis"].bound, "notes": res["notes"]}})
        return 0
    print("\nPerformance summary — Gemma 3n E4B decode on pccx v002 (KV260), INT4 weights and KV, "
          "8K context:")
    ui.table([[n, led[n].fmt(), str(led[n].tier), led[n].source] for n in SUMMARY_FIGURES if n in led],
             ["figure", "value", "tier", "source"])
    print(f"bound: {res['analysis'].bound}")
    for note in res["notes"]:
        print(f"note: {note}")
    print("\nMore: npukit generate --help · npukit perf --help · npukit sim --help · npukit formats")
    return 0
