"""``npukit tflite``: inspect .tflite models and run int8 ones on the reference interpreter or a target.

    npukit tflite info MODEL [--json]
    npukit tflite run MODEL --input X.npy [--input NAME=Y.npy] --target reference|vta
                      [--delegate exact|alkali] [--hw PRESET] [--set K=V] [--out OUT.npz]
                      [--trace FILE] [--json]

MODEL is a path, ``zoo:NAME`` (a real trained model fetched into ~/.cache/npukit, e.g.
``zoo:resnet8-cifar10``) or ``zoo:digits`` (the project-trained model shipped with npukit).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from npukit.cli import ui
from npukit.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tflite", help="inspect .tflite models; run int8 ones (reference or a target)")
    tsub = p.add_subparsers(dest="tflite_command", metavar="ACTION", title="actions")
    info = tsub.add_parser("info", help="ops, tensors and quantization of a .tflite model")
    info.add_argument("model", help="path, zoo:NAME or zoo:digits")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=run_info)
    r = tsub.add_parser("run", help="run a model on .npy inputs")
    r.add_argument("model", help="path, zoo:NAME or zoo:digits")
    r.add_argument("--input", action="append", default=[], metavar="[NAME=]FILE.npy",
                   help="an input array; bound to the subgraph inputs in order, or by NAME (repeatable)")
    r.add_argument("--target", choices=["reference", "vta"], default="reference",
                   help="reference: the int8 interpreter (bit-exact with LiteRT BUILTIN_REF); "
                        "vta: delegate supported ops to the VTA simulator")
    r.add_argument("--delegate", choices=["exact", "alkali"], default=None,
                   help="VTA delegate arithmetic: exact (TFLite rounding) or alkali (the Alkali delegate's)")
    r.add_argument("--hw", default=None, metavar="PRESET", help="hardware preset for --target vta")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one hardware field (repeatable; --target vta)")
    r.add_argument("-o", "--output", "--out", dest="out", default=None, type=ui.output_file("--output"),
                   metavar="OUT.npz", help="write the outputs to an .npz file (--out: the old spelling)")
    r.add_argument("--trace", default=None, metavar="FILE", help="write a Chrome/Perfetto trace of the ops")
    r.add_argument("--json", action="store_true", help="print JSON")
    r.set_defaults(func=run_run)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


def _load(spec: str):
    from npukit.models.tflite import read_model, zoo

    return read_model(zoo.resolve(spec))


def run_info(args: argparse.Namespace) -> int:
    from npukit.models.tflite import report

    model = _load(args.model)
    if args.json:
        ui.emit_json(report.model_json(model))
        return 0
    counts = ", ".join(f"{n} {c}" for n, c in sorted(model.op_counts().items()))
    print(f"{args.model}: {len(model.ops)} ops ({counts}), {len(model.tensors)} tensors")
    for kind, ts in (("input", model.input_tensors()), ("output", model.output_tensors())):
        for t in ts:
            print(f"  {kind} {t.index} {t.name} {list(t.shape)} {t.dtype} {report.quant_text(t)}")
    print()
    ui.table(report.op_rows(model), ["#", "op", "inputs", "outputs", "options"])
    print()
    ui.table(report.tensor_rows(model), ["#", "tensor", "shape", "dtype", "", "quantization"])
    return 0


def _feeds(model, specs: list[str]):
    import numpy as np

    names = {t.name for t in model.input_tensors()}
    positional, named = [], {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if sep and name not in names and not Path(spec).exists():
            raise ConfigError(f"--input {spec}: the model has no input named {name!r} "
                              f"(inputs: {', '.join(sorted(names))})")
        if not sep or name not in names:
            name, path = None, spec
        try:
            value = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot load input {path}: {exc}") from None
        if not isinstance(value, np.ndarray):
            raise ConfigError(f"input {path}: expected one array (.npy), got an archive")
        if name is None:
            positional.append(value)
        else:
            named[name] = value
    if positional and named:
        raise ConfigError("give inputs either all by position or all as NAME=FILE.npy")
    return named or positional


def _interpreter(args: argparse.Namespace, model):
    from npukit.models.tflite import Interpreter
    from npukit.models.tflite.delegates import get_delegate

    if args.target == "reference":
        if args.delegate or args.hw or args.overrides:
            raise ConfigError("--delegate, --hw and --set apply to --target vta")
        return Interpreter(model)
    delegate = get_delegate(args.target, variant=args.delegate, hw=args.hw, overrides=args.overrides)
    return Interpreter(model, delegate=delegate)


def run_run(args: argparse.Namespace) -> int:
    import numpy as np

    from npukit.evidence import Ledger, Tier
    from npukit.models.tflite import report

    model = _load(args.model)
    if not args.input and model.inputs:
        raise ConfigError(f"the model takes {len(model.inputs)} input(s): give --input FILE.npy")
    feeds = _feeds(model, args.input)
    interp = _interpreter(args, model)
    records = []
    if args.trace:
        interp.hooks.append(records.append)
    t0 = time.perf_counter()
    outputs = interp.run(feeds)
    wall = time.perf_counter() - t0
    figures = Ledger()
    figures.add("run_wall_ms", wall * 1e3, "ms", Tier.MEASURED,
                f"perf_counter around Interpreter.run on this host ({args.target})")
    for name, fig in interp.plan.figures.items():
        figures.figures[name] = fig
    if args.out:
        try:
            np.savez(Path(args.out), **outputs)
        except OSError as exc:
            raise ConfigError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    if args.trace:
        report.write_json_file(args.trace, report.trace_json(records, model, {"model": args.model}))
    if args.json:
        ui.emit_json({"outputs": {n: report.output_json(n, v) for n, v in outputs.items()},
                      "delegated_ops": interp.delegated_ops, "host_ops": interp.host_ops,
                      "figures": figures.to_json()["figures"]})
        return 0
    rows = []
    for name, v in outputs.items():
        flat = v.reshape(-1)
        head = " ".join(str(x) for x in flat[:10]) + (" …" if flat.size > 10 else "")
        rows.append([name, str(list(v.shape)), str(v.dtype), str(int(flat.argmax())), head])
    ui.table(rows, ["output", "shape", "dtype", "argmax", "values"])
    print(f"{interp.host_ops} host ops, {interp.delegated_ops} delegated; "
          f"{wall * 1e3:.2f} ms ({figures['run_wall_ms'].tier})")
    return 0
