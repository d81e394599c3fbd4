"""The one place that says what a target is.

A target is a folder ``npukit/targets/<name>/`` whose module ``target.py`` defines ``TARGET``, a
`Target` record. Every capability is named by a lazy ``"module:attribute"`` reference, so listing the
targets imports nothing heavy and this base-layer module never imports a target (layers stay
enforceable). Out-of-tree targets (a user's, or the toy machine in the tests) register the same way:
put their module names in ``NPUKIT_TARGETS`` (comma-separated) or call `register`.

Capabilities, each optional (``None`` = the target does not offer it):

* ``hw`` — the hardware-description dataclass that TOML presets with ``target = "<name>"`` build;
* ``isa`` — the ISA spec (`npukit.isa` toolkit object) behind asm/disasm and the docs table;
* ``assemble(text, hw) -> list[int]``, ``disassemble(words, hw) -> listing`` (rows of `npukit.isa.text`),
  ``load_program(path, hw) -> list[int]``, ``simulate(words, hw, **options) -> result`` —
  what ``npukit asm|disasm|sim --target <name>`` call;
* ``perf(hw) -> npukit.perf.machine.Machine`` — the roofline/energy adapter;
* ``ledger(hw, cfg, **kw) -> Ledger`` — the target's own evidence ledger;
* ``backends`` — modules that register (model family, target) generation backends on import;
* ``extra`` — named entry points; the names shared code resolves have a contract too (``cli``,
  ``rtl``, ``vectors``/``decoder_vectors``, ``sim_sweep``, ``tflite_delegate``: `EXTRA_CONTRACTS`),
  the rest are the target's own and must import.

Each capability's typed contract is a `Protocol` below (`Assemble`, `Disassemble`, `LoadProgram`,
`Simulate`, `PerfAdapter`, `LedgerBuilder`, `IsaSpec`, and the extras'); `check` verifies a record
against them, and
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


class CliArguments(Protocol):  # extra["cli"]: the target's flags on asm/disasm/sim (npukit.cli.cmd_asm)
    def __call__(self, group: Any, command: str, /) -> None: ...


class PortMaps(Protocol):  # extra["rtl"]: {unit: port-map TOML path} of the shipped RTL (npukit cosim)
    def __call__(self) -> Any: ...


class DelegateFactory(Protocol):  # extra["tflite_delegate"] (npukit.models.tflite.delegates)
    def __call__(self, *, variant: str | None, hw: str | None, overrides: list[str]) -> Any: ...


class VectorExporter(Protocol):  # extra["vectors"] / ["decoder_vectors"]: a module (npukit vectors)
    def export(self, *args: Any, **kwargs: Any) -> Any: ...


class SimSweep(Protocol):  # extra["sim_sweep"]: npukit.perf.simsweep.SimAdapter, restated here (base layer)
    target: str
    engines: tuple[str, ...]
    workload_axes: dict[str, Any]

    def load_workload(self, spec: str) -> Any: ...
    def workload_digest(self, workload: Any) -> str: ...
    def program_key(self, hw: Any, params: dict[str, Any]) -> Any: ...
    def compile(self, workload: Any, hw: Any, params: dict[str, Any]) -> Any: ...
    def time(self, program: Any, hw: Any, params: dict[str, Any]) -> Any: ...


EXTRA_CONTRACTS: dict[str, Any] = {"cli": CliArguments, "rtl": PortMaps, "tflite_delegate": DelegateFactory,
                                   "vectors": VectorExporter, "decoder_vectors": VectorExporter,
                                   "sim_sweep": SimSweep}

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
    every reference imports (extras included), callables take the CLI's positional arguments, ``hw``
    is a dataclass type, ``isa`` has ``word_bits``, shared extras keep `EXTRA_CONTRACTS`, backends import."""
    problems = []
    refs = [(cap, getattr(target, cap), CONTRACTS[cap]) for cap in sorted(_CAPABILITIES)]
    refs += [(f"extra[{name!r}]", ref, EXTRA_CONTRACTS.get(name))
             for name, ref in sorted(target.extra.items())]
    for cap, ref, contract in refs:
        if not ref:
            continue
        try:
            obj = load_ref(ref)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{target.name}.{cap}: {ref!r} does not import ({exc})")
            continue
        why = None if contract is None else _violation(contract, obj)
        if why:
            problems.append(f"{target.name}.{cap}: {ref} {why}")
    for module in target.backends:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            problems.append(f"{target.name}.backends: {module!r} does not import ({exc})")
    return problems


def _violation(contract: Any, obj: Any) -> str | None:
    if contract is type:
        return None if isinstance(obj, type) and dataclasses.is_dataclass(obj) else "is not a dataclass type"
    if "__call__" not in vars(contract):  # a protocol of attributes and methods
        return _missing_members(contract, obj)
    if not callable(obj):
        return "is not callable"
    return _call_mismatch(contract, obj)


def _missing_members(contract: Any, obj: Any) -> str | None:
    for name, kind in inspect.get_annotations(contract).items():
        if kind == "int" and not isinstance(getattr(obj, name, None), int):
            return f"has no int {name}"
        if not hasattr(obj, name):
            return f"has no {name} ({contract.__name__})"
    for name, member in vars(contract).items():
        if inspect.isfunction(member) and not name.startswith("_"):
            if not callable(getattr(obj, name, None)):
                return f"has no method {name} ({contract.__name__})"
            why = _call_mismatch_method(contract, name, getattr(obj, name))
            if why:
                return why
    return None


def _call_mismatch_method(contract: Any, name: str, bound: Any) -> str | None:
    params = list(inspect.signature(vars(contract)[name]).parameters.values())[1:]  # after self
    if any(p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) for p in params):
        return None  # the protocol leaves the arguments open
    try:
        inspect.signature(bound).bind(*([None] * len(params)))
    except TypeError as exc:
        return f"{name} cannot be called as {contract.__name__}.{name} ({exc})"
    except ValueError:
        return None
    return None


def _call_mismatch(contract: Any, obj: Any) -> str | None:
    params = list(inspect.signature(contract.__call__).parameters.values())[1:]  # after self
    n = sum(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in params)
    keywords = {p.name: None for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    try:  # the call the protocol describes, with placeholder values
        inspect.signature(obj).bind(*([None] * n), **keywords)
    except TypeError as exc:
        return f"cannot be called as {contract.__name__} ({exc})"
    except ValueError:  # no signature (a builtin): callable is all that can be said
        return None
    return None
