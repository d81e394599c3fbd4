"""Tiling: split every op into tasks that fit, choosing the tile sizes by a cost estimate.

Matmuls split rows, output channels and input channels (passes of at most 768 with fp32 partial
sums), in either loop order; attention splits queries and keys (a key split turns on the two-pass
softmax); vector ops split rows. Among the tilings that fit, the one with the least estimated time
(DMA bytes at the core's DMA rate + per-task overhead + compute, the same terms the timing model
charges) wins, so sizes follow the shapes and the hardware — not a fixed 32.
"""

from __future__ import annotations

import math
from functools import cache

from npukit.errors import NpukitError
from npukit.targets.rk3588.graph import Graph, Node
from npukit.targets.rk3588.hw import RK3588HW
from npukit.targets.rk3588.tasks import F16, fits, segments, totals, weights_moved, working_set


class TilingError(NpukitError):
    """No tile of an op fits the on-chip memories (e.g. one LayerNorm row exceeds the scratchpad)."""


def estimate_cycles(node: Node, g: Graph, hw: RK3588HW, tiling: dict[str, int] | None) -> float:
    """The timing model's terms in closed form: weights at the DRAM DMA rate, activations at the
    L3-snoop rate when the op's tensors fit the L3, per-task overhead, MACs and vector elements."""
    n_tasks, moved, macs, vec = totals(node, g, tiling, hw)
    weights = weights_moved(node, tiling)
    biggest = max([math.prod(g.shape(i)) for i in node.inputs] + [math.prod(node.shape)]) * F16
    act_rate = hw.l3_bytes_per_cycle() if biggest <= hw.dma.l3_bytes.value else hw.dma_bytes_per_cycle()
    rate = hw.macs_per_cycle(node.attrs.get("dtype", "fp16"))
    return (weights / hw.dma_bytes_per_cycle() + (moved - weights) / act_rate
            + n_tasks * hw.core.task_overhead_cycles.value + macs / rate
            + vec / hw.core.vector_elems_per_cycle.value)


def _splits(n: int, align: int, cap: int | None = None) -> list[int]:
    """Block sizes that split ``n`` evenly-ish, rounded up to ``align`` (and at most ``cap``)."""
    out = set()
    for parts in range(1, n + 1):
        b = -(-n // parts)
        b = min(n, -(-b // align) * align)
        if cap is None or b <= cap:
            out.add(b)
        if b <= align:
            break
    return sorted(out)


def _pow2_upto(n: int, lo: int) -> list[int]:
    out, v = {n}, lo
    while v < n:
        out.add(v)
        v *= 2
    return sorted(out)


def candidates(node: Node, g: Graph, hw: RK3588HW) -> list[dict[str, int]]:
    t = node.shape[0]
    if node.op == "matmul":
        kdim, ndim = node.params["w"].shape
        ms = _pow2_upto(t, hw.core.m_align)
        ns = _splits(ndim, hw.core.weight_group_out)
        ks = _splits(kdim, hw.core.weight_group_in, hw.k_per_pass)
        return [{"m": m, "n": n, "k": k, "order": o} for m in ms for n in ns for k in ks for o in (0, 1)]
    if node.op == "attention":
        longest = max(b - a for a, b in segments(node))
        qs = _pow2_upto(longest, 1)
        return [{"q": q, "kv": kv} for q in qs for kv in _pow2_upto(longest, 16)]
    return [{"r": r} for r in _pow2_upto(t, 1)] + [{"r": r} for r in range(1, min(t, 64) + 1)]


def choose(node: Node, g: Graph, hw: RK3588HW) -> dict[str, int]:
    key = (node.op, node.shape, tuple(g.shape(i) for i in node.inputs), node.attrs.get("dtype"),
           tuple(node.params["w"].shape) if "w" in node.params else (),
           tuple(segments(node)) if node.op == "attention" else ())
    return dict(_choose_cached(key, _Ctx(node, g, hw)))


class _Ctx:
    """Carries the node into the cache without making it part of the key."""

    def __init__(self, node: Node, g: Graph, hw: RK3588HW) -> None:
        self.node, self.g, self.hw = node, g, hw

    def __hash__(self) -> int:
        return id(self.hw)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Ctx) and other.hw is self.hw


@cache
def _choose_cached(key: tuple, ctx: _Ctx) -> tuple[tuple[str, int], ...]:
    node, g, hw = ctx.node, ctx.g, ctx.hw
    best, best_cost = None, math.inf
    for tl in candidates(node, g, hw):
        if not fits(working_set(node, g, hw, tl), hw):
            continue
        cost = estimate_cycles(node, g, hw, tl)
        if cost < best_cost:
            best, best_cost = tl, cost
    if best is None:
        ws = working_set(node, g, hw, {"r": 1} if node.op not in ("matmul", "attention") else None)
        raise TilingError(f"tiling: no tile of op {node.name} ({node.describe(g)}) fits: even the smallest "
                          f"needs {ws.scratch_bytes:,} B of scratchpad (limit {hw.scratchpad:,} B)")
    return tuple(sorted(best.items()))


def tile(g: Graph, hw: RK3588HW) -> Graph:
    for node in g.nodes:
        if node.op != "barrier":
            node.tiling = choose(node, g, hw)
    return g
