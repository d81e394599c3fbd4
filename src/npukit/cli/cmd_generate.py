"""``npukit generate``: run a model on a target and stream the generated tokens.

MODEL is a Hugging Face directory (config.json + safetensors [+ tokenizer.json]) or a shape preset
(synthetic weights); without MODEL the embedded default model is used. With ``--json`` one object
is printed: ``tokens`` (generated ids), ``stats``, and with ``--logits`` ``logits`` (per generated
token, the vocabulary logits that chose it). Otherwise tokens stream to stdout (text when the
model has a tokenizer, ids otherwise) and a one-line summary goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from npukit.cli import ui
from npukit.errors import ConfigError, ModelError

if TYPE_CHECKING:
    from npukit.models.loading import LoadedModel


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate tokens with a model on a target (golden, quant, ...)")
    from npukit.runtime import backends  # the --target and --kv choices: every backend's module
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="Hugging Face model directory or preset name (default: the embedded model)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--prompt", help="prompt text (needs the model's tokenizer.json)")
    g.add_argument("--prompt-ids", metavar="IDS", help="comma-separated prompt token ids, e.g. 2,651,1234")
    p.add_argument("--max-new-tokens", type=int, default=32, metavar="N", help="tokens to generate (32)")
    p.add_argument("--target", default="golden", choices=backends.targets(),
                   help="where the model runs (default golden: npukit's float32 reference)")
    p.add_argument("--kv", choices=backends.kv_modes(), default=None,
                   help="KV-cache storage (default: the target's own)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus mass (1.0 = off)")
    p.add_argument("--repetition-penalty", type=float, default=1.0, metavar="R",
                   help="divide positive / multiply negative logits of seen tokens (1.0 = off)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="sampling RNG seed (0)")
    p.add_argument("--ignore-eos", action="store_true", help="do not stop at the end-of-sequence token")
    p.add_argument("--hw", default=None, metavar="PRESET", help="hardware preset or TOML (simulated targets)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a hardware field (repeatable)")
    p.add_argument("--trace", default=None, metavar="FILE",
                   help="write a Perfetto trace (simulated targets) once at the end; pccx: the timing of "
                        "the last 8 program runs (prompt chunks and decode tokens)")
    p.add_argument("--kv-max-tokens", type=int, default=None, metavar="N",
                   help="KV ring hard cap for full-attention layers (evicts sink + window when it wraps)")
    p.add_argument("--kv-sink", type=int, default=None, metavar="N", help="KV ring: positions kept forever")
    p.add_argument("--kv-window", type=int, default=None, metavar="N",
                   help="KV ring: most recent positions kept (max tokens = sink + window)")
    p.add_argument("--executor", default=None, choices=("reference", "fast"),
                   help="pccx program executor: fast (pre-decoded replay, bit-identical; default) "
                        "or reference (the readable simulator)")
    p.add_argument("--prefill", default=None, choices=("gemm", "decode"),
                   help="pccx prompt: GEMM chunks (default) or token by token through the decode program")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--logits", action="store_true", help="with --json: include the per-token logits")
    p.set_defaults(func=run)


def resolve_model(spec: str | None) -> LoadedModel:
    from npukit.api.models import Model, load_model

    model = load_model(spec)
    if not isinstance(model, Model):
        raise ModelError(f"{spec}: a TFLite model; run it with `npukit tflite run`")
    return model.loaded


def parse_ids(text: str) -> list[int]:
    items = text.replace(" ", "").split(",")
    if items == [""]:
        raise ConfigError("--prompt-ids is empty")
    try:
        return [int(t) for t in items]
    except ValueError:
        raise ConfigError(f"--prompt-ids must be comma-separated integers (no empty items), got {text!r}"
                          ) from None


def _prompt(args: argparse.Namespace) -> str | list[int] | None:
    if args.prompt_ids is not None:
        return parse_ids(args.prompt_ids)
    if args.prompt is not None:
        return args.prompt
    return None


_OPTIONS = {"hw": "--hw", "overrides": "--set", "trace": "--trace", "kv_max_tokens": "--kv-max-tokens",
            "kv_sink": "--kv-sink", "kv_window": "--kv-window", "executor": "--executor",
            "prefill": "--prefill"}


def target_options(args: argparse.Namespace) -> dict[str, Any]:
    """The target-specific options the user gave (a backend that lacks one rejects it)."""
    return {k: getattr(args, k) for k in _OPTIONS if getattr(args, k, None) not in (None, [])}


class _Streamer:
    """Writes each new token to stdout: the newly decoded text, or the id."""

    def __init__(self, tokenizer: Any | None, out=None) -> None:
        self.tok, self.out = tokenizer, out or sys.stdout
        self.ids: list[int] = []
        self.text = ""

    def __call__(self, token: int) -> None:
        self.ids.append(token)
        if self.tok is None:
            self.out.write(f"{token} ")
        else:
            text = self.tok.decode(self.ids, skip_special_tokens=True)
            if text.startswith(self.text):
                self.out.write(text[len(self.text):])
                self.text = text
        self.out.flush()


def run(args: argparse.Namespace) -> int:
    from npukit.cli.main import skip_teardown
    from npukit.runtime.generate import long_lived_frozen

    with long_lived_frozen():  # (a bounded run: full GC passes over the model's objects deferred)
        rc = _run(args)
    skip_teardown()  # (the backend closed its workers and wrote its trace in `generate`)
    return rc


def _run(args: argparse.Namespace) -> int:
    from npukit.api.models import Model
    from npukit.api.session import Session, check_options, prompt_ids
    from npukit.evidence import Figure
    from npukit.runtime import backends

    if args.logits and not args.json:
        raise ConfigError("--logits needs --json")
    with ui.step(f"loading model {args.model or '(embedded)'}"):
        model = Model(resolve_model(args.model))
    prompt = _prompt(args)
    options = target_options(args)
    check_options(model.family, args.target, options, _OPTIONS, "--target")
    ids = prompt_ids(model, prompt)
    with ui.step(f"preparing target {args.target} for {Path(model.name).name}"):
        backend = backends.create_backend(model.loaded, args.target, kv=args.kv, **options)
    session = Session(model, args.target, backend, args.hw)
    # The decode bar goes to stderr unless the tokens themselves stream to the terminal.
    show_bar = args.json or not sys.stdout.isatty()
    stream = None if args.json else _Streamer(model.loaded.tokenizer)
    prefill = ui.step(f"prefill: {len(ids)} prompt tokens on {args.target}")
    prefill.__enter__()  # ends when the first token is chosen
    open_steps = [prefill]

    def end_prefill() -> None:
        while open_steps:
            open_steps.pop().__exit__(None, None, None)

    with ui.Progress(args.max_new_tokens, "generate", enabled=show_bar) as bar:
        def on_token(tok: int) -> None:
            end_prefill()
            if stream is not None:
                stream(tok)
            bar.update()

        try:
            gen = session.generate(ids, args.max_new_tokens, temperature=args.temperature,
                                   top_p=args.top_p, repetition_penalty=args.repetition_penalty,
                                   seed=args.seed, ignore_eos=args.ignore_eos, keep_logits=args.logits,
                                   on_token=on_token)
        except BaseException:
            end_prefill()
            if stream is not None and stream.ids:  # the error starts on its own line
                sys.stdout.write("\n")
                sys.stdout.flush()
            raise
        end_prefill()
    result = gen.raw
    if args.json:
        obj: dict[str, Any] = {"model": str(model.name), "family": model.family, "target": args.target}
        obj |= result.to_json(with_logits=args.logits)
        if gen.text is not None:
            obj["text"] = gen.text
        ui.emit_json(obj)
        return 0
    sys.stdout.write("\n")
    f = result.figures
    rate = f"{f['decode_tok_per_s'].value:.2f} tok/s" if "decode_tok_per_s" in f else "n/a"
    compiling = (f" ({f['kernel_compile_s'].value:.1f} s of it compiling kernels, once)"
                 if "kernel_compile_s" in f else "")
    print(f"[{len(result.tokens)} tokens from {Path(str(model.name)).name} on {args.target}: "
          f"prefill {f['prefill_s'].fmt()}{compiling}, decode {rate}, peak RSS {f['peak_rss_mib'].fmt()}, "
          f"stop: {result.stop_reason}]", file=sys.stderr)
    figures = result.backend_stats.get("figures")
    if figures:  # the target's own tiered figures (simulated cycles, utilisation, projected rates)
        rows = [[name, Figure(**fig).fmt(), fig["tier"], fig["source"]] for name, fig in figures.items()]
        ui.table(rows, ["target figure", "value", "tier", "source"], out=sys.stderr)
    return 0
