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
from pathlib import Path
from typing import Any

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
    t.add_argument("--cases", type=ui.positive(int), default=64, metavar="N",
                   help="--target tern: at most N cases per unit (default 64)")
    t.add_argument("--decoder", action="store_true",
                   help="pccx: the instruction decoder's unit vectors (words → opcode, error interrupt) "
                   "for npukit cosim, instead of a program")
    p.add_argument("-o", "--out-dir", dest="out_dir", required=True, type=ui.output_file("--out-dir", True),
                   metavar="DIR", help="directory to write (created; files in it are replaced)")
    p.add_argument("--every", type=ui.positive(int), default=1, metavar="N",
                   help="a state checkpoint after every N instructions (default 1), and after the last")
    add_target_arguments(p, "sim")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.set_defaults(func=run)


def _exporter(name: str) -> Any:
    """The target's golden-vector module (its record's ``extra["vectors"]``)."""
    return _exporter_of(name, "vectors")


def _exporter_of(name: str, capability: str) -> Any:
    from npukit import registry

    target = registry.get(name)
    if not target.provides(capability):
        raise ConfigError(f"target {name!r} has no {capability} exporter "
                          f"(have: {', '.join(registry.names(capability))})")
    return target.resolve(capability)


def run(args: argparse.Namespace) -> int:
    if args.token:
        return run_token(args)
    if args.decoder:
        return run_decoder(args)
    if args.target == "tern":
        return run_tern(args)
    if args.program is None:
        raise ConfigError("give PROGRAM, or --token for a compiled model token")
    target, hw, label, options = resolve_target(args, "simulate")
    vectors = _exporter(target.name)
    words = read_words(target, args.program, hw, None, options)
    if len(words) == 0:
        raise ConfigError(f"{args.program}: the program has no instructions")
    out = Path(args.out_dir)
    with ui.step(f"simulating {len(words)} instructions, writing vectors into {out}"):
        manifest = vectors.export(words, hw, label, args.overrides, options, out, args.every)
    if args.json:
        ui.emit_json({k: v for k, v in manifest.items() if k != "description"})
        return 0
    ui.table([["directory", str(out)], ["instructions", manifest["instructions"]],
              ["checkpoints", f"every {args.every} (checkpoints.jsonl)"],
              ["host regions", ", ".join(manifest["ddr"]["regions"]) or "-"],
              ["replay", manifest["replay"]]], ["vectors", ""])
    return 0


def run_token(args: argparse.Namespace) -> int:
    from npukit.cli.cmd_generate import parse_ids, resolve_model

    if args.program is not None:
        raise ConfigError("give PROGRAM or --token, not both")
    vectors = _exporter("pccx")
    prompt = parse_ids(args.prompt_ids) if args.prompt_ids else None
    with ui.step(f"loading model {args.model or '(embedded)'}"):
        model = resolve_model(args.model)
    out = Path(args.out_dir)
    with ui.step(f"compiling the first token for pccx, writing vectors into {out}"):
        rows = vectors.export_token(model, prompt, args.hw or "pccx-v002-kv260", args.overrides,
                                    args.segment, out, args.every)
    if args.json:
        ui.emit_json({"segments": rows, "out": str(out)})
        return 0
    ui.table([list(r.values()) for r in rows], ["segment", "instructions", "prologue", "host regions"])
    print("\neach segment_NN/ replays with its manifest's 'replay' command; checked against the driver")
    return 0


def run_decoder(args: argparse.Namespace) -> int:
    """The pccx decoder's unit vectors: three (profile, limits) cases of 512 words each."""
    if args.program is not None or (args.target or "pccx") != "pccx":
        raise ConfigError("--decoder exports pccx decoder vectors: no PROGRAM, --target pccx")
    man = _exporter_of("pccx", "decoder_vectors").export(Path(args.out_dir))
    cases = man["units"]["decoder"]["cases"]
    if args.json:
        ui.emit_json({"out": args.out_dir, "cases": [c["label"] for c in cases]})
    else:
        ui.table([[c["label"], c["values"]["word"]["shape"][0]] for c in cases], ["decoder case", "words"])
    return 0


def run_tern(args: argparse.Namespace) -> int:
    """Vectors of the ternfpga units (unpack, engine, attention, FFN glue) from a short BitNet generation."""
    from npukit.cli.cmd_generate import parse_ids, resolve_model
    from npukit.runtime import backends
    from npukit.runtime.generate import generate

    vectors = _exporter("tern")
    RecordingTernOps, tern_export = vectors.RecordingTernOps, vectors.export
    if args.program is not None or args.model is None:
        raise ConfigError("--target tern exports unit vectors of a model run: give --model (BitNet), "
                          "no PROGRAM")
    with ui.step(f"loading model {args.model}"):
        model = resolve_model(args.model)
    options = {"hw": args.hw} if args.hw else {}
    with ui.step("preparing target tern"):
        be = backends.create_backend(model, "tern", **options)
    be.ops.__class__ = RecordingTernOps  # same state, plus recording of each unit call
    ids = parse_ids(args.prompt_ids) if args.prompt_ids else [int(model.config.bos_token_id or 0)]
    with ui.step(f"recording {args.max_new_tokens} token(s) on tern"):
        res = generate(be, ids, args.max_new_tokens, vocab_size=model.vocab_size)
    cases = getattr(be.ops, "cases", {})
    meta = {"target": "tern", "hw": be.hw.name, "model": str(model.name), "prompt_ids": ids,
            "tokens": res.tokens, "cases_per_unit_max": args.cases, "engine_lanes": be.hw.engine.lanes,
            "attention_t_max": be.hw.attention.t_max}
    man = tern_export(cases, Path(args.out_dir), meta)
    counts = {u: len(v["cases"]) for u, v in man["units"].items()}
    if args.json:
        ui.emit_json({"out": args.out_dir, "cases": counts, "tokens": res.tokens})
    else:
        ui.table([[u, n] for u, n in counts.items()], ["unit", "cases"])
    return 0
