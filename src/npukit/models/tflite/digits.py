"""The project-trained model: an int8 MLP for scikit-learn's handwritten digits, built by the writer.

Training (scikit-learn ``MLPClassifier``, 64 → 32 ReLU → 10) happens in ``scripts/train_digits_tflite.py``;
this module holds the data split, the post-training int8 quantization (per-channel symmetric weights
for the hidden layer, per-tensor for the output layer, activation ranges calibrated on the training
split) and the evaluation, so the test can recompute the accuracy the asset claims.

Graph: input int8 [1, 8, 8, 1] (pixel/16 in [0, 1], scale 1/255, zero point −128) → RESHAPE [1, 64]
→ FULLY_CONNECTED(32, RELU) → FULLY_CONNECTED(10) → SOFTMAX (scale 1/256, zero point −128).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from npukit.models.tflite.options import ACT_RELU, FullyConnectedOptions, ReshapeOptions, SoftmaxOptions
from npukit.models.tflite.writer import ModelBuilder

TEST_SIZE = 0.25
SPLIT_SEED = 0
INPUT_SCALE = 1.0 / 255.0
INPUT_ZP = -128
ASSET = "digits-int8"


@dataclass
class Split:
    x_train: np.ndarray  # float pixels 0..16, (n, 64)
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_split() -> Split:
    """scikit-learn's digits (bundled with the package, no download), stratified 75/25 split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    xtr, xte, ytr, yte = train_test_split(d.data, d.target, test_size=TEST_SIZE, random_state=SPLIT_SEED,
                                          stratify=d.target)
    return Split(xtr, ytr, xte, yte)


def quantize_images(x: np.ndarray) -> np.ndarray:
    """Pixels 0..16 → the model's int8 input [n, 8, 8, 1]: round(pixel/16 · 255) − 128."""
    q = np.floor(np.asarray(x, np.float64) / 16.0 * 255.0 + 0.5) + INPUT_ZP
    return np.clip(q, -128, 127).astype(np.int8).reshape(-1, 8, 8, 1)


def _symmetric(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8 weights: scale = max|w|/127 per output unit (float32)."""
    scales = (np.maximum(np.abs(w).max(axis=1), 1e-8) / 127.0).astype(np.float32)
    q = np.clip(np.rint(w / scales[:, None].astype(np.float64)), -127, 127).astype(np.int8)
    return q, scales


def _range_quant(lo: float, hi: float) -> tuple[float, int]:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = float(np.float32(max(hi - lo, 1e-6) / 255.0))
    zp = int(np.clip(round(-128 - lo / scale), -128, 127))
    return scale, zp


def build_int8(w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray,
               x_calib: np.ndarray) -> bytes:
    """Quantize a trained 64-32-10 ReLU MLP (weights as (in, out) like scikit-learn) into .tflite bytes."""
    x = np.asarray(x_calib, np.float64) / 16.0
    hidden = np.maximum(x @ w1 + b1, 0.0)
    logits = hidden @ w2 + b2
    s_h, zp_h = _range_quant(0.0, float(hidden.max()))
    s_o, zp_o = _range_quant(float(logits.min()), float(logits.max()))
    q1, s1 = _symmetric(w1.T)
    w2_scale = np.float32(max(np.abs(w2).max(), 1e-8) / 127.0)
    q2 = np.clip(np.rint(w2.T / np.float64(w2_scale)), -127, 127).astype(np.int8)
    in_s = np.float32(INPUT_SCALE)
    bias1_s = (in_s * s1).astype(np.float32)
    bias2_s = np.float32(np.float32(s_h) * w2_scale)
    bias1 = np.rint(b1 / bias1_s.astype(np.float64)).astype(np.int32)
    bias2 = np.rint(b2 / np.float64(bias2_s)).astype(np.int32)

    b = ModelBuilder("npukit digits int8 MLP (scikit-learn digits)")
    image = b.tensor("image", (1, 8, 8, 1), np.int8, INPUT_SCALE, INPUT_ZP)
    flat = b.tensor("flat", (1, 64), np.int8, INPUT_SCALE, INPUT_ZP)
    b.op("RESHAPE", [image, b.const("shape", np.array([1, 64], np.int32))], [flat], ReshapeOptions((1, 64)))
    h = b.tensor("hidden", (1, 32), np.int8, s_h, zp_h)
    b.op("FULLY_CONNECTED", [flat, b.const("fc1_w", q1, scale=s1, zero_point=0),
                             b.const("fc1_b", bias1, scale=bias1_s, zero_point=0)], [h],
         FullyConnectedOptions(ACT_RELU))
    lg = b.tensor("logits", (1, 10), np.int8, s_o, zp_o)
    b.op("FULLY_CONNECTED", [h, b.const("fc2_w", q2, scale=w2_scale, zero_point=0),
                             b.const("fc2_b", bias2, scale=bias2_s, zero_point=0)], [lg])
    probs = b.tensor("probs", (1, 10), np.int8, 1.0 / 256.0, -128)
    b.op("SOFTMAX", [lg], [probs], SoftmaxOptions(1.0))
    return b.build([image], [probs])


def predict(model: bytes | str | Path, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(argmax classes, int8 softmax outputs) of the reference interpreter over a batch of images."""
    from npukit.models.tflite.interpreter import Interpreter

    interp = Interpreter(model)
    outs = np.stack([next(iter(interp.run([img[None]]).values()))[0] for img in images])
    return outs.argmax(axis=1), outs


def asset_dir() -> Path:
    return Path(str(resources.files("npukit") / "assets" / ASSET))


def load_metrics() -> dict[str, Any]:
    return json.loads((asset_dir() / "metrics.json").read_text())
