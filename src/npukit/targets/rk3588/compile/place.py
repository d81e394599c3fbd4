"""Placement check: every op (or tile) must fit the core's CBUF banks, the per-pass input-channel
limit and the 32 KB vector scratchpad. A miss fails compilation with the op, its shape, the bytes
needed and the limit — what rknn-toolkit2 reports as the bare ``REGTASK Overflow (0xe010)``."""

from __future__ import annotations

from npukit.errors import NpukitError
from npukit.targets.rk3588.graph import Graph, Node
from npukit.targets.rk3588.hw import RK3588HW
from npukit.targets.rk3588.tasks import WorkingSet, working_set


class PlacementError(NpukitError):
    """An op whose working set does not fit the NPU's on-chip memories."""

    def __init__(self, node: Node, g: Graph, ws: WorkingSet, hw: RK3588HW, why: str) -> None:
        self.node = node.name
        self.ws = ws
        self.failures: list[PlacementError] = [self]
        how = "tiles" if node.tiling else (
            "re-fused by the vendor optimizer" if node.fused_into else "untiled")
        super().__init__(f"placement (0xe010): op {node.name} ({node.describe(g)}, {how}) {why}; "
                         + ("enable tiling" if not node.tiling and not node.fused_into
                            else "insert fusion barriers" if node.fused_into else "choose smaller tiles"))


def check_node(node: Node, g: Graph, hw: RK3588HW) -> WorkingSet:
    ws = working_set(node, g, hw, node.tiling)
    if ws.scratch_bytes > hw.scratchpad:
        raise PlacementError(node, g, ws, hw, f"needs {ws.scratch_bytes:,} B in the vector scratchpad "
                             f"({ws.detail}), limit {hw.scratchpad:,} B")
    if ws.k_pass > hw.k_per_pass:
        raise PlacementError(node, g, ws, hw, f"needs {ws.k_pass} input channels in one CNA pass, "
                             f"limit {hw.k_per_pass}")
    if ws.cbuf_banks > hw.banks:
        raise PlacementError(node, g, ws, hw, f"needs {ws.cbuf_banks} CBUF banks = "
                             f"{ws.cbuf_banks * hw.bank_bytes:,} B ({ws.detail}), limit {hw.banks} banks = "
                             f"{hw.cbuf_bytes:,} B")
    return ws


def place(g: Graph, hw: RK3588HW) -> dict[str, WorkingSet]:
    """Check every node; return the working set of each (the plan reports them). On failure the
    error names the first op that does not fit, how many do not, and the largest."""
    out: dict[str, WorkingSet] = {}
    failures: list[PlacementError] = []
    for n in g.nodes:
        if n.op == "barrier":
            continue
        try:
            out[n.name] = check_node(n, g, hw)
        except PlacementError as exc:
            failures.append(exc)
    if failures:
        first = failures[0]
        worst = max(failures, key=lambda e: e.ws.scratch_bytes + e.ws.cbuf_banks * hw.bank_bytes)
        if len(failures) > 1:
            largest = worst.args[0].split(": ", 1)[1]
            first.args = (f"{first.args[0]} — {len(failures)} ops do not fit; the largest: {largest}",)
        first.failures = failures
        raise first
    return out
