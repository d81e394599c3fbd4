"""Backend registry: one entry per (model family, target) — ``("gemma3n", "golden")``,
``("gemma3n", "quant")``, later ``("bitnet", "tern")``, ``("gemma3n", "pccx")``, ….

A backend runs one sequence at a time:

* ``reset()`` — forget the KV cache;
* ``prefill(ids) -> logits`` — run the prompt, return the float32 logits of its last position;
* ``step(token) -> logits`` — run one token at the next position;
* ``stats() -> dict`` — JSON-ready counters (KV bytes, cycles, …) for the generation report.

Registration: a module calls `register_backend` at import. Two kinds are discovered: a target's
backends are the modules its `npukit.registry.Target` record lists in ``backends`` (``pccx``,
``tern``, ... — the target owns them); the references of a model family that belong to no target
(``golden``, ``quant``) are ``npukit/runtime/backend_<family>.py``. Any other module may call
`register_backend` before use (tests do). The factory is called as
``factory(model, kv=<mode>, **options)`` with a `npukit.models.loading.LoadedModel`; ``kv_modes``
lists the ``--kv`` values the backend accepts, the first being its default.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from npukit import registry
from npukit.errors import ConfigError
from npukit.plugins import import_prefixed


@runtime_checkable
class Backend(Protocol):
    def reset(self) -> None: ...
    def prefill(self, ids: Sequence[int]) -> np.ndarray: ...
    def step(self, token: int) -> np.ndarray: ...
    def stats(self) -> dict[str, Any]: ...


Factory = Callable[..., Backend]


class ModelBackend:
    """Base for backends whose model object ``self.ref`` already runs reset / prefill / step."""

    ref: Any

    def reset(self) -> None:
        self.ref.reset()

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        return self.ref.prefill(ids)

    def step(self, token: int) -> np.ndarray:
        return self.ref.step(token)


@dataclass(frozen=True)
class BackendSpec:
    family: str
    target: str
    factory: Factory
    kv_modes: tuple[str, ...]
    help: str = ""

    @property
    def default_kv(self) -> str:
        return self.kv_modes[0]


_REGISTRY: dict[tuple[str, str], BackendSpec] = {}
_discovered = False


def register_backend(family: str, target: str, factory: Factory, kv_modes: Sequence[str] = ("fp16",),
                     help: str = "") -> BackendSpec:
    """Register (or replace) the backend for ``family`` on ``target``."""
    if not kv_modes:
        raise ValueError("a backend needs at least one KV mode")
    spec = BackendSpec(family, target, factory, tuple(kv_modes), help)
    _REGISTRY[(family, target)] = spec
    return spec


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    import_prefixed("npukit.runtime", "backend_")
    for name in registry.names("backends"):
        for module in registry.get(name).backends:
            importlib.import_module(module)


def specs() -> list[BackendSpec]:
    _discover()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def targets(family: str | None = None) -> list[str]:
    """Target names, for one family or across all (what ``--target`` accepts)."""
    return sorted({s.target for s in specs() if family is None or s.family == family})


def kv_modes() -> list[str]:
    """Every KV mode some backend accepts (what ``--kv`` accepts)."""
    return sorted({m for s in specs() for m in s.kv_modes})


def get_spec(family: str, target: str) -> BackendSpec:
    _discover()
    spec = _REGISTRY.get((family, target))
    if spec is None:
        have = targets(family)
        raise ConfigError(f"target {target!r} has no backend for model family {family!r}"
                          f" (available: {', '.join(have) if have else 'none'})")
    return spec


def create_backend(model: Any, target: str, kv: str | None = None, **options: Any) -> Backend:
    """Instantiate the backend for ``model`` (a LoadedModel) on ``target``."""
    spec = get_spec(model.family, target)
    kv = kv or spec.default_kv
    if kv not in spec.kv_modes:
        raise ConfigError(f"target {target!r} does not support --kv {kv} for {model.family} "
                          f"(supported: {', '.join(spec.kv_modes)})")
    try:
        return spec.factory(model, kv=kv, **options)
    except TypeError as exc:
        if "unexpected keyword argument" not in str(exc):
            raise
        bad = str(exc).split("argument", 1)[1].strip().strip("'")
        raise ConfigError(f"target {target!r} does not take the option {bad.replace('_', '-')}") from None
