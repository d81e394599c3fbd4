"""``npukit cosim``: run golden vectors against RTL under Verilator and cocotb.

For each port map (``--port-map FILE``, or the reference RTL a target ships: ``--shipped tern``) it
generates a cocotb test, builds the design once with Verilator (reused while the sources do not
change), runs every case of the map's unit from an ``npukit vectors`` directory and reports per unit:
cases bit-exact, the first mismatch (case, port, index, got, expected) and the cycles the RTL took
against npukit's cycle model. Exit 1 when any case mismatches; 2 for a bad port map, RTL or vectors.
docs/cosim.md describes the port map.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from npukit.cli import ui
from npukit.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cosim", help="co-simulate RTL against golden vectors (Verilator + cocotb): "
                       "bit-exact cases, first mismatch, cycles vs npukit's model")
    p.add_argument("vectors", help="an `npukit vectors --target tern` directory")
    p.add_argument("--port-map", action="append", default=[], metavar="FILE",
                   help="port map TOML of a design (repeatable; docs/cosim.md)")
    p.add_argument("--shipped", metavar="TARGET", default=None,
                   help="the reference RTL and port maps a target ships (tern)")
    p.add_argument("--unit", action="append", default=[], metavar="UNIT",
                   help="with --shipped: only these units (repeatable; default all)")
    p.add_argument("--cases", type=ui.positive(int), default=None, metavar="N",
                   help="the first N cases of each unit (default all)")
    p.add_argument("--build-dir", default=None, metavar="DIR",
                   help="where Verilator builds go (default ~/.cache/npukit/cosim; reused while the RTL "
                   "is unchanged)")
    p.add_argument("--json", action="store_true", help="the per-unit reports as JSON")
    p.set_defaults(func=run)


def shipped_port_maps(target: str, only: list[str]) -> list[Path]:
    from npukit import registry

    t = registry.get(target)
    if not t.provides("rtl"):
        raise ConfigError(f"target {target!r} ships no RTL (have: {', '.join(registry.names('rtl'))})")
    maps: dict[str, Path] = t.resolve("rtl")()
    unknown = sorted(set(only) - set(maps))
    if unknown:
        raise ConfigError(f"target {target!r} ships no RTL for {', '.join(unknown)} "
                          f"(have: {', '.join(maps)})")
    return [p for u, p in maps.items() if not only or u in only]


def _mismatch_text(m: dict[str, Any] | None) -> str:
    if m is None:
        return "-"
    return (f"case {m['case']} ({m['label']}): field {m['field']}, port {m['port']}, index {m['index']}: "
            f"got {m['got']}, expected {m['expected']}")


def run(args: argparse.Namespace) -> int:
    from npukit.cosim import portmap
    from npukit.cosim.run import cosimulate

    if not args.port_map and not args.shipped:
        raise ConfigError("give --port-map FILE (your RTL) or --shipped tern (the reference RTL)")
    if args.unit and not args.shipped:
        raise ConfigError("--unit selects among --shipped units; a --port-map names its own unit")
    vectors = Path(args.vectors)
    if not (vectors / "manifest.json").is_file():
        raise ConfigError(f"{vectors}: no manifest.json (make one with npukit vectors --target tern)")
    paths = [Path(p) for p in args.port_map]
    if args.shipped:
        paths += shipped_port_maps(args.shipped, args.unit)
    maps = [portmap.load(p) for p in paths]  # every map checked before the first build

    def say(msg: str) -> None:
        print(f"cosim {msg} ...", file=sys.stderr, flush=True)

    build_root = Path(args.build_dir) if args.build_dir else None
    reports = [cosimulate(pm, vectors, build_root, args.cases, say) for pm in maps]
    ok = all(r.ok for r in reports)
    if args.json:
        ui.emit_json({"ok": ok, "units": [r.to_json() for r in reports]})
    else:
        ui.table([[r.unit, r.top, f"{r.exact}/{r.cases}", r.cycle_summary()] for r in reports],
                 ["unit", "top", "bit-exact", "cycles: RTL (measured) / model (derived)"])
        for r in reports:
            if r.first_mismatch:
                print(f"{r.unit}: first mismatch: {_mismatch_text(r.first_mismatch)}")
            if r.skipped:
                print(f"{r.unit}: {len(r.skipped)} cases skipped, beyond {r.port_map}'s [limits] "
                      f"(first: case {r.skipped[0]['case']}, {r.skipped[0]['reason']})")
            if r.unchecked:
                print(f"{r.unit}: outputs not bound in {r.port_map}, not checked: {', '.join(r.unchecked)}")
        print("cycles: RTL = rising edges from start to done, counted in the Verilator simulation "
              "(measured); model = npukit's cycle model of the unit (derived)")
    return 0 if ok else 1
