"""The GPU the seed used, as data, and a roofline model of its four FP8-as-storage GEMM paths.

`RTX3090TiHW` is built from ``presets/hw/rtx3090ti.toml`` (every number with a tier and a source).
`project(hw, m, n, k)` returns, per path, the time each candidate bound takes and the binding one:

* ``cached``  — the fp16 matmul on tensor cores (FP32 accumulate, as torch uses): compute-bound at
  ``gemm_efficiency`` of the 80 TFLOPS GeForce rate, or DRAM for thin M;
* ``naive``   — ``cached`` plus the per-call decode, a chain of DRAM-streaming element-wise kernels:
  uint8 codes -> int64 indices (1 + 8 B per weight; ``torch.take`` needs int64, matching the seed's
  128 MiB larger peak allocation), take -> fp16 (8 + 2 B), × column scale (2 + 2 B): 23 B per weight;
* ``int8``    — the int8 ceiling (cuBLASLt IMMA) at ``gemm_efficiency`` of the dense INT8 rate;
* ``fused``   — the seed's v4 kernel: 64 × 64 output tiles, each streaming a 64-row slab of A (fp16)
  and of B (FP8 bytes) over K; the three bounds are IMMA compute, the decode + activation
  quantization on CUDA cores (each CTA decodes its B slab and quantizes its A slab: M·N·K/32
  element conversions at ``decode_instr_per_elem`` INT32-lane instructions each), and the slab
  traffic with no L2 reuse (an upper bound; the 6 MB L2 catches part of it).

The seed's measured figures (its README table, 4096³, RTX 3090 Ti, CUDA 13.1) sit next to each
projection with the error. Its int8 row says 0.018 ms beside 118.06 TOPS: 2·4096³ / 118.06 TOPS is
1.164 ms, so 0.018 is a typo and 1.164 ms is what the TOPS figure measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from npukit import hw as hwmod
from npukit.evidence import Figure, Tier

TARGET = "rtx3090ti"
SEED_SOURCE = "cuda-fp8-ampere README @382460f / amohan.dev blog 2026-01-25, RTX 3090 Ti, 4096³"
# the seed's measured times at M = N = K = 4096 (ms); int8 derived from its 118.06 TOPS
SEED_MS = {"fused": 2.914, "naive": 2.267, "cached": 1.828, "int8": 2 * 4096**3 / 118.06e12 * 1e3}


@dataclass
class Sourced:
    value: float = 0.0
    tier: str = "projected"
    source: str = ""

    def figure(self, unit: str) -> Figure:
        return Figure(self.value, unit, Tier(self.tier), self.source or "presets/hw/rtx3090ti.toml")


def _s() -> Sourced:
    return Sourced()


@dataclass
class RTX3090TiHW:
    name: str = "rtx3090ti"
    sms: Sourced = field(default_factory=_s)
    boost_clock_mhz: Sourced = field(default_factory=_s)
    cuda_lanes_per_sm: Sourced = field(default_factory=_s)
    int32_lanes_per_sm: Sourced = field(default_factory=_s)
    int8_tensor_tops: Sourced = field(default_factory=_s)
    fp16_tensor_fp32acc_tflops: Sourced = field(default_factory=_s)
    fp16_tensor_fp16acc_tflops: Sourced = field(default_factory=_s)
    dram_gbps: Sourced = field(default_factory=_s)
    l2_bytes: Sourced = field(default_factory=_s)
    dram_efficiency: Sourced = field(default_factory=_s)
    gemm_efficiency: Sourced = field(default_factory=_s)
    decode_instr_per_elem: Sourced = field(default_factory=_s)
    fused_tile: Sourced = field(default_factory=_s)

    @property
    def int32_lane_ops(self) -> float:
        """INT32-lane instructions per second over the chip."""
        return self.sms.value * self.int32_lanes_per_sm.value * self.boost_clock_mhz.value * 1e6

    @property
    def dram_bytes_per_s(self) -> float:
        return self.dram_gbps.value * 1e9 * self.dram_efficiency.value


def load(overrides: list[str] | None = None) -> RTX3090TiHW:
    return hwmod.load_hw(TARGET, overrides, expect=TARGET)


@dataclass(frozen=True)
class Projection:
    path: str
    bounds: dict[str, float]  # bound name -> seconds

    @property
    def bound(self) -> str:
        return max(self.bounds, key=self.bounds.__getitem__)

    @property
    def seconds(self) -> float:
        return self.bounds[self.bound]


def project(h: RTX3090TiHW, m: int, n: int, k: int) -> dict[str, Projection]:
    ops = 2.0 * m * n * k
    eff = h.gemm_efficiency.value
    bw = h.dram_bytes_per_s
    fp16_tc = ops / (h.fp16_tensor_fp32acc_tflops.value * 1e12 * eff)
    fp16_dram = (2 * m * k + 2 * n * k + 2 * m * n) / bw
    cached = {"fp16 tensor cores": fp16_tc, "DRAM": fp16_dram}
    decode = 23.0 * n * k / bw
    naive = {"decode DRAM + fp16 tensor cores": decode + max(fp16_tc, fp16_dram)}
    imma = ops / (h.int8_tensor_tops.value * 1e12 * eff)
    int8 = {"IMMA": imma, "DRAM": (m * k + n * k + 4 * m * n) / bw}
    tile = h.fused_tile.value
    slabs = (m / tile) * (n / tile) * tile * k  # elements per operand streamed by all CTAs
    fused = {"IMMA": ops / (h.int8_tensor_tops.value * 1e12),
             "decode on CUDA cores": 2 * slabs * h.decode_instr_per_elem.value / h.int32_lane_ops,
             "DRAM (no L2 reuse)": (slabs * 2 + slabs * 1 + 2 * m * n) / bw}
    return {"fused": Projection("fused", fused), "naive": Projection("naive", naive),
            "cached": Projection("cached", cached), "int8": Projection("int8", int8)}


def seed_table(h: RTX3090TiHW | None = None) -> list[tuple[str, str, float, float, float]]:
    """(path, binding bound, projected ms, seed ms, error %) at the seed's 4096³."""
    h = h or load()
    rows = []
    for path, p in project(h, 4096, 4096, 4096).items():
        ms = p.seconds * 1e3
        rows.append((path, p.bound, ms, SEED_MS[path], 100.0 * (ms - SEED_MS[path]) / SEED_MS[path]))
    return rows


def seed_lines(h: RTX3090TiHW | None = None) -> list[str]:
    h = h or load()
    lines = ["| path | binding bound | projected ms (projected) | seed ms (measured) | error |",
             "|---|---|---|---|---|"]
    for path, bound, ms, seed, err in seed_table(h):
        lines.append(f"| {path} | {bound} | {ms:.3f} | {seed:.3f} | {err:+.1f} % |")
    proj = project(h, 4096, 4096, 4096)
    for path in ("fused", "int8"):
        others = ", ".join(f"{b} {s * 1e3:.3f} ms" for b, s in proj[path].bounds.items())
        lines.append(f"{path} bounds: {others}")
    return lines
