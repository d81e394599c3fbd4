"""``npukit hw``: list hardware presets, or show one with overrides applied."""

from __future__ import annotations

import argparse

from npukit.cli import ui


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hw", help="list hardware presets or show one (with --set overrides)")
    p.add_argument("preset", nargs="?", help="preset name or path to a TOML description")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one field, e.g. --set ddr.bandwidth_gbps=12.8 (repeatable)")
    p.add_argument("--list", action="store_true", help="list the presets (what no PRESET does)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _flatten(d: dict, prefix: str = "") -> list[list[str]]:
    rows = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            rows += _flatten(v, key + ".")
        else:
            rows.append([key, v if isinstance(v, str) else repr(v)])
    return rows


def run(args: argparse.Namespace) -> int:
    from npukit import hw

    if args.list and args.preset:
        from npukit.errors import ConfigError

        raise ConfigError("give PRESET or --list, not both")
    if not args.preset:
        names = hw.preset_names()
        if args.json:
            ui.emit_json({"presets": names})
        else:
            ui.table([[n] for n in names], ["preset"])
        return 0
    if args.preset.endswith(".toml") or "/" in args.preset:
        ui.check_input(args.preset, "preset")
    desc = hw.load_hw(args.preset, args.overrides)
    data = hw.to_dict(desc)
    if args.json:
        ui.emit_json({"preset": args.preset, "description": data})
    else:
        ui.table(_flatten(data), ["field", "value"])
    return 0
