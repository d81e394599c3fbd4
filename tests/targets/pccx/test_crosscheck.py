"""Analytic roofline vs the pccx functional simulator + event-driven timing model on one layer's
GEMVs, assembled and run as a real pccx program."""

import pytest

from npukit.perf.ops import build_ops
from npukit.targets.pccx.crosscheck import crosscheck_layer
from npukit.targets.pccx.hw import PccxHw


@pytest.mark.slow
def test_gemv_layer_analytic_vs_simulated_within_10_percent():
    hw = PccxHw()
    checks = crosscheck_layer(hw, build_ops("gemma3n-e2b"), layer=3)
    by = {c.name.split(".", 1)[1]: c for c in checks}
    # hand arithmetic for the dominant GEMV (E2B FFN 8192 x 2048, INT4 + FP32 row scales): weights
    # stream at min(DDR effective 10 GB/s, HP 16 GB/s) = 25 bytes per 400 MHz cycle
    gate = by["gate_proj"]
    assert gate.simulated_cycles == pytest.approx((8192 * 1024 + 4 * 8192) / 25, rel=0.01)
    for c in checks:
        if c.rows * c.cols >= 2048 * 64:  # every GEMV that streams at least 64 KB of weights
            assert abs(c.error) < 0.10, (c.name, c.analytic_cycles, c.simulated_cycles)
    total_a = sum(c.analytic_cycles for c in checks)
    total_s = sum(c.simulated_cycles for c in checks)
    assert total_a == pytest.approx(total_s, rel=0.10)
