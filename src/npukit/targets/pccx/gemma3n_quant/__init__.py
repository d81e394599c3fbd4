"""W4A8 quantized Gemma 3n reference for pccx: INT4 weights, INT8 activations, FP16/INT8/INT4 KV.

Written only as calls to the pccx operation set (`npukit.targets.pccx.ops.PccxOps`), one call per
future instruction; see `model` for the instruction mapping, `store` for the weight format and
`npukit.targets.pccx.memory` for the KV formats. It lives with the target because it *is* the pccx
program in Python: the compiler (`npukit.targets.pccx.compile`) records it, the simulators must
match it bit for bit.
"""

from npukit.targets.pccx.gemma3n_quant.model import Gemma3nW4A8
from npukit.targets.pccx.gemma3n_quant.store import Int4Matrix, Int4Store, QuantKVCache
from npukit.targets.pccx.memory import KV_FORMATS, kv_quantize
from npukit.targets.pccx.ops import PccxOps, RecordingOps

__all__ = ["KV_FORMATS", "Gemma3nW4A8", "Int4Matrix", "Int4Store", "PccxOps", "QuantKVCache",
           "RecordingOps", "kv_quantize"]
