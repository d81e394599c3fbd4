"""Plain-data views of a model and of a run, for the CLI: op/tensor tables, JSON, a Chrome trace."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError
from npukit.models.tflite.interpreter import OpRecord
from npukit.models.tflite.model import Model, Tensor


def quant_json(t: Tensor) -> dict[str, Any] | None:
    if t.quant is None:
        return None
    q = t.quant
    if q.per_channel:
        return {"per_channel": True, "axis": q.axis, "scales": q.scale.tolist(),
                "zero_points": q.zero_point.tolist()}
    return {"per_channel": False, "scale": q.s, "zero_point": q.zp}


def tensor_json(t: Tensor) -> dict[str, Any]:
    return {"index": t.index, "name": t.name, "shape": list(t.shape), "dtype": str(t.dtype),
            "const": t.is_const, "quantization": quant_json(t)}


def options_json(options: Any) -> dict[str, Any]:
    if options is None:
        return {}
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(options).items()}


def model_json(model: Model) -> dict[str, Any]:
    return {
        "description": model.description,
        "inputs": [tensor_json(t) for t in model.input_tensors()],
        "outputs": [tensor_json(t) for t in model.output_tensors()],
        "op_counts": model.op_counts(),
        "ops": [{"index": op.index, "name": op.name, "version": op.version, "inputs": list(op.inputs),
                 "outputs": list(op.outputs), "options": options_json(op.options)} for op in model.ops],
        "tensors": [tensor_json(t) for t in model.tensors],
    }


def quant_text(t: Tensor) -> str:
    q = quant_json(t)
    if q is None:
        return "-"
    if q["per_channel"]:
        s = np.asarray(q["scales"])
        return f"per-channel axis {q['axis']}: {s.size} scales [{s.min():.4g}, {s.max():.4g}]"
    return f"scale {q['scale']:.6g} zp {q['zero_point']}"


# Option fields whose integers are schema enums, and the `tflite` package's enum class naming them
ENUM_OPTIONS = {"fused_activation_function": "ActivationFunctionType", "padding": "Padding",
                "weights_format": "FullyConnectedOptionsWeightsFormat", "out_type": "TensorType",
                "output_type": "TensorType", "in_data_type": "TensorType", "out_data_type": "TensorType",
                "idx_out_type": "TensorType", "combiner": "CombinerType",
                "mode": "MirrorPadMode", "kernel_type": "LSTMKernelType"}


def enum_name(field: str, value: Any) -> str:
    """An option's value as the schema names it (``fused_activation_function=1`` → ``RELU``)."""
    cls_name = ENUM_OPTIONS.get(field)
    if cls_name is None or not isinstance(value, int) or isinstance(value, bool):
        return str(value)
    import tflite

    cls = getattr(tflite, cls_name, None)
    names = {v: k for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)
             } if cls is not None else {}
    return names.get(value, str(value))


def op_rows(model: Model) -> list[list[str]]:
    rows = []
    for op in model.ops:
        opts = ", ".join(f"{k}={enum_name(k, v)}" for k, v in options_json(op.options).items())
        rows.append([str(op.index), op.name, " ".join(map(str, op.inputs)), " ".join(map(str, op.outputs)),
                     opts])
    return rows


def tensor_rows(model: Model) -> list[list[str]]:
    return [[str(t.index), t.name, str(list(t.shape)), str(t.dtype), "const" if t.is_const else "",
             quant_text(t)] for t in model.tensors]


def output_json(name: str, value: np.ndarray) -> dict[str, Any]:
    return {"shape": list(value.shape), "dtype": str(value.dtype), "data": value.reshape(-1).tolist()}


def trace_json(records: list[OpRecord], model: Model, metadata: dict[str, Any] | None = None) -> dict:
    """Chrome/Perfetto trace events: one track for the host, one per delegate, an ``X`` event per op."""
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0,
                                     "args": {"name": "tflite"}}]
    tids: dict[str, int] = {}
    for r in records:
        if r.where not in tids:
            tids[r.where] = len(tids) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tids[r.where],
                           "args": {"name": r.where}})
        events.append({"ph": "X", "name": r.name, "cat": r.where, "pid": 1, "tid": tids[r.where],
                       "ts": round(r.start * 1e6, 3), "dur": round(r.seconds * 1e6, 3),
                       "args": {"ops": list(r.ops), "first_op": r.index}})
    out: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ns"}
    if metadata:
        out["metadata"] = metadata
    return out


def write_json_file(path: str | Path, obj: Any) -> None:
    try:
        Path(path).write_text(json.dumps(obj, separators=(",", ":")))
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
