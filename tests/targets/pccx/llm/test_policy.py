"""The weight policy against gguf-py (an independent decoder of the same bytes): Q4_0 maps to pccx INT4
bit for bit, Q4_1 / Q4_K to INT4 codes with their own scales plus FP16 offsets (off by at most that
one FP16 rounding), Q8_0 and Q5_0 to INT8 exactly (Q5_1 with an FP16 offset); re-quantisation beats
the absmax rule it replaced."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

from npukit.targets.pccx.llm.policy import affine_fit, policy_matrix, requantize

ROWS, COLS = 24, 512


def _weights(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((ROWS, COLS)) * 0.05 + rng.uniform(-0.02, 0.02, (ROWS, 1))).astype(np.float32)


def _k_quant_bytes(seed: int, nbytes: int) -> np.ndarray:
    """Random Q4_K super-blocks (gguf-py cannot quantise K-types) with finite fp16 d / dmin."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (ROWS * COLS // 256, nbytes), dtype=np.uint8)
    scales = rng.uniform(1e-4, 2e-2, (raw.shape[0], 2)).astype("<f2")
    raw[:, 0:4] = scales.view(np.uint8).reshape(-1, 4)
    return raw.reshape(-1)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q4_K", "Q8_0", "Q5_0", "Q5_1"])
def test_source_formats_map_onto_pccx_without_requantising(kind: str) -> None:
    qt = T[kind]
    raw = _k_quant_bytes(1, 144) if kind == "Q4_K" else quantize(_weights(0), qt).reshape(-1)
    ref = dequantize(raw.reshape(ROWS, -1), qt).astype(np.float32)  # gguf-py's float values
    eight = kind in ("Q8_0", "Q5_0", "Q5_1")
    got = policy_matrix(kind, raw, ref, keep8=eight)
    assert got.fmt == ("int8" if eight else "int4") and got.source == f"{kind} lossless"
    lo, hi = {"Q8_0": (-128, 127), "Q5_0": (-16, 15), "Q5_1": (-16, 15)}.get(kind, (-8, 7))
    assert got.codes.min() >= lo and got.codes.max() <= hi
    deq = got.dequantize()
    if kind in ("Q4_0", "Q8_0", "Q5_0"):
        assert np.array_equal(deq, ref)
    else:  # the only loss: the offset low + 8·d rounded to FP16 (half an FP16 ulp of it)
        assert got.offset is not None
        off = np.repeat(got.offset.astype(np.float64), 32, axis=1)
        ulp = np.spacing(np.abs(got.offset).astype(np.float16)).astype(np.float64)
        assert np.all(np.abs(deq - ref) <= np.repeat(ulp, 32, axis=1) / 2 + 1e-6 * np.abs(off) + 1e-9)
        assert not np.array_equal(deq, np.zeros_like(deq))


def test_other_types_are_requantised_affinely_and_beat_absmax() -> None:
    w = dequantize(quantize(_weights(2), T.Q5_0), T.Q5_0).astype(np.float32)
    got = policy_matrix("Q5_0", np.zeros(0, np.uint8), w, keep8=False)
    old = requantize(w, "int4", "Q5_0", affine=False)
    assert got.source == "Q5_0 -> INT4 affine fit" and got.offset is not None
    err = np.linalg.norm(got.dequantize() - w) / np.linalg.norm(w)
    assert err < 0.85 * np.linalg.norm(old.dequantize() - w) / np.linalg.norm(w)
    assert got.codes.min() >= -8 and got.codes.max() <= 7


def test_affine_fit_recovers_an_exact_affine_grid() -> None:
    rng = np.random.default_rng(7)
    codes = rng.integers(-8, 8, (50, 32))
    codes[:, :2] = [-8, 7]  # each group spans the whole grid
    scale = rng.uniform(0.01, 0.1, (50, 1))
    offset = rng.uniform(-0.05, 0.05, (50, 1)).astype(np.float16).astype(np.float64)
    w = codes * scale + offset
    c, s, o = affine_fit(w)
    assert np.array_equal(c, codes)
    assert np.allclose(s, scale[:, 0], rtol=1e-6)
    assert np.allclose(o.astype(np.float64), offset[:, 0], atol=1e-7)
