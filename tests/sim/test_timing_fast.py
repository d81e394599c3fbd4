"""The compiled event loop (`npukit.sim.timing_nb`) against the readable one (`timing_state.Sim`, the
model's definition): the same schedule bit for bit — every op's times, busy and stalls (with the
dicts' key order), engine totals, fetches, resource bytes, usage and buffer-level samples — and the
same errors, on random machines and programs."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npukit.sim import timing, timing_fast, timing_nb
from npukit.sim.timing import Machine, Op, Resource, Stream, TimingError, TokenQueue
from npukit.sim.timing_state import Sim

pytestmark = pytest.mark.skipif(not timing_fast.enabled(), reason="numba is a core dependency")


def dump(r: timing.TimingResult) -> str:
    """Everything a result holds, floats by their repr (so 0.1 + 0.2 != 0.3 shows)."""
    return json.dumps({**r.to_json(), "fetches": [f.to_json() for f in r.fetches],
                       "usage": [(t, list(u.items())) for t, u in r.usage],
                       "levels": [(t, list(v.items())) for t, v in r.levels],
                       "stall_order": [list(o.stalls) for o in r.ops],
                       "engine_order": [list(e.stalls) for e in r.engines.values()]})


def both(machine: Machine, ops: list[Op]) -> tuple[str, str]:
    fast = timing_fast.try_simulate(machine, ops)
    assert fast is not None, "the compiled loop should cover this machine"
    return dump(fast), dump(Sim(machine, ops).run())


def test_constants_agree():
    assert (timing_nb.FRACTION_EPS, timing_nb.BYTES_EPS) == (timing.FRACTION_EPS, timing.BYTES_EPS)
    assert (timing.FRACTION_EPS, timing.BYTES_EPS) == (1e-9, 1e-6)  # the pinned schedules rest on these


ranges = st.tuples(st.integers(0, 9), st.integers(0, 3)).map(lambda t: (t[0], t[0] + t[1]))  # (empty too)


@st.composite
def machines(draw):
    nres = draw(st.integers(1, 4))
    res = tuple(Resource(f"r{i}", draw(st.sampled_from([1.0, 2.5, 8.0, 12.0, 0.75]))) for i in range(nres))
    names = [r.name for r in res]
    streams = tuple(Stream(f"s{i}", tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=2))),
                           draw(st.sampled_from([64.0, 512.0, 3000.0])),
                           draw(st.sampled_from([math.inf, 3.0, 0.5])))
                    for i in range(draw(st.integers(0, 2))))
    engines = tuple(f"e{i}" for i in range(draw(st.integers(1, 4))))
    return Machine(engines=engines, resources=res, streams=streams,
                   issue_cycles=draw(st.sampled_from([0.0, 1.0, 2.5])),
                   issue_window=draw(st.sampled_from([None, 1, 2, 4])))


@st.composite
def programs(draw, m: Machine):
    ops: list[Op] = []
    names = [r.name for r in m.resources]
    for i in range(draw(st.integers(1, 14))):
        eng = draw(st.sampled_from(m.engines))
        cycles = draw(st.sampled_from([0.0, 1.0, 7.0, 40.0, 123.0]))
        stream = draw(st.sampled_from([None, *[s.name for s in m.streams]])) if cycles > 0 else None
        prods = [p for p, o in enumerate(ops) if o.cycles > 0]
        fifo = draw(st.sampled_from([None, *prods])) if cycles > 0 else None
        ops.append(Op(
            index=i, engine=eng, label=draw(st.sampled_from(["", f"op{i}"])), cycles=cycles,
            latency=draw(st.sampled_from([0.0, 3.0])), tail=draw(st.sampled_from([0.0, 2.0, 0.5])),
            path=tuple(draw(st.lists(st.sampled_from(names), max_size=2))),
            xfer_bytes=draw(st.sampled_from([0.0, 16.0, 300.0, 1000.0])),
            stream=stream, stream_bytes=draw(st.sampled_from([0.0, 100.0, 2000.0])) if stream else 0.0,
            fifo_from=fifo, fifo_depth=draw(st.sampled_from([4.0, 16.0])),
            fifo_elems=draw(st.sampled_from([0.0, 64.0])) if fifo is not None else 0.0,
            is_async=draw(st.booleans()), reads=tuple(draw(st.lists(ranges, max_size=2))),
            writes=tuple(draw(st.lists(ranges, max_size=2))), args={"i": i}))
    return ops


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_compiled_loop_is_the_readable_loop(data):
    m = data.draw(machines())
    ops = data.draw(programs(m))
    try:
        want = dump(Sim(m, ops).run())
    except TimingError as exc:  # the same error, word for word
        with pytest.raises(TimingError) as got:
            timing_fast.try_simulate(m, ops)
        assert str(got.value) == str(exc)
        return
    fast = timing_fast.try_simulate(m, ops)
    assert fast is not None and dump(fast) == want


def test_pccx_like_program_with_streams_fifos_and_hazards():
    """A long program in the shape of a pccx token: weight-streaming GEMVs with SFU consumers over a
    FIFO, DMAs sharing DDR, sync points; 600 ops, a few thousand events."""
    fast, slow = both(*pccx_like())
    assert fast == slow


def pccx_like() -> tuple[Machine, list[Op]]:
    """`test_pccx_like_program_with_streams_fifos_and_hazards`'s machine and program."""
    m = Machine(engines=("gemv", "sfu", "dma", "ctrl"),
                resources=(Resource("ddr", 10.0), Resource("hp", 16.0), Resource("l2b", 16.0)),
                streams=(Stream("weights", ("ddr", "hp"), 4096.0),), issue_window=8)
    ops: list[Op] = []
    for i in range(150):
        a = 4 * i
        ops.append(Op(a, "gemv", f"gemv{i}", cycles=50.0 + i % 7, tail=6.0, stream="weights",
                      stream_bytes=3000.0 + 17 * (i % 5), is_async=True, reads=((0, 8),),
                      writes=((8 + i % 3, 9 + i % 3),), path=("l2b",), xfer_bytes=64.0))
        ops.append(Op(a + 1, "sfu", f"sfu{i}", cycles=20.0, tail=4.0, fifo_from=a, fifo_depth=16.0,
                      fifo_elems=128.0, is_async=i % 4 != 0, reads=((8 + i % 3, 9 + i % 3),),
                      writes=((20, 21),)))
        ops.append(Op(a + 2, "dma", f"dma{i}", latency=5.0, path=("ddr",), xfer_bytes=256.0, is_async=True,
                      reads=((20, 21),), writes=((30 + i % 2, 31 + i % 2),)))
        ops.append(Op(a + 3, "ctrl", f"ctrl{i}", cycles=2.0, writes=((40, 41),), is_async=i % 3 == 0))
    return m, ops


def test_errors_are_worded_alike():
    m = Machine(engines=("a",), resources=())
    with pytest.raises(TimingError, match="neither a rate cap"):
        timing.simulate(m, [Op(0, "a", xfer_bytes=5.0)])  # cycles 0: no cap; no resource on its path


def test_machines_it_does_not_cover_run_the_readable_loop():
    assert timing_fast.Plan.of(Machine(engines=("a",), queues=(TokenQueue("q", 1),))) is None
    assert timing_fast.Plan.of(Machine(engines=("a",), command_depth=2)) is None


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("NPUKIT_TIMING", "python")
    assert timing_fast.try_simulate(Machine(engines=("a",)), [Op(0, "a", cycles=3.0)]) is None
