"""Without VNNI the fast executor's decode GEMVs read cached int8 codes for every matrix (within a byte
budget), prefill GEMMs the packed image: prompt and decode logits and Work records must still be the
reference simulator's (the definition). The tiny model's matrices count as large here (the size
threshold lowered), so the path a CPU without VNNI takes for a real checkpoint is the one tested."""

from __future__ import annotations

import pytest

from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.fast import fastmat
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.gemma3n_quant import Int4Store

from .tiny_gemma3n import CFG, assert_fast_follows_reference


@pytest.mark.parametrize("budget", [1 << 30, 0])
def test_without_vnni_decode_reads_codes_and_matches_reference(monkeypatch, budget):
    monkeypatch.setattr(kx, "PARALLEL_MIN_MACS", 64)  # every weight matrix here counts as large
    monkeypatch.setattr(fastmat, "PORTABLE_CODES_BYTES", budget)
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=11))
    ref = PccxDriver(timing=False).open().load(store).kv_init("fp16", 64).start()
    fast = PccxDriver(executor="fast", timing=False, prefill_chunk=4).open()
    fast.dev.vnni = False  # the path of a CPU without VNNI (the kernels stay exact either way)
    fast.load(store).kv_init("fp16", 64).start()
    prompt = [3, 9, 1, 4, 7, 2]  # two GEMM chunks (packed image), then decode GEMVs
    assert_fast_follows_reference(ref, fast, prompt, steps=4)
    rows = {k: c for k, c in fast.dev._codes.items() if k[3] != "kmajor"}  # (K-major: sparse W_down)
    large = [c for c in rows.values() if c.codes.size >= 64]
    assert (len(large) > 0) == (budget > 0)  # row-major codes of large matrices only within the budget
    assert sum(c.codes.nbytes for c in large) <= budget
    assert fast.dev.fallbacks == 0
