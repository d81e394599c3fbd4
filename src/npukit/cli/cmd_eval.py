"""``npukit eval``: the quality of a model on a target. For a ``.gguf`` LLM (`_eval_gguf`): perplexity
over the first ``--window`` tokens of ``--text`` on ``golden`` (float) or ``quant`` (pccx W4A8), with
``--kv`` picking the KV-cache format; the result carries its evidence (target, KV, window, text)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from npukit.cli import ui
from npukit.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="model quality on a target (perplexity of a GGUF LLM on a text)")
    p.add_argument("model", metavar="MODEL", help="a .gguf LLM file (Gemma 3, Llama)")
    p.add_argument("--text", required=True, type=Path, help="UTF-8 text file to score")
    p.add_argument("--target", default="golden", help="golden (float) or quant (pccx W4A8)")
    p.add_argument("--kv", default=None, help="KV cache format: golden fp32|fp16, quant fp16|int8|int4")
    p.add_argument("--window", type=int, default=512, help="tokens scored from the start of the text")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if Path(args.model).suffix.lower() == ".gguf":
        return _eval_gguf(args)
    raise ConfigError(f"{args.model}: npukit eval takes a .gguf LLM here")


def _eval_gguf(args: argparse.Namespace) -> int:
    from npukit.models.loading import load_model
    from npukit.runtime.llm_eval import perplexity

    with ui.step(f"loading model {Path(args.model).name}"):
        model = load_model(args.model)
    with ui.Progress(max(args.window - 1, 1), f"eval on {args.target}") as bar:
        result = perplexity(model, args.text, args.target, args.kv, args.window, on_chunk=bar.update)
    if args.json:
        ui.emit_json(result.to_json())
        return 0
    rows = [[name, fig.fmt(), str(fig.tier), fig.source] for name, fig in result.figures().items()]
    rows += [[f"weight error {c}", f"{e:.4f}", "measured", "relative Frobenius, INT4 vs GGUF float"]
             for c, e in result.extra.get("weight_error", {}).items()]
    ui.table(rows, ["figure", "value", "tier", "source"], out=sys.stdout)
    return 0
