"""Tiles of one op as NPU tasks: what each touches, computes and moves, and what it needs on chip.

A tiling is a small dict per op kind:

* ``matmul``: ``{"m", "n", "k", "order"}`` — row, output-channel and input-channel blocks; ``order`` 0
  walks n, k, m (a weight tile stays in the CBUF while feature tiles stream), 1 walks m, n, k (a
  feature tile stays, weights stream). K passes of one output tile run in ascending K order.
* ``attention``: ``{"q", "kv"}`` — query and key blocks per head; ``kv`` < T means the two-pass
  softmax (phase 0: row max over key blocks, phase 1: exp, sum and Σ e·v).
* vector ops: ``{"r"}`` — rows per tile (a LayerNorm needs whole rows).

`tasks` enumerates the tiles in execution order (the functional simulator and the timing adapter
walk the same list); `totals` gives the same sums in closed form for the tile chooser; `working_set`
is what the placement check compares with the CBUF banks and the 32 KB scratchpad.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from npukit.targets.rk3588.graph import Graph, Node
from npukit.targets.rk3588.hw import RK3588HW

F16 = 2
F32 = 4
VEC_OPS_PER_ELEM = {"layernorm": 6, "gelu": 1, "add": 1, "scale": 1, "barrier": 0}


@dataclass(frozen=True)
class Task:
    node: str
    kind: str  # "cna" | "vec" | "attn"
    sl: tuple[tuple[int, int], ...]  # matmul: m, n, k; attention: head, q, kv, (phase, 0); vector: rows
    macs: int
    vec_elems: int
    dma_in: int  # bytes DMA'd into the core for this task
    dma_out: int
    last: bool = True  # matmul: the last K pass of its output tile; attention: the last key block
    dma_w: int = 0  # of dma_in, bytes of weights and bias (always from DRAM)


@dataclass(frozen=True)
class WorkingSet:
    cbuf_banks: int  # CBUF banks in use (features + weights)
    k_pass: int  # input channels in one CNA pass
    scratch_bytes: int  # vector scratchpad bytes
    detail: str


def _blocks(n: int, b: int, start: int = 0) -> list[tuple[int, int]]:
    return [(i, min(i + b, start + n)) for i in range(start, start + n, b)]


def segments(node: Node) -> list[tuple[int, int]]:
    return node.attrs.get("segments") or [(0, node.shape[0])]


def weight_bytes(node: Node) -> int:
    """Bytes per weight: 1 for an int8 (w8a8) matmul, 2 for fp16."""
    return 1 if node.attrs.get("dtype") == "int8" else F16


def _row_bytes(node: Node, g: Graph) -> tuple[int, int]:
    """(input bytes, output bytes) per row of a vector op."""
    ins = sum(g.shape(i)[-1] for i in node.inputs) * F16
    return ins, node.shape[-1] * F16


def full_tiling(node: Node, g: Graph) -> dict[str, int]:
    """The untiled op as one tile (what the vendor compiler tries to place)."""
    t = node.shape[0]
    if node.op == "matmul":
        k, n = node.params["w"].shape
        return {"m": t, "n": n, "k": k, "order": 0}
    if node.op == "attention":
        longest = max(b - a for a, b in segments(node))
        return {"q": longest, "kv": longest, "whole": 1}
    return {"r": t}


def working_set(node: Node, g: Graph, hw: RK3588HW, tiling: dict[str, int] | None) -> WorkingSet:
    tl = tiling or full_tiling(node, g)
    bank = hw.bank_bytes
    if node.op == "matmul":
        mb, nb, kb = tl["m"], tl["n"], tl["k"]
        mpad = -(-mb // hw.core.m_align) * hw.core.m_align
        fd = math.ceil(mpad * kb * F16 / bank)
        wt = math.ceil(kb * nb * weight_bytes(node) / bank)
        return WorkingSet(fd + wt, kb, 0, f"features {mpad}x{kb} fp16 = {fd} banks, weights {kb}x{nb} fp16 = "
                                         f"{wt} banks")
    if node.op == "attention":
        heads, d = node.attrs["heads"], node.attrs["head_dim"]
        t = max(b - a for a, b in segments(node))
        qb, kb = tl["q"], tl["kv"]
        if tl.get("whole"):  # the vendor compiler's SDPA: every head's score matrix at once
            return WorkingSet(0, d, heads * t * t * F16,
                              f"scores {heads}x{t}x{t} fp16 for the fused softmax")
        kv_banks = math.ceil(kb * d * F16 / bank)
        banks = math.ceil(qb * d * F16 / bank) + 2 * kv_banks + math.ceil(qb * kb * F16 / bank)
        return WorkingSet(banks, d, qb * kb * F16 + qb * 2 * F32,
                          f"score tile {qb}x{kb} fp16 + row max/sum fp32")
    rin, rout = _row_bytes(node, g)
    rb = tl["r"]
    stats = rb * 2 * F32 if node.op == "layernorm" else 0
    return WorkingSet(0, 0, rb * (rin + rout) + stats,
                      f"{rb} rows x ({rin} B in + {rout} B out)" + (" + row stats" if stats else ""))


def fits(ws: WorkingSet, hw: RK3588HW) -> bool:
    return ws.cbuf_banks <= hw.banks and ws.k_pass <= hw.k_per_pass and ws.scratch_bytes <= hw.scratchpad


def tasks(node: Node, g: Graph, tiling: dict[str, int] | None, hw: RK3588HW) -> Iterator[Task]:
    tl = tiling or full_tiling(node, g)
    if node.op == "matmul":
        yield from _matmul_tasks(node, tl)
    elif node.op == "attention":
        yield from _attention_tasks(node, tl, hw)
    elif node.op == "barrier":
        return
    else:
        rin, rout = _row_bytes(node, g)
        width = node.shape[-1]
        for r0, r1 in _blocks(node.shape[0], tl["r"]):
            rows = r1 - r0
            yield Task(node.name, "vec", ((r0, r1),), 0, rows * width * VEC_OPS_PER_ELEM[node.op],
                       rows * rin, rows * rout)


def _matmul_tasks(node: Node, tl: dict[str, int]) -> Iterator[Task]:
    t = node.shape[0]
    kdim, ndim = node.params["w"].shape
    mbl, nbl, kbl = _blocks(t, tl["m"]), _blocks(ndim, tl["n"]), _blocks(kdim, tl["k"])
    last_k = len(kbl) - 1
    wb = weight_bytes(node)

    def one(m: tuple[int, int], n: tuple[int, int], ki: int, load_w: bool, load_f: bool) -> Task:
        k = kbl[ki]
        mm, nn, kk = m[1] - m[0], n[1] - n[0], k[1] - k[0]
        w = (kk * nn * wb if load_w else 0) + (0 if ki > 0 else nn * F16)  # weights, bias
        din = (mm * kk * F16 if load_f else 0) + w + (mm * nn * F32 if ki > 0 else 0)  # + partial sums in
        dout = mm * nn * (F16 if ki == last_k else F32)
        return Task(node.name, "cna", (m, n, k), mm * nn * kk, 0, din, dout, ki == last_k, w)

    if tl.get("order", 0) == 0:
        for n in nbl:
            for ki in range(len(kbl)):
                for mi, m in enumerate(mbl):
                    yield one(m, n, ki, mi == 0, True)
    else:
        for m in mbl:
            for n in nbl:
                for ki in range(len(kbl)):
                    yield one(m, n, ki, True, n == nbl[0] or len(kbl) > 1)


def _attention_tasks(node: Node, tl: dict[str, int], hw: RK3588HW) -> Iterator[Task]:
    heads, d = node.attrs["heads"], node.attrs["head_dim"]
    for s0, s1 in segments(node):
        yield from _segment_tasks(node, tl, heads, d, s0, s1)


def _segment_tasks(node: Node, tl: dict[str, int], heads: int, d: int, s0: int, s1: int) -> Iterator[Task]:
    qbl, kbl = _blocks(s1 - s0, tl["q"], s0), _blocks(s1 - s0, tl["kv"], s0)
    two_pass = len(kbl) > 1
    for h in range(heads):
        for qi, q in enumerate(qbl):
            qq = q[1] - q[0]
            for phase in ((0, 1) if two_pass else (1,)):
                for ki, k in enumerate(kbl):
                    kk = k[1] - k[0]
                    if two_pass:  # phase 0 streams K, phase 1 streams K and V, per query block
                        kv_bytes = kk * d * F16 * (1 if phase == 0 else 2)
                    else:  # one key block: K and V of the head stay in the CBUF across query blocks
                        kv_bytes = kk * d * F16 * 2 if qi == 0 else 0
                    q_bytes = qq * d * F16 if ki == 0 and phase == (0 if two_pass else 1) else 0
                    last = phase == 1 and ki == len(kbl) - 1
                    macs = qq * kk * d * (1 if phase == 0 else 2)
                    vec = qq * kk * (1 if phase == 0 else 4)
                    yield Task(node.name, "attn", ((h, h + 1), q, k, (phase, 0)), macs, vec,
                               q_bytes + kv_bytes, qq * d * F16 if last else 0, last)


def totals(node: Node, g: Graph, tiling: dict[str, int] | None, hw: RK3588HW) -> tuple[int, int, int, int]:
    """(tasks, DMA bytes in+out, MACs, vector elements) — closed form of summing `tasks`."""
    tl = tiling or full_tiling(node, g)
    if node.op == "matmul":
        return _matmul_totals(node, tl)
    if node.op == "attention":
        return _attention_totals(node, tl, hw)
    if node.op == "barrier":
        return 0, 0, 0, 0
    rin, rout = _row_bytes(node, g)
    rows, width = node.shape[0], node.shape[-1]
    return (math.ceil(rows / tl["r"]), rows * (rin + rout), 0, rows * width * VEC_OPS_PER_ELEM[node.op])


def weights_moved(node: Node, tiling: dict[str, int] | None) -> int:
    """Of `totals`' bytes, those of weights and biases (the `Task.dma_w` sum), in closed form."""
    if node.op != "matmul":
        return 0
    tl = tiling or {"m": node.shape[0], "order": 0}
    kdim, ndim = node.params["w"].shape
    nm = math.ceil(node.shape[0] / tl["m"])
    return kdim * ndim * weight_bytes(node) * (nm if tl.get("order", 0) == 1 else 1) + ndim * F16 * nm


def _matmul_totals(node: Node, tl: dict[str, int]) -> tuple[int, int, int, int]:
    t = node.shape[0]
    kdim, ndim = node.params["w"].shape
    nm, nn, nk = math.ceil(t / tl["m"]), math.ceil(ndim / tl["n"]), math.ceil(kdim / tl["k"])
    w_bytes = kdim * ndim * weight_bytes(node)
    f_bytes = t * kdim * F16
    if tl.get("order", 0) == 0:
        moved = w_bytes + f_bytes * nn
    else:
        moved = w_bytes * nm + f_bytes * (nn if nk > 1 else 1)
    partial = (nk - 1) * t * ndim * F32 * 2  # fp32 partial sums out and back in between passes
    bias = ndim * F16 * nm
    out = t * ndim * F16
    return nm * nn * nk, moved + partial + bias + out, t * ndim * kdim, 0


def _attention_totals(node: Node, tl: dict[str, int], hw: RK3588HW) -> tuple[int, int, int, int]:
    heads, d = node.attrs["heads"], node.attrs["head_dim"]
    out = [0, 0, 0, 0]
    for s0, s1 in segments(node):
        t = s1 - s0
        nq, nk = math.ceil(t / tl["q"]), math.ceil(t / tl["kv"])
        two = nk > 1
        kv = t * d * F16 * 3 * nq if two else t * d * F16 * 2
        out[0] += heads * nq * nk * (2 if two else 1)
        out[1] += heads * (kv + 2 * t * d * F16)  # + q in, output out
        out[2] += heads * t * t * d * (3 if two else 2)
        out[3] += heads * t * t * (5 if two else 4)
    return out[0], out[1], out[2], out[3]
