"""Evidence tiers: every performance or energy number npukit reports says how it was obtained.

* ``measured``  — timed or counted here (or measured on silicon and cited as such);
* ``derived``   — computed from measured or spec primitives by stated arithmetic;
* ``projected`` — a model's estimate resting on assumptions that were not measured.

A ``Figure`` carries value, unit, tier and source; a ``Ledger`` is an ordered set of named figures
with a JSON form ``{"figures": {name: {"value", "unit", "tier", "source"}}}``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Tier(StrEnum):
    MEASURED = "measured"
    DERIVED = "derived"
    PROJECTED = "projected"

    @staticmethod
    def weakest(*tiers: Tier) -> Tier:
        """The tier of a figure computed from others is the weakest of its inputs' tiers,
        and never stronger than ``derived`` (arithmetic on measurements is not a measurement)."""
        order = [Tier.MEASURED, Tier.DERIVED, Tier.PROJECTED]
        worst = max((order.index(t) for t in tiers), default=0)
        return order[max(worst, 1)]


@dataclass(frozen=True)
class Figure:
    value: float
    unit: str
    tier: Tier
    source: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "tier", Tier(self.tier))
        if not self.source:
            raise ValueError("a Figure needs a source")

    def to_json(self) -> dict[str, Any]:
        v = self.value
        if isinstance(v, float) and not math.isfinite(v):
            v = None if math.isnan(v) else ("inf" if v > 0 else "-inf")
        return {"value": v, "unit": self.unit, "tier": str(self.tier), "source": self.source}

    def fmt(self, digits: int = 4) -> str:
        v = self.value
        text = f"{v:.{digits}g}" if isinstance(v, float) else str(v)
        return f"{text} {self.unit}".strip()


@dataclass
class Ledger(Mapping[str, Figure]):
    """Named figures in insertion order."""

    figures: dict[str, Figure] = field(default_factory=dict)

    def add(self, name: str, value: float, unit: str, tier: Tier | str, source: str) -> Figure:
        fig = Figure(value, unit, Tier(tier), source)
        self.figures[name] = fig
        return fig

    def __getitem__(self, name: str) -> Figure:
        return self.figures[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.figures)

    def __len__(self) -> int:
        return len(self.figures)

    def to_json(self) -> dict[str, Any]:
        return {"figures": {k: f.to_json() for k, f in self.figures.items()}}

    def rows(self) -> list[list[str]]:
        return [[k, f.fmt(), str(f.tier), f.source] for k, f in self.figures.items()]
