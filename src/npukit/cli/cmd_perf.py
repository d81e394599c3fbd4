"""``npukit perf``: analytic roofline, energy and evidence ledger for a model on a hardware preset."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from npukit.cli import ui

DEFAULT_HW = "pccx-v002-kv260"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perf", help="analytic per-op roofline, energy and evidence ledger "
                       "for one decode token")
    p.add_argument("model_file", nargs="?", default=None, metavar="MODEL",
                   help="the model, as --model (e.g. a Gemma 3 / Llama .gguf file)")
    p.add_argument("--hw", default=DEFAULT_HW,
                   help=f"hardware preset name or TOML path (default {DEFAULT_HW})")
    p.add_argument("--model", default=None,
                   help="model preset name, path to a HF config.json, or a Gemma 3 / Llama .gguf file "
                   "(its shape from the GGUF metadata)")
    p.add_argument("--weights", default=None,
                   help="weight format: int4|int8|fp16|bf16|fp8-e4m3|fp8-e4m3fn|fp8-e5m2|ternary|ternary-i2s "
                   "(default int4; ternary for bitnet)")
    p.add_argument("--kv", default="fp16", help="KV cache format: fp16|int8|int4 (default fp16)")
    p.add_argument("--context", type=int, default=1024, help="tokens in the KV cache (default 1024)")
    p.add_argument("--sparsity", default=None,
                   help="FFN activation sparsity in [0,1) skipped in up/down, or 'model' for the model's "
                   "own pattern (Gemma 3n top-k); default dense")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="hardware override (e.g. ddr.peak_gbps=25.6) or perf.<key> (e.g. "
                   "perf.static_power_w=3)")
    p.add_argument("--basis", choices=("peak", "effective"), default="peak",
                   help="memory bandwidth basis (default peak: an upper bound)")
    p.add_argument("--target-tps", type=ui.positive(float), default=None,
                   help="decode rate to check for reachability (default: the target's seed goal)")
    p.add_argument("--ops", type=ui.positive(int, zero=True), default=0, metavar="N",
                   help="also list the N slowest ops")
    p.add_argument("--plot", type=ui.output_file("--plot"), default=None, metavar="FILE.png",
                   help="roofline.png: ops on the roofline; layers.png: stacked per-layer times")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def compute(args: argparse.Namespace) -> dict[str, Any]:
    """`npukit.estimate` with the command line's options."""
    from npukit.api.perf import estimate
    from npukit.errors import ConfigError

    if (args.model is None) == (args.model_file is None):
        raise ConfigError("give the model once: MODEL or --model (a preset, config.json or .gguf file)")
    args.model = args.model or args.model_file
    try:
        report = estimate(args.model, args.hw, weights=args.weights, kv=args.kv, context=args.context,
                          sparsity=args.sparsity, overrides=args.overrides, basis=args.basis,
                          target_tps=args.target_tps)
    except ConfigError as exc:  # the API names its parameters; here they are flags
        text = str(exc)
        for name in ("sparsity", "context"):
            if text.startswith(f"{name} "):
                raise ConfigError(f"--{text}") from None
        raise
    return {"analysis": report.analysis, "ledger": report.ledger, "notes": report.notes,
            "target": report.target, "weights": report.weights, "target_ledger": report.has_target_ledger}


def run(args: argparse.Namespace) -> int:
    res = compute(args)
    a, led = res["analysis"], res["ledger"]
    if args.plot:
        from npukit.perf import plot

        plot.plot_file(a, args.plot)
    ops = _slowest(a, args.ops) if args.ops else []
    if args.json:
        out = led.to_json()
        out.update(bound=a.bound, notes=res["notes"], target_ledger=res["target_ledger"],
                   inputs={"hw": args.hw, "model": args.model, "weights": res["weights"], "kv": args.kv,
                           "context": args.context, "sparsity": args.sparsity, "basis": args.basis,
                           "overrides": args.overrides})
        if ops:
            out["ops"] = [dict(zip(("op", "seconds", "bound", "macs", "offchip_bytes"), r, strict=True))
                          for r in ops]
        if args.plot:
            out["plot"] = args.plot
        ui.emit_json(out)
        return 0
    ui.table(led.rows(), ["figure", "value", "tier", "source"])
    print(f"\nbound: {a.bound}")
    for n in res["notes"]:
        print(textwrap.fill(f"note: {n}", ui.WIDTH, subsequent_indent="      "))
    if ops:
        print()
        ui.table([[o, f"{s * 1e3:.3f} ms", b, f"{m:.4g}", f"{y:.4g}"] for o, s, b, m, y in ops],
                 ["op", "time", "bound", "MACs", "off-chip B"], align="lrlrr")
    if args.plot:
        print(f"wrote {args.plot}")
    return 0


def _slowest(a: Any, n: int) -> list[tuple[str, float, str, float, float]]:
    import numpy as np

    sec = a.per_op["op_seconds"]
    idx = np.argsort(-sec)[:n]
    bounds = a.op_bounds()
    off = a.per_op["op_w_bytes"] + a.per_op["op_kv_bytes"]
    return [(a.table.names[i], float(sec[i]), bounds[i], float(a.per_op["op_macs"][i]), float(off[i]))
            for i in idx]
