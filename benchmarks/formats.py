"""Decode/encode throughput of npukit.formats against a peer library doing the same job.

Run: ``python benchmarks/formats.py [--size N] [--repeats R] [--json]``.

Every row times one public npukit call and one peer call on the same input, after checking that
both produce bit-identical results (a faster wrong answer is not a result). Throughput is **GB/s of
output**: float32 values for decode, element codes (one uint8 per element, or the GGUF block bytes
for TQ1_0/TQ2_0) for encode. Each timing is the median of ``--repeats`` runs after one warm-up;
both sides allocate their outputs. Peers:

* FP8 and MX element types: ml_dtypes ``astype`` (MX: element astype times the E8M0 astype; encode
  also computes the spec's FLOOR scale in numpy, since astype alone has no block scale);
* MXINT8: numpy ``int8 -> float32`` astype (no library implements MXINT8);
* TQ1_0/TQ2_0: gguf-py's numpy ``gguf.quants.dequantize`` / ``quantize``.

All figures are tier ``measured`` (timed here); ratios are ``derived`` (npukit GB/s / peer GB/s).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from npukit.cli import ui
from npukit.evidence import Figure, Tier
from npukit.formats import fp8, mx
from npukit.sim.cpu import describe as machine_line

SOURCE = "benchmarks/formats.py"


@dataclass
class Case:
    fmt: str
    op: str  # "decode" | "encode"
    ours: Callable[[], Any]
    peer: Callable[[], Any]
    peer_name: str
    out_bytes: int
    same: Callable[[Any, Any], bool]


def _bits_equal(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f":
        na, nb = np.isnan(a), np.isnan(b)
        return bool(np.array_equal(na, nb)
                    and np.array_equal(a[~na].view(np.uint32), b.astype(np.float32)[~nb].view(np.uint32)))
    return bool(np.array_equal(a.view(np.uint8), b.view(np.uint8)))


def _sample(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    x[:: 997] *= 40  # outliers, as in real weights
    return x


FP8_PEERS = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e4m3": ml_dtypes.float8_e4m3}
MX_PEERS = {
    "mxfp8_e4m3": ml_dtypes.float8_e4m3fn,
    "mxfp8_e5m2": ml_dtypes.float8_e5m2,
    "mxfp6_e2m3": ml_dtypes.float6_e2m3fn,
    "mxfp6_e3m2": ml_dtypes.float6_e3m2fn,
    "mxfp4_e2m1": ml_dtypes.float4_e2m1fn,
    "mxint8": None,
}


def _fp8_cases(x: np.ndarray) -> list[Case]:
    cases = []
    for name, t in FP8_PEERS.items():
        codes = fp8.encode(x, name)
        cases.append(Case(f"fp8 {name}", "decode", lambda c=codes, f=name: fp8.decode(c, f),
                          lambda c=codes, t=t: c.view(t).astype(np.float32), "ml_dtypes astype",
                          codes.size * 4, _bits_equal))
        cases.append(Case(f"fp8 {name}", "encode", lambda f=name: fp8.encode(x, f, saturate=False),
                          lambda t=t: x.astype(t), "ml_dtypes astype", x.size, _bits_equal))
    return cases


def _mx_peer_decode(el: np.ndarray, sc: np.ndarray, t: Any) -> np.ndarray:
    ev = el.view(np.int8).astype(np.float32) / np.float32(64) if t is None else el.view(t).astype(np.float32)
    x = sc.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    return (ev.reshape(-1, 32) * x[:, None]).reshape(el.shape)


def _mx_peer_encode(x: np.ndarray, fmt: str, t: Any) -> np.ndarray:
    s = mx.spec(fmt)
    xb = x.reshape(-1, 32)
    _, e = np.frexp(np.abs(xb).max(axis=1))
    shared = np.clip(e - 1 - s.emax, -127, 127)
    v = xb * np.exp2(-shared.astype(np.float32))[:, None]
    if t is None:
        return np.clip(np.rint(v * 64), -127, 127).astype(np.int8).reshape(x.shape)
    m = float(ml_dtypes.finfo(t).max)
    return np.clip(v, -m, m).astype(t).reshape(x.shape)


def _mx_cases(x: np.ndarray) -> list[Case]:
    cases = []
    for name, t in MX_PEERS.items():
        q = mx.quantize(x, name)
        el, sc = q.elements, q.scales
        peer = "numpy astype" if t is None else "ml_dtypes astype"
        cases.append(Case(name, "decode", lambda el=el, sc=sc, f=name: mx.dequantize(el, sc, f),
                          lambda el=el, sc=sc, t=t: _mx_peer_decode(el, sc, t), peer, el.size * 4,
                          _bits_equal))
        cases.append(Case(name, "encode", lambda f=name: mx.quantize(x, f).elements,
                          lambda f=name, t=t: _mx_peer_encode(x, f, t), f"numpy scale + {peer}", x.size,
                          _bits_equal))
    return cases


def _ternary_cases(x: np.ndarray) -> list[Case]:
    try:
        from npukit.formats import ternary
    except ImportError:  # the ternary module is another area's; skip until it exists
        return []
    import gguf
    from gguf.quants import dequantize, quantize

    w = x[: x.size // 4096 * 4096].reshape(-1, 4096)
    cases = []
    for kind in ("TQ1_0", "TQ2_0"):
        gt = getattr(gguf.GGMLQuantizationType, kind)
        data = ternary.to_gguf(w, kind)
        cases.append(Case(kind, "decode", lambda d=data, k=kind: ternary.from_gguf(d, k, w.shape),
                          lambda d=data, gt=gt: dequantize(d, gt), "gguf.quants (numpy)", w.size * 4,
                          _bits_equal))
        cases.append(Case(kind, "encode", lambda k=kind: ternary.to_gguf(w, k),
                          lambda gt=gt: quantize(w, gt), "gguf.quants (numpy)", data.size, _bits_equal))
    return cases


def _median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up: lazily built tables, page faults
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(size: int, repeats: int, progress: bool | None = None) -> dict[str, Any]:
    size = max(4096, size // 4096 * 4096)
    x = _sample(size, seed=0)
    cases = _fp8_cases(x) + _mx_cases(x) + _ternary_cases(x)
    machine = f"{platform.machine()} {platform.processor() or platform.system()}, {os.cpu_count()} CPUs"
    src = f"{SOURCE}, median of {repeats}, {size} elements, {machine}"
    rows = []
    with ui.Progress(len(cases), "formats bench", enabled=progress) as bar:
        for c in cases:
            if not c.same(c.ours(), c.peer()):
                raise AssertionError(f"{c.fmt} {c.op}: npukit and {c.peer_name} disagree")
            t_ours = _median_seconds(c.ours, repeats)
            t_peer = _median_seconds(c.peer, repeats)
            ours = Figure(c.out_bytes / t_ours / 1e9, "GB/s", Tier.MEASURED, src)
            peer = Figure(c.out_bytes / t_peer / 1e9, "GB/s", Tier.MEASURED, f"{c.peer_name}; {src}")
            ratio = Figure(ours.value / peer.value, "x", Tier.weakest(ours.tier, peer.tier),
                           "npukit GB/s / peer GB/s")
            rows.append({"format": c.fmt, "op": c.op, "output": "float32" if c.op == "decode" else "codes",
                         "npukit": ours, "peer_name": c.peer_name, "peer": peer, "ratio": ratio})
            bar.update(note=f"{c.fmt} {c.op}")
    return {"size": size, "repeats": repeats, "machine": machine, "unit": "GB/s of output", "rows": rows}


def main(argv: list[str] | None = None) -> int:
    print(machine_line(), file=sys.stderr)  # the CPU and kernel paths measured
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1 << 22, help="elements per tensor (default 4Mi)")
    p.add_argument("--repeats", type=int, default=7, help="timed runs per call; the median is kept")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    res = run(args.size, max(1, args.repeats), progress=None if not args.json else False)
    if args.json:
        ui.emit_json(res)
        return 0
    print(f"npukit formats benchmark: {res['size']} elements, median of {res['repeats']}, "
          f"{res['machine']}; GB/s of output (decode: float32, encode: codes); tier measured")
    ui.table([[r["format"], r["op"], f"{r['npukit'].value:.2f}", r["peer_name"], f"{r['peer'].value:.2f}",
               f"{r['ratio'].value:.2f}"] for r in res["rows"]],
             ["format", "op", "npukit GB/s", "peer", "peer GB/s", "ratio"], align="llrlrr")
    slow = [f"{r['format']}" for r in res["rows"] if r["op"] == "decode" and r["ratio"].value < 1.0]
    if slow:
        print(f"decode slower than its peer: {', '.join(slow)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
