"""``npukit formats``: every number format on one deterministic weight matrix, side by side.

For each format the sample is quantized and dequantized with npukit.formats, and the table shows
the storage cost (bits per element including scales, bytes) and the error (RMSE, max |error|,
SQNR). Storage figures follow from each layout's spec; error figures are measured on the sample.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from npukit.cli import ui
from npukit.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

COLS = 256  # one Gemma-3n head_dim per row; also the TQ1_0/TQ2_0 block length


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("formats", help="compare number formats (FP8, MX, INT4, KV, ternary) on a sample")
    p.add_argument("--size", type=int, default=256 * COLS,
                   help=f"elements in the sample matrix, a multiple of {COLS} (default {256 * COLS})")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def sample(size: int, seed: int) -> np.ndarray:
    """Gaussian weights (σ = 1) of shape (size/256, 256) with 0.1% outliers at 10-30σ."""
    import numpy as np

    if size < COLS or size % COLS:
        raise ConfigError(f"--size must be a positive multiple of {COLS}, got {size}")
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((size // COLS, COLS)).astype(np.float32)
    n_out = max(1, size // 1000)
    idx = rng.choice(size, n_out, replace=False)
    w.reshape(-1)[idx] *= rng.uniform(10, 30, n_out).astype(np.float32)
    return w


def _fp8(fmt: str) -> Callable[[np.ndarray], tuple[np.ndarray, int]]:
    def go(w: np.ndarray) -> tuple[np.ndarray, int]:
        from npukit.formats import fp8

        c = fp8.encode(w, fmt, saturate=True)
        return fp8.decode(c, fmt), c.nbytes

    return go


def _mx(fmt: str) -> Callable[[np.ndarray], tuple[np.ndarray, int]]:
    def go(w: np.ndarray) -> tuple[np.ndarray, int]:
        from npukit.formats import mx

        q = mx.quantize(w, fmt)
        return q.dequantize(), mx.pack(q.elements, fmt).nbytes + q.scales.nbytes

    return go


def _int4(group: int | None) -> Callable[[np.ndarray], tuple[np.ndarray, int]]:
    def go(w: np.ndarray) -> tuple[np.ndarray, int]:
        from npukit.formats import int4

        q, s = int4.quantize_int4(w, group_size=group)
        return int4.dequantize_int4(q, s, group_size=group), int4.pack_int4(q).nbytes + s.nbytes

    return go


def _kv(bits: int) -> Callable[[np.ndarray], tuple[np.ndarray, int]]:
    def go(w: np.ndarray) -> tuple[np.ndarray, int]:
        from npukit.formats import int4, kvquant

        c, s = kvquant.quantize_kv(w, bits)
        stored = c.nbytes if bits == 8 else int4.pack_int4(c).nbytes
        return kvquant.dequantize_kv(c, s, bits), stored + s.nbytes

    return go


def _ternary_rows() -> list[tuple[str, str, Callable[[np.ndarray], tuple[np.ndarray, int]]]]:
    try:
        from npukit.formats import ternary
    except ImportError:  # written in another area; the showcase works without it
        return []

    def absmean(w: np.ndarray) -> tuple[np.ndarray, int]:
        import numpy as np

        t, s = ternary.quantize_absmean(w)
        return (t.astype(np.float64) / s).astype(np.float32), ternary.pack_base3(t).nbytes + 4

    def tq(kind: str) -> Callable[[np.ndarray], tuple[np.ndarray, int]]:
        def go(w: np.ndarray) -> tuple[np.ndarray, int]:
            data = ternary.to_gguf(w, kind)
            return ternary.from_gguf(data, kind, w.shape), data.nbytes

        return go

    return [("ternary", "absmean, base-3 5/byte, fp32 tensor scale", absmean),
            ("TQ1_0", "ggml, 256-blocks, fp16 absmax scale", tq("TQ1_0")),
            ("TQ2_0", "ggml, 256-blocks, fp16 absmax scale", tq("TQ2_0"))]


def rows_spec() -> list[tuple[str, str, Callable[[np.ndarray], tuple[np.ndarray, int]]]]:
    return [
        ("fp8 e4m3fn", "OCP E4M3FN, direct cast, saturating", _fp8("e4m3fn")),
        ("fp8 e5m2", "OCP E5M2, direct cast, saturating", _fp8("e5m2")),
        ("fp8 e4m3", "IEEE-style E4M3 (max 240), direct cast", _fp8("e4m3")),
        ("mxfp8_e4m3", "OCP MX, 32-blocks, E8M0 scale", _mx("mxfp8_e4m3")),
        ("mxfp8_e5m2", "OCP MX, 32-blocks, E8M0 scale", _mx("mxfp8_e5m2")),
        ("mxfp6_e2m3", "OCP MX, 32-blocks, E8M0 scale", _mx("mxfp6_e2m3")),
        ("mxfp6_e3m2", "OCP MX, 32-blocks, E8M0 scale", _mx("mxfp6_e3m2")),
        ("mxfp4_e2m1", "OCP MX, 32-blocks, E8M0 scale", _mx("mxfp4_e2m1")),
        ("mxint8", "OCP MX, 32-blocks, E8M0 scale", _mx("mxint8")),
        ("int4 per-channel", "symmetric amax/7, fp32 scale per row", _int4(None)),
        ("int4 group-32", "symmetric amax/7, fp32 scale per 32", _int4(32)),
        ("kv int8", "per token and head (256), fp32 scale", _kv(8)),
        ("kv int4", "per token and head (256), fp32 scale", _kv(4)),
        *_ternary_rows(),
    ]


def _metrics(w: np.ndarray, d: np.ndarray) -> tuple[float, float, float]:
    import numpy as np

    x = w.astype(np.float64)
    err = d.astype(np.float64) - x
    se = float(np.sum(err * err))
    rmse = math.sqrt(se / err.size)
    sqnr = math.inf if se == 0 else 10 * math.log10(float(np.sum(x * x)) / se)
    return rmse, float(np.max(np.abs(err))), sqnr


def evaluate(size: int, seed: int) -> dict[str, Any]:
    import numpy as np

    w = sample(size, seed)
    out = []
    for name, layout, fn in rows_spec():
        d, nbytes = fn(w)
        rmse, mx_err, sqnr = _metrics(w, d)
        out.append({"format": name, "layout": layout, "bits_per_element": 8 * nbytes / w.size,
                    "bytes": nbytes, "rmse": rmse, "max_abs_error": mx_err, "sqnr_db": sqnr})
    return {
        "sample": {"shape": list(w.shape), "seed": seed, "elements": w.size,
                   "distribution": "N(0,1) float32, 0.1% outliers x10-30",
                   "rms": float(np.sqrt(np.mean(w.astype(np.float64) ** 2)))},
        "evidence": {"storage": "derived from each format's layout (bytes incl. scales)",
                     "error": f"measured: quantize -> dequantize of the sample, seed {seed}"},
        "formats": out,
    }


def run(args: argparse.Namespace) -> int:
    res = evaluate(args.size, args.seed)
    if args.json:
        ui.emit_json(res)
        return 0
    s = res["sample"]
    # one line (< 100 columns): bits/bytes follow from the layouts, errors are measured on the sample
    print(f"npukit formats: {s['shape'][0]}x{s['shape'][1]} {s['distribution']}, seed {s['seed']}, "
          f"rms {s['rms']:.3f}; errors measured")
    rows = [[r["format"], f"{r['bits_per_element']:.4g}", r["bytes"], f"{r['rmse']:.3g}",
             f"{r['max_abs_error']:.3g}", f"{r['sqnr_db']:.1f}", r["layout"]] for r in res["formats"]]
    ui.table(rows, ["format", "bits/elem", "bytes", "RMSE", "max |err|", "SQNR dB", "layout"],
             align="lrrrrrl")
    return 0
