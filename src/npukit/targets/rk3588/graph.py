"""A small graph IR for encoders on the rk3588 NPU.

A `Graph` is a topologically ordered list of `Node`s over named tensors (one input sequence of
``T`` tokens; the host does embeddings, pooling and normalization). Ops:

``matmul`` (CNA: x[T,K] @ w[K,N] + b), ``attention`` (q, k, v -> per-head softmax(q k^T / sqrt d) v),
``add``, ``layernorm``, ``gelu`` (vector unit), ``scale`` (×2^e, the sandwich), ``barrier`` (identity;
a fusion barrier: nothing is fused across it and the tiles of its producer stay separate).

Passes (``npukit.targets.rk3588.compile``) annotate nodes (``tiling``, ``fused``) or insert nodes
(``scale``, ``barrier``); the functional simulator runs any of these graphs.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npukit.models.encoder import Encoder
from npukit.targets.rk3588.numerics import f16

VECTOR_OPS = ("add", "layernorm", "gelu", "scale")
CNA_OPS = ("matmul",)


@dataclass
class Node:
    name: str
    op: str
    inputs: list[str]
    output: str
    shape: tuple[int, ...]  # output shape
    attrs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, np.ndarray] = field(default_factory=dict)
    tiling: dict[str, int] | None = None  # set by the tiling pass
    fused_into: str | None = None  # set by the vendor fuser: the group this op was merged into

    @property
    def block(self) -> str:
        return self.attrs.get("block", "")

    def describe(self, g: Graph) -> str:
        shapes = " x ".join("[" + "x".join(map(str, g.shape(i))) + "]" for i in self.inputs)
        if self.op == "matmul":
            shapes += " x [" + "x".join(map(str, self.params["w"].shape)) + "]"
        return f"{self.op} {shapes}".strip()


@dataclass
class Graph:
    name: str
    inputs: dict[str, tuple[int, ...]]
    nodes: list[Node]
    outputs: list[str]
    meta: dict[str, Any] = field(default_factory=dict)

    def shape(self, tensor: str) -> tuple[int, ...]:
        if tensor in self.inputs:
            return self.inputs[tensor]
        return self.producer(tensor).shape

    def producer(self, tensor: str) -> Node:
        for n in self.nodes:
            if n.output == tensor:
                return n
        raise KeyError(tensor)

    def consumers(self, tensor: str) -> list[Node]:
        return [n for n in self.nodes if tensor in n.inputs]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def copy(self) -> Graph:
        nodes = [Node(n.name, n.op, list(n.inputs), n.output, n.shape, dict(n.attrs), dict(n.params),
                      dict(n.tiling) if n.tiling else None, n.fused_into) for n in self.nodes]
        return Graph(self.name, dict(self.inputs), nodes, list(self.outputs), dict(self.meta))

    def rename_input(self, old: str, new: str, only: list[Node]) -> None:
        for n in only:
            n.inputs = [new if i == old else i for i in n.inputs]

    def summary(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.op] = out.get(n.op, 0) + 1
        return out


def _mm(name: str, x: str, w: np.ndarray, b: np.ndarray, t: int, block: str) -> Node:
    """A matmul node with HF's [out, in] weight stored as fp16 [in, out]."""
    return Node(name, "matmul", [x], name, (t, w.shape[0]), {"block": block},
                {"w": f16(np.ascontiguousarray(w.T)), "b": f16(b)})


def build_graph(enc: Encoder, seq_len: int, segments: list[tuple[int, int]] | None = None) -> Graph:
    """The encoder stack for one input of ``seq_len`` tokens (embeddings and pooling stay on the host).

    ``segments`` packs several inputs into one sequence: attention stays inside each [start, end)
    segment (block-diagonal), every other op is row-wise, so each input's rows are computed exactly
    as if it ran alone.
    """
    c = enc.config
    segs = [tuple(s) for s in (segments or [(0, seq_len)])]
    if segs[0][0] != 0 or segs[-1][1] != seq_len or any(a[1] != b[0] for a, b in itertools.pairwise(segs)):
        raise ValueError(f"segments {segs} do not tile [0, {seq_len})")
    t, h = seq_len, c.hidden
    nodes: list[Node] = []
    x = "x"
    gelu = "gelu_tanh" if c.act == "gelu_tanh" else "gelu"
    for i, w in enumerate(enc.layers):
        p, ba, bm = f"layer{i}", f"layer{i}.attn", f"layer{i}.mlp"
        src = x
        if c.pre_norm:
            nodes.append(Node(f"{p}.ln1", "layernorm", [x], f"{p}.ln1", (t, h), {"block": ba, "eps": c.eps},
                              {"g": f16(w["ln1_g"]), "b": f16(w["ln1_b"])}))
            src = f"{p}.ln1"
        for part in "qkv":
            nodes.append(_mm(f"{p}.{part}", src, w[f"{part}_w"], w[f"{part}_b"], t, ba))
        nodes.append(Node(f"{p}.attention", "attention", [f"{p}.q", f"{p}.k", f"{p}.v"], f"{p}.attention",
                          (t, h), {"block": ba, "heads": c.heads, "head_dim": c.head_dim,
                                   "scale": 1.0 / math.sqrt(c.head_dim), "segments": segs}))
        nodes.append(_mm(f"{p}.o", f"{p}.attention", w["o_w"], w["o_b"], t, ba))
        nodes.append(Node(f"{p}.attn_residual", "add", [x, f"{p}.o"], f"{p}.attn_residual", (t, h),
                          {"block": ba}))
        x = f"{p}.attn_residual"
        if c.pre_norm:
            nodes.append(Node(f"{p}.ln2", "layernorm", [x], f"{p}.ln2", (t, h), {"block": bm, "eps": c.eps},
                              {"g": f16(w["ln2_g"]), "b": f16(w["ln2_b"])}))
            src = f"{p}.ln2"
        else:
            nodes.append(Node(f"{p}.ln1", "layernorm", [x], f"{p}.ln1", (t, h), {"block": ba, "eps": c.eps},
                              {"g": f16(w["ln1_g"]), "b": f16(w["ln1_b"])}))
            x = src = f"{p}.ln1"
        nodes.append(_mm(f"{p}.fc1", src, w["fc1_w"], w["fc1_b"], t, bm))
        nodes.append(Node(f"{p}.gelu", "gelu", [f"{p}.fc1"], f"{p}.gelu", (t, c.intermediate),
                          {"block": bm, "table": gelu}))
        nodes.append(_mm(f"{p}.fc2", f"{p}.gelu", w["fc2_w"], w["fc2_b"], t, bm))
        nodes.append(Node(f"{p}.mlp_residual", "add", [x, f"{p}.fc2"], f"{p}.mlp_residual", (t, h),
                          {"block": bm}))
        x = f"{p}.mlp_residual"
        if not c.pre_norm:
            nodes.append(Node(f"{p}.ln2", "layernorm", [x], f"{p}.ln2", (t, h), {"block": bm, "eps": c.eps},
                              {"g": f16(w["ln2_g"]), "b": f16(w["ln2_b"])}))
            x = f"{p}.ln2"
    if enc.final_ln is not None:
        nodes.append(Node("post_layernorm", "layernorm", [x], "post_layernorm", (t, h),
                          {"block": f"layer{c.layers - 1}.mlp", "eps": c.eps},
                          {"g": f16(enc.final_ln[0]), "b": f16(enc.final_ln[1])}))
        x = "post_layernorm"
    return Graph(enc.name, {"x": (t, h)}, nodes, [x], {"family": c.family, "seq_len": t,
                                                       "layers": c.layers, "hidden": h})
