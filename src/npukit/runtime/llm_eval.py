"""Perplexity of a GGUF LLM on a text, on any target whose backend exposes the forward pass
(``golden``, ``quant``): the first ``window`` tokens of the text (the tokenizer's own BOS included),
fed in chunks through the KV cache, every next token scored from float64 log-softmax of the logits.

``perplexity = exp(mean(-log p(token[i+1] | token[..i])))`` over the ``window - 1`` predictions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError, ModelError
from npukit.evidence import Figure, Tier
from npukit.runtime import backends
from npukit.sim.cpu import host_cpu_model

CHUNK = 64  # tokens per forward call (the progress granularity)


@dataclass
class PerplexityResult:
    model: str
    target: str
    kv: str
    text: str
    tokens: int  # window actually scored (predictions = tokens - 1)
    perplexity: float
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> dict[str, Figure]:
        src = f"{self.target} --kv {self.kv}, first {self.tokens} tokens of {Path(self.text).name}"
        return {"perplexity": Figure(self.perplexity, "", Tier.MEASURED, src),
                "eval_s": Figure(self.seconds, "s", Tier.MEASURED, f"wall clock, {host_cpu_model()}")}

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "target": self.target, "kv": self.kv, "text": self.text,
                "tokens": self.tokens, "perplexity": self.perplexity, **self.extra,
                "figures": {k: f.to_json() for k, f in self.figures().items()}}


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] per row, in float64."""
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    log_norm = np.log(np.exp(z).sum(axis=-1))
    return log_norm - z[np.arange(len(targets)), targets]


def mean_nll(ref: Any, ids: np.ndarray, on_chunk: Callable[[int], None] | None = None) -> float:
    """Mean next-token NLL of ``ids`` under a forward pass with a KV cache (``reset``/``forward``)."""
    ref.reset()
    nll = []
    for lo in range(0, ids.size - 1, CHUNK):
        chunk = ids[lo:min(lo + CHUNK, ids.size - 1)]
        nll.append(token_nll(ref.forward(chunk), ids[lo + 1:lo + 1 + chunk.size]))
        if on_chunk is not None:
            on_chunk(int(chunk.size))
    return float(np.concatenate(nll).mean())


def perplexity(model: Any, text_path: str | Path, target: str = "golden", kv: str | None = None,
               window: int = 512, on_chunk: Callable[[int], None] | None = None) -> PerplexityResult:
    """Perplexity of ``model`` (a GGUF `LoadedModel`) over the first ``window`` tokens of a text file."""
    if window < 2:
        raise ConfigError("--window must be at least 2 tokens")
    if model.tokenizer is None:
        raise ModelError(f"{model.name}: no tokenizer in the GGUF metadata; cannot score a text")
    try:
        text = Path(text_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{text_path}: cannot read the text ({exc})") from None
    ids = np.asarray(model.tokenizer.encode(text).ids[:window], dtype=np.int64)
    if ids.size < 2:
        raise ConfigError(f"{text_path}: fewer than 2 tokens")
    backend = backends.create_backend(model, target, kv=kv)
    ref = getattr(backend, "ref", None)
    if not hasattr(ref, "forward"):
        raise ConfigError(f"target {target!r} has no whole-sequence forward pass for perplexity")
    t0 = time.perf_counter()
    mean = mean_nll(ref, ids, on_chunk)
    stats = backend.stats()
    extra = {"weight_error": stats["weight_error"]} if "weight_error" in stats else {}
    return PerplexityResult(str(model.name), target, kv or backends.get_spec(model.family, target).default_kv,
                            str(text_path), int(ids.size), math.exp(mean), time.perf_counter() - t0, extra)
