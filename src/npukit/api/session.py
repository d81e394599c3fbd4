"""Compiling a language model for a target and generating with it: `compile_model` → `Session.generate` →
`Generation` (tokens, text, logits, simulated cycles, tiered figures)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from npukit.api.models import Model, load_model
from npukit.errors import ConfigError, ModelError

if TYPE_CHECKING:
    import numpy as np

    from npukit.api.perf import PerfReport
    from npukit.evidence import Figure, Ledger
    from npukit.runtime.backends import Backend


@dataclass
class Generation:
    """What one `Session.generate` produced.

    ``ledger`` holds every figure with its evidence tier: the host's measured timings
    (``prefill_s``, ``decode_s``, ...) and, on a simulated target, the target's own figures (simulated
    cycles, utilisation, projected rates). ``logits`` (with ``keep_logits=True``) has one float32
    vocabulary row per generated token. ``stats`` is the backend's raw report.
    """

    prompt_ids: list[int]
    tokens: list[int]
    text: str | None
    stop_reason: str  # "length" or "stop_token"
    ledger: Ledger
    stats: dict[str, Any] = field(default_factory=dict, repr=False)
    logits: np.ndarray | None = field(default=None, repr=False)
    raw: Any = field(default=None, repr=False)  # the runtime's GenerationResult (the CLI's JSON form)

    @property
    def cycles_per_token(self) -> Figure | None:
        """Simulated cycles per decode token (a tiered `Figure`), or None on an unsimulated target or
        a run with no decode step. A target with several timing phases reports its first one here;
        every phase is in ``ledger``."""
        for name, fig in self.ledger.items():
            if name == "cycles_per_token" or name.startswith("cycles_per_token."):
                return fig
        return None

    def to_json(self, with_logits: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt_ids": self.prompt_ids, "tokens": self.tokens,
                               "stop_reason": self.stop_reason, **self.ledger.to_json()}
        if self.text is not None:
            out["text"] = self.text
        if with_logits:
            if self.logits is None:
                raise ConfigError("logits were not kept for this generation (keep_logits=True)")
            out["logits"] = self.logits.tolist()
        return out


def check_options(family: str, target: str, options: dict[str, Any],
                  flags: dict[str, str] | None = None, where: str = "target") -> None:
    """Reject the options the target's backend does not take, before any work (``flags`` and
    ``where`` name them the way the caller spelled them, e.g. ``--trace`` and ``--target``)."""
    from npukit.runtime import backends

    factory = backends.get_spec(family, target).factory
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    bad = [(flags or {}).get(k, k) for k in options if k not in params]
    if bad:
        raise ConfigError(f"{where} {target} does not take {' or '.join(bad)}")


class Session:
    """A model compiled for one target (and hardware): `generate` runs it, as often as you like."""

    def __init__(self, model: Model, target: str, backend: Backend, hw: str | None) -> None:
        self.model, self.target, self.backend, self.hw = model, target, backend, hw
        self.last: Generation | None = None  # the latest `generate` result

    def generate(self, prompt: str | Sequence[int] | None = None, max_new_tokens: int = 32, *,
                 temperature: float = 0.0, top_p: float = 1.0, repetition_penalty: float = 1.0,
                 seed: int = 0, ignore_eos: bool = False, keep_logits: bool = False,
                 on_token: Callable[[int], None] | None = None) -> Generation:
        """Generate up to ``max_new_tokens`` after ``prompt`` (text, token ids, or None for the
        model's BOS token). Greedy by default; ``temperature`` / ``top_p`` / ``repetition_penalty``
        / ``seed`` sample. ``on_token`` sees each token as soon as it is chosen."""
        import numpy as np

        from npukit.runtime.generate import generate as run_loop
        from npukit.runtime.sampling import SamplingParams

        ids = prompt_ids(self.model, prompt)
        sampling = SamplingParams(temperature, top_p, repetition_penalty, seed)
        stops = () if ignore_eos else self.model.loaded.eos_token_ids
        res = run_loop(self.backend, ids, max_new_tokens, sampling, stops, self.model.vocab_size,
                       keep_logits=keep_logits, on_token=on_token)
        led = res.figures
        from npukit.evidence import Figure

        for name, fig in (res.backend_stats.get("figures") or {}).items():
            led.figures.setdefault(name, Figure(**fig))
        logits = np.stack(res.logits) if res.logits else None
        self.last = Generation(res.prompt, res.tokens, self.model.decode(res.tokens), res.stop_reason, led,
                               dict(res.backend_stats), logits, res)
        return self.last

    def hardware_name(self) -> str | None:
        """The hardware preset (or TOML) this session simulates, the target's default included."""
        if self.hw:
            return str(self.hw)
        desc = getattr(self.backend, "hw", None)
        name = getattr(self.backend, "hw_name", None) or getattr(desc, "name", None)
        return str(name) if name else None

    def estimate(self, context: int | None = None, **kwargs: Any) -> PerfReport:
        """Analytic time and energy per decode token of this model on this session's hardware
        (`npukit.estimate`; ``context`` defaults to the last generation's prompt + tokens)."""
        from npukit.api.perf import estimate

        hw = self.hardware_name()
        if hw is None:
            raise ConfigError(f"target {self.target} simulates no hardware: call npukit.estimate(model, hw)")
        if context is None:
            last = self.last
            context = len(last.prompt_ids) + len(last.tokens) if last is not None else 1024
        return estimate(self.model, hw, context=context, **kwargs)

    def __repr__(self) -> str:
        return f"Session({self.model.name!r} on {self.target!r}, hw={self.hw!r})"


def prompt_ids(model: Model, prompt: str | Sequence[int] | None) -> list[int]:
    """Token ids for a prompt: text is encoded, ids are checked against the vocabulary, None is BOS."""
    if isinstance(prompt, str):
        ids = model.encode(prompt)
    elif prompt is None:
        bos = getattr(model.loaded.config, "bos_token_id", None)
        if bos is None:
            raise ConfigError("give a prompt: text or token ids (--prompt, --prompt-ids); the model has no "
                              "BOS token to start from")
        ids = [int(bos)]
    else:
        ids = [int(t) for t in prompt]
        if not ids:
            raise ConfigError("empty prompt: give at least one token")
    bad = [t for t in ids if not 0 <= t < model.vocab_size]
    if bad:
        raise ModelError(f"token id {bad[0]} out of range [0, {model.vocab_size}) for {model.name}")
    return ids


def list_targets(model: Model | None = None) -> list[str]:
    """Every generation target, or those ``model``'s family runs on."""
    from npukit.runtime import backends

    return backends.targets(model.family if model is not None else None)


def compile_model(model: Model | str | Path | None, target: str = "golden", *, hw: str | None = None,
            kv: str | None = None, overrides: Sequence[str] = (), trace: str | Path | None = None,
            **options: Any) -> Session:
    """Compile ``model`` (a `Model` or anything `load_model` takes) to run on ``target``.

    ``target``: ``"golden"`` (float reference), ``"quant"`` (integer reference), ``"pccx"``,
    ``"tern"``, ... (`targets`). ``hw``: a hardware preset name or TOML file for a simulated target;
    ``overrides``: ``"key=value"`` hardware fields. ``kv``: KV-cache storage (default: the target's).
    ``trace``: a Perfetto trace file the run writes at its end. Other keyword options go to the
    target's backend (pccx: ``executor``, ``prefill``, ``kv_max_tokens``, ``kv_sink``, ``kv_window``);
    one it does not take raises `npukit.ConfigError`.
    """
    from npukit.runtime import backends

    if not isinstance(model, Model):
        loaded = load_model(model)
        if not isinstance(loaded, Model):
            raise ConfigError(f"{model}: a TFLite model runs with TfliteModel.run, not compile_model")
        model = loaded
    given = {k: v for k, v in (("hw", hw), ("overrides", list(overrides)), ("trace", trace)) if v}
    given |= {k: v for k, v in options.items() if v is not None}
    if "trace" in given:
        given["trace"] = str(given["trace"])
    if target not in backends.targets():
        raise ConfigError(f"unknown target {target!r} (known: {', '.join(backends.targets())})")
    check_options(model.family, target, given)
    backend = backends.create_backend(model.loaded, target, kv=kv, **given)
    return Session(model, target, backend, hw)


def generate(model: Model | str | Path | None, prompt: str | Sequence[int] | None = None,
             max_new_tokens: int = 32, *, target: str = "golden", hw: str | None = None,
             **kwargs: Any) -> Generation:
    """`compile_model` then `Session.generate` in one call (keyword arguments go to whichever takes them)."""
    gen_keys = set(inspect.signature(Session.generate).parameters) - {"self", "prompt", "max_new_tokens"}
    gen_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in gen_keys}
    session = compile_model(model, target, hw=hw, **kwargs)
    return session.generate(prompt, max_new_tokens, **gen_kw)
