"""Buffer lifetimes over a node order and their first-fit placement in one address range.

`lifetimes` walks the nodes once: a buffer lives from the first node that names it (defines or
reads it) to the last. `first_fit` is a linear scan over the node order: at node ``i`` it places
the buffers born there — in the order given, each at the lowest free address where it fits — and
then frees those whose last use is ``i``, merging neighbouring free ranges. The placement is a
pure function of (order, sizes, range): two compilers that agree on those agree on every address.
`fit_around` places more buffers around ones already placed, each at the lowest address where it
overlaps no placed buffer that lives at the same time: a program whose bucket-sized buffers are
placed that way keeps every other address whatever the bucket.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

PRUNE_EVERY = 64  # `fit_around` drops the buffers dead before the next birth this often


@dataclass(frozen=True)
class Lifetime:
    item: Any  # the buffer (any object)
    first: int  # index of the first node that names it
    last: int  # index of the last node that names it


def lifetimes(nodes: Iterable[Iterable[Any]], key: Callable[[Any], Hashable] = id) -> list[Lifetime]:
    """One `Lifetime` per distinct buffer (by ``key``) in order of first appearance; ``nodes[i]`` is
    every buffer node ``i`` names."""
    first: dict[Hashable, int] = {}
    last: dict[Hashable, int] = {}
    items: dict[Hashable, Any] = {}
    for i, bufs in enumerate(nodes):
        for b in bufs:
            k = key(b)
            items[k] = b
            first.setdefault(k, i)
            last[k] = i
    return [Lifetime(items[k], first[k], last[k]) for k in items]


class NoRoom(Exception):
    """Raised by `first_fit` when a buffer does not fit; carries what the caller needs to say so."""

    def __init__(self, item: Any, size: int, node: int) -> None:
        super().__init__(f"no room for {size} units at node {node}")
        self.item, self.size, self.node = item, size, node


def first_fit(spans: list[Lifetime], size: Callable[[Any], int], lo: int,
              hi: int) -> tuple[dict[int, int], int]:
    """Place every lifetime in [lo, hi): returns ({index in ``spans``: address}, peak end address).

    Raises `NoRoom` naming the first buffer that does not fit."""
    born: dict[int, list[int]] = {}
    dies: dict[int, list[int]] = {}
    for j, s in enumerate(spans):
        born.setdefault(s.first, []).append(j)
        dies.setdefault(s.last, []).append(j)
    free: list[tuple[int, int]] = [(lo, hi)]
    addr: dict[int, int] = {}
    peak = lo
    for i in range(max((s.last for s in spans), default=-1) + 1):
        for j in born.get(i, []):
            need = size(spans[j].item)
            for f, (a, e) in enumerate(free):
                if e - a >= need:
                    addr[j] = a
                    free[f] = (a + need, e)
                    if free[f][0] == e:
                        free.pop(f)
                    peak = max(peak, a + need)
                    break
            else:
                raise NoRoom(spans[j].item, need, i)
        for j in dies.get(i, []):
            free.append((addr[j], addr[j] + size(spans[j].item)))
            free.sort()
            merged: list[tuple[int, int]] = []
            for a, e in free:
                if merged and merged[-1][1] == a:
                    merged[-1] = (merged[-1][0], e)
                else:
                    merged.append((a, e))
            free = merged
    return addr, peak


def fit_around(spans: list[Lifetime], size: Callable[[Any], int], placed: list[tuple[Lifetime, int]],
               lo: int, hi: int) -> tuple[dict[int, int], int]:
    """Place every lifetime of ``spans`` in [lo, hi) around ``placed`` ((lifetime, address) pairs that
    stay where they are): in order of birth, each at the lowest address where it overlaps no placed
    buffer, nor one placed here before it, that is live at any node it is (both alive at a node:
    ``a.first <= b.last and b.first <= a.last``). Returns ({index in ``spans``: address}, the peak end
    address of all of them, the placed ones too); raises `NoRoom` naming the first that does not fit."""
    order = sorted(range(len(spans)), key=lambda j: spans[j].first)
    rows = [(s.first, s.last, a, a + size(s.item)) for s, a in placed]
    table = np.zeros((4, len(rows) + len(spans)), np.int64)  # first, last, start, end of those placed
    n = len(rows)
    table[:, :n] = np.array(rows, np.int64).reshape(-1, 4).T
    peak = max(lo, int(table[3, :n].max(initial=lo)))
    addr: dict[int, int] = {}
    for k, j in enumerate(order):
        s, need = spans[j], size(spans[j].item)
        if k % PRUNE_EVERY == 0:  # (births come in order: one dead before this birth never counts again)
            keep = table[1, :n] >= s.first
            n = int(keep.sum())
            table[:, :n] = table[:, :keep.size][:, keep]
        firsts, lasts, starts, ends = table[:, :n]
        live = np.flatnonzero((firsts <= s.last) & (lasts >= s.first))
        by = np.argsort(starts[live], kind="stable")
        b = starts[live][by]
        # the lowest free address before the k-th lowest obstacle: lo, or past every one below it
        cand = np.maximum(np.concatenate(([lo], np.maximum.accumulate(ends[live][by]))), lo)
        fits = np.flatnonzero(b >= cand[:-1] + need)
        a = int(cand[fits[0]] if fits.size else cand[-1])
        if a + need > hi:
            raise NoRoom(s.item, need, s.first)
        addr[j] = a
        peak = max(peak, a + need)
        table[:, n] = (s.first, s.last, a, a + need)
        n += 1
    return addr, peak
