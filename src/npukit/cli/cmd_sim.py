"""``npukit sim``: run a program bit-exactly on a target's functional simulator, then time it.

The target is reached through its registry record (``--target``, see ``cmd_asm``): ``load_program``
reads the file (assembly, hex or binary), ``simulate(words, hw, **options)`` runs it. A simulator that
returns ``{"timing": TimingResult, "instructions": n, "state": {...}}`` (the shared timing core's result)
gets the timing table, the evidence ledger and ``--trace``; any other result is printed as JSON.

pccx program data: weights live in host DDR and GEMV/MEMCPY find them through constant-cache entries;
``--ddr-image FILE@ADDR`` writes a file's bytes into host DDR at byte address ADDR before the run
(e.g. a `weight_image` of an INT4 matrix), ``--l2-image FILE@WORD`` writes little-endian BF16 bit
patterns into L2 from word WORD (activations). Both repeat. Everything else the program sets up itself
(MEMSET shapes, MEMCPY host→L2).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from npukit.cli import ui
from npukit.cli.cmd_asm import add_target_arguments, call, read_words, resolve_target
from npukit.errors import ConfigError

if TYPE_CHECKING:
    from npukit.evidence import Ledger

MODEL = "npukit.sim.timing fluid event model"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sim", help="simulate a program bit-exactly and time it (cycles, stalls, trace)")
    p.add_argument("program", help="program file: .bin (LE words), .hex/.mem ($readmemh) or assembly (.s)")
    add_target_arguments(p, "sim")
    p.add_argument("--trace", default=None, metavar="FILE.json",
                   help="write a Chrome/Perfetto trace (open in ui.perfetto.dev)")
    p.add_argument("--dump", action="append", default=[], metavar="L2:ADDR+WORDS|DDR:ADDR+BYTES",
                   help="pccx: print the computed values of an L2 range (BF16) or host DDR range "
                   "after the run (repeatable)")
    p.add_argument("--dump-out", default=None, type=ui.output_file("--dump-out"),
                   metavar="FILE.bin|FILE.json",
                   help="also save the --dump ranges: raw bytes (.bin, one --dump) or JSON (hex per range)")
    p.add_argument("--rows", type=int, default=40, help="instructions listed in the table (default 40)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _ledger(res: Any, source: str) -> Ledger:
    from npukit.evidence import Ledger, Tier

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


def _plain(result: Any) -> Any:
    """A simulator result without a timing record, as JSON-able data."""
    import dataclasses

    if hasattr(result, "to_json"):
        return result.to_json()
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.asdict(result)
    return result


def run(args: argparse.Namespace) -> int:
    from npukit.evidence import Tier

    target, hw, label, options = resolve_target(args, "simulate")
    words = read_words(target, args.program, hw, None, options)
    if len(words) == 0:
        raise ConfigError(f"{args.program}: the program has no instructions")
    result = call(target.resolve("simulate"), words, hw, **options)
    head = {"program": args.program, "target": target.name, "hw": label, "overrides": args.overrides,
            **options}
    dumps = _dumps(args, target, words, hw, options) if args.dump else {}
    if not (isinstance(result, dict) and "timing" in result):
        ui.emit_json({**head, "result": _plain(result)})
        return 0
    res = result["timing"]
    source = f"hw {label}" + (f" ({', '.join(args.overrides)})" if args.overrides else "")
    led = _ledger(res, source)
    if args.trace:
        from npukit.sim.trace import write_trace

        write_trace(res, args.trace, process=f"{target.name} {label}",
                    metadata={"program": args.program, "hw": label, "overrides": args.overrides,
                              "tier": str(Tier.DERIVED), "source": f"{source} + {MODEL}"})
    if args.json:
        ui.emit_json({**head, "instructions": result.get("instructions", len(res.ops)),
                      "clock_hz": res.clock_hz, "timing": res, "ledger": led, "trace": args.trace,
                      "state": result.get("state"), "dump": {k: v.hex() for k, v in dumps.items()}})
        return 0
    _print_tables(res, led, args.rows)
    if result.get("state"):
        print()
        ui.table([[k, v] for k, v in result["state"].items()], ["state", "value"])
    if args.trace:
        print(f"\ntrace written to {args.trace} (open in ui.perfetto.dev)")
    _print_dumps(dumps, target)
    return 0


def _dumps(args: argparse.Namespace, target: Any, words: Any, hw: Any, options: dict[str, Any]
           ) -> dict[str, bytes]:
    """The --dump ranges after a run of the program on the target's functional simulator (its
    golden-vector module, ``extra["vectors"]``, knows the memories)."""
    if not target.provides("vectors"):
        raise ConfigError(f"--dump reads target memories; target {target.name!r} has none to read")
    vec = target.resolve("vectors")
    specs = [vec.parse_dump(d) for d in args.dump]
    if args.dump_out and args.dump_out.endswith(".bin") and len(specs) != 1:
        raise ConfigError("--dump-out FILE.bin holds one --dump range; use FILE.json for several")
    sim = vec.simulator(words, hw, options)
    for _ in vec.run_checked(sim):
        pass
    out = {spec: vec.read_dump(sim, *parsed) for spec, parsed in zip(args.dump, specs, strict=True)}
    if args.dump_out:
        from pathlib import Path

        path = Path(args.dump_out)
        if path.suffix == ".bin":
            path.write_bytes(next(iter(out.values())))
        else:
            path.write_text(json.dumps({k: v.hex() for k, v in out.items()}, indent=2) + "\n")
    return out


def _print_dumps(dumps: dict[str, bytes], target: Any) -> None:
    vec = target.resolve("vectors") if dumps else None
    for spec, data in dumps.items():
        region, addr, _ = vec.parse_dump(spec)
        print()
        head = ["L2 word", "BF16 values, element 0 first (bits: --json)"] if region == "L2" else [
            "host byte", "hex"]
        ui.table(vec.dump_rows(region, addr, data), head)


def _print_tables(res: Any, led: Ledger, n_rows: int) -> None:
    rows = [[o.index, o.engine, o.label[:64], f"{o.start:.0f}", f"{o.end:.0f}", f"{o.cycles:.0f}",
             _stall_text(o.stalls)] for o in res.ops[: max(n_rows, 0)]]
    ui.table(rows, ["#", "engine", "instruction", "start", "end", "cycles", "stalls (cycles)"],
             align="rlllrrrl")
    if len(res.ops) > n_rows:
        print(f"... {len(res.ops) - n_rows} more instructions not listed (--rows N, or --json for all)")
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
