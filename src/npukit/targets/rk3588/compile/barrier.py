"""Fusion barriers as a graph construct (the principled form of SHARD's "poison pill").

A ``barrier`` node is an identity that consumes its producer tile by tile: nothing is fused across
it and its producer's tiles cannot be merged back into one op. The seed got the same effect by
adding ``sigmoid(x[..., :1]) * 1e-6`` to the output (a real, if tiny, numerical change); here the
barrier is exact — it moves no data and computes nothing.
"""

from __future__ import annotations

from npukit.targets.rk3588.graph import Graph, Node


def insert_barriers(g: Graph) -> Graph:
    """After every op split into more than one tile, insert a barrier that its consumers read."""
    out: list[Node] = []
    for node in g.nodes:
        out.append(node)
        if node.op == "barrier" or not node.tiling or single_tile(node):
            continue
        name = f"{node.name}.barrier"
        consumers = g.consumers(node.output)
        barrier = Node(name, "barrier", [node.output], name, node.shape,
                       {"block": node.block, "fences": node.name})
        g.rename_input(node.output, name, consumers)
        if node.output in g.outputs:
            g.outputs = [name if o == node.output else o for o in g.outputs]
        out.append(barrier)
    g.nodes = out
    return g


def single_tile(node: Node) -> bool:
    tl = node.tiling or {}
    t = node.shape[0]
    if node.op == "matmul":
        k, n = node.params["w"].shape
        return tl["m"] >= t and tl["n"] >= n and tl["k"] >= k
    if node.op == "attention":
        return False  # heads are tiles already
    return tl.get("r", t) >= t


def fenced(g: Graph, node: Node) -> bool:
    return any(c.op == "barrier" and c.attrs.get("fences") == node.name for c in g.consumers(node.output))
