"""Accuracy of an int8 classifier over a labelled dataset, on the host or a target, checked per
sample against LiteRT's reference kernels.

    ds = load_dataset("zoo:digits", model)            # scikit-learn digits' held-out split
    result = evaluate(model, ds, target="vta")        # top-1, agreement with LiteRT REF, VTA figures

Datasets that install offline:

* ``zoo:digits`` — scikit-learn's bundled handwritten digits, the held-out 25 % split the shipped
  digits model was not trained on (`digits.load_split`).
* a folder ``DIR`` with ``x.npy`` (samples stacked on axis 0, each the model's input shape without
  its batch axis of 1, in the input's dtype or float for float-input models) and ``y.npy`` (integer
  class labels, one per sample).

Agreement: each sample's output is compared bit for bit with LiteRT ``BUILTIN_REF`` (the oracle the
interpreter is exact with); LiteRT is optional (``ai-edge-litert``), without it agreement is None.
The VTA figures are per inference: the delegated programs are data-independent, so cycles and
energy are the plan's, the same for every sample (tiers as the delegate gives them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError, ModelError
from npukit.evidence import Ledger, Tier
from npukit.models.tflite.model import Model

TARGETS = ("ref", "vta")


@dataclass
class Dataset:
    name: str
    inputs: np.ndarray  # (n, *input shape without the batch axis)
    labels: np.ndarray  # (n,) int


@dataclass
class EvalResult:
    dataset: str
    target: str
    samples: int
    correct: int
    agree_with_ref: int | None  # samples whose output equals LiteRT BUILTIN_REF bit for bit (None: no LiteRT)
    figures: Ledger = field(default_factory=Ledger)

    @property
    def top1(self) -> float:
        return self.correct / self.samples if self.samples else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "target": self.target, "samples": self.samples,
                "correct": self.correct, "top1": self.top1, "agree_with_litert_ref": self.agree_with_ref,
                "figures": self.figures.to_json()["figures"]}


def load_dataset(spec: str, model: Model, limit: int | None = None) -> Dataset:
    """``zoo:digits`` or a folder with ``x.npy`` and ``y.npy`` (see the module doc); ``limit`` keeps
    the first N samples."""
    if spec == "zoo:digits":
        from npukit.models.tflite import digits

        split = digits.load_split()
        ds = Dataset(spec, digits.quantize_images(split.x_test), split.y_test)
    elif spec.startswith("zoo:"):
        raise ConfigError(f"unknown dataset {spec!r}: the offline datasets are zoo:digits or a folder "
                          "with x.npy and y.npy")
    else:
        ds = _folder(Path(spec))
    _check_shape(ds, model)
    if limit is not None:
        if limit < 1:
            raise ConfigError(f"--limit {limit}: expected a positive number of samples")
        ds = Dataset(ds.name, ds.inputs[:limit], ds.labels[:limit])
    return ds


def _folder(path: Path) -> Dataset:
    if not path.is_dir():
        raise ConfigError(f"dataset {path}: not a folder (expected x.npy and y.npy inside, or zoo:digits)")
    arrays = []
    for name in ("x.npy", "y.npy"):
        try:
            arrays.append(np.load(path / name, allow_pickle=False))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"dataset {path}: cannot load {name}: {exc}") from None
    x, y = arrays
    if y.ndim != 1 or y.dtype.kind not in "iu":
        raise ConfigError(f"dataset {path}: y.npy must be a 1-D integer label array, got {y.dtype} {y.shape}")
    if x.shape[:1] != y.shape:
        raise ConfigError(f"dataset {path}: {x.shape[0] if x.ndim else 0} samples in x.npy, {y.size} labels")
    return Dataset(str(path), x, y.astype(np.int64))


def _check_shape(ds: Dataset, model: Model) -> None:
    ins = model.input_tensors()
    if len(ins) != 1 or len(model.outputs) != 1:
        raise ModelError("eval takes a classifier with one input and one output tensor")
    want = tuple(ins[0].shape)
    sample = tuple(ds.inputs.shape[1:])
    if sample != want[1:] and sample != want:
        raise ConfigError(f"dataset {ds.name}: samples of shape {list(sample)}, the model's input is "
                          f"{list(want)}")


def _litert_ref(model: Model, source: bytes | None) -> Callable[[np.ndarray], np.ndarray] | None:
    if source is None:
        return None
    try:
        from ai_edge_litert.interpreter import Interpreter as LiteRT
        from ai_edge_litert.interpreter import OpResolverType
    except ImportError:
        return None
    ref = LiteRT(model_content=source, experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                 num_threads=1)
    ref.allocate_tensors()
    inp, out = ref.get_input_details()[0]["index"], ref.get_output_details()[0]["index"]

    def run(x: np.ndarray) -> np.ndarray:
        ref.set_tensor(inp, x)
        ref.invoke()
        return ref.get_tensor(out).copy()

    return run


def evaluate(model: Model, dataset: Dataset, target: str = "ref", *, source: bytes | None = None,
             hw: str | None = None, on_sample: Callable[[int], None] | None = None) -> EvalResult:
    """Top-1 over ``dataset`` on ``target`` (``ref``: the host interpreter; ``vta``: the VTA
    delegate, preset ``hw``); ``source`` is the model's .tflite bytes for the LiteRT agreement check.
    ``on_sample(i)`` is called after each sample (progress)."""
    from npukit.models.tflite.interpreter import Interpreter

    if target not in TARGETS:
        raise ConfigError(f"unknown target {target!r} (choose {' or '.join(TARGETS)})")
    if target == "ref":
        if hw is not None:
            raise ConfigError("--hw applies to --target vta")
        interp = Interpreter(model)
    else:
        from npukit.models.tflite.delegates import get_delegate

        interp = Interpreter(model, delegate=get_delegate("vta", hw=hw))
    shape, dtype = tuple(model.input_tensors()[0].shape), model.input_tensors()[0].dtype
    out_index = model.outputs[0]
    oracle = _litert_ref(model, source)
    correct, agree = 0, 0
    for i in range(len(dataset.labels)):
        x = np.asarray(dataset.inputs[i]).astype(dtype, copy=False).reshape(shape)
        y = interp.run_all([x])[out_index]
        correct += int(int(np.argmax(y.reshape(-1))) == int(dataset.labels[i]))
        if oracle is not None:
            agree += int(np.array_equal(y, oracle(x)))
        if on_sample is not None:
            on_sample(i)
    n = len(dataset.labels)
    result = EvalResult(dataset.name, target, n, correct, agree if oracle is not None else None)
    src = f"npukit eval over {n} samples of {dataset.name}"
    result.figures.add("top1", 100.0 * result.top1, "%", Tier.MEASURED, src)
    if oracle is not None:
        result.figures.add("agreement_with_litert_ref", 100.0 * agree / n if n else 0.0, "%", Tier.MEASURED,
                           f"{src}: outputs bit-identical with LiteRT BUILTIN_REF")
    for name in ("vta_cycles", "vta_time", "vta_energy"):
        fig = interp.plan.figures.figures.get(name)
        if fig is not None:
            result.figures.figures[f"{name}_per_inference"] = fig
            result.figures.add(f"{name}_total", fig.value * n, fig.unit, fig.tier,
                               f"{fig.source}; × {n} inferences (data-independent programs)")
    return result
