"""A model of the vendor graph optimizer that undid SHARD's tiling.

rknn-toolkit2 looks at a tiled graph, finds it inefficient and merges the pieces back into one op
(the seed disabled rules such as ``fuse_matmul_softmax_matmul_to_sdpa``; the blog: "it fused the
operators back together into a single giant block"). Here: every tiled op whose tiles are not
fenced by a barrier is re-fused into one untiled op — which the placement check then rejects.
"""

from __future__ import annotations

from npukit.targets.rk3588.compile.barrier import fenced, single_tile
from npukit.targets.rk3588.graph import Graph


def vendor_fuse(g: Graph) -> list[str]:
    """Re-fuse unfenced tiles; return the names of the ops it merged."""
    merged = []
    for node in g.nodes:
        if node.op == "barrier" or not node.tiling or single_tile(node):
            continue
        if not fenced(g, node):
            node.tiling = None
            node.fused_into = node.name
            merged.append(node.name)
    return merged
