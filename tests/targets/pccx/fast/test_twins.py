"""The executor's choice between the parallel and serial twin of a large GEMV kernel: it follows what
the calls cost, explores the other twin periodically, and never changes a result bit (the decode
logits and Work records stay the reference simulator's whichever twin runs)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.fast.twins import TwinChooser
from npukit.targets.pccx.gemma3n_quant import Int4Store

from .tiny_gemma3n import CFG, assert_fast_follows_reference

SITES = ("q", "ffn", "head")  # the calls of one decode step, in order


def _steps(ch: TwinChooser, n: int, cost) -> list[list[int]]:
    """``n`` decode steps of `SITES`; ``cost(twin, site, previous twin)`` in seconds (a dict
    {twin: seconds} for the same cost everywhere): the twins picked, per step."""
    out, prev = [], -1
    for _ in range(n):
        step = []
        for site in SITES:
            twin = ch.pick(site)
            c = cost[twin] if isinstance(cost, dict) else cost(twin, site, prev)
            ch.record(twin, c, 1000, site)
            step.append(twin)
            prev = twin
        out.append(step)
    return out


def _parallel_share(steps: list[list[int]]) -> float:
    flat = [t for step in steps for t in step]
    return flat.count(0) / len(flat)


def _probe_starts(steps: list[list[int]], probed: int) -> list[int]:
    """The call indices where a run of ``probed`` calls begins."""
    flat = [t for step in steps for t in step]
    return [i for i, t in enumerate(flat) if t == probed and (i == 0 or flat[i - 1] != probed)]


def test_chooser_takes_the_cheaper_twin_and_probes_the_other_ever_more_rarely():
    ch = TwinChooser(period=6, threads=2, max_gap=48)
    steps = _steps(ch, 120, {0: 9e-3, 1: 1e-3})  # parallel stalls (a busy machine)
    assert ch.twin == 1 and _parallel_share(steps[20:]) < 0.1  # (a probe: 4 calls per 48 or so)
    starts = _probe_starts(steps, 0)[2:]
    gaps = [b - a for a, b in pairwise(starts)]
    assert gaps == sorted(gaps) and max(gaps) <= 48 + len(SITES) + 2  # backing off, up to max_gap
    steps = _steps(ch, 60, {0: 1e-4, 1: 1e-3})  # the machine went quiet: parallel is now cheaper
    flat = [t for step in steps for t in step]
    assert ch.twin == 0 and flat.index(0) <= 48 and flat[-60:].count(1) <= 6


def test_a_probe_samples_every_site():
    ch = TwinChooser(period=6, threads=2, max_gap=48)
    _steps(ch, 40, {0: 9e-3, 1: 1e-3})
    flat = [t for step in _steps(ch, 40, {0: 9e-3, 1: 1e-3}) for t in step]
    runs = [len(r) for r in "".join(map(str, flat)).split("1") if r]
    assert runs and set(runs) == {len(SITES) + 1}  # (the first of a parallel burst wakes the workers)


def test_a_probe_after_the_prompt_lasts_one_decode_step():
    """The prompt's chunks call many sites once each; the decode step after it calls `SITES` only. The
    first probe of the decode ends at the first site it calls again, not after a call per prompt site
    (it ran the probed twin for 8 decode steps at hidden 1024 so)."""
    ch = TwinChooser(period=6, threads=2)
    for k in range(40):  # a prompt: 40 sites, one call each, parallel cheaper
        twin = ch.pick(("chunk", k))
        ch.record(twin, 1e-4 if twin == 0 else 1e-3, 1000, ("chunk", k))
    flat = [t for step in _steps(ch, 20, {0: 1e-4, 1: 1e-3}) for t in step]
    runs = [len(r) for r in "".join(map(str, flat)).split("0") if r]
    assert runs and max(runs) <= len(SITES) + 1 and ch.twin == 0


def test_kernel_loads_and_worker_wake_ups_are_no_samples():
    """A twin's first call loads its kernel (50 ms here); a parallel call right after a serial one wakes
    the workers (5 ms here). Neither is a sample: steadily the parallel twin is 10x cheaper and wins."""
    first = {0: True, 1: True}

    def cost(twin, site, prev):
        if first[twin]:
            first[twin] = False
            return 5e-2
        if twin == 0 and prev == 1:
            return 5e-3
        return 1e-4 if twin == 0 else 1e-3

    steps = _steps(ch := TwinChooser(period=6, threads=2), 80, cost)
    assert ch.twin == 0 and _parallel_share(steps[10:]) > 0.9
    assert ch.report()["parallel"]["ns_per_byte"] == pytest.approx(100.0)  # 0.1 ms per 1000 bytes


def test_sites_are_compared_each_with_itself():
    """Sites of different cost per byte: parallel 20 % faster at each. A single per-byte mean per twin
    compared the dear site's parallel calls with the cheap sites' serial ones; per site it is clear."""
    dear = {"q": 8.0, "ffn": 1.0, "head": 1.0}

    def cost(twin, site, prev):
        return dear[site] * (8e-4 if twin == 0 else 1e-3)

    steps = _steps(ch := TwinChooser(period=6, threads=2), 80, cost)
    assert ch.twin == 0 and _parallel_share(steps[10:]) > 0.9


def test_one_preempted_call_does_not_move_the_choice_but_frequent_stalls_do():
    ch = TwinChooser(period=6, threads=2)
    _steps(ch, 30, {0: 1e-4, 1: 2e-4})
    ch.record(0, 5e-2, 1000, "ffn")  # one parallel call preempted for 50 ms
    assert _parallel_share(_steps(ch, 30, {0: 1e-4, 1: 2e-4})) > 0.9
    calls = iter(range(10**6))

    def stalls(twin, site, prev):  # every other parallel call now stalls 5 ms
        return (5e-3 if next(calls) % 2 else 1e-4) if twin == 0 else 2e-4

    assert _parallel_share(_steps(ch, 60, stalls)[30:]) < 0.2


def test_a_change_in_load_is_followed_before_the_next_scheduled_probe():
    """Settled on parallel with the probes backed off to max_gap, the machine turns busy: the twin in
    use looking dearer than the other's last times at a step's worth of calls brings the probe forward."""
    ch = TwinChooser(period=6, threads=2, max_gap=400)
    _steps(ch, 200, {0: 1e-4, 1: 1e-3})
    assert ch.twin == 0
    flat = [t for step in _steps(ch, 10, {0: 1e-2, 1: 1e-3}) for t in step]
    assert ch.twin == 1 and flat.index(1) <= 3 * len(SITES)  # (two dear calls a site: one is trimmed)
    assert flat[-len(SITES) * 4:].count(0) <= len(SITES) + 1  # (at most one probe of parallel since)


def test_no_lock_in_longer_than_max_gap():
    """However long the parallel twin was dear, it is probed again within ``max_gap`` calls, and once
    it is cheaper the choice follows within a few probes."""
    ch = TwinChooser(period=6, threads=2, max_gap=48)
    _steps(ch, 200, {0: 1e-2, 1: 1e-3})  # a long busy spell
    flat = [t for step in _steps(ch, 60, {0: 1e-4, 1: 1e-3}) for t in step]  # quiet again
    assert 0 in flat[:48 + 1] and flat[-90:].count(0) >= 80


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
