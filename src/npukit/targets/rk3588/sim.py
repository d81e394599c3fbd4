"""Functional simulation of an rk3588 graph with the NPU arithmetic contract (``numerics``).

`run_graph` executes every node either whole (the untiled NumPy reference of the contract) or tile
by tile, walking the very task list the timing adapter schedules (`npukit.targets.rk3588.tasks`).
The contract makes the two bit-identical; the tests check it on real weights.

``stats`` (optional) collects per node the peak finite |output|, the count of non-finite outputs
and, for LayerNorms, the peak |x - mean| (the value whose fp16 square overflows at 256).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npukit.targets.rk3588 import numerics as nx
from npukit.targets.rk3588.graph import Graph, Node
from npukit.targets.rk3588.hw import RK3588HW
from npukit.targets.rk3588.tasks import segments, tasks


def _bias(node: Node) -> np.ndarray:
    b = node.params["b"]
    e = node.attrs.get("bias_exp", 0)
    return nx.scale_pow2(b, e) if e else b


def _eps(node: Node) -> float:
    return float(np.ldexp(node.attrs["eps"], 2 * node.attrs.get("eps_exp", 0)))


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    t, h = x.shape
    return np.ascontiguousarray(x.reshape(t, heads, h // heads).transpose(1, 0, 2))


def _whole(node: Node, args: list[np.ndarray]) -> np.ndarray:
    op = node.op
    if op == "matmul" and node.attrs.get("dtype") == "int8":
        xq = nx.quantize_act(args[0], node.attrs["sa"])
        acc = nx.int8_acc(xq, node.params["wq"])
        return nx.int8_out(acc, node.attrs["sa"], node.params["sw"], _bias(node))
    if op == "matmul":
        return nx.bias_out(nx.seq_acc(args[0], node.params["w"]), _bias(node))
    if op == "attention":
        hd = node.attrs["heads"]
        q, k, v = (_heads(a, hd) for a in args)
        out = np.empty(node.shape, np.float16)
        for s0, s1 in segments(node):
            s = nx.attention_scores(q[:, s0:s1], k[:, s0:s1], node.attrs["scale"])
            e = nx.softmax_exp(s, s.max(-1))
            o = nx.attention_finish(nx.seq_acc(e, v[:, s0:s1]), nx.row_sum(e))
            out[s0:s1] = o.transpose(1, 0, 2).reshape(s1 - s0, -1)
        return out
    return _vector(node, args)


def _vector(node: Node, args: list[np.ndarray]) -> np.ndarray:
    op = node.op
    if op == "layernorm":
        return nx.layernorm(args[0], node.params["g"], node.params["b"], _eps(node))
    if op == "gelu":
        return nx.lut(node.attrs["table"], args[0])
    if op == "add":
        return nx.add(args[0], args[1])
    if op == "scale":
        return nx.scale_pow2(args[0], node.attrs["exp"])
    if op == "barrier":
        return args[0]
    raise ValueError(f"unknown op {op!r}")


def _tiled(node: Node, g: Graph, args: list[np.ndarray], hw: RK3588HW) -> np.ndarray:
    out = np.empty(node.shape, np.float16)
    if node.op == "matmul":
        int8 = node.attrs.get("dtype") == "int8"
        w, b = (node.params["wq"] if int8 else node.params["w"]), _bias(node)
        x = nx.quantize_act(args[0], node.attrs["sa"]) if int8 else args[0]
        acc: dict[tuple, np.ndarray] = {}
        for t in tasks(node, g, node.tiling, hw):
            (m0, m1), (n0, n1), (k0, k1) = t.sl
            key = (m0, n0)
            step = nx.int8_acc if int8 else nx.seq_acc
            acc[key] = step(x[m0:m1, k0:k1], w[k0:k1, n0:n1], acc.get(key))
            if t.last and int8:
                sw = node.params["sw"][n0:n1]
                out[m0:m1, n0:n1] = nx.int8_out(acc.pop(key), node.attrs["sa"], sw, b[n0:n1])
            elif t.last:
                out[m0:m1, n0:n1] = nx.bias_out(acc.pop(key), b[n0:n1])
        return out
    if node.op == "attention":
        return _tiled_attention(node, g, args, hw, out)
    for t in tasks(node, g, node.tiling, hw):
        (r0, r1), = t.sl
        out[r0:r1] = _vector(node, [a[r0:r1] for a in args])
    return out


def _tiled_attention(node: Node, g: Graph, args: list[np.ndarray], hw: RK3588HW,
                     out: np.ndarray) -> np.ndarray:
    hd = node.attrs["heads"]
    q, k, v = (_heads(a, hd) for a in args)
    d = q.shape[-1]
    state: dict[tuple, list[Any]] = {}  # (head, q0) -> [row max, row sum, Σ e·v]
    for t in tasks(node, g, node.tiling, hw):
        (h, _), (q0, q1), (k0, k1), (phase, _) = t.sl
        st = state.setdefault((h, q0), [None, None, None])
        s = nx.attention_scores(q[h, q0:q1], k[h, k0:k1], node.attrs["scale"])
        if phase == 0:  # two-pass softmax, pass 1: the row max over key blocks
            bm = s.max(-1)
            st[0] = bm if st[0] is None else np.maximum(st[0], bm)
            continue
        if st[0] is None:  # one key block: the max comes with the scores
            st[0] = s.max(-1)
        e = nx.softmax_exp(s, st[0])
        st[1] = nx.row_sum(e, st[1])
        st[2] = nx.seq_acc(e, v[h, k0:k1], st[2])
        if t.last:
            out[q0:q1, h * d:(h + 1) * d] = nx.attention_finish(st[2], st[1])
            del state[(h, q0)]
    return out


def run_graph(g: Graph, x: np.ndarray, hw: RK3588HW, tiled: bool = True,
              stats: dict[str, dict[str, float]] | None = None) -> dict[str, np.ndarray]:
    """Execute ``g`` on input ``x`` ([T, H], cast to fp16); return every tensor by name."""
    env: dict[str, np.ndarray] = {"x": nx.f16(x)}
    for node in g.nodes:
        args = [env[i] for i in node.inputs]
        if tiled and node.tiling and node.op != "barrier":
            y = _tiled(node, g, args, hw)
        else:
            y = _whole(node, args)
        env[node.output] = y
        if stats is not None:
            _note(stats, node, args, y)
    return env


def _note(stats: dict[str, dict[str, float]], node: Node, args: list[np.ndarray], y: np.ndarray) -> None:
    y32 = y.astype(np.float32)
    finite = np.isfinite(y32)
    rec = stats.setdefault(node.name, {"peak": 0.0, "nonfinite": 0, "dev_peak": 0.0})
    rec["peak"] = max(rec["peak"], float(np.abs(y32[finite]).max()) if finite.any() else 0.0)
    rec["nonfinite"] += int((~finite).sum())
    if node.op == "layernorm":
        x = args[0].astype(np.float64)
        dev = np.abs(x - x.mean(-1, keepdims=True))
        rec["dev_peak"] = max(rec["dev_peak"], float(np.nanmax(np.where(np.isfinite(dev), dev, 0))))


def output(g: Graph, env: dict[str, np.ndarray]) -> np.ndarray:
    return env[g.outputs[0]]
