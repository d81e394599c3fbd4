"""Activation-sparsity analysis of a BitNet model's ``down_proj`` inputs (relu² zeros), the quantity
ternfpga's gather exploits: per-layer exact-zero fraction, how many channels are data-dependent
(zero on some tokens, nonzero on others) versus always zero, and token-to-token overlap (Jaccard)
of the active sets. ternfpga measured 59.8% zeros, 93.9% data-dependent channels, ~4% always zero
and Jaccard 0.42 on BitNet-2B-4T (seeds/002 Phases 2–3; refs/ternary.md §1.6).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from npukit.errors import ConfigError
from npukit.evidence import Ledger, Tier
from npukit.models.bitnet.model import BitNet


@dataclass
class LayerSparsity:
    tokens: int = 0
    zeros: int = 0
    elems: int = 0
    ever_zero: np.ndarray | None = None
    ever_active: np.ndarray | None = None
    jaccard: list[float] = field(default_factory=list)
    _prev: np.ndarray | None = None

    def add(self, x: np.ndarray) -> None:
        """x (T, F): inputs of down_proj for T consecutive tokens."""
        active = x != 0
        if self.ever_zero is None:
            self.ever_zero = np.zeros(x.shape[1], bool)
            self.ever_active = np.zeros(x.shape[1], bool)
        self.ever_zero |= (~active).any(axis=0)
        self.ever_active |= active.any(axis=0)
        self.zeros += int((~active).sum())
        self.elems += active.size
        self.tokens += active.shape[0]
        for row in active:
            if self._prev is not None:
                union = int((row | self._prev).sum())
                self.jaccard.append(int((row & self._prev).sum()) / union if union else 1.0)
            self._prev = row

    @property
    def zero_fraction(self) -> float:
        return self.zeros / self.elems if self.elems else 0.0


class SparsityAnalyser:
    """Attach to a `BitNet` (replaces its observer), run token sequences, then `ledger()`."""

    def __init__(self, model: BitNet) -> None:
        self.model = model
        self.layers = [LayerSparsity() for _ in range(model.cfg.num_hidden_layers)]
        model.observer = self._observe

    def _observe(self, layer: int, name: str, x: np.ndarray, q: np.ndarray | None) -> None:
        if name == "down_proj":
            self.layers[layer].add(x)

    def run(self, sequences: Iterable[list[int]]) -> SparsityAnalyser:
        for seq in sequences:
            for lay in self.layers:
                lay._prev = None  # overlap is measured between consecutive tokens of one sequence
            self.model.forward(seq, self.model.new_cache())
        return self

    def ledger(self, source: str) -> Ledger:
        if not any(lay.tokens for lay in self.layers):
            raise ConfigError("sparsity analysis saw no tokens")
        led = Ledger()
        zeros = sum(lay.zeros for lay in self.layers)
        elems = sum(lay.elems for lay in self.layers)
        ez = np.concatenate([lay.ever_zero for lay in self.layers])
        ea = np.concatenate([lay.ever_active for lay in self.layers])
        jac = [j for lay in self.layers for j in lay.jaccard]
        src = f"npukit sparsity analysis of down_proj inputs: {source}"
        led.add("sparsity.zero_fraction", zeros / elems, "fraction", Tier.MEASURED, src)
        for i, lay in enumerate(self.layers):
            led.add(f"sparsity.zero_fraction.layer{i}", lay.zero_fraction, "fraction", Tier.MEASURED, src)
        led.add("sparsity.data_dependent_channels", float((ez & ea).mean()), "fraction", Tier.MEASURED,
                f"{src}; channels zero on some tokens and nonzero on others")
        led.add("sparsity.always_zero_channels", float((~ea).mean()), "fraction", Tier.MEASURED, src)
        if jac:
            led.add("sparsity.token_jaccard", float(np.mean(jac)), "fraction", Tier.MEASURED,
                    f"{src}; |A_t ∩ A_t+1| / |A_t ∪ A_t+1| of consecutive tokens' active sets")
        return led
