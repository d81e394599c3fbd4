"""Hardware descriptions as data: typed (nested) dataclasses loaded from TOML presets.

A target names its description class in its `npukit.registry.Target` record (``hw=``). A preset is
a TOML file in ``npukit/presets/hw/`` (or any path) whose top-level ``target`` key names the target;
every other key maps onto a dataclass field, nested tables onto nested dataclasses. Users override single
fields with dotted ``key=value`` strings (``--set ddr.bandwidth_gbps=12.8``), so a sweep never
edits code. Unknown keys, wrong types and missing fields raise `ConfigError` with one line.

Derived quantities (field widths from log2 parameters, peak rates) are properties on the
dataclasses, never stored twice.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from npukit import registry
from npukit.errors import ConfigError

T = TypeVar("T")


def preset_names() -> list[str]:
    root = resources.files("npukit") / "presets" / "hw"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


def _preset_text(name_or_path: str | Path) -> tuple[str, str]:
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.exists():
        return path.read_text(), str(path)
    res = resources.files("npukit") / "presets" / "hw" / f"{name_or_path}.toml"
    if res.is_file():
        return res.read_text(), f"preset {name_or_path}"
    if path.suffix and path.suffix != ".toml":
        raise ConfigError(f"{name_or_path}: hardware descriptions are TOML files ({path.suffix} is not "
                          f"accepted); presets: {', '.join(preset_names())}")
    if path.suffix == ".toml":
        raise ConfigError(f"{name_or_path}: no such file")
    raise ConfigError(f"unknown hardware preset {str(name_or_path)!r}; known: {', '.join(preset_names())}")


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {type(value).__name__}")
        return _build(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], where)
    if origin in (list, tuple):
        (inner, *_) = typing.get_args(tp) or (Any,)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        items = [_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value, 0)
            except ValueError:
                pass
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def _build(cls: type[T], data: dict[str, Any], where: str) -> T:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, f in fields.items():
        sub = f"{where}.{name}" if where else name
        if name in data:
            kwargs[name] = _coerce(data[name], hints[name], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{sub}: missing required field")
    try:
        obj = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where or cls.__name__}: {exc}") from None
    validate = getattr(obj, "validate", None)
    if callable(validate):
        validate()
    return obj


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=3"`` -> (["a", "b"], 3); the value is parsed as a TOML value, else kept as a string."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not key=value")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"override {text!r} has an empty key")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str] | dict[str, Any] | None) -> dict[str, Any]:
    items = overrides.items() if isinstance(overrides, dict) else (
        (".".join(p), v) for p, v in map(parse_override, overrides or [])
    )
    out = _deepcopy(data)
    for key, value in items:
        path = key.split(".")
        node = out
        for part in path[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {key!r}: {part!r} is not a table of this description")
            node = nxt
        node[path[-1]] = value
    return out


def _deepcopy(d: dict[str, Any]) -> dict[str, Any]:
    return {k: _deepcopy(v) if isinstance(v, dict) else v for k, v in d.items()}


def load_hw(name_or_path: str | Path, overrides: list[str] | dict[str, Any] | None = None,
            expect: str | None = None) -> Any:
    """Load a preset (by name or TOML path), apply overrides, build the target's dataclass."""
    text, origin = _preset_text(name_or_path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin}: invalid TOML: {exc}") from None
    target = data.pop("target", None)
    data.pop("description", None)
    if target is None:
        raise ConfigError(f"{origin}: missing top-level 'target' key")
    if expect is not None and target != expect:
        raise ConfigError(f"{origin} describes a {target!r} device, not {expect!r}")
    return _build(description_class(target, origin), apply_overrides(data, overrides), "")


def description_class(target: str, origin: str = "") -> type:
    """The hardware-description dataclass of ``target``, from its registry record."""
    where = f"{origin}: " if origin else ""
    try:
        cls = registry.get(str(target), "hw").resolve("hw")
    except ConfigError as exc:
        raise ConfigError(f"{where}{exc}") from None
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ConfigError(f"{where}target {target!r}: hardware description {cls!r} is not a dataclass")
    return cls


def target_of(desc: Any) -> str:
    """The target whose hardware description ``desc`` is an instance of (compared by class name, so
    no target is imported to answer)."""
    cls = type(desc)
    ref = f"{cls.__module__}:{cls.__qualname__}"
    names = registry.names("hw")
    for name in names:
        if registry.get(name).hw == ref:
            return name
    for name in names:  # a record may name the class through a re-export
        if registry.get(name).resolve("hw") is cls:
            return name
    raise ConfigError(f"{cls.__name__} is not the hardware description of any registered target")


def to_dict(obj: Any) -> dict[str, Any]:
    """The JSON/TOML form of a description (fields only, no derived properties)."""
    return dataclasses.asdict(obj)
