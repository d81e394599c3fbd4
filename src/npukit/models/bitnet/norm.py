"""RMSNorm as BitNet's float reference computes it (float32 throughout, as transformers does), shared by
the float model and the integer datapath's final norm."""

from __future__ import annotations

import numpy as np

F32 = np.float32


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    var = np.mean(np.square(x, dtype=F32), axis=-1, keepdims=True, dtype=F32)
    return (w * (x * (F32(1.0) / np.sqrt(var + F32(eps))))).astype(F32)
