"""Golden vectors for RTL testbenches from a model run (`write_vectors`); the program-level form is
``npukit vectors PROGRAM`` (docs/vectors.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from npukit.api.models import Model, load_model
from npukit.api.session import prompt_ids
from npukit.errors import ConfigError


def _exporter(target: str) -> Any:
    from npukit import registry

    record = registry.get(target)
    if not record.provides("vectors"):
        raise ConfigError(f"target {target!r} has no golden-vector exporter "
                          f"(have: {', '.join(registry.names('vectors'))})")
    return record.resolve("vectors")


def write_vectors(model: Model | str | Path | None, out_dir: str | Path, *, target: str = "pccx",
                  hw: str | None = None, overrides: Sequence[str] = (), prompt: Sequence[int] | None = None,
                  segment: str = "all", every: int = 1, max_new_tokens: int = 2) -> dict[str, Any]:
    """Write golden vectors of ``model`` into ``out_dir`` and return what was written.

    ``target="pccx"``: the first generated token compiled for pccx, one ``segment_NN/`` folder per
    program segment (``segment``: an index or ``"all"``), a state checkpoint every ``every``
    instructions, each checked against the driver. ``target="tern"``: the ternfpga units' cases
    (engine, attention, FFN glue) recorded over ``max_new_tokens`` generated tokens.
    """
    if not isinstance(model, Model):
        loaded = load_model(model)
        if not isinstance(loaded, Model):
            raise ConfigError("golden vectors come from a language model, not a TFLite model")
        model = loaded
    out = Path(out_dir)
    exporter = _exporter(target)
    if target == "pccx":
        rows = exporter.export_token(model.loaded, list(prompt) if prompt else None,
                                     hw or "pccx-v002-kv260", list(overrides), segment, out, every)
        return {"out": str(out), "segments": rows}
    if target == "tern":
        return _tern(exporter, model, out, hw, prompt, max_new_tokens)
    raise ConfigError(f"write_vectors supports targets pccx and tern, not {target!r}")


def _tern(exporter: Any, model: Model, out: Path, hw: str | None, prompt: Sequence[int] | None,
          max_new_tokens: int) -> dict[str, Any]:
    from npukit.runtime import backends
    from npukit.runtime.generate import generate

    be = backends.create_backend(model.loaded, "tern", **({"hw": hw} if hw else {}))
    be.ops.__class__ = exporter.RecordingTernOps  # same state, plus recording of each unit call
    ids = prompt_ids(model, list(prompt) if prompt else [int(model.loaded.config.bos_token_id or 0)])
    res = generate(be, ids, max_new_tokens, vocab_size=model.vocab_size)
    meta = {"target": "tern", "hw": be.hw.name, "model": model.name, "prompt_ids": ids,
            "tokens": res.tokens, "cases_per_unit_max": exporter.RecordingTernOps.limit}
    man = exporter.export(getattr(be.ops, "cases", {}), out, meta)
    counts = {u: len(v) for u, v in man["units"].items() if isinstance(v, list)}
    return {"out": str(out), "cases": counts, "tokens": res.tokens}
