"""The executor's choice between the parallel and serial twin of a large GEMV kernel: it follows what
the calls cost, explores the other twin periodically, and never changes a result bit (the decode
logits and Work records stay the reference simulator's whichever twin runs)."""

from __future__ import annotations

import pytest

from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.fast.twins import TwinChooser
from npukit.targets.pccx.gemma3n_quant import Int4Store

from .tiny_gemma3n import CFG, assert_fast_follows_reference


def _calls(ch: TwinChooser, n: int, cost: dict[int, float]) -> list[int]:
    """``n`` calls, each twin costing ``cost[twin]`` seconds per 1000 bytes: the twins picked."""
    picks = []
    for _ in range(n):
        twin = ch.pick()
        ch.record(twin, cost[twin], 1000)
        picks.append(twin)
    return picks


def test_chooser_follows_the_cheaper_twin_and_backs_off_trying_the_other():
    ch = TwinChooser(period=4, weight=1.0, threads=2)
    picks = _calls(ch, 40, {0: 9e-3, 1: 1e-3})  # parallel stalls (a busy machine)
    assert picks[:2] == [0, 1]  # nothing measured: each twin once,
    tries = [i + 1 for i, p in enumerate(picks) if p == 0][1:]
    assert tries == [6, 14, 30]  # then the dearer one 4 calls after that, then after 8, 16, ...
    picks = _calls(ch, 40, {0: 1e-4, 1: 1e-3})  # the machine went quiet: parallel is now cheaper
    first = picks.index(0)  # tried at the next scheduled call (gap 32 by then), it wins and stays
    assert first <= 32 and picks[first:].count(1) == 2  # (the serial twin tried 4, then 8 calls later)
    rep = ch.report()
    assert rep["serial"]["ns_per_byte"] == pytest.approx(1000.0)  # 1 ms over 1000 bytes
    assert rep["parallel"]["calls"] + rep["serial"]["calls"] == 80


def test_a_first_call_that_loaded_its_kernel_does_not_decide_the_choice():
    """The first call of each twin pays for loading its kernel: the second replaces that figure, so a
    slow first parallel call does not keep the faster parallel twin out for the run."""
    ch = TwinChooser(period=4, weight=0.25, threads=2)
    loading = {0: 5e-2, 1: 1e-3}  # the parallel twin's first call: 50 ms of kernel loading
    picks = _calls(ch, 2, loading)
    assert picks == [0, 1]
    picks = _calls(ch, 30, {0: 1e-4, 1: 1e-3})  # then parallel streams 10x faster
    assert picks.index(0) <= 4 and picks[picks.index(0):].count(1) <= 2
    assert ch.report()["parallel"]["ns_per_byte"] == pytest.approx(100.0)


def test_one_preempted_call_does_not_shut_the_cheaper_twin_out():
    """A call the OS preempted costs tens of times the usual: it counts as 4x, so the cheaper twin keeps
    (or at once regains) its place, while a lasting slowdown is still followed within a few calls."""
    ch = TwinChooser(period=4, weight=0.25, threads=2)
    _calls(ch, 20, {0: 1e-4, 1: 2e-4})
    ch.record(0, 5e-2, 1000)  # one parallel call preempted for 50 ms
    picks = _calls(ch, 40, {0: 1e-4, 1: 2e-4})
    assert picks.count(1) <= 2
    picks = _calls(ch, 40, {0: 5e-3, 1: 2e-4})  # the parallel twin now stalls on every call
    assert picks.index(1) <= 4 and picks[10:].count(0) <= 3


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
    assert_fast_follows_reference(ref, fast, [3, 9], steps=3)
    assert fast.dev.twins.calls[twin] > 0 and fast.dev.twins.calls[twin ^ 1] == 0
