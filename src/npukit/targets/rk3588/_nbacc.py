"""numba kernel for `numerics.seq_acc` (optional, the fast extra): the same fp32 operations in the same
order — per output element, products added one input channel at a time in ascending order, no FMA
contraction (numba compiles without fastmath) — so it returns the NumPy loop's bits, faster."""

from __future__ import annotations

import numba
import numpy as np

from npukit.sim import compile_report

compile_report.install()  # first-run compiles are announced, never silent


@numba.njit(cache=True, nogil=True)
def seq_acc_2d(a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> None:  # pragma: no cover - compiled
    m, k = a.shape
    n = b.shape[1]
    for i in range(m):
        for kk in range(k):
            x = a[i, kk]
            for j in range(n):
                p = x * b[kk, j]
                acc[i, j] = acc[i, j] + p


@numba.njit(cache=True, nogil=True)
def row_sum_2d(x: np.ndarray, acc: np.ndarray) -> None:  # pragma: no cover - compiled
    rows, n = x.shape
    for i in range(rows):
        s = acc[i]
        for j in range(n):
            s = s + x[i, j]
        acc[i] = s
