"""Opening models: language models (Hugging Face folder, GGUF file, shape preset, the embedded default)
and int8 TFLite models (a ``.tflite`` file or a ``zoo:NAME``), each as one typed object."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from npukit.errors import ConfigError, ModelError

if TYPE_CHECKING:
    import numpy as np

    from npukit.evidence import Ledger
    from npukit.models.loading import LoadedModel


@dataclass
class Model:
    """A language model ready to compile for a target (`npukit.compile_model`).

    ``family`` is the registry key (``"gemma3n"``, ``"bitnet"``), ``origin`` says whether the weights
    are a checkpoint's or synthetic (``"preset"``), ``config`` is the model's ``config.json`` as a dict.
    """

    loaded: LoadedModel

    @property
    def name(self) -> str:
        return str(self.loaded.name)

    @property
    def family(self) -> str:
        return self.loaded.family

    @property
    def origin(self) -> str:
        return self.loaded.origin

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.loaded.raw_config)

    @property
    def vocab_size(self) -> int:
        return self.loaded.vocab_size

    @property
    def has_tokenizer(self) -> bool:
        return self.loaded.tokenizer is not None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (needs the model's ``tokenizer.json``)."""
        if self.loaded.tokenizer is None:
            raise ModelError(f"model {self.name} has no tokenizer.json; give token ids (--prompt-ids)")
        ids = list(self.loaded.tokenizer.encode(text).ids)
        if not ids:
            raise ConfigError("the prompt encodes to no tokens")
        return ids

    def decode(self, ids: Sequence[int]) -> str | None:
        """Text of ``ids`` (special tokens skipped); None without a tokenizer."""
        if self.loaded.tokenizer is None:
            return None
        return str(self.loaded.tokenizer.decode(list(ids), skip_special_tokens=True))

    def targets(self) -> list[str]:
        """The targets this model's family runs on (``npukit.compile_model(model, target)``)."""
        from npukit.runtime import backends

        return backends.targets(self.family)

    def __repr__(self) -> str:
        return f"Model({self.name!r}, family={self.family!r}, origin={self.origin!r})"


@dataclass
class TensorInfo:
    """One input or output of a TFLite model."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass
class TfliteResult:
    """Outputs of one TFLite run by name, the ops each side ran, and tiered figures (host wall time;
    a target's simulated cycles and energy)."""

    outputs: dict[str, np.ndarray]
    ledger: Ledger
    host_ops: int
    delegated_ops: int
    records: list[Any] = field(default_factory=list, repr=False)


@dataclass
class TfliteModel:
    """An int8 TFLite model: `run` it on npukit's interpreter (compiled kernels, bit-exact with LiteRT) or
    on a target that takes a subset of its ops (``target="vta"``)."""

    name: str
    model: Any  # npukit.models.tflite.Model
    path: Path | None = None  # the .tflite file (LiteRT's agreement check in `evaluate` reads it)

    @property
    def inputs(self) -> list[TensorInfo]:
        return [TensorInfo(t.name, tuple(t.shape), str(t.dtype)) for t in self.model.input_tensors()]

    @property
    def outputs(self) -> list[TensorInfo]:
        return [TensorInfo(t.name, tuple(t.shape), str(t.dtype)) for t in self.model.output_tensors()]

    def run(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray], target: str = "reference", *,
            hw: str | None = None, overrides: Sequence[str] = (), trace: str | Path | None = None
            ) -> TfliteResult:
        """Run once. ``inputs``: arrays by input name or in input order. ``target``: ``"reference"``
        or a delegate target (``"vta"``, with ``hw`` preset and ``overrides``). ``trace``: write a
        Chrome/Perfetto trace of the ops there."""
        from npukit.evidence import Ledger, Tier
        from npukit.models.tflite import Interpreter
        from npukit.models.tflite.delegates import get_delegate

        if target == "reference":
            if hw or overrides:
                raise ConfigError("hw and overrides apply to a delegate target such as 'vta'")
            interp = Interpreter(self.model)
        else:
            interp = Interpreter(self.model, delegate=get_delegate(target, hw=hw, overrides=list(overrides)))
        records: list[Any] = []
        if trace is not None:
            interp.hooks.append(records.append)
        feeds = dict(inputs) if isinstance(inputs, Mapping) else list(inputs)
        t0 = time.perf_counter()
        outputs = interp.run(feeds)
        wall = time.perf_counter() - t0
        led = Ledger()
        led.add("run_wall_ms", wall * 1e3, "ms", Tier.MEASURED,
                f"perf_counter around Interpreter.run on this host ({target})")
        for name, fig in interp.plan.figures.items():
            led.figures[name] = fig
        if trace is not None:
            from npukit.models.tflite import report

            report.write_json_file(str(trace), report.trace_json(records, self.model, {"model": self.name}))
        return TfliteResult(dict(outputs), led, interp.host_ops, interp.delegated_ops, records)

    def evaluate(self, dataset: str, target: str = "ref", *, hw: str | None = None, limit: int | None = None,
                 progress: bool | None = None) -> Any:
        """Top-1 accuracy over ``dataset`` (``zoo:digits`` or a folder with x.npy/y.npy), per-sample
        agreement with LiteRT BUILTIN_REF, and on ``target="vta"`` cycles and energy per inference
        (an `npukit.models.tflite.evaluate.EvalResult`). ``progress``: a bar (None: on a terminal)."""
        from npukit.models.tflite import evaluate as ev
        from npukit.progress import Progress

        ds = ev.load_dataset(dataset, self.model, limit)
        source = self.path.read_bytes() if self.path is not None else None
        with Progress(len(ds.labels), f"eval {self.name} on {target}", enabled=progress) as bar:
            return ev.evaluate(self.model, ds, target, source=source, hw=hw,
                               on_sample=lambda _i: bar.update())

    def __repr__(self) -> str:
        return f"TfliteModel({self.name!r}, {len(self.model.ops)} ops)"


def model_presets() -> list[str]:
    """Names of the shape presets `load_model` accepts (synthetic deterministic weights)."""
    from npukit.models.presets import model_preset_names

    return model_preset_names()


def load_model(spec: str | Path | None = None, *, seed: int = 0) -> Model | TfliteModel:
    """Open a model.

    ``spec`` is a Hugging Face folder (``config.json`` + safetensors [+ ``tokenizer.json``]), a GGUF
    file (BitNet), a shape preset name (`model_presets`; synthetic weights from ``seed``), a
    ``.tflite`` file or ``zoo:NAME`` (returns a `TfliteModel`), or None for the embedded default
    model (a tiny Gemma 3n). Bad input raises a typed `npukit.NpukitError`.
    """
    from npukit.models.loading import load_model as _load

    if spec is None:
        try:
            from npukit.models.embedded import default_model_dir
        except ImportError:
            raise ModelError("no embedded default model in this build; give a model") from None
        return Model(_load(default_model_dir(), seed=seed))
    text = str(spec)
    if text.startswith("zoo:") or text.lower().endswith(".tflite"):
        from npukit.models.tflite import read_model, zoo

        path = zoo.resolve(text)
        return TfliteModel(text, read_model(path), path)
    return Model(_load(spec, seed=seed))
