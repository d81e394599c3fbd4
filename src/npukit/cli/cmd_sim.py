"""``npukit sim``: run a program bit-exactly on a target's functional simulator, then time it.

Program data: weights live in host DDR and GEMV/MEMCPY find them through constant-cache entries;
``--ddr-image FILE@ADDR`` writes a file's bytes into host DDR at byte address ADDR before the run
(e.g. a `weight_image` of an INT4 matrix), ``--l2-image FILE@WORD`` writes little-endian BF16 bit
patterns into L2 from word WORD (activations). Both repeat. Everything else the program sets up itself
(MEMSET shapes, MEMCPY host→L2).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from npukit import hw as hwmod
from npukit.cli import ui
from npukit.errors import ConfigError, NpukitError
from npukit.evidence import Ledger, Tier

MODEL = "npukit.sim.timing fluid event model"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sim", help="simulate a program bit-exactly and time it (cycles, stalls, trace)")
    p.add_argument("program", help="program file: .bin (LE 64-bit words), .hex/.mem ($readmemh) or .s")
    p.add_argument("--hw", default="pccx-v002-kv260", help="hardware preset name or TOML path")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="hardware override, e.g. ddr.bandwidth_gbps=12.8 (repeatable)")
    p.add_argument("--profile", choices=("strict", "extended"), default="extended",
                   help="ISA profile (default extended)")
    p.add_argument("--ddr-image", action="append", default=[], metavar="FILE@ADDR",
                   help="preload host DDR with FILE's bytes at byte address ADDR (repeatable)")
    p.add_argument("--l2-image", action="append", default=[], metavar="FILE@WORD",
                   help="preload L2 with FILE's little-endian BF16 bits from word WORD (repeatable)")
    p.add_argument("--trace", default=None, metavar="FILE.json",
                   help="write a Chrome/Perfetto trace (open in ui.perfetto.dev)")
    p.add_argument("--rows", type=int, default=40, help="instructions listed in the table (default 40)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _split_at(text: str, what: str) -> tuple[Path, int]:
    if "@" not in text:
        raise ConfigError(f"{what} {text!r} is not FILE@ADDR")
    name, addr = text.rsplit("@", 1)
    try:
        value = int(addr, 0)
    except ValueError:
        raise ConfigError(f"{what} {text!r}: address {addr!r} is not an integer") from None
    path = Path(name)
    if not path.is_file():
        raise ConfigError(f"{what}: no such file {name!r}")
    return path, value


def _load_words(path: Path, profile: str, hw: Any) -> list[int]:
    from npukit.targets.pccx import asm

    if not path.is_file():
        raise ConfigError(f"no such program file {str(path)!r}")
    if path.suffix.lower() in (".s", ".asm"):
        return asm.assemble(path.read_text(), profile, hw)
    return asm.read_program(path)


def simulate_pccx(args: argparse.Namespace, hw: Any) -> tuple[Any, list[Any]]:
    import numpy as np

    from npukit.targets.pccx.sim import Simulator
    from npukit.targets.pccx.timing import simulate_works

    words = _load_words(Path(args.program), args.profile, hw)
    sim = Simulator(hw, args.profile)
    for spec in args.ddr_image:
        path, addr = _split_at(spec, "--ddr-image")
        sim.host.write(addr, np.frombuffer(path.read_bytes(), np.uint8))
    for spec in args.l2_image:
        path, word = _split_at(spec, "--l2-image")
        data = path.read_bytes()
        if len(data) % 2:
            raise ConfigError(f"--l2-image {path}: {len(data)} bytes is not a whole number of BF16 values")
        sim.write_l2_bits(word, np.frombuffer(data, "<u2"))
    sim.load_program(words)
    works = sim.run()
    if sim.error is not None:
        raise NpukitError(str(sim.error))
    return simulate_works(hw, works), works


def _ledger(res: Any, source: str) -> Ledger:
    led = Ledger()
    src = f"{source} + {MODEL}"
    led.add("total cycles", res.cycles, "cycles", Tier.DERIVED, src)
    led.add("total time", res.seconds * 1e6, "us", Tier.DERIVED, src)
    for name, st in res.engines.items():
        if st.busy or st.stalls:
            led.add(f"{name} busy", st.busy, "cycles", Tier.DERIVED, src)
            for why, c in sorted(st.stalls.items()):
                led.add(f"{name} stall {why}", c, "cycles", Tier.DERIVED, src)
    for name, b in res.resource_bytes.items():
        if b:
            led.add(f"{name} bytes", b, "B", Tier.DERIVED, src)
            led.add(f"{name} mean bandwidth", b / res.seconds / 1e9 if res.seconds else 0.0, "GB/s",
                    Tier.DERIVED, src)
    return led


def _stall_text(stalls: dict[str, float]) -> str:
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:2]
    return ", ".join(f"{k} {v:.0f}" for k, v in top if v >= 0.5)


def run(args: argparse.Namespace) -> int:
    hw = hwmod.load_hw(args.hw, args.overrides)
    target = type(hw).__module__.split(".")[2] if type(hw).__module__.startswith("npukit.targets.") else "?"
    if target != "pccx":
        raise ConfigError(f"npukit sim supports the pccx target; {args.hw!r} is {target!r}")
    res, works = simulate_pccx(args, hw)
    source = f"hw {args.hw}" + (f" ({', '.join(args.overrides)})" if args.overrides else "")
    led = _ledger(res, source)
    if args.trace:
        from npukit.sim.trace import write_trace

        write_trace(res, args.trace, process=f"pccx {args.hw}",
                    metadata={"program": args.program, "hw": args.hw, "overrides": args.overrides,
                              "tier": str(Tier.DERIVED), "source": f"{source} + {MODEL}"})
    if args.json:
        ui.emit_json({"program": args.program, "hw": args.hw, "overrides": args.overrides,
                      "profile": args.profile, "instructions": len(works), "clock_hz": res.clock_hz,
                      "timing": res, "ledger": led, "trace": args.trace})
        return 0
    rows = [[o.index, o.engine, o.label[:64], f"{o.start:.0f}", f"{o.end:.0f}", f"{o.cycles:.0f}",
             _stall_text(o.stalls)] for o in res.ops[: max(args.rows, 0)]]
    ui.table(rows, ["#", "engine", "instruction", "start", "end", "cycles", "stalls (cycles)"],
             align="rlllrrrl")
    if len(res.ops) > args.rows:
        print(f"... {len(res.ops) - args.rows} more instructions not listed (--rows N, or --json for all)")
    print()
    total = res.cycles or 1.0
    erows = []
    for name, st in res.engines.items():
        erows.append([name, f"{st.busy:.0f}", f"{100 * st.busy / total:.1f}%",
                      ", ".join(f"{k} {v:.0f}" for k, v in sorted(st.stalls.items(), key=lambda kv: -kv[1]))
                      or "-", f"{st.idle:.0f}"])
    ui.table(erows, ["engine", "busy", "util", "stalls (cycles)", "idle"], align="lrrlr")
    print()
    ui.table(led.rows(), ["figure", "value", "tier", "source"])
    if args.trace:
        print(f"\ntrace written to {args.trace} (open in ui.perfetto.dev)")
    return 0
