"""Sharding: cut the task stream into submissions under the driver's per-submission task limit.

SHARD cut SigLIP into one binary per half layer (``l{i}_attn``, ``l{i}_mlp``) because thousands of
tiny tasks in one job hit the driver timeout. Here whole half-layer blocks are packed greedily into
a submission while its task count stays under ``driver.max_tasks_per_submit``; a block that alone
exceeds the limit is split at op boundaries, and an op that alone exceeds it at task boundaries.
With ``pack=False`` (the default, the seed's cut) every half-layer block starts a new submission,
which gives the pipelined schedule stages to spread over the cores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from npukit.targets.rk3588.graph import Graph
from npukit.targets.rk3588.hw import RK3588HW
from npukit.targets.rk3588.tasks import totals


@dataclass
class ShardItem:
    node: str
    start: int  # task range [start, stop) of the node's task list
    stop: int


@dataclass
class Shard:
    index: int
    items: list[ShardItem] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)

    @property
    def tasks(self) -> int:
        return sum(i.stop - i.start for i in self.items)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "tasks": self.tasks, "blocks": self.blocks,
                "items": [[i.node, i.start, i.stop] for i in self.items]}


def shard(g: Graph, hw: RK3588HW, limit: int | None = None, pack: bool = False) -> list[Shard]:
    limit = limit or hw.task_limit
    blocks: dict[str, list[tuple[str, int]]] = {}
    for n in g.nodes:
        blocks.setdefault(n.block, []).append((n.name, totals(n, g, n.tiling, hw)[0]))
    shards: list[Shard] = [Shard(0)]

    def room() -> int:
        return limit - shards[-1].tasks

    def new() -> None:
        if shards[-1].items:
            shards.append(Shard(len(shards)))

    for block, nodes in blocks.items():
        size = sum(c for _, c in nodes)
        if size > room() or not pack:
            new()
        for name, count in nodes:
            start = 0
            if count > room() and count <= limit:
                new()
            while True:
                take = min(count - start, room())
                if take <= 0 and count > 0:
                    new()
                    continue
                shards[-1].items.append(ShardItem(name, start, start + take))
                if block not in shards[-1].blocks:
                    shards[-1].blocks.append(block)
                start += take
                if start >= count:
                    break
    return [s for s in shards if s.items]
