"""Host-side token sampling, as pccx's host does it: repetition penalty, temperature, top-p.

Order: repetition penalty on the logits of every token already seen (prompt and generated):
positive logits are divided by the penalty, negative ones multiplied (both push the token down);
then temperature 0 is argmax (lowest id on ties), otherwise softmax(logits / T) in float64,
restricted to the smallest set of most-probable tokens whose mass reaches top-p (the token that
crosses the threshold is kept), renormalised and drawn from a seeded RNG.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from npukit.errors import ConfigError


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = 0

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0 and np.isfinite(self.temperature)):
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top-p must be in (0, 1], got {self.top_p}")
        if not (self.repetition_penalty > 0.0 and np.isfinite(self.repetition_penalty)):
            raise ConfigError(f"repetition penalty must be > 0, got {self.repetition_penalty}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def apply_repetition_penalty(logits: np.ndarray, seen: Iterable[int], penalty: float) -> np.ndarray:
    """Copy of ``logits`` with each seen token's logit divided (if > 0) or multiplied (if < 0)."""
    out = np.array(logits, dtype=np.float64 if logits.dtype == np.float64 else np.float32, copy=True)
    if penalty == 1.0:
        return out
    idx = np.unique(np.fromiter(seen, dtype=np.int64))
    idx = idx[(idx >= 0) & (idx < out.size)]
    v = out[idx]
    out[idx] = np.where(v > 0, v / penalty, v * penalty)
    return out


def top_p_probs(logits: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """Sampling distribution (float64, sums to 1) after temperature and nucleus truncation."""
    z = logits.astype(np.float64) / temperature
    z -= z.max()
    p = np.exp(z)
    p /= p.sum()
    if top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        csum = np.cumsum(p[order])
        keep = int(np.searchsorted(csum, top_p, side="left")) + 1  # include the crossing token
        mask = np.zeros(p.size, dtype=bool)
        mask[order[:keep]] = True
        p = np.where(mask, p, 0.0)
        p /= p.sum()
    return p


_FLOATS = (np.float32, np.float64)  # `apply_repetition_penalty` keeps these dtypes


class Sampler:
    """Stateful sampler: owns the RNG so a seeded run is reproducible token for token."""

    def __init__(self, params: SamplingParams | None = None) -> None:
        self.params = params or SamplingParams()
        self.rng = np.random.default_rng(self.params.seed)

    def __call__(self, logits: np.ndarray, seen: Iterable[int] = ()) -> int:
        p = self.params
        if p.greedy and p.repetition_penalty == 1.0 and getattr(logits, "dtype", None) in _FLOATS:
            return int(np.argmax(logits))  # what the copy below would give, without copying the vocabulary
        z = apply_repetition_penalty(np.asarray(logits), seen, p.repetition_penalty)
        if p.greedy:
            return int(np.argmax(z))
        probs = top_p_probs(z, p.temperature, p.top_p)
        return int(self.rng.choice(probs.size, p=probs))
