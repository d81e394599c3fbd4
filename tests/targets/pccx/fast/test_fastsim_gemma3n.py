"""Whole compiled Gemma 3n tokens: the pccx driver on FastSimulator equals it on the reference Simulator
(logits bit for bit, same Work records), for every KV format; the fast path really ran (no fallbacks) and
the program was compiled once and replayed with patched span descriptors."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.fast import kernels
from npukit.targets.pccx.fast.fastsim import FastSimulator
from npukit.targets.pccx.gemma3n_quant import Int4Store

from .tiny_gemma3n import CFG


@pytest.mark.slow
@pytest.mark.parametrize("kv", ["fp16", "int8", "int4"])
def test_compiled_tokens_bit_exact_and_same_work(kv):
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=3))
    ref = PccxDriver(timing=False).open().load(store).kv_init(kv, 16).start()
    fast = PccxDriver(executor="fast", timing=False).open().load(store).kv_init(kv, 16).start()
    assert isinstance(fast.dev, FastSimulator)
    assert fast.dev.backend == kernels.BACKENDS[0]
    tok = 2
    for _ in range(10):  # past the sliding window: the attention shapes change every token
        a, b = ref.step(tok), fast.step(tok)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        tok = int(np.argmax(a))
    assert fast.dev.trace == ref.dev.trace  # every decoded instruction and its Work record
    assert fast.dev.fallbacks == 0  # every layout the compiler emits has a fast step
    # compiled once: one program for the whole span bucket, only the span descriptors were patched
    assert len(fast.variants) == 1 and len(ref.variants) == 1
