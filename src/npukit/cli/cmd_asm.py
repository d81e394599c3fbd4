"""``npukit asm``: assemble a target's assembly text into a program file (raw little-endian words or hex).

``asm``, ``disasm`` and ``sim`` reach a target only through its `npukit.registry` record
(``--target``, default: the ``--hw`` preset's target, else pccx), so a target gets these commands by
registering ``assemble``/``disassemble``/``load_program``/``simulate`` (and ``isa`` for the word width).
Target-specific flags come from the record's ``extra["cli"]`` hook, ``add_arguments(group, command)``,
shown under "<target> options"; their values reach the target's functions as keyword arguments.
The helpers here are shared by the three commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from npukit.cli import ui
from npukit.errors import ConfigError, FormatError, NpukitError

DEFAULT_TARGET = "pccx"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("asm", help="assemble a target's assembly text into a program (bin or $readmemh hex)")
    p.add_argument("src", help="assembly source file ('-' for stdin)")
    p.add_argument("-o", "--output", required=True, help="program file to write")
    p.add_argument("--format", choices=["bin", "hex"], help="bin = little-endian words, "
                   "hex = $readmemh text (default: from the output suffix, .hex/.mem -> hex)")
    add_target_arguments(p, "asm")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


# --- shared by asm, disasm and sim -----------------------------------------------------------------

def add_target_arguments(p: argparse.ArgumentParser, command: str) -> None:
    """--target, --hw, --set and every registered target's own flags (its ``cli`` hook)."""
    p.add_argument("--target", default=None,
                   help="registered target (default: the --hw preset's target, else pccx; "
                        "`npukit hw --list` lists presets)")
    p.add_argument("--hw", default=None, help="hardware preset name or TOML path "
                   "(default: the target's first preset, else its description's defaults)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="hardware override, e.g. ddr.bandwidth_gbps=12.8 (repeatable)")
    p.set_defaults(target_options=_add_hook_arguments(p, command))


def _add_hook_arguments(p: argparse.ArgumentParser, command: str) -> dict[str, list[tuple[str, Any, str]]]:
    """Each target's flags in its own group; per target the (dest, default, flag) it added."""
    from npukit import registry

    out: dict[str, list[tuple[str, Any, str]]] = {}
    try:
        names = registry.names("cli")
    except NpukitError:  # a bad NPUKIT_TARGETS: reported when a command resolves a target
        return out
    for name in names:
        try:
            hook = registry.get(name).resolve("cli")
        except (NpukitError, ImportError):
            continue
        group = p.add_argument_group(f"{name} options")
        before = len(p._actions)
        try:
            hook(group, command)
        except argparse.ArgumentError:  # a flag another target already defines: rename it (--<target>-...)
            continue
        added = [a for a in p._actions[before:] if a.option_strings]
        out[name] = [(a.dest, a.default, a.option_strings[0]) for a in added]
    return out


def _default_preset(target: str) -> str | None:
    import tomllib

    from npukit import hw as hwmod

    for name in hwmod.preset_names():
        try:
            text, _ = hwmod._preset_text(name)
            if tomllib.loads(text).get("target") == target:
                return name
        except (NpukitError, tomllib.TOMLDecodeError):
            continue
    return None


def resolve_target(args: argparse.Namespace, capability: str) -> tuple[Any, Any, str, dict[str, Any]]:
    """(target record, hardware description, a label of it, the target's own options) for ``args``."""
    from npukit import hw as hwmod
    from npukit import registry

    name, hw, label = args.target, None, args.hw
    if args.hw is not None:
        hw = hwmod.load_hw(args.hw, args.overrides, expect=name)
        name = name or hwmod.target_of(hw)
    name = name or DEFAULT_TARGET
    target = registry.get(name, capability)
    if hw is None and target.provides("hw"):
        preset = _default_preset(name)
        if preset is not None:
            hw, label = hwmod.load_hw(preset, args.overrides), preset
        else:
            cls = target.resolve("hw")
            data = hwmod.apply_overrides(hwmod.to_dict(cls()), args.overrides)
            hw, label = hwmod._build(cls, data, ""), f"{name} defaults"
    elif hw is None and args.overrides:
        raise ConfigError(f"target {name!r} has no hardware description to --set")
    return target, hw, label or name, _options(args, name)


def _options(args: argparse.Namespace, name: str) -> dict[str, Any]:
    hooks: dict[str, list[tuple[str, Any, str]]] = getattr(args, "target_options", {}) or {}
    for other, added in hooks.items():
        if other == name:
            continue
        for dest, default, flag in added:
            if getattr(args, dest, default) != default and dest not in {d for d, _, _ in hooks.get(name, [])}:
                raise ConfigError(f"{flag} is an option of target {other!r}, not {name!r}")
    return {dest: getattr(args, dest) for dest, _, _ in hooks.get(name, [])}


def call(fn: Any, *args: Any, **options: Any) -> Any:
    """``fn(*args, **options)`` with only the options ``fn`` accepts (a target's loader need not take
    its simulator's flags)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(*args, **options)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        options = {k: v for k, v in options.items() if k in params}
    return fn(*args, **options)


def word_bits(target: Any) -> int:
    """The target's instruction word width (from its ISA spec; 64 when it registers none)."""
    if not target.provides("isa"):
        return 64
    return int(target.resolve("isa").word_bits)


def read_words(target: Any, path: str, hw: Any, fmt: str | None, options: dict[str, Any]) -> list[int]:
    """A program file's words: the target's ``load_program``, else raw words of its ISA's width."""
    from npukit.isa import text

    if target.provides("load_program"):
        load = target.resolve("load_program")
        return call(load, path, hw, **({"fmt": fmt} if fmt else {}), **options)
    if not Path(path).is_file():
        raise ConfigError(f"no such program file {path!r}")
    return text.read_program(path, word_bits(target), fmt)


# --- npukit asm ------------------------------------------------------------------------------------

def _read_text(src: str) -> str:
    if src == "-":
        import sys

        return sys.stdin.read()
    try:
        return Path(src).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"cannot read {src}: {getattr(exc, 'strerror', None) or exc}") from None


def run(args: argparse.Namespace) -> int:
    from npukit.isa import text

    target, hw, _, options = resolve_target(args, "assemble")
    words = call(target.resolve("assemble"), _read_text(args.src), hw, **options)
    out = Path(args.output)
    fmt = text.program_format(out, args.format)
    try:
        text.write_program(out, words, word_bits(target), fmt)
    except OSError as exc:
        raise FormatError(f"cannot write {out}: {exc.strerror}") from None
    summary = {"target": target.name, "source": args.src, "output": str(out), "format": fmt, **options,
               "words": len(words)}
    if args.json:
        ui.emit_json(summary)
    else:
        ui.table([[k, v] for k, v in summary.items()], ["field", "value"])
    return 0
