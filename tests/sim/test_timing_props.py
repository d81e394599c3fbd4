"""Invariants of the timing core on random programs (hypothesis)."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npukit.sim.timing import Machine, Op, Resource, Stream, simulate

M = Machine(engines=("mac", "vec", "dma"), resources=(Resource("ddr", 8.0), Resource("port", 12.0)),
            streams=(Stream("w", ("ddr", "port"), 512.0),), issue_window=4)

rng = st.tuples(st.integers(0, 6), st.integers(1, 3)).map(lambda t: (t[0], t[0] + t[1]))


@st.composite
def programs(draw):
    ops = []
    for i in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["mac", "vec", "dma"]))
        common = dict(index=i, engine=kind, is_async=draw(st.booleans()),
                      reads=tuple(draw(st.lists(rng, max_size=2))),
                      writes=tuple(draw(st.lists(rng, max_size=1))),
                      latency=draw(st.sampled_from([0.0, 3.0])), tail=draw(st.sampled_from([0.0, 2.0])))
        if kind == "mac":
            ops.append(Op(cycles=draw(st.integers(1, 200)), stream="w",
                          stream_bytes=draw(st.integers(0, 3000)), **common))
        elif kind == "vec":
            prods = [p for p, o in enumerate(ops) if o.engine == "mac"]
            src = draw(st.sampled_from([None, *prods]))
            ops.append(Op(cycles=draw(st.integers(1, 100)), fifo_from=src, fifo_depth=16.0,
                          fifo_elems=64.0 if src is not None else 0.0, **common))
        else:
            ops.append(Op(xfer_bytes=draw(st.integers(1, 2000)), path=("ddr",), **common))
    return ops


def _overlap(a, b):
    return any(x0 < y1 and y0 < x1 for x0, x1 in a for y0, y1 in b)


@settings(max_examples=150)
@given(programs())
def test_schedule_invariants(ops):
    r = simulate(M, ops)
    t = r.ops
    for st_ in r.engines.values():  # every cycle of every engine is attributed exactly once
        assert st_.busy + st_.idle + sum(st_.stalls.values()) == pytest.approx(r.cycles, abs=1e-6)
    for e in M.engines:  # in-order, non-overlapping engine queues
        mine = [o for o in t if o.engine == e]
        for a, b in itertools.pairwise(mine):
            assert a.end <= b.start + 1e-9
    for i, op in enumerate(ops):
        o = t[i]
        assert o.issue <= o.start <= o.end
        assert o.end - o.start >= op.latency + op.tail + op.cycles - 1e-6  # never faster than the engine
        if i and not ops[i - 1].is_async:
            assert o.issue >= t[i - 1].end - 1e-9  # sync blocks the issuer
        for j in range(i):  # hazards wait for completion unless streamed through the FIFO
            p = ops[j]
            fifo = op.fifo_from == j and p.is_async
            if not fifo and (_overlap(p.writes, op.reads) or _overlap(p.writes, op.writes)
                             or _overlap(p.reads, op.writes)):
                assert o.start >= t[j].end - 1e-9
    want = sum(o.xfer_bytes for o in ops) + sum(o.stream_bytes for o in ops)
    assert r.resource_bytes["ddr"] == pytest.approx(want, rel=1e-9, abs=1e-6)
    # DDR can never beat its bandwidth
    assert r.cycles >= want / 8.0 - 1e-6
