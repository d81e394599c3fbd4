"""``npukit vectors``: golden vectors for RTL tests of a pccx program.

For a program (assembly, $readmemh hex or binary) and its inputs (``--ddr-image``, ``--l2-image``,
the same flags as ``npukit sim``) it writes, into one directory:

* ``program.hex`` — the instruction words, Verilog ``$readmemh`` (one 16-digit word per line);
* ``init/`` — the memories before the first instruction: ``l2.bin`` (the whole L2, little-endian BF16
  bit patterns, word 0 first) and ``l2.hex`` ($readmemh, one 128-bit word per line, element 0 in the
  low 16 bits, ``@addr`` before each run of non-zero words), ``ddr_<ADDR>.bin|.hex`` per mapped host
  region (bytes), ``cc.hex`` (constant cache: fmap then weight cache, 3 × 16-bit per entry);
* ``checkpoints.jsonl`` — after every N-th instruction (``--every``, default 1) and after the last:
  ``pc``, SFU ``s_reg`` / ``e_max`` bits, ``status``, and the L2 words, host bytes and
  constant-cache entries that changed since the previous checkpoint (hex strings): init + the deltas
  up to a checkpoint is the expected machine state there;
* ``final/`` — the same files as ``init/`` after the last instruction;
* ``manifest.json`` — hardware preset and overrides (and the full description), ISA profile, word
  widths, element formats, byte order, every address and file, instruction count, checkpoint period.

``npukit sim PROGRAM --l2-image init/l2.bin@0 --ddr-image init/ddr_<ADDR>.bin@<ADDR> --dump ...``
replays the run from these images. ``docs/vectors.md`` describes the format and the testbench skeleton
in ``examples/rtl/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from npukit.cli import ui
from npukit.cli.cmd_asm import add_target_arguments, read_words, resolve_target
from npukit.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("vectors", help="golden vectors for RTL: program, initial and final memory images, "
                       "per-instruction state, manifest (pccx)")
    p.add_argument("program", nargs="?", help="program file: assembly (.s), $readmemh (.hex/.mem) or binary")
    t = p.add_argument_group("a compiled model token (instead of PROGRAM)")
    t.add_argument("--token", action="store_true",
                   help="the first generated token of MODEL (default: the embedded model) compiled for pccx")
    t.add_argument("--model", default=None, help="with --token: a Gemma 3n folder or preset; with --target "
                   "tern: a BitNet folder or preset (the units' vectors of a short generation)")
    t.add_argument("--max-new-tokens", type=ui.positive(int), default=2, metavar="N",
                   help="--target tern: tokens generated while recording (default 2)")
    t.add_argument("--prompt-ids", default=None, metavar="IDS", help="prompt token ids (default: BOS)")
    t.add_argument("--segment", default="all", metavar="N|all",
                   help="which program segment of the token (they are split by host KV steps; default all)")
    p.add_argument("-o", "--out-dir", dest="out_dir", required=True, type=ui.output_file("--out-dir", True),
                   metavar="DIR", help="directory to write (created; files in it are replaced)")
    p.add_argument("--every", type=ui.positive(int), default=1, metavar="N",
                   help="a state checkpoint after every N instructions (default 1), and after the last")
    add_target_arguments(p, "sim")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.set_defaults(func=run)


# --- running a pccx program with its images ---------------------------------------------------------

def pccx_simulator(words: Sequence[int], hw: Any, options: dict[str, Any]) -> Any:
    """A pccx functional simulator loaded with the program and the ``--ddr-image`` / ``--l2-image``
    inputs (the same parsing as ``npukit sim``), not yet run."""
    from npukit.targets.pccx.asm import _split_at
    from npukit.targets.pccx.sim import Simulator

    sim = Simulator(hw, options.get("profile", "extended"))
    for spec in options.get("ddr_image") or ():
        path, addr = _split_at(spec, "--ddr-image")
        sim.host.write(addr, np.frombuffer(path.read_bytes(), np.uint8))
    for spec in options.get("l2_image") or ():
        path, word = _split_at(spec, "--l2-image")
        data = path.read_bytes()
        if len(data) % 2:
            raise ConfigError(f"--l2-image {path}: {len(data)} bytes is not a whole number of BF16 values")
        sim.write_l2_bits(word, np.frombuffer(data, "<u2"))
    sim.load_program([int(w) for w in words])
    return sim


def run_checked(sim: Any, every: int | None = None) -> Iterator[int]:
    """Step ``sim`` to the end; yield the number of instructions done at each checkpoint."""
    done = 0
    while not sim.halted:
        if sim.step() is None:
            break
        done += 1
        if every and done % every == 0:
            yield done
    if sim.error is not None:
        raise ConfigError(str(sim.error))
    if not every or done % every:
        yield done


def regions(sim: Any) -> list[tuple[int, np.ndarray]]:
    """The host DDR regions (base byte address, bytes) the run has mapped."""
    return list(zip(sim.host._bases, sim.host._bufs, strict=True))


# --- dumps (npukit sim --dump) --------------------------------------------------------------------

def parse_dump(spec: str) -> tuple[str, int, int]:
    """``L2:ADDR+LEN`` (128-bit words) or ``DDR:ADDR+LEN`` (bytes) -> (region, addr, len)."""
    try:
        region, rest = spec.split(":", 1)
        addr, n = rest.split("+", 1)
        out = region.upper(), int(addr, 0), int(n, 0)
    except ValueError:
        raise ConfigError(f"--dump {spec!r} is not L2:ADDR+WORDS or DDR:ADDR+BYTES") from None
    if out[0] not in ("L2", "DDR") or out[1] < 0 or out[2] <= 0:
        raise ConfigError(f"--dump {spec!r}: region L2 or DDR, address >= 0, length > 0")
    return out


def read_dump(sim: Any, region: str, addr: int, n: int) -> bytes:
    if region == "L2":
        if addr + n > sim.l2.shape[0]:
            raise ConfigError(f"--dump L2:{addr:#x}+{n}: L2 has {sim.l2.shape[0]} words")
        return sim.l2[addr: addr + n].astype("<u2").tobytes()
    from npukit.targets.pccx.memory import DeviceFault

    try:
        return sim.host.read(addr, n).tobytes()
    except DeviceFault as exc:
        raise ConfigError(f"--dump DDR:{addr:#x}+{n}: {exc}") from None


def dump_rows(region: str, addr: int, data: bytes) -> list[list[str]]:
    """Human rows: per L2 word its 8 BF16 values; per 16 host bytes their hex."""
    if region == "DDR":
        return [[f"{addr + i:#010x}", data[i: i + 16].hex(" ")] for i in range(0, len(data), 16)]
    from npukit.targets.pccx import numerics as nx

    bits = np.frombuffer(data, "<u2").reshape(-1, 8)
    vals = nx.from_bits(bits)
    return [[f"{addr + i:#07x}", " ".join(f"{v:.4g}" for v in vals[i])] for i in range(len(bits))]


# --- npukit vectors ------------------------------------------------------------------------------

def _hex_words(bits: np.ndarray) -> str:
    """$readmemh of L2 words (rows of 8 uint16, element 0 low), @addr before each non-zero run."""
    lines, prev = [], -2
    nz = np.flatnonzero(bits.any(axis=1))
    for w in nz:
        if w != prev + 1:
            lines.append(f"@{w:x}")
        lines.append("".join(f"{int(b):04x}" for b in bits[w][::-1]))
        prev = w
    return "\n".join(lines) + "\n"


def _hex_bytes(data: np.ndarray) -> str:
    return "\n".join(f"{int(b):02x}" for b in data) + "\n"


def _write_memories(sim: Any, d: Path) -> dict[str, Any]:
    d.mkdir(parents=True, exist_ok=True)
    (d / "l2.bin").write_bytes(sim.l2.astype("<u2").tobytes())
    (d / "l2.hex").write_text(_hex_words(sim.l2))
    cc = sim.cc.reshape(-1, 3)
    (d / "cc.hex").write_text("\n".join("".join(f"{int(v):04x}" for v in e[::-1]) for e in cc) + "\n")
    ddr = {}
    for base, buf in regions(sim):
        name = f"ddr_{base:#x}"
        (d / f"{name}.bin").write_bytes(buf.tobytes())
        (d / f"{name}.hex").write_text(_hex_bytes(buf))
        ddr[f"{base:#x}"] = {"bytes": int(buf.size), "bin": f"{d.name}/{name}.bin",
                             "hex": f"{d.name}/{name}.hex"}
    return {"l2": {"bin": f"{d.name}/l2.bin", "hex": f"{d.name}/l2.hex"}, "cc": f"{d.name}/cc.hex",
            "ddr": ddr}


class _Delta:
    """What changed in the machine since the last checkpoint (L2 words, host bytes, cache entries)."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self._snap()

    def _snap(self) -> None:
        self.l2 = self.sim.l2.copy()
        self.cc = self.sim.cc.copy()
        self.ddr = {b: buf.copy() for b, buf in regions(self.sim)}

    def record(self, done: int) -> dict[str, Any]:
        s = self.sim
        words = np.flatnonzero((s.l2 != self.l2).any(axis=1))
        ddr = []
        for base, buf in regions(s):
            old = self.ddr.get(base)
            idx = np.arange(buf.size) if old is None else np.flatnonzero(buf != old)
            ddr += [[f"{base + int(i):#x}", f"{int(buf[i]):02x}"] for i in idx]
        cc = np.argwhere((s.cc != self.cc).any(axis=2))
        out = {"after": done, "pc": int(s.pc), "status": int(s.status), "s_reg": f"{int(s.s_reg):04x}",
               "e_max": f"{int(s.e_max):04x}",
               "l2": [[f"{int(w):#x}", "".join(f"{int(b):04x}" for b in s.l2[w][::-1])] for w in words],
               "ddr": ddr,
               "cc": [[("fmap", "weight")[int(c)], int(e), [int(v) for v in s.cc[c, e]]] for c, e in cc]}
        self._snap()
        return out


def export(words: Sequence[int], hw: Any, label: str, overrides: list[str], options: dict[str, Any],
           out: Path, every: int, sim: Any = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``words`` (on ``sim`` when given: already holding its initial state) and write the vectors."""
    from npukit import hw as hwmod
    from npukit.isa import text
    from npukit.targets.pccx.isa import ELEMS_PER_WORD

    sim = sim if sim is not None else pccx_simulator(words, hw, options)
    out.mkdir(parents=True, exist_ok=True)
    text.write_program(out / "program.hex", list(words), 64, "hex")
    init = _write_memories(sim, out / "init")
    delta = _Delta(sim)
    n = 0
    with (out / "checkpoints.jsonl").open("w") as fh:
        for n in run_checked(sim, every):
            fh.write(json.dumps(delta.record(n)) + "\n")
    final = _write_memories(sim, out / "final")
    digest = hashlib.sha256(b"".join(int(w).to_bytes(8, "little") for w in words)).hexdigest()
    manifest = {
        "target": "pccx", "hw": label, "overrides": list(overrides), "description": hwmod.to_dict(hw),
        "profile": options.get("profile", "extended"), "instructions": n, "checkpoint_every": every,
        "program": {"hex": "program.hex", "word_bits": 64, "words": len(words), "sha256_le_words": digest},
        "inputs": {"ddr_image": list(options.get("ddr_image") or []),
                   "l2_image": list(options.get("l2_image") or [])},
        "l2": {"words": int(sim.l2.shape[0]), "word_bits": 16 * ELEMS_PER_WORD, "element": "bf16",
               "elements_per_word": ELEMS_PER_WORD, "address_unit": "128-bit word",
               "hex_layout": "element 0 in bits [15:0]"},
        "ddr": {"address_unit": "byte", "regions": sorted(init["ddr"] | final["ddr"])},
        "constant_cache": {"caches": ["fmap", "weight"], "entries": int(sim.cc.shape[1]),
                           "fields": ["a", "b", "c"], "field_bits": 16, "hex_layout": "a in bits [15:0]"},
        "byte_order": "little",
        "sfu": {"s_reg": "bf16 bits", "e_max": "bf16 bits"},
        "files": {"init": init, "final": final, "checkpoints": "checkpoints.jsonl"},
        "replay": "npukit sim program.hex --l2-image init/l2.bin@0 " + " ".join(
            f"--ddr-image init/ddr_{a}.bin@{a}" for a in init["ddr"]),
    }
    manifest.update(extra or {})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def run(args: argparse.Namespace) -> int:
    if args.token:
        return run_token(args)
    if args.target == "tern":
        return run_tern(args)
    if args.program is None:
        raise ConfigError("give PROGRAM, or --token for a compiled model token")
    target, hw, label, options = resolve_target(args, "simulate")
    if target.name != "pccx":
        raise ConfigError(f"npukit vectors exports pccx programs; target {target.name!r} has no exporter")
    words = read_words(target, args.program, hw, None, options)
    if len(words) == 0:
        raise ConfigError(f"{args.program}: the program has no instructions")
    out = Path(args.out_dir)
    manifest = export(words, hw, label, args.overrides, options, out, args.every)
    if args.json:
        ui.emit_json({k: v for k, v in manifest.items() if k != "description"})
        return 0
    ui.table([["directory", str(out)], ["instructions", manifest["instructions"]],
              ["checkpoints", f"every {args.every} (checkpoints.jsonl)"],
              ["host regions", ", ".join(manifest["ddr"]["regions"]) or "-"],
              ["replay", manifest["replay"]]], ["vectors", ""])
    return 0


def run_token(args: argparse.Namespace) -> int:
    from npukit.cli import vectors_token as vt
    from npukit.cli.cmd_generate import parse_ids

    if args.program is not None:
        raise ConfigError("give PROGRAM or --token, not both")
    label = args.hw or "pccx-v002-kv260"
    prompt = parse_ids(args.prompt_ids) if args.prompt_ids else None
    hw, segments = vt.capture(args.model, prompt, label, args.overrides)
    if args.segment == "all":
        chosen = list(range(len(segments)))
    else:
        try:
            chosen = [int(args.segment)]
        except ValueError:
            raise ConfigError(f"--segment must be an index or 'all', got {args.segment!r}") from None
        if not 0 <= chosen[0] < len(segments):
            raise ConfigError(f"--segment {chosen[0]}: the token has {len(segments)} segments")
    out = Path(args.out_dir)
    rows = []
    for j in chosen:
        words, before, after = segments[j]
        pro = vt.prologue(before, hw)
        sim = vt.replay_simulator(pro + words, before, hw)
        d = out / f"segment_{j:02d}"
        man = export(pro + words, hw, label, args.overrides, {"profile": "extended"}, d, args.every, sim,
                     {"token": {"model": args.model or "embedded", "prompt_ids": prompt or "BOS",
                                "segment": j, "segments": len(segments), "prologue_instructions": len(pro),
                                "checked_against_driver": True}})
        vt.check_final(sim, after, j)
        rows.append([d.name, man["instructions"], len(pro), ", ".join(man["ddr"]["regions"])])
    if args.json:
        ui.emit_json({"segments": [dict(zip(("dir", "instructions", "prologue", "ddr"), r, strict=True))
                                   for r in rows], "out": str(out)})
        return 0
    ui.table(rows, ["segment", "instructions", "prologue", "host regions"])
    print("\neach segment_NN/ replays with its manifest's 'replay' command; checked against the driver")
    return 0


def run_tern(args: argparse.Namespace) -> int:
    """Vectors of the ternfpga units (engine, attention, FFN glue) from a short BitNet generation."""
    from npukit.cli.cmd_generate import parse_ids, resolve_model
    from npukit.runtime import backends
    from npukit.runtime.generate import generate
    from npukit.targets.tern.vectors import RecordingTernOps
    from npukit.targets.tern.vectors import export as tern_export

    if args.program is not None or args.model is None:
        raise ConfigError("--target tern exports unit vectors of a model run: give --model (BitNet), "
                          "no PROGRAM")
    model = resolve_model(args.model)
    options = {"hw": args.hw} if args.hw else {}
    be = backends.create_backend(model, "tern", **options)
    be.ops.__class__ = RecordingTernOps  # same state, plus recording of each unit call
    ids = parse_ids(args.prompt_ids) if args.prompt_ids else [int(model.config.bos_token_id or 0)]
    res = generate(be, ids, args.max_new_tokens, vocab_size=model.vocab_size)
    cases = getattr(be.ops, "cases", {})
    meta = {"target": "tern", "hw": be.hw.name, "model": str(model.name), "prompt_ids": ids,
            "tokens": res.tokens, "cases_per_unit_max": RecordingTernOps.limit}
    man = tern_export(cases, Path(args.out_dir), meta)
    counts = {u: len(v) for u, v in man["units"].items() if isinstance(v, list)}
    if args.json:
        ui.emit_json({"out": args.out_dir, "cases": counts, "tokens": res.tokens})
    else:
        ui.table([[u, n] for u, n in counts.items()], ["unit", "cases"])
    return 0
