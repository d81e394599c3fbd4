"""CPU benchmark of FP8-as-storage GEMM paths, every figure from one run (`npukit fp8 bench`).

Paths, as in the seed's ``bench_torch_vs_fp8imma.py`` but on this CPU:

* ``fused``  — `npukit.kernels.fp8.gemm`, v4 mode (fp16 activations, fused quantization);
* ``naive``  — decode every call: ``lut[codes] · scale`` -> fp32 weights -> torch (MKL) sgemm
  (NumPy/OpenBLAS without torch);
* ``cached`` — fp32 weights decoded once and kept: the matmul alone, the upper bound that gives up
  the memory saving;
* ``int8``   — ``torch._int_mm`` on int8 weights: the CPU int8 ceiling (the seed's cuBLASLt row).

Timing: the paths take turns (one warm-up each, then ``reps`` rounds, more for cheap shapes) and
each keeps its best time (this machine is shared; the minimum is the least disturbed, and taking
turns spreads load bursts over all paths). Memory per path: resident weight bytes (what must stay
allocated between calls) and peak workspace of one call, measured two ways: tracemalloc (NumPy
allocations; the fused path allocates only through NumPy) and the growth of the process's peak RSS
(``/proc/self/clear_refs`` reset; covers torch and MKL; page-granular, and 0 when the call reuses
memory freed earlier).
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npukit.kernels.fp8 import contract as C

PATHS = ("fused", "naive", "cached", "int8")
# (N, K) of one decoder layer's projections; hub configs (hidden, intermediate, heads x head_dim)
PROJECTIONS = {
    "gemma3n-e4b": {"q_proj": (2048, 2048), "k_proj": (512, 2048), "gate_proj": (16384, 2048),
                    "down_proj": (2048, 16384)},
    "llama3-8b": {"q_proj": (4096, 4096), "k_proj": (1024, 4096), "gate_proj": (14336, 4096),
                  "down_proj": (4096, 14336)},
}
PROJECTION_SOURCE = ("google/gemma-3n-E4B config (hidden 2048, FFN 16384, 8×256 q, 2×256 kv); "
                     "meta-llama/Meta-Llama-3-8B config (hidden 4096, FFN 14336, 32×128 q, 8×128 kv)")
M_VALUES = (1, 16, 128, 512)


@dataclass
class PathResult:
    ms: float
    resident_bytes: int
    workspace_traced: int  # tracemalloc peak of one call
    workspace_rss: int | None  # peak-RSS growth of one call (None where it cannot be measured)
    note: str = ""


@dataclass
class ShapeResult:
    label: str
    m: int
    n: int
    k: int
    paths: dict[str, PathResult] = field(default_factory=dict)

    @property
    def ops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def tops(self, path: str) -> float:
        return self.ops / (self.paths[path].ms * 1e-3) / 1e12

    def ratio(self, path: str) -> float:
        """How many times faster the fused path is than ``path`` (>1: fused wins)."""
        return self.paths[path].ms / self.paths["fused"].ms


def _rss_kib(field_name: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _call_peaks(fn: Callable[[], object]) -> tuple[int, int | None]:
    """(tracemalloc peak, peak-RSS growth or None) of one call of ``fn``, from the same call."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        before = _rss_kib("VmRSS")
    except OSError:
        before = None
    tracemalloc.start()
    try:
        fn()
        traced = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    peak = _rss_kib("VmHWM") if before is not None else None
    return traced, None if before is None or peak is None else max(0, peak - before) * 1024


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def make_operands(m: int, n: int, k: int, fmt: str, seed: int = 0):
    """Random fp16 activations, FP8 codes of Gaussian weights (finite, per-tensor scaled), and the
    activation scale; the GEMM's ``global_scale`` is then ``weights.tensor_scale / fp16(a_inv)``."""
    from npukit.kernels.fp8.encode import activation_inv_scale, encode

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k), dtype=np.float32)
    weights = encode(w, fmt, scaling="tensor")
    a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    return a, weights, activation_inv_scale(a)


def _path_fns(a16, weights, a_inv):
    """{path: (callable, resident bytes, note)}; callables close over prepared operands."""
    from npukit.kernels.fp8 import gemm

    torch = _torch()
    codes, scales, fmt = weights.codes, weights.col_scales, weights.fmt
    lut32 = C.lut_f16(fmt).astype(np.float32)
    s32 = scales.astype(np.float32)[:, None]
    a32 = a16.astype(np.float32)
    fp8_resident = codes.nbytes + scales.nbytes
    gs = weights.tensor_scale / float(C.a_inv_f16(a_inv))
    fns = {"fused": (lambda: gemm(a16, codes, scales, fmt=fmt, a_inv_scale=a_inv, global_scale=gs),
                     fp8_resident, "")}
    if torch is not None:
        at = torch.from_numpy(a32)
        fns["naive"] = (lambda: at @ torch.from_numpy(lut32[codes] * s32).T, fp8_resident, "torch/MKL")
        w32 = torch.from_numpy(lut32[codes] * s32)
        fns["cached"] = (lambda: at @ w32.T, w32.numel() * 4, "torch/MKL fp32")
        w8 = torch.from_numpy(C.weight_codes(codes, scales, fmt))
        a8 = torch.from_numpy(C.quantize_activations(a16, a_inv))
        fns["int8"] = (lambda: torch._int_mm(a8, w8.T), w8.numel() + scales.nbytes, "torch._int_mm")
    else:
        fns["naive"] = (lambda: a32 @ (lut32[codes] * s32).T, fp8_resident, "NumPy/OpenBLAS")
        w32n = lut32[codes] * s32
        fns["cached"] = (lambda: a32 @ w32n.T, w32n.nbytes, "NumPy/OpenBLAS fp32")
    return fns


def _interleaved_best_ms(fns: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Best time of each path, the paths taking turns (one warm-up each, then ``reps`` rounds), so that
    a burst of load from other processes hits every path alike instead of one."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return {k: v * 1e3 for k, v in best.items()}


def reps_for(m: int, n: int, k: int, reps: int) -> int:
    """More rounds for cheap shapes (up to 15), ``reps`` for shapes of 10^10 operations and more."""
    return max(reps, min(15, int(1e10 / (2.0 * m * n * k))))


def bench_shape(label: str, m: int, n: int, k: int, *, fmt: str = "e4m3", reps: int = 3,
                memory: bool = True) -> ShapeResult:
    a16, weights, a_inv = make_operands(m, n, k, fmt)
    res = ShapeResult(label, m, n, k)
    paths = _path_fns(a16, weights, a_inv)
    ms = _interleaved_best_ms({p: v[0] for p, v in paths.items()}, reps)
    for name, (fn, resident, note) in paths.items():
        traced, rss = _call_peaks(fn) if memory else (0, None)
        res.paths[name] = PathResult(ms[name], int(resident), int(traced), rss, note)
    return res


def default_shapes(quick: bool) -> list[tuple[str, int, int, int]]:
    """(label, M, N, K): the seed's 4096³ first, then model projections × M."""
    shapes = [("seed 4096³", 4096, 4096, 4096)]
    ms = (1, 16, 128) if quick else M_VALUES
    for model, projs in PROJECTIONS.items():
        for proj, (n, k) in projs.items():
            if quick and proj not in ("q_proj", "down_proj"):
                continue
            shapes += [(f"{model} {proj}", m, n, k) for m in ms]
    return shapes


def run(shapes, *, fmt: str = "e4m3", reps: int = 3, memory: bool = True,
        progress: Callable[[ShapeResult], None] | None = None) -> list[ShapeResult]:
    out = []
    for label, m, n, k in shapes:
        r = bench_shape(label, m, n, k, fmt=fmt, reps=reps_for(m, n, k, reps), memory=memory)
        out.append(r)
        if progress:
            progress(r)
    return out


def _mib(b: int | None) -> str:
    return "—" if b is None else f"{b / 2**20:.1f}"


def speed_table(results: list[ShapeResult]) -> list[str]:
    """Markdown: ms (effective TOPS) per path, then how many times faster fused is than each."""
    paths = [p for p in PATHS if all(p in r.paths for r in results)]
    head = "| shape | M | N | K | " + " | ".join(f"{p} ms (TOPS)" for p in paths)
    head += " | " + " | ".join(f"fused vs {p}" for p in paths[1:]) + " |"
    lines = [head, "|" + "---|" * (4 + 2 * len(paths) - 1)]
    for r in results:
        cells = [r.label, str(r.m), str(r.n), str(r.k)]
        cells += [f"{r.paths[p].ms:.3f} ({r.tops(p):.3f})" for p in paths]
        cells += [f"{r.ratio(p):.2f}×" for p in paths[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def memory_table(results: list[ShapeResult]) -> list[str]:
    paths = [p for p in PATHS if all(p in r.paths for r in results)]
    lines = ["| shape | M | " + " | ".join(f"{p} resident / traced / RSS MiB" for p in paths) + " |",
             "|" + "---|" * (2 + len(paths))]
    for r in results:
        cells = [r.label, str(r.m)]
        for p in paths:
            pr = r.paths[p]
            mem = (pr.resident_bytes, pr.workspace_traced, pr.workspace_rss)
            cells.append(" / ".join(_mib(b) for b in mem))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def to_json(results: list[ShapeResult]) -> list[dict]:
    out = []
    for r in results:
        out.append({"label": r.label, "m": r.m, "n": r.n, "k": r.k, "paths": {
            p: {"ms": v.ms, "tops": r.tops(p), "resident_bytes": v.resident_bytes,
                "workspace_traced_bytes": v.workspace_traced, "workspace_rss_bytes": v.workspace_rss,
                "note": v.note, "tier": "measured"} for p, v in r.paths.items()}})
    return out
