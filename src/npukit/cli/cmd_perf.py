"""``npukit perf``: analytic roofline, energy and evidence ledger for a model on a hardware preset."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from npukit.cli import ui
from npukit.errors import ConfigError

# Targets whose seeds state a decode-rate goal; checked unless --target-tps overrides.
DEFAULT_TARGETS = {"pccx": (20.0, "seeds/000 pccx gemma3n_execution.rst §6 (target, nothing measured)")}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perf", help="analytic per-op roofline, energy and evidence ledger "
                       "for one decode token")
    p.add_argument("--hw", required=True, help="hardware preset name or TOML path")
    p.add_argument("--model", required=True, help="model preset name or path to a HF config.json")
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


def parse_sparsity(text: str | None) -> tuple[float, bool]:
    if text is None:
        return 0.0, False
    if text == "model":
        return 0.0, True
    try:
        s = float(text)
    except ValueError:
        raise ConfigError(f"--sparsity must be a number in [0,1) or 'model', got {text!r}") from None
    if not 0 <= s < 1:
        raise ConfigError(f"--sparsity must be in [0, 1), got {s}")
    return s, False


def compute(args: argparse.Namespace) -> dict[str, Any]:
    from npukit.evidence import Tier
    from npukit.perf import ledger as lg
    from npukit.perf.machine import load_machine, target_of
    from npukit.perf.ops import build_ops
    from npukit.perf.roofline import analyze

    desc, machine = load_machine(args.hw, args.overrides)
    table = build_ops(args.model, name=str(args.model))
    weights = args.weights or ("ternary" if table.config.get("model_type") == "bitnet" else "int4")
    maxpos = table.config.get("max_position_embeddings")
    if args.context < 1:
        raise ConfigError(f"--context must be >= 1, got {args.context}")
    if maxpos and args.context > int(maxpos):
        raise ConfigError(f"--context {args.context} exceeds the model's max_position_embeddings {maxpos}")
    sparsity, model_sp = parse_sparsity(args.sparsity)
    a = analyze(table, machine, weights=weights, kv=args.kv, context=args.context, sparsity=sparsity,
                model_sparsity=model_sp, basis=args.basis)
    target = target_of(desc)
    tps, src = ((args.target_tps, "--target-tps") if args.target_tps
                else DEFAULT_TARGETS.get(target, (None, "")))
    led = lg.build_ledger(a)
    notes: list[str] = []
    if tps:
        notes = lg.add_target_check(led, a, tps, src, led["tokens_per_second"].tier)
        if not model_sp and table.density.min() < 1:
            b = analyze(table, machine, weights=weights, kv=args.kv, context=args.context,
                        sparsity=sparsity, model_sparsity=True, basis=args.basis)
            led.add("with_model_sparsity.tokens_per_second", b.totals["tokens_per_second"], "tok/s",
                    led["tokens_per_second"].tier, "same roofline with the model's own FFN top-k skipping")
            notes.append(f"with the model's FFN top-k skipping: {b.totals['tokens_per_second']:.2f} tok/s")
    if args.basis == "peak":
        e = analyze(table, machine, weights=weights, kv=args.kv, context=args.context, sparsity=sparsity,
                    model_sparsity=model_sp, basis="effective")
        led.add("tokens_per_second_effective_bw", e.totals["tokens_per_second"], "tok/s", Tier.PROJECTED,
                "same roofline at the effective (sustained) bandwidths of the description")
    tl = lg.target_ledger(target, desc, table.config, context=args.context, weights=weights, kv=args.kv,
                          sparsity=None if model_sp else sparsity)
    led = lg.merge(led, tl)
    phases = {n.split(".", 1)[1]: f.value for n, f in led.items() if n.startswith("tokens_per_second.")}
    if phases:
        each = ", ".join(f"{ph} {v:.3g}" for ph, v in phases.items())
        notes.append(f"tokens_per_second {a.totals['tokens_per_second']:.3g} is the analytic roofline "
                     f"(no target phase); the target's own phases, tok/s: {each}")
    return {"analysis": a, "ledger": led, "notes": notes, "target": target, "weights": weights,
            "target_ledger": tl is not None}


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
