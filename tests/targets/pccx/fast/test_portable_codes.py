"""Without VNNI the fast executor reads large INT4 matrices packed, in place (the portable packed loop),
for decode GEMVs and prefill GEMMs alike; only small matrices get cached int8 codes. Prompt and decode
logits and Work records must still be the reference simulator's (the definition). The tiny model's
matrices count as large here (the size threshold lowered), so the path a CPU without VNNI takes for a
real checkpoint is the one tested."""

from __future__ import annotations

import pytest

from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.gemma3n_quant import Int4Store

from .tiny_gemma3n import CFG, assert_fast_follows_reference


@pytest.mark.parametrize("large_from", [64, 1 << 40])
def test_without_vnni_large_matrices_are_read_packed_and_match_reference(monkeypatch, large_from):
    monkeypatch.setattr(kx, "PARALLEL_MIN_MACS", large_from)  # 64: every weight matrix here is large
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=11))
    ref = PccxDriver(timing=False).open().load(store).kv_init("fp16", 64).start()
    fast = PccxDriver(executor="fast", timing=False, prefill_chunk=4).open()
    fast.dev.simd_rows = False  # the path of a CPU without VNNI or AVX2 (the kernels stay exact either way)
    fast.load(store).kv_init("fp16", 64).start()
    prompt = [3, 9, 1, 4, 7, 2]  # two GEMM chunks (packed image), then decode GEMVs
    assert_fast_follows_reference(ref, fast, prompt, steps=4)
    rows = [c for k, c in fast.dev._codes.items() if k[3] != "kmajor"]  # (K-major: sparse W_down)
    large = [c for c in rows if c.codes.size >= large_from]
    assert large == []  # no int8 copy of a large matrix
    if large_from > 64:
        assert len(rows) > 10  # every matrix small: cached codes
    assert fast.dev.fallbacks == 0
