"""``npukit demo gemma3``: Gemma 3 270M (the pinned GGUF package, when installed) writing English in pccx's
W4A8 arithmetic (the ``quant`` target: the weight policy of docs/models.md), streamed token by token, then
the evidence-tiered projection of the same model on the pccx v002 KV260 preset, its shape read from the
GGUF metadata. Without the package it says which pip command installs it (exit 2)."""

from __future__ import annotations

import argparse

from npukit.cli import ui

SUMMARY = "Gemma 3 270M (GGUF package) in pccx W4A8 arithmetic, then its projected tok/s on the KV260"
SUMMARY_FIGURES = ("tokens_per_second", "bytes_per_token", "joules_per_token")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt", default="The capital of France is", help="prompt text")
    p.add_argument("--max-new-tokens", type=int, default=24, metavar="N")
    p.add_argument("--target", default="quant", choices=("quant", "golden"),
                   help="quant (pccx W4A8, default) or golden (float32)")
    p.add_argument("--kv", default=None, help="KV-cache format (quant: fp16|int8|int4)")


def run(args: argparse.Namespace) -> int:
    from npukit.cli.cmd_perf import compute
    from npukit.cli.main import build_parser
    from npukit.models.gguf.installed import installed_gguf

    path = str(installed_gguf("gemma3"))  # ModelError naming the pip command when missing
    print(f"npukit demo gemma3: {path}\ntarget {args.target!r}, prompt {args.prompt!r}\n", flush=True)
    parser = build_parser()
    argv = ["generate", path, "--prompt", args.prompt, "--max-new-tokens", str(args.max_new_tokens),
            "--target", args.target]
    if args.kv:
        argv += ["--kv", args.kv]
    gen = parser.parse_args(argv)
    rc = gen.func(gen)
    if rc:
        return int(rc)
    print("\nProjected: the same model decoding on pccx v002 (KV260), INT4 weights, fp16 KV, 1K context:",
          flush=True)
    with ui.step("building the ledger"):
        res = compute(parser.parse_args(["perf", path]))
    led = res["ledger"]
    ui.table([[n, led[n].fmt(), str(led[n].tier), led[n].source] for n in SUMMARY_FIGURES if n in led],
             ["figure", "value", "tier", "source"])
    print(f"bound: {res['analysis'].bound}")
    return 0
