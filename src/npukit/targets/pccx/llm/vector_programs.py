"""The operations Gemma 3 and Llama need that pccx v002 has no instruction for, as pccx programs of
existing instructions (extended profile where noted) or as exact constant folds:

* **SiLU** (Llama's SwiGLU gate), `silu_source`: ``x / (1 + exp(−x))`` =
  MEMSET S ← −1 (SFU register, extended) → ``cvo.scale`` (−x) → ``cvo.exp`` with ``accm`` onto a row
  of ones (``1 + exp(−x)``, one rounding) → ``cvo.recip`` → ``cvo.mul`` by x (extended). Four CVO
  instructions per vector; `silu_reference` is the same sequence as `numerics` calls.
* **Gemma's (1 + w) RMSNorm**: the weight is a constant, so the host folds it: the norm program is the
  plain RMSNorm with ``γ' = bf16(1 + w)`` (one BF16 rounding of a constant, nothing at run time).
* **Query scale** (Gemma 3: 1/√256 = 2⁻⁴; Llama: 1/√head_dim, 2⁻³ for SmolLM2): a power of two, so it is
  folded exactly — into Gemma's q-norm constant (``γ' · 2⁻⁴``) or Llama's q rows' FP32 scales (RoPE is
  linear, so scaling before it is the same value) — no instruction; other head sizes need one
  ``cvo.scale``.

Not wired into the ``pccx`` target yet (its vector operations still run on the host, docs/models.md).
"""

from __future__ import annotations

import numpy as np

from npukit.targets.pccx import numerics as nx

NEG_ONE_BF16 = 0xBF80


def silu_source(n: int, x_word: int, t_word: int, ones_word: int, y_word: int) -> str:
    """Assembly (extended profile): y ← SiLU(x) for n BF16 elements. ``ones_word`` holds n ones (a
    constant the host stages); it is consumed: y is built in place there."""
    if y_word != ones_word:
        raise ValueError("SiLU builds its result in the ones row (exp with accm adds onto it)")
    return "\n".join([
        f"memset cache=sreg slot=0 a=0x{NEG_ONE_BF16:04X}",
        f"cvo.scale src=0x{x_word:X} dst=0x{t_word:X} len={n}",
        f"cvo.exp src=0x{t_word:X} dst=0x{y_word:X} len={n} flags=accm",
        f"cvo.recip src=0x{y_word:X} dst=0x{y_word:X} len={n}",
        f"cvo.mul src=0x{x_word:X} dst=0x{y_word:X} len={n}",
    ])


def silu_reference(x: np.ndarray) -> np.ndarray:
    """The same four steps as `numerics` calls (what the simulator computes)."""
    t = nx.cvo_scale(x, -1.0)
    u = nx.cvo_exp(t, dst=np.ones_like(np.asarray(x, np.float32)))
    return nx.cvo_mul(x, nx.cvo_recip(u))


def fold_one_plus(w: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """Gemma's RMSNorm weight as the norm program's constant: ``bf16((1 + w) · scale)`` (``scale`` a
    power of two, e.g. the query scale folded into the q norm)."""
    return nx.bf16((np.float64(1.0) + np.asarray(w, np.float64)) * scale)
