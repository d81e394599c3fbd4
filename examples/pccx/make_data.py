"""Write the small input images the example programs read (deterministic; the .bin files next to this
script are its output, committed so the README's commands run as written).

    python examples/pccx/make_data.py

gemv_w.bin   host DDR image of a 16x64 INT4 weight matrix + 16 FP32 row scales (pccx GEMV layout,
             `npukit.targets.pccx.memory.weight_image`), loaded at host byte 0x10000000
gemv_x.bin   64 BF16 activations (little-endian bit patterns), loaded at L2 word 0
softmax_x.bin 16 BF16 logits, loaded at L2 word 0
host_data.bin 128 bytes: 64 bytes of a counting pattern, then 64 zero bytes, at host byte 0x10000000
"""

from pathlib import Path

import numpy as np

from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.memory import weight_image

HERE = Path(__file__).resolve().parent


def main() -> None:
    rng = np.random.default_rng(13)
    w = rng.integers(-8, 8, (16, 64))
    scales = (rng.random(16) * 0.05 + 0.01).astype(np.float32)
    (HERE / "gemv_w.bin").write_bytes(weight_image(w, "int4", scales))
    x = rng.standard_normal(64).astype(np.float32)
    (HERE / "gemv_x.bin").write_bytes(nx.to_bits(x).astype("<u2").tobytes())
    logits = np.linspace(-2.0, 3.0, 16, dtype=np.float32)
    (HERE / "softmax_x.bin").write_bytes(nx.to_bits(logits).astype("<u2").tobytes())
    (HERE / "host_data.bin").write_bytes(bytes(range(64)) + bytes(64))


if __name__ == "__main__":
    main()
