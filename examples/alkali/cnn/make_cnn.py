#!/usr/bin/env python3
"""Train and write the Alkali CNN example: a small int8 CNN for scikit-learn's handwritten digits,
quantized post-training and written by npukit's TFLite writer; plus the input the device reads from
its namespace (model, then images) and the expected classes.

    python examples/alkali/cnn/make_cnn.py [OUTDIR]       (needs torch and scikit-learn; seed 0)

Graph: image int8 [1, 8, 8, 1] → CONV_2D 3×3 ×8 (SAME, ReLU) → CONV_2D 3×3 ×16 (VALID, stride 2,
ReLU) → RESHAPE [1, 144] → FULLY_CONNECTED 10 (logits). Weights per-channel symmetric int8,
activation ranges calibrated on the training split. Writes ``model.tflite``, ``images.bin``
(``IMAGES`` held-out images, 64 bytes each), ``input.bin`` (model, then the images: the input
buffer the firmware ``cnn_classify`` expects), ``labels.json`` and ``metrics.json``; with the default
OUTDIR also the copies in ``src/npukit/devices/alkali/data/`` that ``npukit demo alkali`` reads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from npukit.models.tflite import digits
from npukit.models.tflite.options import (
    ACT_RELU,
    PAD_VALID,
    Conv2DOptions,
    FullyConnectedOptions,
    ReshapeOptions,
)
from npukit.models.tflite.writer import ModelBuilder

IMAGES = 8
SEED = 0
HERE = Path(__file__).resolve().parent


def train(split: digits.Split):
    import torch

    torch.manual_seed(SEED)
    net = torch.nn.ModuleDict({
        "c1": torch.nn.Conv2d(1, 8, 3, padding=1), "c2": torch.nn.Conv2d(8, 16, 3, stride=2),
        "fc": torch.nn.Linear(144, 10)})

    def forward(x, keep=False):
        a1 = torch.relu(net["c1"](x))
        a2 = torch.relu(net["c2"](a1))
        logits = net["fc"](a2.permute(0, 2, 3, 1).flatten(1))  # NHWC flattening, as TFLite's RESHAPE
        return (a1, a2, logits) if keep else logits

    x = torch.tensor(split.x_train / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(split.y_train, dtype=torch.long)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    for _epoch in range(40):
        perm = torch.randperm(len(x))
        for i in range(0, len(x), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(forward(x[idx]), y[idx]).backward()
            opt.step()
    with torch.no_grad():
        a1, a2, logits = forward(x, keep=True)
    ranges = [(0.0, float(a1.max())), (0.0, float(a2.max())), (float(logits.min()), float(logits.max()))]
    params = {k: v.detach().numpy().astype(np.float64) for k, v in net.state_dict().items()}
    return params, ranges


def _per_channel(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flat = w.reshape(w.shape[0], -1)
    scales = (np.maximum(np.abs(flat).max(axis=1), 1e-8) / 127.0).astype(np.float32)
    q = np.clip(np.rint(flat / scales[:, None].astype(np.float64)), -127, 127).astype(np.int8)
    return q.reshape(w.shape), scales


def _range(lo: float, hi: float) -> tuple[float, int]:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = float(np.float32(max(hi - lo, 1e-6) / 255.0))
    return scale, int(np.clip(round(-128 - lo / scale), -128, 127))


def build_model(params: dict, ranges: list[tuple[float, float]]) -> bytes:
    b = ModelBuilder("npukit Alkali CNN example (scikit-learn digits)")
    (s1, z1), (s2, z2), (s3, z3) = (_range(*r) for r in ranges)
    x = b.tensor("image", (1, 8, 8, 1), np.int8, digits.INPUT_SCALE, digits.INPUT_ZP)
    in_scale = np.float32(digits.INPUT_SCALE)
    layers = [("c1", (1, 8, 8, 8), s1, z1, Conv2DOptions(fused_activation_function=ACT_RELU)),
              ("c2", (1, 3, 3, 16), s2, z2, Conv2DOptions(padding=PAD_VALID, stride_w=2, stride_h=2,
                                                          fused_activation_function=ACT_RELU))]
    for name, shape, s, z, opts in layers:
        w, ws = _per_channel(params[f"{name}.weight"].transpose(0, 2, 3, 1))  # OIHW → OHWI
        bias_s = (in_scale * ws).astype(np.float32)
        bias = np.rint(params[f"{name}.bias"] / bias_s.astype(np.float64)).astype(np.int32)
        y = b.tensor(name, shape, np.int8, s, z)
        b.op("CONV_2D", [x, b.const(f"{name}_w", w, scale=ws, zero_point=0),
                         b.const(f"{name}_b", bias, scale=bias_s, zero_point=0)], [y], opts)
        x, in_scale = y, np.float32(s)
    flat = b.tensor("flat", (1, 144), np.int8, s2, z2)
    b.op("RESHAPE", [x, b.const("shape", np.array([1, 144], np.int32))], [flat], ReshapeOptions((1, 144)))
    w, ws = _per_channel(params["fc.weight"])
    bias_s = (in_scale * ws).astype(np.float32)
    bias = np.rint(params["fc.bias"] / bias_s.astype(np.float64)).astype(np.int32)
    logits = b.tensor("logits", (1, 10), np.int8, s3, z3)
    b.op("FULLY_CONNECTED", [flat, b.const("fc_w", w, scale=ws, zero_point=0),
                             b.const("fc_b", bias, scale=bias_s, zero_point=0)], [logits],
         FullyConnectedOptions())
    return b.build([0], [logits])


def main(out: Path) -> None:
    from npukit.models.tflite import Interpreter

    split = digits.load_split()
    params, ranges = train(split)
    model = build_model(params, ranges)
    images = digits.quantize_images(split.x_test)
    interp = Interpreter(model)
    classes = np.array([int(np.argmax(next(iter(interp.run([im[None]]).values())))) for im in images])
    accuracy = float((classes == split.y_test).mean())
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.tflite").write_bytes(model)
    picked = images[:IMAGES].tobytes()
    (out / "images.bin").write_bytes(picked)
    (out / "input.bin").write_bytes(model + picked)
    (out / "labels.json").write_text(json.dumps({"labels": split.y_test[:IMAGES].tolist(),
                                                 "classes": classes[:IMAGES].tolist()}) + "\n")
    (out / "metrics.json").write_text(json.dumps({
        "held_out_images": len(images), "int8_accuracy": round(accuracy, 4), "model_bytes": len(model),
        "seed": SEED, "epochs": 40, "source": "examples/alkali/cnn/make_cnn.py (torch training, npukit "
        "int8 reference interpreter for the accuracy)"}, indent=1) + "\n")
    print(f"model {len(model)} B, int8 held-out accuracy {accuracy:.4f}")
    if out == HERE:  # the copies `npukit demo alkali` ships in the package
        data = HERE.parents[2] / "src" / "npukit" / "devices" / "alkali" / "data"
        for src, dst in (("model.tflite", "cnn_model.tflite"), ("images.bin", "cnn_images.bin"),
                         ("labels.json", "cnn_labels.json"), ("cnn_classify.v1.o", "cnn_classify.v1.o")):
            (data / dst).write_bytes((out / src).read_bytes())


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else HERE)
