"""The executor's choice between the parallel and serial twin of a large GEMV kernel: it follows what
the calls cost, explores the other twin periodically, and never changes a result bit (the decode
logits and Work records stay the reference simulator's whichever twin runs)."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.fast.twins import TwinChooser
from npukit.targets.pccx.gemma3n_quant import Int4Store

from .tiny_gemma3n import CFG


def test_chooser_follows_the_cheaper_twin_and_explores_the_other():
    ch = TwinChooser(period=4, weight=1.0, threads=2)
    assert ch.pick() == 0  # nothing measured: the parallel twin first,
    ch.record(0, 9e-3, 1000)
    assert ch.pick() == 1  # then the serial one
    ch.record(1, 1e-3, 1000)
    picks = [ch.pick() for _ in range(8)]
    assert picks.count(1) == 6 and picks.count(0) == 2  # the cheaper, the other every 4th call
    ch.record(0, 1e-4, 1000)  # the machine went quiet: parallel is now cheaper
    assert [ch.pick() for _ in range(3)].count(0) >= 2
    rep = ch.report()
    assert rep["parallel"]["calls"] == 2 and rep["serial"]["calls"] == 1
    assert rep["serial"]["ns_per_byte"] == pytest.approx(1000.0)  # 1 ms over 1000 bytes


def test_one_thread_always_takes_the_serial_twin():
    ch = TwinChooser(threads=1)
    par, ser = object(), object()
    assert ch.wrap(par, ser, 10) is ser and ch.pick() == 1


@pytest.mark.skipif("numba" not in kx.BACKENDS, reason="the twins are numba kernels")
@pytest.mark.parametrize("twin", [0, 1])
def test_either_twin_gives_the_reference_logits(monkeypatch, twin):
    monkeypatch.setattr(kx, "PARALLEL_MIN_MACS", 64)  # every weight matrix here counts as large
    monkeypatch.setattr(TwinChooser, "pick", lambda self: twin)
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=5))
    ref = PccxDriver(timing=False).open().load(store).kv_init("fp16", 64).start()
    fast = PccxDriver(executor="fast", timing=False).open()
    fast.dev.twins.single = False  # (a one-thread CI runner would otherwise bypass the chooser)
    fast.load(store).kv_init("fp16", 64).start()
    a, b = ref.prefill([3, 9]), fast.prefill([3, 9])
    tok = int(np.argmax(a))
    for _ in range(3):
        a, b = ref.step(tok), fast.step(tok)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert fast.last_works == ref.last_works
        tok = int(np.argmax(a))
    assert fast.dev.twins.calls[twin] > 0 and fast.dev.twins.calls[twin ^ 1] == 0
