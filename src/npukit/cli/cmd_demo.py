"""``npukit demo [SYSTEM]``: the README's first command. One demo per system the toolkit has.

The default (``pccx``) runs the embedded Gemma 3n model on the best available target (the simulated
pccx NPU once it is registered, else the W4A8 quantized reference), then a short evidence-tiered
performance summary of full-size Gemma 3n E4B on the pccx v002 KV260 preset. ``tern`` shows the
ternfpga ledger. Every other system plugs in as a module ``npukit/cli/demo_<system>.py`` with
``SUMMARY``, ``add_arguments(parser)`` and ``run(args) -> int`` (discovered like subcommands)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from types import ModuleType

from npukit.cli import ui
from npukit.errors import ConfigError, NpukitError
from npukit.plugins import import_prefixed

PREFERRED_TARGETS = ("pccx", "quant", "golden")
SUMMARY_FIGURES = ("tokens_per_second", "bytes_per_token", "joules_per_token")
BUILTIN = {
    "pccx": "Gemma 3n (embedded model) on the simulated pccx v002 NPU, then an E4B perf summary",
    "tern": "BitNet b1.58 2B-4T on ternfpga (Arty A7-35T): the evidence-tiered cycle/energy ledger",
}


def _plugins() -> dict[str, ModuleType]:
    return {m.__name__.rsplit(".", 1)[-1][len("demo_"):]: m for m in import_prefixed("npukit.cli", "demo_")}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run one system's demo (default pccx; --list shows them all)",
                       description="Run a demo of one system. With no SYSTEM: pccx (the embedded model "
                       "on the simulated NPU). Options after SYSTEM belong to that system's demo "
                       "(npukit demo SYSTEM --help).")
    p.add_argument("system", nargs="?", default="pccx", metavar="SYSTEM",
                   help="which system (default pccx); see --list")
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.add_argument("--list", action="store_true", help="list the systems that have a demo and exit")
    g = p.add_argument_group("pccx demo options")
    g.add_argument("--prompt", default="def ", help="prompt text (default: 'def ')")
    g.add_argument("--max-new-tokens", type=int, default=48, metavar="N")
    g.add_argument("--target", default=None, help="override the target (default: best registered)")
    g.add_argument("--json", action="store_true",
                   help="print one object: {generation: <generate --json>, summary: <perf figures>}")
    p.set_defaults(func=run)


def systems() -> dict[str, str]:
    """System name -> one-line summary, built-ins first."""
    out = dict(BUILTIN)
    for name, mod in sorted(_plugins().items()):
        out[name] = getattr(mod, "SUMMARY", "")
    return out


def run(args: argparse.Namespace) -> int:
    if args.list:
        ui.table([[n, s] for n, s in systems().items()], ["system", "demo"])
        return 0
    if args.system == "pccx":
        if args.rest:
            raise ConfigError(f"demo pccx: unexpected arguments {' '.join(args.rest)!r}")
        return run_pccx(args)
    if args.system == "tern":
        return run_tern(args.rest)
    plugin = _plugins().get(args.system)
    if plugin is None:
        raise ConfigError(f"unknown demo {args.system!r} (known: {', '.join(systems())})")
    sp = argparse.ArgumentParser(prog=f"npukit demo {args.system}", description=plugin.SUMMARY)
    plugin.add_arguments(sp)
    return int(plugin.run(ui.check_args(sp.parse_args(args.rest))) or 0)


def run_tern(rest: list[str]) -> int:
    from npukit.cli.main import main

    print("npukit demo tern: BitNet b1.58 2B-4T decode on ternfpga (Arty A7-35T), 64-token context\n")
    return main(["perf", "--hw", "tern-arty-a7-35t", "--model", "bitnet-b1.58-2b-4t", "--context", "64",
                 *rest])


def best_target(targets: list[str]) -> str:
    for t in PREFERRED_TARGETS:
        if t in targets:
            return t
    raise NpukitError("no generation target is registered")


def run_pccx(args: argparse.Namespace) -> int:
    from npukit.cli.main import build_parser
    if not args.json:  # at once: finding the targets imports every backend
        print(f"npukit demo: embedded Gemma 3n model, prompt {args.prompt!r}", flush=True)
    from npukit.runtime import backends

    with ui.step("loading the generation targets"):
        target = args.target or best_target(backends.targets())
        parser = build_parser()
    if not args.json:
        print(f"target {target!r}\n", flush=True)
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

    if not args.json:  # the full-size model's ledger takes a couple of seconds: say what comes
        print("\nPerformance summary — Gemma 3n E4B decode on pccx v002 (KV260), INT4 weights and KV, "
              "8K context:", flush=True)
    with ui.step("building the Gemma 3n E4B ledger"):
        res = compute(perf)
    led = res["ledger"]
    if args.json:
        ui.emit_json({"generation": json.loads(captured.getvalue()),
                      "summary": {"figures": {n: led[n].to_json() for n in SUMMARY_FIGURES if n in led},
                                  "bound": res["analysis"].bound, "notes": res["notes"]}})
        return 0
    ui.table([[n, led[n].fmt(), str(led[n].tier), led[n].source] for n in SUMMARY_FIGURES if n in led],
             ["figure", "value", "tier", "source"])
    print(f"bound: {res['analysis'].bound}")
    for note in res["notes"]:
        print(f"note: {note}")
    print("\nMore: npukit generate --help · npukit perf --help · npukit sim --help · npukit formats")
    return 0
