"""``npukit sweep --level sim`` and ``npukit sweep report FILE`` (called from `cmd_sweep`)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from npukit.cli import ui
from npukit.sim.cpu import host_cpu_model


def _spec(args: argparse.Namespace) -> tuple[Any, Any]:
    from npukit.perf.simsweep import SimSpec, adapter_for
    from npukit.perf.sweep import axes_from

    axes = axes_from(args.grid)
    probe = SimSpec(args.hw, args.model, axes)
    adapter = adapter_for(probe.target)
    hw_over, fixed = [], {}
    for text in args.overrides:
        key, sep, value = text.partition("=")
        if sep and key.strip() in adapter.workload_axes:
            fixed[key.strip()] = value.strip()
        else:
            hw_over.append(text)
    spec = SimSpec(args.hw, args.model, axes, hw_over, fixed, use_cache=not args.no_compile_cache)
    return spec, adapter


def run_sim(args: argparse.Namespace) -> int:
    from npukit.errors import ConfigError
    from npukit.perf import simreport
    from npukit.perf.simrun import Progress, RowSink, execute, order_and_chunk
    from npukit.perf.simsweep import Evaluator, columns, grid

    if args.resume and not args.out:
        raise ConfigError("--resume needs --out FILE (the file to complete)")
    spec, adapter = _spec(args)
    workload = adapter.load_workload(args.model)
    points = grid(spec, adapter)
    cols = columns(spec, adapter)
    objectives = simreport.objectives_from(args.objectives, cols)
    driver = Evaluator(spec, workload)
    sink = RowSink(args.out, cols, resume=args.resume) if args.out else None
    todo = [p for p in points if not sink or driver.row_id(p) not in sink.done]
    parallel = 8 if args.ray else args.workers
    chunks = order_and_chunk(driver, todo, parallel)
    rows: list[dict[str, Any]] = []
    bar = Progress(len(todo), sys.stderr)

    def take(chunk: list[dict[str, Any]]) -> None:
        if sink:
            sink.write(chunk)
        rows.extend(chunk)
        bar.update(len(chunk))

    t0 = time.perf_counter()
    try:
        stats = execute(spec, workload, chunks, workers=args.workers, ray_address=args.ray, on_rows=take)
    except KeyboardInterrupt:
        if sink:
            sink.close()
            print(f"npukit: interrupted: {args.out} holds {sink.kept + sink.written} of {len(points)} "
                  f"points; rerun with --resume to finish", file=sys.stderr)
        raise
    finally:
        if sink:
            sink.close()
    dt = time.perf_counter() - t0
    if sink:
        _, rows = simreport.load(args.out)
    front = simreport.pareto(rows, objectives)
    if args.pareto:
        simreport.plot_front(rows, front, objectives, args.pareto)
    where = f"Ray cluster {args.ray}" if args.ray else f"{args.workers} local worker(s)"
    timing = {"points": len(todo), "skipped": len(points) - len(todo), "seconds": dt,
              "points_per_second": len(todo) / dt if dt > 0 else None, "tier": "measured",
              "source": f"wall clock of this run, {where}, driver CPU {host_cpu_model()}",
              "compiles": stats.compiles, "program_reuses": stats.hits, "compile_seconds": stats.compile_s}
    errors = sum(1 for r in rows if r.get("status") != "ok")
    if args.json:
        ui.emit_json({"level": "sim", "target": adapter.target, "axes": spec.axes, "timing": timing,
                      "objectives": list(objectives), "errors": errors, "pareto": [rows[i] for i in front],
                      "out": args.out, "pareto_plot": args.pareto})
        return 0
    _front_table(rows, front, [c for c in cols[:cols.index("point_id")] if c in spec.axes] or
                 cols[:cols.index("point_id")], objectives)
    rate = f"{len(todo) / dt:.1f} points/s" if dt > 0 else "-"
    print(f"\n{len(front)} Pareto points of {len(rows)} ({errors} error rows); {len(todo)} run in {dt:.2f} s "
          f"({rate}, measured on {where}, {host_cpu_model()}); {stats.compiles} compiles, "
          f"{stats.hits} reuses" + (f"; wrote {args.out}" if args.out else "")
          + (f", {args.pareto}" if args.pareto else ""))
    return 0


def _fmt(v: Any) -> str:
    return "-" if v is None or v == "" else f"{v:.4g}" if isinstance(v, float) else str(v)


def _front_table(rows: list[dict[str, Any]], front: list[int], params: list[str],
                 objectives: tuple[str, ...]) -> None:
    ui.table([[*(_fmt(rows[i][p]) for p in params), _fmt(rows[i]["time_s"]), rows[i]["time_tier"],
               _fmt(rows[i]["energy_j"]), rows[i]["energy_tier"], _fmt(rows[i]["sim_over_roofline"]),
               rows[i]["dominant_stall"]] for i in front],
             [*params, "time s", "tier", "energy J", "tier", "sim/roofline", "dominant stall"])


def run_report(args: argparse.Namespace) -> int:
    from npukit.errors import ConfigError
    from npukit.perf import simreport

    if not args.file:
        raise ConfigError("npukit sweep report FILE: give the sweep's CSV or Parquet output")
    ui.check_input(args.file, "report FILE")
    cols, rows = simreport.load(args.file)
    objectives = simreport.objectives_from(args.objectives, cols)
    params = simreport.parameters(cols)
    front = simreport.pareto(rows, objectives)
    dev = simreport.deviation(rows, params)
    errors = [r for r in rows if r.get("status") != "ok"]
    if args.pareto:
        simreport.plot_front(rows, front, objectives, args.pareto)
    if args.json:
        ui.emit_json({"file": args.file, "points": len(rows), "errors": len(errors),
                      "objectives": list(objectives), "pareto": [rows[i] for i in front], "deviation": dev})
        return 0
    print(f"{args.file}: {len(rows)} points, {len(errors)} error rows; "
          f"Pareto front of {' vs '.join(objectives)}:")
    varying = [p for p in params if len({str(r[p]) for r in rows}) > 1] or params
    _front_table(rows, front, varying, objectives)
    print("\nsimulator vs roofline time per parameter value (ratio > 1: the roofline is optimistic):")
    ui.table([[d["parameter"], d["value"], d["points"], d["errors"], _fmt(d["median_ratio"]),
               _fmt(d["max_ratio"]), d["tier"], d["dominant_stall"], _fmt(d["stall_share"])] for d in dev],
             ["parameter", "value", "points", "errors", "median sim/roof", "max", "tier", "dominant stall",
              "its share"])
    for r in errors[:5]:
        print(f"error at {', '.join(f'{p}={r[p]}' for p in varying)}: {r['error']}")
    return 0
