"""``npukit sweep``: grid over hardware and format parameters → table (CSV/Parquet) + Pareto plot.

``--level roofline`` (default) evaluates the analytic model; ``--level sim`` compiles the workload and
runs the target's timing model per point (`npukit.cli.sweep_sim`); ``npukit sweep report FILE`` reads
a simulator sweep back."""

from __future__ import annotations

import argparse
import time

from npukit.cli import ui


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="sweep hardware and format parameters: tok/s and J/token per point")
    p.add_argument("action", nargs="?", choices=("report",),
                   help="report FILE: the Pareto front and the roofline-vs-simulator deviation of a "
                   "--level sim output")
    p.add_argument("file", nargs="?", help="the sweep output to report on (CSV or Parquet)")
    p.add_argument("--hw", help="hardware preset name or TOML path (required for a sweep)")
    p.add_argument("--model", help="workload: model preset or HF config.json; --level sim: a .tflite or "
                   "zoo:digits (vta), a BitNet preset or config.json (tern), a SigLIP preset[:layers=N]"
                   "[:px=N] (rk3588), embedded, a model directory or config.json (pccx)")
    p.add_argument("--level", choices=("roofline", "sim"), default="roofline",
                   help="roofline: the analytic model (default); sim: compile and run the target's "
                   "timing model per point (workload parameters go in --grid/--set; docs/sweep.md)")
    p.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2|START:STOP:N",
                   help="a swept axis (repeatable): weights, kv, context, sparsity, clock_mhz, lanes, "
                   "ddr_gbps, static_power_w, perf.<key>, or a hardware field such as gemv.cores_log2")
    p.add_argument("--weights", default="int4", help="weight format when not swept (default int4)")
    p.add_argument("--kv", default="fp16", help="KV format when not swept (default fp16)")
    p.add_argument("--context", type=int, default=1024, help="context when not swept (default 1024)")
    p.add_argument("--sparsity", type=float, default=0.0, help="FFN sparsity when not swept (default 0)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="fixed hardware override applied to every point")
    p.add_argument("--basis", choices=("peak", "effective"), default="peak",
                   help="memory bandwidth basis: peak (an upper bound, default) or effective (sustained)")
    p.add_argument("-o", "--output", "--out", dest="out", type=ui.output_file("--output"), default=None,
                   metavar="FILE.csv|FILE.parquet", help="write every point (--out: the old spelling)")
    p.add_argument("--pareto", type=ui.output_file("--pareto"), default=None, metavar="FILE.png",
                   help="Pareto plot of tok/s vs J/token")
    p.add_argument("--workers", type=ui.positive(int), default=2, help="local worker processes (default 2)")
    p.add_argument("--ray", default=None, metavar="ADDRESS", help="run the chunks on a Ray cluster")
    p.add_argument("--resume", action="store_true",
                   help="--level sim: keep the rows already in --out and run only the missing points")
    p.add_argument("--objectives", default=None, metavar="A,B",
                   help="--level sim and report: the two columns of the Pareto front, each minimised "
                   "(max:NAME maximises); default time_s,energy_j")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="--level sim: compile every point afresh (to measure what sharing programs saves)")
    p.add_argument("--json", action="store_true", help="print one JSON object (Pareto front and timing)")
    # Ctrl-C keeps the rows already streamed to the output (a valid file that --resume continues)
    p.set_defaults(func=run, resumable_output=True)


def run(args: argparse.Namespace) -> int:
    from npukit.errors import ConfigError

    if args.action == "report":
        from npukit.cli.sweep_sim import run_report

        return run_report(args)
    if args.file is not None:
        raise ConfigError(f"unexpected argument {args.file!r} (did you mean 'npukit sweep report FILE'?)")
    if not args.hw or not args.model:
        raise ConfigError("a sweep needs --hw and --model")
    if args.level == "sim":
        from npukit.cli.sweep_sim import run_sim

        return run_sim(args)
    from npukit.perf.ops import build_ops
    from npukit.perf.sweep import Sweep, axes_from, pareto_front, run_sweep, write_table

    if args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    axes = axes_from(args.grid)
    table = build_ops(args.model, name=args.model)
    sw = Sweep(args.hw, table, axes, {"weights": args.weights, "kv": args.kv, "context": args.context,
                                       "sparsity": args.sparsity}, args.overrides, args.basis)
    t0 = time.perf_counter()
    where = f"the Ray cluster at {args.ray}" if args.ray else f"{args.workers} local worker(s)"
    with ui.step(f"evaluating {len(sw.grid())} design points on {where}"):
        rows = run_sweep(sw, workers=args.workers, ray_address=args.ray)
    dt = time.perf_counter() - t0
    front = pareto_front(rows)
    if args.out:
        write_table(rows, args.out)
    if args.pareto:
        from npukit.perf.plot import plot_pareto

        plot_pareto(rows, front, args.pareto, title=f"{args.model} on {args.hw}")
    axis_names = list(axes)
    timing = {"points": len(rows), "seconds": dt, "points_per_second": len(rows) / dt if dt > 0 else None,
              "tier": "measured", "source": "wall clock of this run (time.perf_counter)"}
    if args.json:
        ui.emit_json({"axes": axes, "timing": timing, "pareto": [rows[i] for i in front],
                      "out": args.out, "pareto_plot": args.pareto})
        return 0
    show = sorted(front, key=lambda i: -rows[i]["tokens_per_second"])
    ui.table([[*(rows[i][a] for a in axis_names), f"{rows[i]['tokens_per_second']:.4g}",
               rows[i]["time_tier"], f"{rows[i]['joules_per_token']:.4g}", rows[i]["energy_tier"],
               rows[i]["bound"]] for i in show],
             [*axis_names, "tok/s", "tier", "J/token", "tier", "bound"])
    print(f"\n{len(front)} Pareto points of {len(rows)}; {dt:.2f} s ({len(rows) / dt:.0f} points/s, measured)"
          + (f"; wrote {args.out}" if args.out else "") + (f", {args.pareto}" if args.pareto else ""))
    return 0
