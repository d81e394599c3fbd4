"""GPTQ-style error-compensated rounding onto pccx's INT4 affine groups (docs/models.md, "GPTQ").

Round-to-nearest picks each weight's code on its own; GPTQ (Frantar et al., 2022, after Optimal Brain
Quantization) picks codes column by column and feeds each column's rounding error forward into the
columns not yet rounded, weighted by the inverse Hessian ``H = XᵀX`` of the layer's calibration inputs,
so that the *output* error ``‖X·Wᵀ − X·Ŵᵀ‖`` rather than the weight error is what is kept small.

The result is in exactly the format round-to-nearest produces (`GroupedMatrix`: INT4 codes, one
float32 scale and one FP16 offset per row and group of 32 inputs): the group's (scale, offset) is
fitted (`fit`, by default the policy's affine least-squares fit) on the group's weights as they stand
when the first column of the group is reached, i.e. after the errors of the earlier groups were fed
into them. pccx executes it with the same instructions, so pccx stays bit-identical to quant.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

F32 = np.float32
DAMP = 0.01  # added to H's diagonal, as a share of its mean (GPTQ's default "percdamp")
BLOCK = 128  # columns per lazy batch update (a multiple of the group)
LO, HI = -8, 7

# groups [M, 1, g] -> (codes [M, 1, g], float32 scale [M, 1], FP16 offset [M, 1])
GroupFit = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


def inverse_hessian_factor(h: np.ndarray, damp: float = DAMP) -> np.ndarray:
    """Upper Cholesky factor U of H⁻¹ (``H⁻¹ = UᵀU``) after dampening: row i of U, divided by
    ``U[i, i]``, is how column i's rounding error spreads over the later columns."""
    hd = np.array(h, np.float64)
    k = hd.shape[0]
    dead = np.diag(hd) <= 0  # an input that never fired: its weights do not matter, keep H regular
    hd[dead, dead] = 1.0
    hd[np.diag_indices(k)] += damp * float(np.mean(np.diag(hd)))
    return np.linalg.cholesky(np.linalg.inv(hd)).T


def _round_block(w1: np.ndarray, u1: np.ndarray, first: int, group: int, fit: GroupFit,
                 out: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """Round the columns of one block (w1 [M, B], updated in place), fitting each group's scale and
    offset when its first column comes; returns the scaled errors [M, B] for the later blocks."""
    codes, scale, offset = out
    err = np.zeros_like(w1)
    s = o = np.zeros(w1.shape[0])
    for i in range(w1.shape[1]):
        col = first + i
        if col % group == 0:
            _, gs, go = fit(w1[:, i:i + group][:, None, :])
            scale[:, col // group], offset[:, col // group] = gs[:, 0], go[:, 0]
            s, o = gs[:, 0].astype(np.float64), go[:, 0].astype(np.float64)
        q = np.clip(np.rint((w1[:, i] - o) / s), LO, HI)
        codes[:, col] = q
        err[:, i] = (w1[:, i] - (q * s + o)) / u1[i, i]
        w1[:, i + 1:] -= np.outer(err[:, i], u1[i, i + 1:])
    return err


def _round_static_block(w1: np.ndarray, u1: np.ndarray, cols: np.ndarray, grid: tuple[np.ndarray, np.ndarray],
                        codes: np.ndarray) -> np.ndarray:
    """As `_round_block`, on grids fixed beforehand: column i (original index ``cols[i]``) rounds on its
    group's (scale, offset) ``grid`` [M, K / group] whatever order the columns come in."""
    scale, offset = grid
    err = np.zeros_like(w1)
    group = codes.shape[1] // scale.shape[1]
    for i, col in enumerate(cols):
        s, o = scale[:, col // group], offset[:, col // group]
        q = np.clip(np.rint((w1[:, i] - o) / s), LO, HI)
        codes[:, col] = q
        err[:, i] = (w1[:, i] - (q * s + o)) / u1[i, i]
        w1[:, i + 1:] -= np.outer(err[:, i], u1[i, i + 1:])
    return err


def _gptq_act_order(w: np.ndarray, h: np.ndarray, fit: GroupFit, group: int, damp: float, block: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPTQ's act-order: the columns rounded by decreasing Hessian diagonal (the inputs that carry the
    most energy first, while the most columns are left to absorb their error), each on its group's grid
    fitted on the original weights before the pass ("static groups"), so the stored format is the same."""
    m, k = w.shape
    _, scale, offset = fit(np.asarray(w).reshape(m, k // group, group))
    grid = (scale.astype(np.float64), offset.astype(np.float64))
    order = np.argsort(-np.diag(np.asarray(h, np.float64)), kind="stable")
    u = inverse_hessian_factor(np.asarray(h)[np.ix_(order, order)], damp)
    work = np.array(w, np.float64)[:, order]
    codes = np.empty((m, k), np.int8)
    for lo in range(0, k, block):
        hi = min(lo + block, k)
        err = _round_static_block(work[:, lo:hi], u[lo:hi, lo:hi], order[lo:hi], grid, codes)
        work[:, hi:] -= err @ u[lo:hi, hi:]
    return codes, scale.astype(F32), offset.astype(np.float16)


def gptq_affine(w: np.ndarray, h: np.ndarray, fit: GroupFit, group: int = 32, damp: float = DAMP,
                block: int = BLOCK, act_order: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weights w [M, K] and their inputs' Hessian h [K, K] (``Σ xᵀx``) -> INT4 codes int8 [M, K],
    float32 scales and FP16 offsets [M, K // group], the codes error-compensated in column order
    (``act_order``: by decreasing Hessian diagonal, on grids fitted before the pass)."""
    m, k = w.shape
    if k % group or block % group or h.shape != (k, k):
        raise ValueError(f"bad GPTQ shapes: w {w.shape}, h {h.shape}, group {group}, block {block}")
    if act_order:
        return _gptq_act_order(w, h, fit, group, damp, block)
    u = inverse_hessian_factor(h, damp)
    work = np.array(w, np.float64)
    out = (np.empty((m, k), np.int8), np.empty((m, k // group), F32), np.empty((m, k // group), np.float16))
    for lo in range(0, k, block):
        hi = min(lo + block, k)
        err = _round_block(work[:, lo:hi], u[lo:hi, lo:hi], lo, group, fit, out)
        work[:, hi:] -= err @ u[lo:hi, hi:]
    return out


def output_error(x: np.ndarray, w: np.ndarray, w_hat: np.ndarray) -> float:
    """``‖X·Wᵀ − X·Ŵᵀ‖_F``: what GPTQ minimises (greedily), what round-to-nearest ignores."""
    return float(np.linalg.norm(np.asarray(x, np.float64) @ (np.asarray(w, np.float64) - w_hat).T))
