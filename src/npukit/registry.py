"""The one place that says what a target is.

A target is a folder ``npukit/targets/<name>/`` whose module ``target.py`` defines ``TARGET``, a
`Target` record. Every capability is named by a lazy ``"module:attribute"`` reference, so listing the
targets imports nothing heavy and this base-layer module never imports a target (layers stay
enforceable). Out-of-tree targets (a user's, or the toy machine in the tests) register the same way:
put their module names in ``NPUKIT_TARGETS`` (comma-separated) or call `register`.

Capabilities, each optional (``None`` = the target does not offer it):

* ``hw`` — the hardware-description dataclass that TOML presets with ``target = "<name>"`` build;
* ``isa`` — the ISA spec (`npukit.isa` toolkit object) behind asm/disasm and the docs table;
* ``assemble(text, hw) -> list[int]``, ``disassemble(words, hw) -> str``,
  ``load_program(path, hw) -> list[int]``, ``simulate(words, hw, **options) -> result`` —
  what ``npukit asm|disasm|sim --target <name>`` call;
* ``perf(hw) -> npukit.perf.machine.Machine`` — the roofline/energy adapter;
* ``ledger(hw, cfg, **kw) -> Ledger`` — the target's own evidence ledger;
* ``backends`` — modules that register (model family, target) generation backends on import.

Each capability's typed contract is a `Protocol` below (`Assemble`, `Disassemble`, `LoadProgram`,
`Simulate`, `PerfAdapter`, `LedgerBuilder`, `IsaSpec`); `check` verifies a record against them, and
tests/test_registry_contracts.py checks every registered target and the toy one.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import pkgutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from npukit.errors import ConfigError

ENV_VAR = "NPUKIT_TARGETS"


@dataclass(frozen=True)
class Target:
    name: str
    summary: str
    hw: str | None = None
    isa: str | None = None
    assemble: str | None = None
    disassemble: str | None = None
    load_program: str | None = None
    simulate: str | None = None
    perf: str | None = None
    ledger: str | None = None
    backends: tuple[str, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)  # target-specific named entry points

    def provides(self, capability: str) -> bool:
        return bool(getattr(self, capability, None) or self.extra.get(capability))

    def resolve(self, capability: str) -> Any:
        """Import and return the object behind a capability; `ConfigError` if the target lacks it."""
        ref = getattr(self, capability, None) if capability in _CAPABILITIES else self.extra.get(capability)
        if not ref:
            raise ConfigError(f"target {self.name!r} does not provide {capability!r}")
        return load_ref(ref)


# ---------------------------------------------------------------- the typed contract of each capability
# The CLI passes the positional arguments below and, by name, only the options a function accepts
# (`npukit.cli.cmd_asm.call`); `check` verifies every registered record against these.
class Assemble(Protocol):
    def __call__(self, text: str, hw: Any, /, **options: Any) -> list[int]: ...


class Disassemble(Protocol):  # a listing: text, or rows of `npukit.isa.text`
    def __call__(self, words: Sequence[int], hw: Any, /, **options: Any) -> Any: ...


class LoadProgram(Protocol):
    def __call__(self, path: str | Path, hw: Any, /, **options: Any) -> list[int]: ...


class Simulate(Protocol):  # a result object or dict the CLI prints (and --json serialises)
    def __call__(self, words: Sequence[int], hw: Any, /, **options: Any) -> Any: ...


class PerfAdapter(Protocol):  # -> npukit.perf.machine.Machine
    def __call__(self, hw: Any, /) -> Any: ...


class LedgerBuilder(Protocol):  # -> npukit.evidence.Ledger (what `npukit.perf.ledger.target_ledger` calls)
    def __call__(self, hw: Any, cfg: Any, /, *, context: int, weights: str | None, kv: str | None,
                 sparsity: float | None) -> Any: ...


class IsaSpec(Protocol):
    word_bits: int


CONTRACTS: dict[str, Any] = {"assemble": Assemble, "disassemble": Disassemble, "load_program": LoadProgram,
                             "simulate": Simulate, "perf": PerfAdapter, "ledger": LedgerBuilder,
                             "isa": IsaSpec, "hw": type}
_CAPABILITIES = frozenset(CONTRACTS)
_TARGETS: dict[str, Target] = {}
_discovered = False


def load_ref(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


def register(target: Target) -> Target:
    """Add (or replace) a target record."""
    _TARGETS[target.name] = target
    return target


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    # the folder is listed, not imported: this base-layer module depends on no target (import-linter)
    folder = str(Path(__file__).with_name("targets"))
    for info in sorted(pkgutil.iter_modules([folder]), key=lambda m: m.name):
        if info.ispkg:
            _import_target_module(f"npukit.targets.{info.name}.target", required=False)
    for name in filter(None, (s.strip() for s in os.environ.get(ENV_VAR, "").split(","))):
        _import_target_module(name, required=True)


def _import_target_module(module: str, *, required: bool) -> None:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if not required and exc.name == module:
            return  # a target folder without target.py (work in progress)
        raise ConfigError(f"cannot import target module {module!r}: {exc}") from None
    target = getattr(mod, "TARGET", None)
    if not isinstance(target, Target):
        raise ConfigError(f"target module {module!r} defines no TARGET record")
    register(target)


def names(capability: str | None = None) -> list[str]:
    """Registered target names, optionally only those providing ``capability``."""
    _discover()
    return sorted(n for n, t in _TARGETS.items() if capability is None or t.provides(capability))


def get(name: str, capability: str | None = None) -> Target:
    """The record of ``name``; `ConfigError` naming the choices if unknown or lacking ``capability``."""
    _discover()
    target = _TARGETS.get(name)
    if target is None or (capability is not None and not target.provides(capability)):
        have = names(capability)
        what = f"with {capability!r} " if capability else ""
        raise ConfigError(f"unknown target {name!r} {what}(known: {', '.join(have) or 'none'})")
    return target


def check(target: Target) -> list[str]:
    """Problems of ``target``'s record against the capability contracts (empty when it keeps them):
    every reference imports, callables take the CLI's positional arguments, ``hw`` is a dataclass
    type, ``isa`` has ``word_bits``, backends import."""
    problems = []
    for cap in sorted(_CAPABILITIES):
        ref = getattr(target, cap)
        if not ref:
            continue
        try:
            obj = load_ref(ref)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{target.name}.{cap}: {ref!r} does not import ({exc})")
            continue
        why = _violation(cap, obj)
        if why:
            problems.append(f"{target.name}.{cap}: {ref} {why}")
    for module in target.backends:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            problems.append(f"{target.name}.backends: {module!r} does not import ({exc})")
    return problems


def _violation(cap: str, obj: Any) -> str | None:
    if cap == "hw":
        return None if isinstance(obj, type) and dataclasses.is_dataclass(obj) else "is not a dataclass type"
    if cap == "isa":
        return None if isinstance(getattr(obj, "word_bits", None), int) else "has no int word_bits"
    if not callable(obj):
        return "is not callable"
    params = list(inspect.signature(CONTRACTS[cap].__call__).parameters.values())[1:]  # after self
    n = sum(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in params)
    keywords = {p.name: None for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    try:  # the call the protocol describes, with placeholder values
        inspect.signature(obj).bind(*([None] * n), **keywords)
    except TypeError as exc:
        return f"cannot be called as {CONTRACTS[cap].__name__} ({exc})"
    except ValueError:  # no signature (a builtin): callable is all that can be said
        return None
    return None
