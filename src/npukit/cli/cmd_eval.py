"""``npukit eval``: a model's quality on a target, dispatched on the model file's kind.

    npukit eval MODEL.tflite --target ref|vta --dataset DIR|zoo:digits [--limit N] [--hw PRESET] [--json]
    npukit eval MODEL.gguf --text FILE --target golden|quant|pccx [--kv FMT] [--window N] [--json]

A ``.tflite`` model (or ``zoo:NAME``) is an int8 classifier: top-1 accuracy, per-sample agreement
with LiteRT BUILTIN_REF and, on VTA, cycles and energy per inference (`npukit.models.tflite.evaluate`).
A ``.gguf`` LLM is scored by perplexity over the first ``--window`` tokens of ``--text``
(`npukit.runtime.llm_eval`); the result carries its evidence (target, KV, window, text).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from npukit.cli import ui
from npukit.errors import ConfigError

_TARGETS = {"tflite": ("ref", "vta"), "gguf": ("golden", "quant", "pccx")}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="model quality on a target (.tflite: top-1 and LiteRT agreement over a "
                                    "dataset; .gguf: perplexity on a text)")
    p.add_argument("model", metavar="MODEL", help="MODEL.tflite, zoo:NAME or a .gguf LLM (Gemma 3, Llama)")
    p.add_argument("--target", default=None,
                   help=".tflite: ref (host, bit-exact with LiteRT BUILTIN_REF, default) or vta; "
                        ".gguf: golden (float, default), quant (pccx W4A8) or pccx (its products on the "
                        "simulated NPU)")
    p.add_argument("--dataset", default=None, metavar="DIR|zoo:NAME",
                   help=".tflite: zoo:digits (scikit-learn's held-out digits) or a folder with x.npy, y.npy")
    p.add_argument("--limit", type=int, default=None, metavar="N", help=".tflite: the first N samples only")
    p.add_argument("--hw", default=None, metavar="PRESET", help=".tflite: hardware preset for --target vta")
    p.add_argument("--text", default=None, type=Path, help=".gguf: UTF-8 text file to score")
    p.add_argument("--kv", default=None, help=".gguf: KV format: golden fp32|fp16, quant fp16|int8|int4")
    p.add_argument("--window", type=int, default=512, help=".gguf: tokens scored from the start of the text")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _kind(model: str) -> str:
    if model.startswith("zoo:") or model.lower().endswith(".tflite"):
        return "tflite"
    return model.rsplit(".", 1)[-1].lower() if "." in model else "unknown"


def _target(args: argparse.Namespace, kind: str) -> str:
    allowed = _TARGETS[kind]
    target = args.target or allowed[0]
    if target not in allowed:
        raise ConfigError(f"npukit eval: --target {target!r} is not one for a .{kind} model "
                          f"({' or '.join(allowed)})")
    return target


def _eval_tflite(args: argparse.Namespace) -> int:
    import npukit

    target = _target(args, "tflite")
    if args.dataset is None:
        raise ConfigError("npukit eval: a .tflite model needs --dataset DIR|zoo:NAME")
    m = npukit.load_model(args.model)
    result = m.evaluate(args.dataset, target, hw=args.hw, limit=args.limit)
    if args.json:
        ui.emit_json({"model": args.model, **result.to_json()})
        return 0
    agree = ("LiteRT not installed" if result.agree_with_ref is None
             else f"{result.agree_with_ref}/{result.samples} bit-identical with LiteRT BUILTIN_REF")
    print(f"{args.model} on {target}, {result.dataset}: top-1 {100 * result.top1:.2f}% "
          f"({result.correct}/{result.samples}); {agree}")
    ui.table(result.figures.rows(), ["figure", "value", "tier", "source"])
    return 0


def _eval_gguf(args: argparse.Namespace) -> int:
    from npukit.models.loading import load_model
    from npukit.runtime.llm_eval import perplexity

    target = _target(args, "gguf")
    if args.text is None:
        raise ConfigError("npukit eval: a .gguf model needs --text FILE")
    with ui.step(f"loading model {Path(args.model).name}"):
        model = load_model(args.model)
    with ui.Progress(max(args.window - 1, 1), f"eval on {target}") as bar:
        result = perplexity(model, args.text, target, args.kv, args.window, on_chunk=bar.update)
    if args.json:
        ui.emit_json(result.to_json())
        return 0
    rows = [[name, fig.fmt(), str(fig.tier), fig.source] for name, fig in result.figures().items()]
    rows += [[f"weight error {c}", f"{e:.4f}", "measured", "relative Frobenius, INT4 vs GGUF float"]
             for c, e in result.extra.get("weight_error", {}).items()]
    ui.table(rows, ["figure", "value", "tier", "source"], out=sys.stdout)
    return 0


_EVALUATORS: dict[str, Callable[[argparse.Namespace], int]] = {"tflite": _eval_tflite, "gguf": _eval_gguf}


def run(args: argparse.Namespace) -> int:
    kind = _kind(args.model)
    evaluator = _EVALUATORS.get(kind)
    if evaluator is None:
        raise ConfigError(f"npukit eval: {args.model}: model kind {kind!r} is not supported "
                          f"(MODEL.tflite, zoo:NAME or MODEL.gguf)")
    return evaluator(args)
