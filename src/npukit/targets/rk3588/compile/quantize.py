"""w8a8: int8 weights with per-output-channel scales and int8 activations with one static scale per
matmul input, both from the calibration run (``--dtype int8``). Attention and the vector ops stay
fp16. The CNA accumulates exact int32 sums, so tiling is exact by construction; the result is
``fp16(acc * sa * sw[n] + b)``.

Per-tensor activation scales are what the seed's INT8 path used (``asymmetric_quantized-8``); the
spikes that make a per-tensor scale coarse are why its final exporter stayed fp16.
"""

from __future__ import annotations

import numpy as np

from npukit.targets.rk3588.graph import Graph


def quantize(g: Graph, stats: dict[str, dict[str, float]], input_peak: float) -> list[str]:
    """Quantize every matmul in place; return their names."""
    done = []
    for n in g.nodes:
        if n.op != "matmul":
            continue
        w = n.params["w"].astype(np.float64)
        sw = np.abs(w).max(axis=0) / 127.0
        sw[sw == 0] = 1.0
        n.params["wq"] = np.clip(np.rint(w / sw), -127, 127).astype(np.int8)
        n.params["sw"] = sw.astype(np.float32)
        src = n.inputs[0]
        peak = input_peak if src == "x" else stats[g.producer(src).name]["peak"]
        n.attrs["sa"] = float(np.float32(max(peak, 1e-12) / 127.0))
        n.attrs["dtype"] = "int8"
        done.append(n.name)
    return done
