"""W4A8 quantized Gemma 3n reference for pccx: INT4 weights, INT8 activations, FP16/INT8/INT4 KV.

Written only as calls to the pccx numerics primitives (`ops.PccxOps`), one call per future
instruction; see `model` for the instruction mapping and `store` for the weight and KV formats.
"""

from npukit.models.gemma3n_quant.model import Gemma3nW4A8
from npukit.models.gemma3n_quant.ops import PccxOps, RecordingOps
from npukit.models.gemma3n_quant.store import KV_FORMATS, Int4Matrix, Int4Store, QuantKVCache, kv_quantize

__all__ = ["KV_FORMATS", "Gemma3nW4A8", "Int4Matrix", "Int4Store", "PccxOps", "QuantKVCache",
           "RecordingOps", "kv_quantize"]
