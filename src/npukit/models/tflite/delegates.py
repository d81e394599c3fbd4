"""Delegates: a target takes a subset of a model's ops, the interpreter runs the rest on the host.

A delegate answers ``partition(model) -> Plan``. A `Plan` is a list of `Segment`s, each a run of op
indices the delegate executes as one unit (``run({tensor index: array}) -> {tensor index: array}``
over the segment's input and output tensors), plus optional evidence-tiered figures. The
interpreter walks the graph in order and hands a segment its inputs when it reaches the segment's
first op; ops in no segment run on the host reference kernels.

Delegates are found by target name: `register_delegate` (in-process), or a target record
(`npukit.registry`) whose ``extra["tflite_delegate"]`` names a factory ``"module:attr"``. The factory
is called as ``factory(variant=..., hw=..., overrides=[...])`` and returns the delegate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from npukit.errors import ConfigError
from npukit.evidence import Ledger
from npukit.models.tflite.model import Model, Op


@dataclass
class Segment:
    ops: tuple[int, ...]
    inputs: tuple[int, ...]  # tensor indices the segment reads (activations; constants it may read itself)
    outputs: tuple[int, ...]  # tensor indices it produces that later ops or the graph outputs need
    run: Callable[[dict[int, np.ndarray]], dict[int, np.ndarray]]
    label: str = ""


@dataclass
class Plan:
    segments: list[Segment] = field(default_factory=list)
    figures: Ledger = field(default_factory=Ledger)

    def delegated_ops(self) -> set[int]:
        return {i for s in self.segments for i in s.ops}


def op_segments(model: Model, ops: Iterable[int],
                run_op: Callable[[Op, list[np.ndarray | None]], list[np.ndarray]],
                label: str = "delegate") -> list[Segment]:
    """One `Segment` per op index: ``run_op(op, inputs)`` gets the op's input arrays in operand order
    (constants from the model, None for omitted optional operands) and returns its outputs."""
    segments = []
    for index in sorted(ops):
        op = model.ops[index]

        def run(values: dict[int, np.ndarray], op: Op = op) -> dict[int, np.ndarray]:
            ins = [None if i < 0 else values[i] if i in values else model.tensors[i].data for i in op.inputs]
            return dict(zip(op.outputs, run_op(op, ins), strict=True))

        activations = tuple(i for i in op.inputs if i >= 0 and model.tensors[i].data is None)
        segments.append(Segment((index,), activations, op.outputs, run, f"{label}:{op.name}#{index}"))
    return segments


class Delegate(Protocol):
    name: str

    def partition(self, model: Model) -> Plan: ...


class DelegateUnavailable(ConfigError):
    """No delegate is registered for the requested target (yet)."""


DelegateFactory = Callable[..., Delegate]
_DELEGATES: dict[str, DelegateFactory] = {}


def register_delegate(target: str, factory: DelegateFactory) -> None:
    _DELEGATES[target] = factory


def available() -> list[str]:
    names = set(_DELEGATES)
    try:
        from npukit import registry

        names |= {n for n in registry.names() if registry.get(n).extra.get("tflite_delegate")}
    except ConfigError:
        pass
    return sorted(names)


def get_delegate(target: str, variant: str | None = None, hw: str | None = None,
                 overrides: list[str] | None = None) -> Delegate:
    factory = _DELEGATES.get(target)
    if factory is None:
        factory = _from_registry(target)
    if factory is None:
        raise DelegateUnavailable(f"the {target.upper()} delegate is not available yet "
                                  f"(registered TFLite delegates: {', '.join(available()) or 'none'})")
    return factory(variant=variant, hw=hw, overrides=list(overrides or []))


def _from_registry(target: str) -> DelegateFactory | None:
    from npukit import registry

    try:
        record = registry.get(target)
    except ConfigError:
        return None
    ref = record.extra.get("tflite_delegate")
    return registry.load_ref(ref) if ref else None


def describe(plan: Plan) -> dict[str, Any]:
    return {"segments": [{"label": s.label, "ops": list(s.ops)} for s in plan.segments],
            "delegated_ops": len(plan.delegated_ops())}
