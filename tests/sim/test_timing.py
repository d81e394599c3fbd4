"""Timing core against closed-form schedules worked out by hand for small event sequences."""

import json

import pytest

from npukit.sim.timing import Machine, Op, Resource, Stream, TimingError, simulate

ENGINES = ("mac", "vec", "dma")


def machine(**kw):
    base = dict(engines=ENGINES, resources=(Resource("ddr", 10.0), Resource("port", 16.0)),
                streams=(Stream("w", ("ddr", "port"), 1000.0),), clock_hz=1e9)
    base.update(kw)
    return Machine(**base)


def test_sync_ops_serialize_and_async_ops_overlap():
    ops = [Op(0, "mac", cycles=100), Op(1, "vec", cycles=50)]
    r = simulate(machine(), ops)
    assert [(o.start, o.end) for o in r.ops] == [(0, 100), (100, 150)]  # op 0 blocks the issuer
    assert r.engines["vec"].stalls == {"sync": 100}
    r = simulate(machine(), [Op(0, "mac", cycles=100, is_async=True), Op(1, "vec", cycles=50)])
    assert [(o.start, o.end) for o in r.ops] == [(0, 100), (0, 50)]
    assert r.cycles == 100


def test_engine_queue_is_in_order_and_latency_adds():
    ops = [Op(i, "mac", cycles=10, latency=3, is_async=True) for i in range(4)]
    r = simulate(machine(), ops)
    assert [o.end for o in r.ops] == [13, 26, 39, 52]
    assert r.engines["mac"].busy == pytest.approx(52)


@pytest.mark.parametrize(
    ("a", "b", "dependent"),
    [
        (dict(writes=((0, 8),)), dict(reads=((4, 12),)), True),  # RAW
        (dict(reads=((0, 8),)), dict(writes=((7, 9),)), True),  # WAR
        (dict(writes=((0, 8),)), dict(writes=((0, 1),)), True),  # WAW
        (dict(reads=((0, 8),)), dict(reads=((0, 8),)), False),  # RAR is free
        (dict(writes=((0, 8),)), dict(reads=((8, 16),)), False),  # half-open ranges touch only
    ],
)
def test_range_dependencies(a, b, dependent):
    ops = [Op(0, "mac", cycles=100, is_async=True, **a), Op(1, "vec", cycles=10, is_async=True, **b)]
    r = simulate(machine(), ops)
    assert r.ops[1].start == (100 if dependent else 0)
    if dependent:
        assert r.engines["vec"].stalls == {"dep_mac": 100}
        assert r.ops[1].stalls == {"dep_mac": 100}


def test_fair_sharing_of_a_bandwidth_resource():
    # two DMAs on a 10 B/cycle DDR: 500 B and 1500 B. Shared 5/5 until the first ends at 100,
    # then the second gets all 10: 1000 B left -> ends at 200.
    ops = [Op(0, "dma", xfer_bytes=500, path=("ddr",), is_async=True),
           Op(1, "vec", xfer_bytes=1500, path=("ddr",), is_async=True)]
    r = simulate(machine(), ops)
    assert r.ops[0].end == pytest.approx(100)
    assert r.ops[1].end == pytest.approx(200)
    assert r.resource_bytes["ddr"] == pytest.approx(2000)
    assert r.engines["dma"].stalls["bandwidth"] == pytest.approx(50)  # half the time at half rate
    assert r.engines["dma"].busy == pytest.approx(50)


def test_rate_capped_flow_leaves_bandwidth_to_others():
    # op 0 moves 400 B but its engine caps it at 4 B/cycle (100 cycles); op 1 gets the other 6.
    ops = [Op(0, "dma", cycles=100, xfer_bytes=400, path=("ddr",), is_async=True),
           Op(1, "vec", xfer_bytes=600, path=("ddr",), is_async=True)]
    r = simulate(machine(), ops)
    assert r.ops[0].end == pytest.approx(100)
    assert r.ops[1].end == pytest.approx(100)


def test_memory_bound_stream_consumer():
    # 10 000 B through a 10 B/cycle DDR (port 16 does not bind): 1000 cycles; compute needs 200.
    r = simulate(machine(), [Op(0, "mac", cycles=200, stream="w", stream_bytes=10_000)])
    assert r.cycles == pytest.approx(1000)
    assert r.engines["mac"].busy == pytest.approx(200)
    assert r.engines["mac"].stalls["w"] == pytest.approx(800)
    (f,) = r.fetches
    assert (f.start, f.end) == (0, pytest.approx(1000))


def test_compute_bound_stream_pauses_when_buffer_full():
    # 3000 B, compute 900 cycles (3.33 B/cycle drawn). Fetch runs at 10 until the 1000 B buffer is full:
    # level grows at 10 - 3.33 = 6.67 B/cycle -> full at t=150, then follows consumption.
    r = simulate(machine(), [Op(0, "mac", cycles=900, stream="w", stream_bytes=3000)])
    assert r.cycles == pytest.approx(900)
    assert r.engines["mac"].stalls == {}
    assert max(v["w"] for _, v in r.levels) == pytest.approx(1000, rel=1e-6)
    (f,) = r.fetches
    # remaining 3000 - 1500 (fetched at t=150) at 3.33 B/cycle... fetch ends when the buffer holds
    # the last 1000 B: consumed 2000 B at t = 600.
    assert f.end == pytest.approx(600)


def test_prefetch_starts_when_previous_consumer_launches():
    # Op 1's weights may not be fetched before op 0 starts; op 0 waits on a 100-cycle DMA dependency.
    ops = [Op(0, "dma", cycles=100, is_async=True, writes=((0, 1),)),
           Op(1, "mac", cycles=50, stream="w", stream_bytes=500, reads=((0, 1),), is_async=True),
           Op(2, "mac", cycles=50, stream="w", stream_bytes=500, is_async=True)]
    r = simulate(machine(), ops)
    f1, f2 = r.fetches
    assert f1.start == 0  # op 1 is the stream's first op: fetched at issue
    assert f1.end == pytest.approx(50)
    assert f2.start == pytest.approx(100)  # held until op 1 launched at t=100
    assert r.ops[1].start == 100 and r.ops[1].end == pytest.approx(150)
    assert r.ops[2].end == pytest.approx(200)  # 500 B fetched 100..150 at 10 B/cycle, compute 150..200


def test_fifo_consumer_follows_producer_and_backpressures():
    # producer emits 1000 elements in 100 cycles; consumer takes 1 per cycle (1000 cycles), depth 100.
    ops = [Op(0, "mac", cycles=100, is_async=True, writes=((0, 1000),)),
           Op(1, "vec", cycles=1000, fifo_from=0, fifo_depth=100, fifo_elems=1000, reads=((0, 1000),),
              is_async=True)]
    r = simulate(machine(), ops)
    assert r.ops[1].start == 0  # no RAW wait: streamed through the FIFO
    assert r.ops[1].end == pytest.approx(1000)
    # the producer may lead by 100 elements: it finishes when the consumer has taken 900 -> t = 900
    assert r.ops[0].end == pytest.approx(900)
    assert r.engines["mac"].stalls["wait_vec"] == pytest.approx(800, rel=1e-6)


def test_fifo_consumer_waits_for_slow_producer():
    ops = [Op(0, "mac", cycles=1000, is_async=True, writes=((0, 100),)),
           Op(1, "vec", cycles=100, fifo_from=0, fifo_depth=16, fifo_elems=100, reads=((0, 100),),
              is_async=True)]
    r = simulate(machine(), ops)
    assert r.ops[1].end == pytest.approx(1000)
    assert r.engines["vec"].busy == pytest.approx(100)
    assert r.engines["vec"].stalls["wait_mac"] == pytest.approx(900)


def test_sync_producer_disables_fifo_coupling():
    ops = [Op(0, "mac", cycles=100, writes=((0, 10),)),
           Op(1, "vec", cycles=10, fifo_from=0, fifo_depth=4, fifo_elems=10, reads=((0, 10),))]
    r = simulate(machine(), ops)
    assert r.ops[1].start == 100 and r.ops[1].end == 110


def test_issue_window_and_issue_cost():
    ops = [Op(0, "mac", cycles=100, is_async=True)] + [
        Op(i, "mac", cycles=1, is_async=True) for i in range(1, 5)]
    r = simulate(machine(issue_window=2, issue_cycles=1), ops)
    # ops 1, 2 queue behind op 0 (window full); op 3 issues when op 1 starts at t=100
    assert r.ops[1].issue == 1 and r.ops[2].issue == 2
    assert r.ops[3].issue == pytest.approx(100)
    assert r.ops[4].issue == pytest.approx(101)


def test_accounting_adds_up_and_json_round_trips():
    ops = [Op(0, "dma", xfer_bytes=300, path=("ddr",), latency=7, is_async=True, writes=((0, 4),)),
           Op(1, "mac", cycles=40, stream="w", stream_bytes=900, reads=((0, 4),), is_async=True,
              writes=((4, 8),)),
           Op(2, "vec", cycles=30, fifo_from=1, fifo_depth=2, fifo_elems=8, reads=((4, 8),))]
    r = simulate(machine(), ops)
    for st in r.engines.values():
        assert st.busy + st.idle + sum(st.stalls.values()) == pytest.approx(r.cycles)
    for o in r.ops:
        assert o.issue <= o.start <= o.end <= r.cycles
    text = json.dumps(r.to_json())
    assert json.loads(text)["cycles"] == pytest.approx(r.cycles)
    assert r.seconds == pytest.approx(r.cycles / 1e9)


def test_bad_descriptions_raise():
    with pytest.raises(TimingError, match="unknown engine"):
        simulate(machine(), [Op(0, "nope", cycles=1)])
    with pytest.raises(TimingError, match="unknown resource"):
        simulate(machine(), [Op(0, "dma", xfer_bytes=1, path=("x",))])
    with pytest.raises(TimingError, match="earlier op"):
        simulate(machine(), [Op(0, "vec", cycles=1, fifo_from=0, fifo_depth=1, fifo_elems=1)])


def test_tail_delays_completion_and_dependents():
    # producer work 100 cycles + 20 drain; the FIFO consumer's own drain of 5 follows the producer's data
    ops = [Op(0, "mac", cycles=100, tail=20, is_async=True, writes=((0, 10),)),
           Op(1, "vec", cycles=10, tail=5, fifo_from=0, fifo_depth=64, fifo_elems=10, reads=((0, 10),),
              is_async=True, writes=((10, 20),)),
           Op(2, "mac", cycles=1, reads=((10, 20),))]
    r = simulate(machine(), ops)
    assert r.ops[0].end == pytest.approx(120)
    assert r.ops[1].end == pytest.approx(105)  # work ends with the producer's work (t=100), + 5
    assert r.ops[2].start == pytest.approx(120)  # in-order mac queue: after op 0's drain
    assert r.ops[2].end == pytest.approx(121)
    assert r.engines["mac"].busy == pytest.approx(121)


# --- pinned regression: the event loop's optimisations must not move a single bit -----------------

PIN_MACHINE = Machine(engines=("mac", "vec", "dma"), resources=(Resource("ddr", 8.0), Resource("port", 12.0)),
                      streams=(Stream("w", ("ddr", "port"), 512.0, 6.0),), issue_window=4, issue_cycles=0.5)


def pinned_program(n=160, seed=7):
    """A fixed pseudo-random program: streams, FIFO couplings, transfers, hazards, sync and async ops."""
    import random

    rnd = random.Random(seed)
    ops = []
    for i in range(n):
        kind = ("mac", "vec", "dma")[rnd.randrange(3)]
        a, b = rnd.randrange(8), rnd.randrange(8)
        common = dict(index=i, engine=kind, is_async=rnd.random() < 0.6,
                      reads=((a, a + 1 + rnd.randrange(3)),),
                      writes=((b, b + 1 + rnd.randrange(2)),) if i % 3 else (),
                      latency=(0.0, 3.0)[rnd.randrange(2)], tail=(0.0, 2.0)[rnd.randrange(2)])
        if kind == "mac":
            ops.append(Op(cycles=1 + rnd.randrange(200), stream="w", stream_bytes=rnd.randrange(3000),
                          **common))
        elif kind == "vec":
            prods = [p for p, o in enumerate(ops) if o.engine == "mac"][-3:]
            src = prods[rnd.randrange(len(prods))] if prods and rnd.random() < 0.7 else None
            ops.append(Op(cycles=1 + rnd.randrange(100), fifo_from=src, fifo_depth=16.0,
                          fifo_elems=64.0 if src is not None else 0.0, path=("port",),
                          xfer_bytes=rnd.randrange(500), **common))
        else:
            ops.append(Op(xfer_bytes=1 + rnd.randrange(2000),
                          path=(("ddr",), ("ddr", "port"))[rnd.randrange(2)], **common))
    return ops


def result_digest(r):
    """sha256 over every field of a TimingResult, floats by their bits, dicts in their order."""
    import hashlib
    import struct

    out = []

    def canon(x):
        if isinstance(x, float):
            out.append(struct.pack("<d", x))
        elif isinstance(x, dict):
            for k, v in x.items():
                canon(k)
                canon(v)
        elif isinstance(x, (list, tuple)):
            out.append(b"[%d" % len(x))
            for v in x:
                canon(v)
        else:
            out.append(repr(x).encode())

    canon((r.cycles, r.clock_hz, r.resource_bytes, r.usage, r.levels))
    for e in r.engines.values():
        canon((e.name, e.busy, e.idle, e.stalls))
    for o in r.ops:
        canon((o.index, o.engine, o.label, o.issue, o.start, o.end, o.busy, o.stalls, o.args))
    for f in r.fetches:
        canon((f.stream, f.index, f.start, f.end, f.bytes))
    return hashlib.sha256(b"".join(out)).hexdigest()[:16]


def test_pinned_schedule_is_bit_identical():
    """Pinned from the pre-optimisation implementation at commit 4afa6c5 (the per-event re-scan
    `_Sim`), run on `pinned_program()`: exact floats, and a digest of every field of the result.
    A change of the model may move these; a change of how the event loop finds things may not."""
    r = simulate(PIN_MACHINE, pinned_program())
    assert r.cycles == 21176.37333987063
    assert (len(r.usage), len(r.levels)) == (285, 523)
    e = r.engines
    assert (e["mac"].busy, e["mac"].idle) == (5373.000000000001, 101.0)
    assert e["mac"].stalls == {"sync": 3585.5833333333335, "issue": 45.5, "dep_dma": 1544.6249999999995,
                               "w": 9934.462625584927, "wait_vec": 3.0, "dep_vec": 589.202380952381}
    assert e["vec"].busy == 2730.083333333334
    assert e["vec"].stalls["wait_mac"] == 631.9166666666666
    assert e["dma"].stalls == {"sync": 9968.748339870644, "issue": 314.0, "bandwidth": 1751.3749999999995,
                               "dep_mac": 3718.916666666668, "dep_vec": 270.83333333333337}
    assert r.resource_bytes == {"ddr": 128594.0, "port": 120447.99999999994}
    assert [(o.start, o.end) for o in r.ops[40:43]] == [(5971.624999999999, 6060.624999999999),
                                                        (6061.124999999999, 6100.291666666666),
                                                        (6061.624999999999, 6242.124999999999)]
    assert result_digest(r) == "1a309d6d700c959d"
