"""A compiler as a list of stages (ZigZag's ``MainStage([...])`` idea, without its callbacks).

Each `Stage` has a name, the type it takes and the type it returns, and ``run(value, ctx)``. A
`Pipeline` checks when it is built that each stage takes what the previous one returns, runs them
in order, checks each result's type, and keeps every intermediate result with its wall time in a
`Run`, so a report (or a test) can look at any stage's output::

    pipe = Pipeline([Stage("lower", Model, Graph, lower), Stage("codegen", Graph, Program, codegen)])
    run = pipe.run(model, hw=hw)
    program = run.value            # the last stage's result
    graph = run["lower"]           # any stage's result

``ctx`` is a plain dict shared by all stages (the hardware description, options, statistics); a stage
may add to it for later stages.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from npukit.errors import NpukitError


class PipelineError(NpukitError):
    """A pipeline whose stages do not fit together, or a stage that returned the wrong type."""


@dataclass(frozen=True)
class Stage:
    name: str
    takes: type | tuple[type, ...]
    gives: type | tuple[type, ...]
    fn: Callable[[Any, dict[str, Any]], Any]

    def run(self, value: Any, ctx: dict[str, Any]) -> Any:
        return self.fn(value, ctx)


@dataclass
class StageResult:
    name: str
    value: Any
    seconds: float


@dataclass
class Run:
    results: list[StageResult] = field(default_factory=list)
    ctx: dict[str, Any] = field(default_factory=dict)

    @property
    def value(self) -> Any:
        return self.results[-1].value

    def __getitem__(self, name: str) -> Any:
        for r in self.results:
            if r.name == name:
                return r.value
        raise KeyError(name)

    def timings(self) -> dict[str, float]:
        return {r.name: r.seconds for r in self.results}


def _types(t: type | tuple[type, ...]) -> tuple[type, ...]:
    return t if isinstance(t, tuple) else (t,)


class Pipeline:
    def __init__(self, stages: Sequence[Stage]) -> None:
        if not stages:
            raise PipelineError("a pipeline needs at least one stage")
        names = [s.name for s in stages]
        if len(set(names)) != len(names):
            raise PipelineError(f"stage names repeat: {names}")
        for a, b in itertools.pairwise(stages):
            if not all(any(issubclass(g, t) for t in _types(b.takes)) for g in _types(a.gives)):
                raise PipelineError(f"stage {b.name!r} takes {b.takes!r}, but {a.name!r} gives {a.gives!r}")
        self.stages = list(stages)

    def run(self, value: Any, **ctx: Any) -> Run:
        first = self.stages[0]
        if not isinstance(value, _types(first.takes)):
            raise PipelineError(f"stage {first.name!r} takes {first.takes!r}, got {type(value).__name__}")
        out = Run(ctx=dict(ctx))
        for stage in self.stages:
            t0 = time.perf_counter()
            value = stage.run(value, out.ctx)
            if not isinstance(value, _types(stage.gives)):
                raise PipelineError(f"stage {stage.name!r} returned {type(value).__name__}, "
                                    f"not {stage.gives!r}")
            out.results.append(StageResult(stage.name, value, time.perf_counter() - t0))
        return out
