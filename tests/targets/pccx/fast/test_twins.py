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


def _calls(ch: TwinChooser, n: int, cost: dict[int, float], site: object = 0) -> list[int]:
    """``n`` calls at ``site``, each twin costing ``cost[twin]`` seconds (1000 weight bytes): the twins
    picked. A cost may be a list: the calls' costs in turn, cycled."""
    picks = []
    for i in range(n):
        twin = ch.pick(site)
        c = cost[twin]
        ch.record(twin, c[i % len(c)] if isinstance(c, list) else c, 1000, site)
        picks.append(twin)
    return picks


def _warm(ch: TwinChooser) -> None:
    """The first call of each twin in a process (its kernel loading): not a sample anywhere."""
    ch.record(0, 5e-2, 1000, "load")
    ch.record(1, 5e-2, 1000, "load")


def test_chooser_follows_the_cheaper_twin_and_backs_off_trying_the_other():
    ch = TwinChooser(period=4, threads=2, max_gap=16)
    _warm(ch)
    picks = _calls(ch, 60, {0: 9e-3, 1: 1e-3})  # parallel stalls (a busy machine)
    assert picks[:2] == [0, 1]  # nothing measured at this site: each twin once,
    tries = [i + 1 for i, p in enumerate(picks) if p == 0][1:]
    assert tries == [6, 14, 30, 46]  # then the dearer one 4 calls after that, then 8, 16, 16 (max_gap)
    picks = _calls(ch, 40, {0: 1e-4, 1: 1e-3})  # the machine went quiet: parallel is now cheaper
    first = picks.index(0)  # tried at the next scheduled call; its window then turns within calls
    assert first <= 16 and picks[first + 8:].count(1) <= 3  # (serial tried 4, 8, 16 calls on)
    rep = ch.report()
    assert rep["parallel"]["calls"] + rep["serial"]["calls"] == 102


def test_a_first_call_that_loaded_its_kernel_does_not_decide_the_choice():
    """The first call of each twin in the process pays for loading its kernel: it is no sample, so a
    slow first parallel call does not keep the faster parallel twin out."""
    ch = TwinChooser(period=4, threads=2)
    # parallel's first call: 50 ms of loading, no sample (parallel runs again), then serial's likewise
    assert _calls(ch, 4, {0: [5e-2, 1e-4], 1: [5e-2, 1e-3]}) == [0, 0, 1, 1]
    picks = _calls(ch, 30, {0: 1e-4, 1: 1e-3})  # then parallel streams 10x faster
    assert picks[0] == 0 and picks.count(1) <= 3
    assert ch.report()["parallel"]["ns_per_byte"] == pytest.approx(100.0)  # 0.1 ms per 1000 bytes


def test_one_preempted_call_does_not_shut_the_cheaper_twin_out_but_frequent_stalls_do():
    """A call the OS preempted costs tens of times the usual: the largest of a twin's recent times does
    not count, so the cheaper twin keeps its place; a twin stalling on every other call is dearer."""
    ch = TwinChooser(period=4, threads=2)
    _warm(ch)
    _calls(ch, 20, {0: 1e-4, 1: 2e-4})
    ch.record(0, 5e-2, 1000)  # one parallel call preempted for 50 ms
    picks = _calls(ch, 40, {0: 1e-4, 1: 2e-4})
    assert picks.count(1) <= 3
    picks = _calls(ch, 40, {0: [1e-4, 5e-3], 1: 2e-4})  # now every other parallel call stalls 5 ms
    assert picks[8:].count(0) <= 4


def test_sites_are_compared_each_with_itself():
    """Two call sites of different cost per byte (a fused run with many small rows, one with few): each
    follows the twin cheaper there. Compared across sites (the earlier chooser's per-byte mean), the
    dear site's parallel calls against the cheap site's serial ones chose serial for both."""
    ch = TwinChooser(period=4, threads=2)
    _warm(ch)
    a, b = [], []
    for _ in range(40):
        a += _calls(ch, 1, {0: 4e-3, 1: 5e-3}, "heavy")  # parallel 20 % faster at both sites
        b += _calls(ch, 1, {0: 8e-4, 1: 1e-3}, "light")
    assert a[8:].count(0) >= 28 and b[8:].count(0) >= 28


def test_no_lock_in_longer_than_max_gap():
    """However unlucky the dearer twin's samples were, it is tried again within ``max_gap`` calls and
    its recent window follows the machine: the chooser returns to it within a few tries."""
    ch = TwinChooser(period=4, threads=2, max_gap=16)
    _warm(ch)
    _calls(ch, 100, {0: 1e-2, 1: 1e-3})  # a long busy spell: parallel dear, backed off to 16
    picks = _calls(ch, 120, {0: 1e-4, 1: 1e-3})  # quiet again
    assert picks.index(0) <= 16
    assert picks[-40:].count(0) >= 35  # and parallel holds once its window turned


def test_one_thread_always_takes_the_serial_twin():
    ch = TwinChooser(threads=1)
    par, ser = object(), object()
    assert ch.wrap(par, ser, 10) is ser and ch.pick() == 1


@pytest.mark.skipif("numba" not in kx.BACKENDS, reason="the twins are numba kernels")
@pytest.mark.parametrize("twin", [0, 1])
def test_either_twin_gives_the_reference_logits(monkeypatch, twin):
    monkeypatch.setattr(kx, "PARALLEL_MIN_MACS", 64)  # every weight matrix here counts as large
    monkeypatch.setattr(TwinChooser, "pick", lambda self, site=0: twin)
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=5))
    ref = PccxDriver(timing=False).open().load(store).kv_init("fp16", 64).start()
    fast = PccxDriver(executor="fast", timing=False).open()
    fast.dev.twins.single = False  # (a one-thread CI runner would otherwise bypass the chooser)
    fast.load(store).kv_init("fp16", 64).start()
    assert_fast_follows_reference(ref, fast, [3, 9], steps=3)
    assert fast.dev.twins.calls[twin] > 0 and fast.dev.twins.calls[twin ^ 1] == 0
