"""Open a model by name: a Hugging Face directory (``config.json`` + safetensors [+ tokenizer.json])
or a shape preset (``npukit.models.presets``, filled with deterministic synthetic weights).

Model families register themselves in modules named ``npukit/models/family_<name>.py`` (found
automatically, like CLI subcommands), each calling `register_family` with the ``model_type``
values it understands and a loader returning a `LoadedModel`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npukit.errors import ConfigError, ModelError
from npukit.models import presets
from npukit.plugins import import_prefixed


@dataclass
class LoadedModel:
    """A model ready for a backend: family config + lazily read weights (+ tokenizer)."""

    family: str  # registry key, e.g. "gemma3n"
    name: str  # preset name or directory path
    config: Any  # the family's typed config dataclass
    weights: Any  # the family's weights object (one tensor at a time)
    tokenizer: Any | None = None  # tokenizers.Tokenizer when the directory ships tokenizer.json
    origin: str = "checkpoint"  # "checkpoint" or "preset" (synthetic weights)
    raw_config: dict[str, Any] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return tuple(getattr(self.config, "eos_token_ids", ()))


# loader(raw_config, directory or None for a preset, name, seed) -> LoadedModel
Loader = Callable[[dict[str, Any], Path | None, str, int], LoadedModel]


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    load: Loader


_FAMILIES: dict[str, Family] = {}
_discovered = False


def register_family(name: str, model_types: Iterable[str], load: Loader) -> None:
    _FAMILIES[name] = Family(name, tuple(model_types), load)


# single-file checkpoints by suffix (".gguf"): loader(path, name) -> LoadedModel
_FILE_FORMATS: dict[str, Callable[[Path, str], LoadedModel]] = {}


def register_file_format(suffix: str, load: Callable[[Path, str], LoadedModel]) -> None:
    _FILE_FORMATS[suffix.lower()] = load


# GGUF files by ``general.architecture`` ("gemma3", "llama"); other GGUF files go to the ".gguf" format
_GGUF_ARCHITECTURES: dict[str, Callable[[Path, str], LoadedModel]] = {}


def register_gguf_architecture(arch: str, load: Callable[[Path, str], LoadedModel]) -> None:
    _GGUF_ARCHITECTURES[arch] = load


def _gguf_loader(path: Path) -> Callable[[Path, str], LoadedModel] | None:
    from npukit.models.gguf import GGUFFile

    return _GGUF_ARCHITECTURES.get(str(GGUFFile(path).meta.get("general.architecture")))


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    import_prefixed("npukit.models", "family_")


def families() -> dict[str, Family]:
    _discover()
    return dict(_FAMILIES)


def family_for(raw: dict[str, Any], where: str) -> Family:
    mt = raw.get("model_type")
    for fam in families().values():
        if mt in fam.model_types:
            return fam
    known = sorted(t for f in _FAMILIES.values() for t in f.model_types)
    raise ConfigError(f"{where}: model_type {mt!r} unsupported (known: {', '.join(known)})")


def read_config(directory: Path) -> dict[str, Any]:
    path = directory / "config.json"
    if not path.is_file():
        raise ModelError(f"{directory}: no config.json (not a Hugging Face model directory)")
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{path}: unreadable config ({exc})") from None
    if not isinstance(raw, dict):
        raise ModelError(f"{path}: config is not a JSON object")
    return raw


def load_tokenizer(directory: Path) -> Any | None:
    """tokenizers.Tokenizer from ``tokenizer.json`` if the directory has one, else None."""
    path = directory / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers package raises plain Exceptions on bad files
        raise ModelError(f"{path}: cannot load tokenizer ({str(exc).splitlines()[0]})") from None


def load_model(spec: str | Path, seed: int = 0) -> LoadedModel:
    """Open a model directory, or a preset name (synthetic weights from ``seed``)."""
    path = Path(spec)
    if path.is_dir():
        raw = read_config(path)
        return family_for(raw, str(path)).load(raw, path, str(path), seed)
    if str(spec) in presets.model_preset_names():
        raw = presets.model_preset(str(spec))
        return family_for(raw, f"preset {spec}").load(raw, None, str(spec), seed)
    if path.is_file():
        _discover()
        load = _gguf_loader(path) if path.suffix.lower() == ".gguf" else None
        load = load or _FILE_FORMATS.get(path.suffix.lower())
        if load is not None:
            return load(path, str(path))
        known = ", ".join(sorted(_FILE_FORMATS)) or "none"
        raise ModelError(f"{path}: not a model directory or a known single-file format ({known})")
    raise ConfigError(f"no model directory or preset named {str(spec)!r}; presets: "
                      f"{', '.join(presets.model_preset_names())}")
