"""Strongly connected components of the verifier's explored control-flow graph (iterative Tarjan)."""

from __future__ import annotations

from collections import defaultdict


def components(edges: set[tuple[int, int]]) -> list[list[int]]:
    """The strongly connected components of the graph given by ``edges`` (nodes are ints)."""
    succ: dict[int, list[int]] = defaultdict(list)
    nodes: set[int] = set()
    for a, b in edges:
        succ[a].append(b)
        nodes.update((a, b))
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            children = succ[node]
            if i < len(children):
                work.append((node, i + 1))
                child = children[i]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return out


def closed_cycles(edges: set[tuple[int, int]]) -> list[int]:
    """The first node of every cycle that no edge leaves (a node with an edge to itself counts)."""
    heads = []
    for comp in components(edges):
        members = set(comp)
        cyclic = len(comp) > 1 or (comp[0], comp[0]) in edges
        if cyclic and not any(a in members and b not in members for a, b in edges):
            heads.append(min(comp))
    return sorted(heads)
