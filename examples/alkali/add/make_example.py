#!/usr/bin/env python3
"""Rebuild the seed's ADD example from npukit's own sources: an int8 ADD model with the example's
quantization parameters, written by npukit's TFLite writer, and the example input.

    python examples/alkali/add/make_example.py [OUTDIR]     (default: this folder)

Writes ``model.tflite`` (padded with zeros to the 1024 bytes the firmware's MODEL_SIZE expects),
``input-vector.bin`` (the two int8 vectors) and ``input.bin`` (model followed by the vectors: the
accelerator's input buffer under the seed's helper ABI). Firmware: ``examples/alkali/add_vta.v1.o``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from npukit.models.tflite.writer import ModelBuilder

MODEL_SIZE = 1024
# alkali-csd-projects examples/tflite_vta/add/model.tflite, as read with the tflite package
QUANT = {"in1": (0.02394966, 17), "in0": (0.02529984, -1), "out": (0.03020681, -4)}
VECTOR = bytes([5, 8, 2, 3, 2, 4, 2, 2])  # input-vector.bin: subgraph input 0, then input 1


def build_model() -> bytes:
    b = ModelBuilder("npukit: the Alkali ADD example")
    t0 = b.tensor("serving_default_input_1:0", (1, 4), np.int8, *QUANT["in1"])
    t1 = b.tensor("serving_default_input_0:0", (1, 4), np.int8, *QUANT["in0"])
    t2 = b.tensor("PartitionedCall:0", (1, 4), np.int8, *QUANT["out"])
    b.op("ADD", [t1, t0], [t2])  # operand order as in the example: op inputs [1, 0]
    data = b.build(inputs=[t0, t1], outputs=[t2])
    if len(data) > MODEL_SIZE:
        raise SystemExit(f"the ADD model is {len(data)} bytes, the firmware expects at most {MODEL_SIZE}")
    return data.ljust(MODEL_SIZE, b"\0")


def main(out: Path) -> None:
    model = build_model()
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.tflite").write_bytes(model)
    (out / "input-vector.bin").write_bytes(VECTOR)
    (out / "input.bin").write_bytes(model + VECTOR)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
