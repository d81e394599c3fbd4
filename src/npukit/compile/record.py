"""Recording operation sets: the same arithmetic, every call of a named operation logged.

A reference model written as calls to an operation set (pccx's `PccxOps`, one call per future
instruction) runs unchanged on a `Recorder` subclass of that set; ``trace`` then lists the calls in
order, each as ``(name, shapes of array arguments, keyword flags)``::

    @dataclass
    class RecordingOps(Recorder, PccxOps):
        recorded: ClassVar[frozenset[str]] = frozenset(PCCX_OP_NAMES)

Only names in ``recorded`` are logged (helpers and attributes pass through untouched). A keyword
argument is logged by value when it is a scalar, by shape when it is an array.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

Call = tuple[str, tuple, dict]


def shape_of(a: Any) -> tuple[int, ...] | None:
    """The shape of an array argument; None for anything else."""
    return tuple(np.shape(a)) if isinstance(a, np.ndarray | np.generic) else None


@dataclass
class Recorder:
    """Mixin placed before an operation set's class: records each call of a method in ``recorded``."""

    trace: list[Call] = field(default_factory=list)
    recorded: ClassVar[frozenset[str]] = frozenset()

    def __getattribute__(self, name: str) -> Any:
        attr = object.__getattribute__(self, name)
        if name in type(self).recorded:
            trace = object.__getattribute__(self, "trace")

            def call(*args: Any, **kw: Any) -> Any:
                flags = {k: (v if np.ndim(v) == 0 and not isinstance(v, np.ndarray) else shape_of(v))
                         for k, v in kw.items()}
                trace.append((name, tuple(shape_of(a) for a in args), flags))
                return attr(*args, **kw)

            return call
        return attr

    def counts(self) -> dict[str, int]:
        """Calls per operation name, in order of first call."""
        out: dict[str, int] = {}
        for name, _, _ in self.trace:
            out[name] = out.get(name, 0) + 1
        return out
