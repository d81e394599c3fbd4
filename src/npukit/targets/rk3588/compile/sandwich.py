"""Sandwich scaling: a power-of-two domain shift where calibration says an intermediate would
overflow fp16, applied only there and undone exactly.

SHARD scaled the whole network by ×0.1 on the host and ×10 after (not exact in binary floating
point). Here the calibration run (float32, the same graph) gives each LayerNorm the peak |x - mean|
of its input; where that squared would exceed ``margin × 65504`` (the contract stores d·d in fp16),
a ``scale`` node multiplies the input by ``2^-k`` and the LayerNorm's epsilon by ``2^-2k``. LayerNorm
is invariant to the scale, so its output is the unscaled result — the shift is undone by the op
itself, with no post-scale. The same check on every other intermediate (peak |value| against fp16's
range) reports sites the pass cannot fix (none in the encoders here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from npukit.errors import NpukitError
from npukit.models.encoder import gelu_fp32, layernorm_fp32
from npukit.targets.rk3588.graph import Graph, Node
from npukit.targets.rk3588.numerics import F16_MAX

MARGIN = 0.5  # keep calibrated peaks under half of fp16's range (inputs beyond the calibration set)


class SandwichError(NpukitError):
    """An intermediate overflows fp16 where no scale-invariant op can absorb a domain shift."""


@dataclass
class Site:
    node: str
    peak: float  # calibrated peak of the quantity that overflows
    quantity: str
    exp: int  # the applied shift: input x 2^exp


def calibrate(g: Graph, inputs: list[np.ndarray]) -> dict[str, dict[str, float]]:
    """Run ``g`` in float32 on the inputs (one sequence each, whatever ``g``'s packing; run packed in
    one pass, attention inside each input); per node the peak |output| and, for LayerNorms, the
    peak |x - mean| of the input."""
    stats: dict[str, dict[str, float]] = {}
    w32 = {n.name: n.params["w"].astype(np.float32) for n in g.nodes if n.op == "matmul"}
    if inputs:
        bounds = np.cumsum([0] + [len(x) for x in inputs])
        segs = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
        env = {"x": np.concatenate(inputs).astype(np.float32)}
        for n in g.nodes:
            args = [env[i] for i in n.inputs]
            y = _fp32(n, args, w32.get(n.name), segs)
            rec = stats.setdefault(n.name, {"peak": 0.0, "dev_peak": 0.0})
            rec["peak"] = max(rec["peak"], float(np.abs(y).max()))
            if n.op == "layernorm":
                dev = np.abs(args[0] - args[0].mean(-1, keepdims=True))
                rec["dev_peak"] = max(rec["dev_peak"], float(dev.max()))
            env[n.output] = y
        stats["x"] = {"peak": float(np.abs(env["x"]).max()), "dev_peak": 0.0}
    return stats


def _fp32(n: Node, args: list[np.ndarray], w32: np.ndarray | None, segs: list[tuple[int, int]]) -> np.ndarray:
    if n.op == "matmul":
        return args[0] @ w32 + n.params["b"].astype(np.float32)
    if n.op == "layernorm":
        return layernorm_fp32(args[0], n.params["g"].astype(np.float32), n.params["b"].astype(np.float32),
                              n.attrs["eps"])
    if n.op == "gelu":
        return gelu_fp32(args[0], n.attrs["table"]).astype(np.float32)
    if n.op == "add":
        return args[0] + args[1]
    if n.op == "scale":
        return np.ldexp(args[0], n.attrs["exp"]).astype(np.float32)
    if n.op == "barrier":
        return args[0]
    if n.op == "attention":
        out = np.empty(args[0].shape, np.float32)
        hd = n.attrs["heads"]
        q, k, v = (a.reshape(a.shape[0], hd, -1).transpose(1, 0, 2) for a in args)
        for s0, s1 in segs:
            s = q[:, s0:s1] @ k[:, s0:s1].transpose(0, 2, 1) * np.float32(n.attrs["scale"])
            e = np.exp(s - s.max(-1, keepdims=True))
            o = (e / e.sum(-1, keepdims=True)) @ v[:, s0:s1]
            out[s0:s1] = o.transpose(1, 0, 2).reshape(s1 - s0, -1)
        return out
    raise ValueError(n.op)


def plan_sites(g: Graph, stats: dict[str, dict[str, float]], margin: float = MARGIN) -> list[Site]:
    """Where a shift is needed and how large (the smallest power of two that brings the peak under)."""
    sites = []
    limit = F16_MAX * margin
    for n in g.nodes:
        rec = stats.get(n.name)
        if rec is None:
            continue
        if n.op == "layernorm" and rec["dev_peak"] ** 2 > limit:
            k = math.ceil(math.log2(rec["dev_peak"] / math.sqrt(limit)))
            sites.append(Site(n.name, rec["dev_peak"], "|x - mean| (its fp16 square)", -k))
        elif rec["peak"] > limit:
            raise SandwichError(f"sandwich: {n.name} ({n.op}) peaks at {rec['peak']:.4g}, beyond "
                                f"{margin:g} x fp16 max; no scale-invariant op absorbs a shift there")
    return sites


def apply_sandwich(g: Graph, sites: list[Site]) -> Graph:
    """Insert ``scale`` nodes before the LayerNorms named in ``sites`` (eps scaled to match)."""
    by_name = {s.node: s for s in sites}
    out: list[Node] = []
    for n in g.nodes:
        s = by_name.get(n.name)
        if s is not None:
            name = f"{n.name}.sandwich"
            out.append(Node(name, "scale", [n.inputs[0]], name, g.shape(n.inputs[0]),
                            {"block": n.block, "exp": s.exp, "sandwich_for": n.name}))
            n.inputs = [name]
            n.attrs["eps_exp"] = s.exp
        out.append(n)
    g.nodes = out
    return g
