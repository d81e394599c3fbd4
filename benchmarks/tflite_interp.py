"""Inference speed of npukit's int8 TFLite interpreter against LiteRT on the same models.

Run: ``python benchmarks/tflite_interp.py [--models resnet8-cifar10,digits] [--rounds R] [--json]``.

Contenders: npukit's compiled path (the interpreter's default), the same on a batch of 32 along N
(``Interpreter.run_batch``; its figure is per inference), and its readable reference kernels
(``Interpreter(..., compiled=False)``, the living definition the compiled path is tested against).
Peers, measured in the same run: LiteRT (ai-edge-litert) with its reference kernels
(``OpResolverType.BUILTIN_REF``, the resolver npukit is bit-exact with) and with its default
resolver (optimized kernels + XNNPACK), both on one thread, as npukit runs on one BLAS thread.
Before timing, npukit's outputs are checked bit-identical with BUILTIN_REF (a faster wrong answer
is not a result); how many outputs the default resolver rounds differently is reported.

Timing: ``--rounds`` rounds, each running every contender for at least ``--min-time`` seconds in
turn (interleaved, so load from other processes hits all four alike); a contender's figure is the
median over rounds of its mean seconds per inference. Inferences/s are tier ``measured``; ratios
(npukit / peer) are ``derived``. The per-inference overhead on the digits model (four tiny ops)
is npukit's whole time per inference there, µs (goal ≤ 20 µs), tier ``measured``. Zoo models are
fetched into ~/.cache/npukit on first use.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from npukit.cli import ui
from npukit.evidence import Figure, Tier
from npukit.models.tflite import Interpreter, read_model, zoo
from npukit.sim.cpu import describe as machine_line

SOURCE = "benchmarks/tflite_interp.py"
DEFAULT_MODELS = "resnet8-cifar10,ds-cnn-kws,zoo:digits"
KERNELS = "npukit.models.tflite.kernels._nb_gemm"  # the kernel family whose path the CPU line names
BATCH = 32  # samples per `Interpreter.run_batch` call in the batched figure


def _inputs(model, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = []
    for t in model.input_tensors():
        if t.dtype == np.float32:
            feeds.append(rng.normal(size=t.shape).astype(np.float32))
        else:
            info = np.iinfo(t.dtype)
            feeds.append(rng.integers(info.min, info.max + 1, t.shape).astype(t.dtype))
    return feeds


def _litert(path: str, reference: bool) -> Any:
    from ai_edge_litert.interpreter import Interpreter as LiteRT
    from ai_edge_litert.interpreter import OpResolverType

    kind = OpResolverType.BUILTIN_REF if reference else OpResolverType.AUTO
    interp = LiteRT(model_path=path, experimental_op_resolver_type=kind, num_threads=1)
    interp.allocate_tensors()
    return interp


def _litert_runner(interp, feeds) -> tuple[Callable[[], None], Callable[[], list[np.ndarray]]]:
    for d, x in zip(interp.get_input_details(), feeds, strict=True):
        interp.set_tensor(d["index"], x)
    outs = [d["index"] for d in interp.get_output_details()]

    def run() -> None:
        interp.invoke()

    return run, lambda: [interp.get_tensor(i).copy() for i in outs]


def _time(fn: Callable[[], Any], min_time: float) -> float:
    fn()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time:
            return elapsed / n


def bench_model(spec: str, rounds: int, min_time: float) -> dict[str, Any]:
    path = str(zoo.resolve(spec if spec.startswith("zoo:") or os.path.exists(spec) else f"zoo:{spec}"))
    model = read_model(path)
    feeds = _inputs(model)
    ours = Interpreter(model)
    readable = Interpreter(model, compiled=False)
    ref, fast = _litert(path, True), _litert(path, False)
    ref_run, ref_out = _litert_runner(ref, feeds)
    fast_run, fast_out = _litert_runner(fast, feeds)
    ref_run()
    fast_run()
    mine = list(ours.run(feeds).values())
    for a, b, c in zip(mine, ref_out(), readable.run(feeds).values(), strict=True):
        if not (np.array_equal(a, b) and np.array_equal(c, b)):
            raise SystemExit(f"{spec}: npukit differs from LiteRT BUILTIN_REF; refusing to time it")
    xnn_diff = sum(int((a != b).sum()) for a, b in zip(mine, fast_out(), strict=True))
    batch = np.concatenate([feeds[0]] * BATCH) if len(feeds) == 1 else None
    contenders = {"npukit": lambda: ours.run(feeds), "npukit_reference_kernels": lambda: readable.run(feeds),
                  "litert_ref": ref_run, "litert_default": fast_run}
    if batch is not None:  # per inference: the batch's time / BATCH
        batched = ours.run_batch(batch).values()
        if not all(np.array_equal(a[:1], b) for a, b in zip(batched, mine, strict=True)):
            raise SystemExit(f"{spec}: npukit's batched run differs from its single run")
        contenders["npukit_batch"] = lambda: ours.run_batch(batch)
    samples: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            samples[name].append(_time(fn, min_time))
    per_inf = {k: statistics.median(v) / (BATCH if k == "npukit_batch" else 1) for k, v in samples.items()}
    src = f"{SOURCE}: median of {rounds} interleaved rounds, ≥{min_time}s each, 1 thread"
    figs = {f"{k}_inf_per_s": Figure(1.0 / v, "inferences/s", Tier.MEASURED, src) for k, v in per_inf.items()}
    for peer in ("litert_ref", "litert_default"):
        figs[f"ratio_vs_{peer}"] = Figure(per_inf[peer] / per_inf["npukit"], "x", Tier.DERIVED,
                                          f"npukit inferences/s / {peer} inferences/s, same run")
    figs["npukit_us_per_inference"] = Figure(per_inf["npukit"] * 1e6, "us", Tier.MEASURED, src)
    return {"model": spec, "ops": len(model.ops), "outputs_equal_ref": True,
            "default_resolver_differing_outputs": xnn_diff, "figures": figs}


def main(argv: list[str] | None = None) -> int:
    print(machine_line(KERNELS), file=sys.stderr)  # the CPU and kernel paths measured
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated (default {DEFAULT_MODELS})")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--min-time", type=float, default=0.3, help="seconds per contender per round")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = [bench_model(m.strip(), args.rounds, args.min_time) for m in args.models.split(",") if m.strip()]
    env = {"python": sys.version.split()[0], "machine": platform.machine(), "cpus": os.cpu_count(),
           "numpy": np.__version__, "cpu": machine_line(KERNELS)}
    if args.json:
        ui.emit_json({"rows": rows, "environment": env})
        return 0
    table = []
    for r in rows:
        f = r["figures"]
        batched = f.get("npukit_batch_inf_per_s")
        table.append([r["model"], str(r["ops"]), f"{f['npukit_inf_per_s'].value:.1f}",
                      f"{batched.value:.1f}" if batched else "-",
                      f"{f['npukit_reference_kernels_inf_per_s'].value:.1f}",
                      f"{f['litert_ref_inf_per_s'].value:.1f}", f"{f['litert_default_inf_per_s'].value:.1f}",
                      f"{f['ratio_vs_litert_ref'].value:.2f}x", f"{f['ratio_vs_litert_default'].value:.2f}x",
                      str(r["default_resolver_differing_outputs"])])
    ui.table(table, ["model", "ops", "npukit inf/s", f"batch of {BATCH} inf/s", "reference kernels inf/s",
                     "LiteRT ref inf/s", "LiteRT default inf/s", "vs ref", "vs default",
                     "default≠ref outputs"],
             align="llrrrrrrrr")
    for r in rows:
        if r["model"].endswith("digits"):
            us = r["figures"]["npukit_us_per_inference"]
            print(f"per-inference overhead on {r['model']}: {us.value:.1f} us ({us.tier}; goal <= 20 us)")
    print(f"inf/s: measured ({SOURCE}, 1 thread, interleaved) on {machine_line(KERNELS)}; ratios: derived. "
          "npukit outputs (compiled and reference kernels) bit-identical with LiteRT BUILTIN_REF "
          "on every model.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
