"""``npukit fp8``: the FP8-as-storage GEMM (cuda-fp8-ampere's contract) on this CPU.

Verbs: ``gemm`` (one run, ``--check`` against the NumPy reference and float64), ``bench`` (fused vs
naive decode+matmul vs cached fp32 vs int8, speed and memory, one run; then the RTX 3090 Ti
projection of the seed's table), ``harness`` (error of each stage against float64), ``gpu`` (the
GPU model alone) and ``models`` (real models with FP8-stored linear layers).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from npukit.cli import ui
from npukit.errors import ConfigError

FMTS = ("e4m3", "e4m3fn", "e5m2")


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fp8", help="FP8-as-storage GEMM: run, check, benchmark, GPU model, real models")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", title="verbs")
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])

    g = verbs.add_parser("gemm", help="one fused GEMM on random operands (--check: vs reference and fp64)")
    g.add_argument("--m", type=_positive, default=16)
    g.add_argument("--n", type=_positive, default=4096)
    g.add_argument("--k", type=_positive, default=4096)
    g.add_argument("--fmt", choices=FMTS, default="e4m3",
                   help="FP8 storage format (default e4m3, the seed's)")
    g.add_argument("--act", choices=("f16", "int8"), default="f16",
                   help="activations: f16 (v4, fused quantization; default) or int8 (v2)")
    g.add_argument("--random-bytes", action="store_true",
                   help="the seed's weights: uniform random bytes (inf/NaN codes included) instead of "
                   "encoded Gaussian weights")
    g.add_argument("--reps", type=_positive, default=5, help="timed calls; the best is reported (default 5)")
    g.add_argument("--check", action="store_true", help="compare bit for bit with the NumPy reference")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=run_gemm)

    b = verbs.add_parser("bench", help="fused vs naive vs cached vs int8: time, TOPS, memory (one run)")
    b.add_argument("--quick", action="store_true", help="fewer shapes and M values (about a minute)")
    b.add_argument("--fmt", choices=FMTS, default="e4m3")
    b.add_argument("--reps", type=_positive, default=3, help="timed calls per path (default 3)")
    b.add_argument("--shape", action="append", default=[], metavar="MxNxK",
                   help="benchmark these shapes instead of the default set (repeatable)")
    b.add_argument("--no-memory", action="store_true", help="skip the per-call memory measurements")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=run_bench)

    h = verbs.add_parser("harness", help="error of each stage (FP8, int8, activations, fp16) vs float64")
    h.add_argument("--quick", action="store_true")
    h.add_argument("--fmt", choices=FMTS, action="append", help="format(s) (default all three)")
    h.add_argument("--scaling", choices=("tensor", "column"), default="column")
    h.add_argument("--json", action="store_true")
    h.set_defaults(func=run_harness)

    u = verbs.add_parser("gpu", help="RTX 3090 Ti model of the seed's four paths, next to its measured times")
    u.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="preset override, e.g. dram_efficiency.value=0.8")
    u.add_argument("--json", action="store_true")
    u.set_defaults(func=run_gpu)

    m = verbs.add_parser("models", help="real models with every linear layer stored in FP8")
    m.add_argument("--quick", action="store_true", help="fewer held-out windows / sentences")
    m.add_argument("--fmt", choices=FMTS, action="append", help="format(s) (default all three)")
    m.add_argument("--model", choices=("gemma3n", "minilm"), action="append", help="default both")
    m.add_argument("--stage", choices=("fp8", "int8", "tensor", "token"), action="append",
                   help="what runs in FP8 (default fp8, tensor, token; see the table's legend)")
    m.add_argument("--windows", type=_positive, default=None,
                   help="Gemma 3n held-out windows of 128 tokens (default 8; --quick 2)")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=run_models)


def _shape(text: str) -> tuple[str, int, int, int]:
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise ConfigError(f"--shape wants MxNxK (e.g. 16x4096x4096), got {text!r}") from None
    if min(m, n, k) < 1:
        raise ConfigError(f"--shape dimensions must be >= 1, got {text!r}")
    return (text, m, n, k)


def run_gemm(args: argparse.Namespace) -> int:
    import hashlib

    import numpy as np

    from npukit.kernels import fp8 as K
    from npukit.kernels.fp8 import bench, contract, fast

    a16, weights, a_inv = bench.make_operands(args.m, args.n, args.k, args.fmt, args.seed)
    codes, scales = weights.codes, weights.col_scales
    if args.random_bytes:
        rng = np.random.default_rng(args.seed)
        codes = rng.integers(0, 256, (args.n, args.k), dtype=np.uint8)
        scales = np.ones(args.n, np.float16)
    a = contract.quantize_activations(a16, a_inv) if args.act == "int8" else a16
    gs = 1.0 if args.random_bytes else weights.tensor_scale / float(contract.a_inv_f16(a_inv))
    kw = {"fmt": args.fmt, "a_inv_scale": None if args.act == "int8" else a_inv, "global_scale": gs}
    out = K.gemm(a, codes, scales, **kw)
    best = float("inf")
    for _ in range(args.reps):
        t0 = time.perf_counter()
        out = K.gemm(a, codes, scales, **kw)
        best = min(best, time.perf_counter() - t0)
    ops = 2.0 * args.m * args.n * args.k
    res = {"m": args.m, "n": args.n, "k": args.k, "fmt": args.fmt, "act": args.act,
           "simd": fast.simd()[0] if fast.available() else "numpy-reference",
           "ms": {"value": best * 1e3, "tier": "measured", "source": f"best of {args.reps} calls"},
           "tops": {"value": ops / best / 1e12, "tier": "derived", "source": "2·M·N·K / ms"}}
    if args.check:
        ref = K.gemm_reference(a, codes, scales, **kw)
        same = (out.view(np.uint16) == ref.view(np.uint16)) | (np.isnan(out) & np.isnan(ref))
        res["bit_identical"] = bool(same.all())
        # the output's bits, so runs on different CPUs (x86 matrix, aarch64) compare outputs directly
        res["output_sha256"] = hashlib.sha256(np.ascontiguousarray(out).view(np.uint16).tobytes()).hexdigest()
        if not args.random_bytes:
            from npukit.kernels.fp8 import harness

            y0 = a16.astype(np.float64) @ weights.values().astype(np.float64).T
            e = harness.errors(out.T, y0, "kernel")
            res["vs_fp64_of_fp8_weights"] = {"max_rel": e.max_rel, "mean_rel": e.mean_rel, "cosine": e.cosine}
    if args.json:
        ui.emit_json(res)
        return 0 if res.get("bit_identical", True) else 1
    print(f"fp8 gemm {args.m}x{args.n}x{args.k} {args.fmt} act={args.act} [{res['simd']}]: "
          f"{res['ms']['value']:.3f} ms (measured, best of {args.reps}), "
          f"{res['tops']['value']:.3f} TOPS (derived)")
    if args.check:
        print(f"bit-identical to the NumPy reference: {res['bit_identical']}")
        if "vs_fp64_of_fp8_weights" in res:
            v = res["vs_fp64_of_fp8_weights"]
            print(f"vs float64 GEMM of the stored FP8 weights: max rel {v['max_rel']:.2e}, "
                  f"mean rel {v['mean_rel']:.2e}, cosine {v['cosine']:.6f}")
    return 0 if res.get("bit_identical", True) else 1


def run_bench(args: argparse.Namespace) -> int:
    from npukit.kernels.fp8 import bench, fast, gpu

    shapes = [_shape(s) for s in args.shape] or bench.default_shapes(args.quick)
    reps = 1 if args.quick and args.reps == 3 else args.reps
    simd = fast.simd()[0] if fast.available() else "numpy-reference"

    def progress(r):
        if not args.json:
            ms = {p: f"{v.ms:.2f}" for p, v in r.paths.items()}
            print(f"  {r.label} M={r.m}: {ms} ms", file=sys.stderr, flush=True)

    with ui.step(f"timing {len(shapes)} shapes, fused / naive / cached / int8 ({simd})"):
        results = bench.run(shapes, fmt=args.fmt, reps=reps, memory=not args.no_memory, progress=progress)
    if args.json:
        ui.emit_json({"simd": simd, "fmt": args.fmt, "results": bench.to_json(results),
                      "gpu_projection": _gpu_rows(gpu.seed_table())})
        return 0
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"FP8-as-storage GEMM on this CPU ({simd}), fmt {args.fmt}, v4 activations; times measured "
          f"(best of {reps}+ rounds, paths taking turns), TOPS and ratios derived; all from this one run; "
          f"load average {load} on {os.cpu_count()} CPUs")
    print("\n".join(bench.speed_table(results)))
    print("\nMemory (MiB, measured): resident weight bytes / tracemalloc peak of one call / peak-RSS growth "
          "of one call")
    print("\n".join(bench.memory_table(results)))
    print("\nThe seed's GPU, modelled (presets/hw/rtx3090ti.toml; projections vs the seed's measurements):")
    print("\n".join(gpu.seed_lines()))
    return 0


def _gpu_rows(rows) -> list[dict]:
    keys = ("path", "bound", "projected_ms", "seed_ms", "error_pct")
    return [dict(zip(keys, r, strict=True)) | {"tier": "projected vs measured"} for r in rows]


def run_harness(args: argparse.Namespace) -> int:
    from npukit.kernels.fp8 import harness

    with ui.step("measuring each stage's error against float64"):
        rows = harness.run(harness.default_shapes(args.quick), tuple(args.fmt or FMTS), args.scaling)
    if args.json:
        ui.emit_json({"scaling": args.scaling, "rows": [
            {"shape": r[0], "m": r[1], "n": r[2], "k": r[3], "fmt": r[4],
             "stages": [e.__dict__ for e in r[5]]} for r in rows], "load_check": harness.load_check()})
        return 0
    print(f"Error vs the float64 GEMM of the original weights ({args.scaling} FP8 scaling; derived):")
    print("\n".join(harness.table(rows)))
    print("\nLoad check:\n" + "\n".join(harness.load_check()))
    return 0


def run_gpu(args: argparse.Namespace) -> int:
    from npukit.kernels.fp8 import gpu

    h = gpu.load(args.overrides)
    if args.json:
        ui.emit_json(_gpu_rows(gpu.seed_table(h)))
        return 0
    print("\n".join(gpu.seed_lines(h)))
    return 0


def run_models(args: argparse.Namespace) -> int:
    from npukit.kernels.fp8 import models

    fmts = tuple(args.fmt or FMTS)
    stages = tuple(args.stage or ("fp8", "tensor", "token"))
    with ui.step("real models with every linear layer in FP8 (loading, perplexity windows)"):
        res = models.run(tuple(args.model or ("gemma3n", "minilm")), fmts, stages, quick=args.quick,
                         windows=args.windows)
    if args.json:
        ui.emit_json(res)
        return 0
    print("\n".join(models.table(res)))
    return 0
