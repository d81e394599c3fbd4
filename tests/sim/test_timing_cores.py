"""Engine pools (several cores of one engine type, e.g. RK3588's three NPU cores) against schedules
worked out by hand: an op naming the pool goes to the first free core (ties: the lowest index), an op
naming a core goes there, and statistics are per core."""

import dataclasses
import itertools

import pytest

from npukit.sim.timing import EnginePool, Machine, Op, Resource, TimingError, simulate
from npukit.sim.trace import to_trace

NPU = EnginePool("npu", 3)


def machine(**kw):
    return Machine(engines=(NPU, "dma"), resources=(Resource("ddr", 10.0),), **kw)


def npu(i, cycles, engine="npu", **kw):
    return Op(i, engine, f"conv {i}", cycles=cycles, is_async=True, **kw)


def test_three_cores_run_independent_ops_three_times_faster():
    """Six independent 100-cycle ops: one core takes 600 cycles. Three: ops 0-2 on cores 0-2 at t=0,
    all free again at 100, so ops 3-5 go to cores 0, 1, 2 (lowest index first): 200 cycles."""
    ops = [npu(i, 100) for i in range(6)]
    one = simulate(Machine(engines=("npu", "dma")), ops)
    three = simulate(machine(), ops)
    assert one.cycles == 600 and three.cycles == 200
    assert [o.engine for o in three.ops] == ["npu.0", "npu.1", "npu.2"] * 2
    assert [(o.start, o.end) for o in three.ops] == [(0, 100)] * 3 + [(100, 200)] * 3
    assert list(three.engines) == ["npu.0", "npu.1", "npu.2", "dma"]
    assert all(three.engines[c].busy == 200 for c in NPU.cores)


def test_earliest_free_core_takes_the_next_op():
    """Op 0 (300 cycles) holds core 0; ops 1, 2 (100) take cores 1, 2. At 100 both are free: op 3 (50)
    takes core 1, op 4 (50) core 2, both 100-150; op 5 (10) then waits for the next free core, core 1
    at 150 (cores 1 and 2 free together: the lower), 150-160. Core 0 runs alone until 300."""
    ops = [npu(0, 300), npu(1, 100), npu(2, 100), npu(3, 50), npu(4, 50), npu(5, 10)]
    r = simulate(machine(), ops)
    assert [(o.engine, o.start, o.end) for o in r.ops] == [
        ("npu.0", 0, 300), ("npu.1", 0, 100), ("npu.2", 0, 100), ("npu.1", 100, 150), ("npu.2", 100, 150),
        ("npu.1", 150, 160)]
    assert r.cycles == 300
    e = r.engines
    assert (e["npu.1"].busy, e["npu.1"].idle) == (160, 140)
    assert (e["npu.2"].busy, e["npu.2"].idle) == (150, 150)


def test_pinned_ops_stay_on_their_core():
    """Op 0 is pinned to core 0 (100 cycles) and op 2 too (10, queued behind it: 100-110). The pool ops
    1 and 3 find core 0 busy and take cores 1 (100 cycles) and 2 (10)."""
    ops = [npu(0, 100, "npu.0"), npu(1, 100), npu(2, 10, "npu.0"), npu(3, 10)]
    r = simulate(machine(), ops)
    assert [(o.engine, o.start, o.end) for o in r.ops] == [
        ("npu.0", 0, 100), ("npu.1", 0, 100), ("npu.0", 100, 110), ("npu.2", 0, 10)]
    assert [r.engines[c].busy for c in NPU.cores] == [110, 100, 10]


def test_synchronous_ops_use_one_core_at_a_time():
    """Each sync op blocks the issuer until it completes, so the next finds every core free and takes
    core 0: no overlap, 3 x 40 cycles on npu.0."""
    ops = [Op(i, "npu", cycles=40) for i in range(3)]
    r = simulate(machine(), ops)
    assert [(o.engine, o.start, o.end) for o in r.ops] == [("npu.0", 0, 40), ("npu.0", 40, 80),
                                                           ("npu.0", 80, 120)]
    assert r.engines["npu.1"].idle == 120


def test_a_dispatched_op_waits_for_its_hazard_on_its_core():
    """A 50-cycle DMA writes [0, 4); pool op 1 reads it, goes to core 0 at t=0 and waits there (dep_dma)
    until 50, then runs 50-150; op 2 (independent) takes core 1 at t=0."""
    ops = [Op(0, "dma", cycles=50, is_async=True, writes=((0, 4),)), npu(1, 100, reads=((0, 4),)),
           npu(2, 100)]
    r = simulate(machine(), ops)
    assert [(o.engine, o.start, o.end) for o in r.ops] == [("dma", 0, 50), ("npu.0", 50, 150),
                                                           ("npu.1", 0, 100)]
    assert r.engines["npu.0"].stalls == {"dep_dma": 50}
    assert r.ops[1].stalls == {"dep_dma": 50}


def test_cores_share_memory_bandwidth():
    """Three ops of 50 compute cycles moving 1000 B each over a 10 B/cycle DDR: alone each takes 100
    (memory-bound); on three cores they share the DDR (10/3 B/cycle each) and all end at 300 — the
    same as one core doing them in turn. More cores do not buy bandwidth."""
    ops = [npu(i, 50, xfer_bytes=1000, path=("ddr",)) for i in range(3)]
    r = simulate(machine(), ops)
    assert [o.end for o in r.ops] == [pytest.approx(300)] * 3
    assert simulate(Machine(engines=("npu", "dma"), resources=(Resource("ddr", 10.0),)), ops).cycles == \
        pytest.approx(300)
    assert r.resource_bytes["ddr"] == pytest.approx(3000)


def test_per_core_accounting_and_trace():
    ops = [npu(0, 30), npu(1, 70, "npu.2"), npu(2, 20), Op(3, "dma", cycles=5)]
    r = simulate(machine(), ops)
    for st in r.engines.values():
        assert st.busy + st.idle + sum(st.stalls.values()) == pytest.approx(r.cycles)
    tracks = {e["args"]["name"] for e in to_trace(r)["traceEvents"] if e.get("name") == "thread_name"}
    assert {"npu.0", "npu.1", "npu.2", "dma"} <= tracks


def test_pool_declarations_are_checked():
    with pytest.raises(TimingError, match="declared twice"):
        simulate(Machine(engines=(NPU, "npu.1")), [npu(0, 1)])
    with pytest.raises(TimingError, match="core count"):
        simulate(Machine(engines=(EnginePool("npu", 0),)), [npu(0, 1)])
    with pytest.raises(TimingError, match=r"unknown engine 'npu\.3'"):
        simulate(machine(), [npu(0, 1, "npu.3")])


def test_an_unused_pool_leaves_the_pinned_schedule_bit_identical():
    """The pinned program of test_timing with an extra, unused pool: every op's timing, every resource
    and stream sample and the three original engines' figures are those pinned there (its digest covers
    exactly those once the extra cores are left out); the two spare cores idle throughout."""
    from .test_timing import PIN_MACHINE, pinned_program, result_digest

    m = dataclasses.replace(PIN_MACHINE, engines=(*PIN_MACHINE.engines, EnginePool("spare", 2)))
    r = simulate(m, pinned_program())
    assert r.engines["spare.0"].idle == r.engines["spare.1"].idle == r.cycles
    r.engines = {k: v for k, v in r.engines.items() if not k.startswith("spare")}
    assert result_digest(r) == "1a309d6d700c959d"


def test_random_pool_programs_keep_the_model_invariants():
    """Random mixes of pool, pinned and DMA ops with range hazards (hypothesis): every op runs on one
    core of its pool (or its pinned core), a core runs one op at a time, hazards are honoured and every
    cycle of every core is attributed once."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    rng = st.tuples(st.integers(0, 6), st.integers(1, 3)).map(lambda t: (t[0], t[0] + t[1]))
    op = st.tuples(st.sampled_from(["npu", "npu", "npu.1", "dma"]), st.integers(1, 60), st.booleans(),
                   st.lists(rng, max_size=1), st.lists(rng, max_size=1))

    @settings(max_examples=60, deadline=None)
    @given(st.lists(op, min_size=1, max_size=10))
    def check(spec):
        ops = [Op(i, e, cycles=c, is_async=a, reads=tuple(r), writes=tuple(w))
               for i, (e, c, a, r, w) in enumerate(spec)]
        r = simulate(machine(), ops)
        for o, t in zip(ops, r.ops, strict=True):
            assert t.engine == o.engine or (o.engine == "npu" and t.engine in NPU.cores)
            assert t.end - t.start >= o.cycles - 1e-9
        for core in (*NPU.cores, "dma"):
            mine = sorted((t.start, t.end) for t in r.ops if t.engine == core)
            assert all(a[1] <= b[0] + 1e-9 for a, b in itertools.pairwise(mine))
            st_ = r.engines[core]
            assert st_.busy + st_.idle + sum(st_.stalls.values()) == pytest.approx(r.cycles, abs=1e-6)
        for j, p in enumerate(ops):
            for i in range(j + 1, len(ops)):
                q = ops[i]
                if any(x0 < y1 and y0 < x1 for x0, x1 in p.writes for y0, y1 in (*q.reads, *q.writes)) or \
                        any(x0 < y1 and y0 < x1 for x0, x1 in p.reads for y0, y1 in q.writes):
                    assert r.ops[i].start >= r.ops[j].end - 1e-9

    check()


def test_pool_cores_with_token_handshakes():
    """Two NPU cores consume what one DMA produces through a 2-deep token queue: D0 (10 cycles) and
    D1 (10) push 'ready'; conv 2 and conv 3 (pool ops, 50 cycles) pop it. conv 2 is dispatched to
    npu.0 at t=0 and waits there for D0's token (10), conv 3 to npu.1 and waits for D1's (20):
    npu.0 runs 10-60, npu.1 20-70."""
    from npukit.sim.timing import TokenOp, TokenQueue

    m = Machine(engines=(EnginePool("npu", 2), "dma"), queues=(TokenQueue("ready", 2),))
    ops = [TokenOp(0, "dma", cycles=10, is_async=True, push="ready"),
           TokenOp(1, "dma", cycles=10, is_async=True, push=("ready",)),
           TokenOp(2, "npu", cycles=50, is_async=True, pop=("ready",)),
           TokenOp(3, "npu", cycles=50, is_async=True, pop=("ready",))]
    r = simulate(m, ops)
    assert [(o.engine, o.start, o.end) for o in r.ops] == [
        ("dma", 0, 10), ("dma", 10, 20), ("npu.0", 10, 60), ("npu.1", 20, 70)]
    assert r.engines["npu.1"].stalls == {"pop_ready": 20}
