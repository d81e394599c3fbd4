"""``npukit eval``: a model's quality over a dataset, dispatched on the model file's kind.

    npukit eval MODEL.tflite --target ref|vta --dataset DIR|zoo:digits [--limit N] [--hw PRESET] [--json]

A ``.tflite`` model (or ``zoo:NAME``) is an int8 classifier: top-1 accuracy, per-sample agreement
with LiteRT BUILTIN_REF and, on VTA, cycles and energy per inference (`npukit.models.tflite.evaluate`).
Other model kinds get their own evaluator in `_EVALUATORS` (keyed by kind); until then they are an
error that says which kinds are supported.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from npukit.cli import ui
from npukit.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="accuracy of a model over a dataset (int8 .tflite: top-1, "
                                    "LiteRT agreement)")
    p.add_argument("model", help="MODEL.tflite or zoo:NAME")
    p.add_argument("--target", choices=["ref", "vta"], default="ref",
                   help="ref: the host interpreter (bit-exact with LiteRT BUILTIN_REF); "
                        "vta: the VTA delegate")
    p.add_argument("--dataset", required=True, metavar="DIR|zoo:NAME",
                   help="zoo:digits (scikit-learn's held-out digits) or a folder with x.npy and y.npy")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="evaluate the first N samples only")
    p.add_argument("--hw", default=None, metavar="PRESET", help="hardware preset for --target vta")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _kind(model: str) -> str:
    if model.startswith("zoo:") or model.lower().endswith(".tflite"):
        return "tflite"
    return model.rsplit(".", 1)[-1].lower() if "." in model else "unknown"


def _eval_tflite(args: argparse.Namespace) -> int:
    import npukit

    m = npukit.load_model(args.model)
    result = m.evaluate(args.dataset, args.target, hw=args.hw, limit=args.limit)
    if args.json:
        ui.emit_json({"model": args.model, **result.to_json()})
        return 0
    agree = ("LiteRT not installed" if result.agree_with_ref is None
             else f"{result.agree_with_ref}/{result.samples} bit-identical with LiteRT BUILTIN_REF")
    print(f"{args.model} on {args.target}, {result.dataset}: top-1 {100 * result.top1:.2f}% "
          f"({result.correct}/{result.samples}); {agree}")
    ui.table(result.figures.rows(), ["figure", "value", "tier", "source"])
    return 0


_EVALUATORS: dict[str, Callable[[argparse.Namespace], int]] = {"tflite": _eval_tflite}


def run(args: argparse.Namespace) -> int:
    kind = _kind(args.model)
    evaluator = _EVALUATORS.get(kind)
    if evaluator is None:
        raise ConfigError(f"npukit eval: {args.model}: model kind {kind!r} is not supported "
                          f"(supported: {', '.join(sorted(_EVALUATORS))}: MODEL.tflite or zoo:NAME)")
    return evaluator(args)
