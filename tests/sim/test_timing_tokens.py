"""Dependency-token queues (VTA's load/compute/store handshake) against schedules worked out by hand.

Every op here is asynchronous, as VTA's fetch module dispatches without waiting; each engine runs its
own queue in program order. Cycle counts are plain sums of the op lengths given, derived in each
test's docstring.
"""

import dataclasses

import pytest

from npukit.sim.timing import (
    Machine,
    Op,
    TimingError,
    TokenDeadlock,
    TokenOp,
    TokenQueue,
    simulate,
)

ENGINES = ("load", "compute", "store")


def vta(*queues, **kw):
    return Machine(engines=ENGINES, queues=queues, **kw)


def load(i, cycles=10, **kw):
    return TokenOp(i, "load", f"LOAD {i}", cycles=cycles, is_async=True, **kw)


def gemm(i, cycles=30, **kw):
    return TokenOp(i, "compute", f"GEMM {i}", cycles=cycles, is_async=True, **kw)


def close(x):
    return pytest.approx(x, rel=1e-9, abs=1e-9)


def spans(r):
    """(start, end) of every op, rounded to 1e-6 cycles (the rates 1/10, 1/30 are not exact in binary)."""
    return [(round(o.start, 6), round(o.end, 6)) for o in r.ops]


def test_producer_consumer_across_a_depth_one_queue():
    """Loads L0..L2 (10 cycles, push l2g) feed GEMMs G0..G2 (30 cycles, pop l2g) through a 1-deep queue.

    L0 0-10 pushes; G0 pops at 10, runs 10-40. L1 10-20 pushes (queue 0 -> 1). L2's work ends at 30,
    but the queue is full until G1 pops L1's token at 40: L2 ends at 40 (10 cycles push_l2g stall),
    and L3 (no token) runs 40-50 behind it. G1 40-70, G2 pops L2's token at 70 and runs 70-100.
    """
    ops = [load(0, push=("l2g",)), load(1, push=("l2g",)), load(2, push=("l2g",)), load(3),
           gemm(4, pop=("l2g",)), gemm(5, pop=("l2g",)), gemm(6, pop=("l2g",))]
    r = simulate(vta(TokenQueue("l2g", 1)), ops)
    assert spans(r) == [(0, 10), (10, 20), (20, 40), (40, 50), (10, 40), (40, 70), (70, 100)]
    assert r.cycles == close(100)
    ld, cp = r.engines["load"], r.engines["compute"]
    assert (ld.busy, ld.idle) == close((40, 50)) and ld.stalls == close({"push_l2g": 10})
    assert r.ops[2].busy == close(10) and r.ops[2].stalls == close({"push_l2g": 10})
    assert (cp.busy, cp.idle) == close((90, 0)) and cp.stalls == close({"pop_l2g": 10})
    assert r.ops[4].stalls == close({"pop_l2g": 10})
    assert r.engines["store"].idle == close(100)


def test_a_deeper_queue_removes_the_push_stall():
    """The same program with l2g 2 deep: L2 pushes its token at 30 (two held), so L3 runs 30-40."""
    ops = [load(0, push=("l2g",)), load(1, push=("l2g",)), load(2, push=("l2g",)), load(3),
           gemm(4, pop=("l2g",)), gemm(5, pop=("l2g",)), gemm(6, pop=("l2g",))]
    r = simulate(vta(TokenQueue("l2g", 2)), ops)
    assert spans(r)[:4] == [(0, 10), (10, 20), (20, 30), (30, 40)]
    assert r.engines["load"].stalls == {}
    assert r.cycles == close(100)


@pytest.mark.parametrize(("buffers", "want"), [(2, 130), (1, 160)])
def test_initial_tokens_are_free_buffers(buffers, want):
    """VTA double buffering: each load pops a free input buffer (g2l), pushes l2g; each GEMM pops l2g
    and pushes the buffer back (g2l) when done. Four of each, loads 10 cycles, GEMMs 30.

    Two buffers (g2l starts with 2): L0 0-10, L1 10-20; G0 10-40 returns a buffer at 40, so L2 40-50;
    G1 40-70 returns one at 70, L3 70-80; G2 70-100 (L2's data arrived at 50), G3 100-130: 130.
    One buffer: fully serial, L0 0-10, G0 10-40, L1 40-50, G1 50-80, L2 80-90, G2 90-120, L3 120-130,
    G3 130-160: 160.
    """
    loads = [load(i, pop=("g2l",), push=("l2g",)) for i in range(4)]
    gemms = [gemm(4 + i, pop=("l2g",), push=("g2l",)) for i in range(4)]
    m = vta(TokenQueue("l2g", 2), TokenQueue("g2l", 2, initial=buffers))
    r = simulate(m, loads + gemms)
    assert r.cycles == close(want)
    if buffers == 2:
        assert spans(r) == [(0, 10), (10, 20), (40, 50), (70, 80), (10, 40), (40, 70), (70, 100), (100, 130)]
        assert r.engines["load"].stalls == close({"pop_g2l": 40})  # 20-40 and 50-70
    for e in r.engines.values():
        assert e.busy + e.idle + sum(e.stalls.values()) == pytest.approx(r.cycles)


def test_waiting_for_a_token_does_not_block_dispatch_with_command_queues():
    """G0, G1 pop l2g that L2, L3 (issued after them) push. A global issue window of 2 fills with the
    two waiting GEMMs and the loads are never issued: deadlock. Per-engine command queues let the
    loads through: L2 0-10, L3 10-20, G0 10-40, G1 40-70. One slot is enough, as in VTA: compute
    holds G0 (a module takes an instruction off its queue, then waits for its tokens), G1 fills the
    slot, and the loads go to load's own queue."""
    ops = [gemm(0, pop=("l2g",)), gemm(1, pop=("l2g",)), load(2, push=("l2g",)), load(3, push=("l2g",))]
    with pytest.raises(TokenDeadlock) as exc:
        simulate(vta(TokenQueue("l2g", 2), issue_window=2), ops)
    assert exc.value.queues == ("l2g",)
    assert [(w.index, w.action, w.queue) for w in exc.value.waits] == [(0, "pop", "l2g")]
    for depth in (1, 2):
        r = simulate(vta(TokenQueue("l2g", 2), command_depth=depth), ops)
        assert spans(r) == [(10, 40), (40, 70), (0, 10), (10, 20)]
        assert [o.issue for o in r.ops] == [0, 0, 0, 0]


def test_a_full_command_queue_stops_the_in_order_issuer():
    """Three GEMMs waiting on l2g ahead of the load that feeds them, compute's queue 1 deep: compute
    holds G0, G1 fills the slot, G2 finds it full and the in-order issuer stops before the load."""
    ops = [gemm(0, pop=("l2g",)), gemm(1, pop=("l2g",)), gemm(2, pop=("l2g",)), load(3, push=("l2g",))]
    with pytest.raises(TokenDeadlock, match="op 0 \\(GEMM 0\\) on compute waits to pop 'l2g' \\(empty\\)"):
        simulate(vta(TokenQueue("l2g", 2), command_depth=1), ops)
    # two slots: G2 queues too, L3 issues at 0 and feeds G0 at 10; L3 pushes once, so G1 then waits
    with pytest.raises(TokenDeadlock, match="at cycle 40: op 1"):
        simulate(vta(TokenQueue("l2g", 2), command_depth=2), ops)


def test_command_depth_holds_the_issuer():
    """Three 10-cycle loads then a 5-cycle store, command queues 1 deep. t=0: L0 issues as load's head,
    L1 issues into load's queue, L2 finds it full and the in-order issuer stops. t=10: load takes L1,
    L2 takes the slot, and the store (its engine idle) issues and runs 10-15 instead of 0-5."""
    ops = [load(0), load(1), load(2), TokenOp(3, "store", "STORE", cycles=5, is_async=True)]
    r = simulate(vta(command_depth=1), ops)
    assert [o.issue for o in r.ops] == close([0, 0, 10, 10])
    assert spans(r) == [(0, 10), (10, 20), (20, 30), (10, 15)]
    assert r.engines["store"].stalls == close({"issue": 10})


def test_deadlocks_name_queues_and_ops():
    """Compute waits on l2g and load on g2l, both empty (no initial tokens): nothing can ever run."""
    ops = [load(0, pop=("g2l",), push=("l2g",)), gemm(1, pop=("l2g",), push=("g2l",))]
    with pytest.raises(TokenDeadlock) as exc:
        simulate(vta(TokenQueue("l2g", 1), TokenQueue("g2l", 1)), ops)
    e = exc.value
    assert e.cycle == 0 and e.queues == ("g2l", "l2g")
    assert [(w.index, w.engine, w.action, w.queue, w.tokens) for w in e.waits] == [
        (0, "load", "pop", "g2l", 0), (1, "compute", "pop", "l2g", 0)]
    assert isinstance(e, TimingError) and "\n" not in str(e)
    # a push that never finds room: two stores push s2g (1 deep), nobody pops; the second is stuck at 10
    st = [TokenOp(i, "store", f"STORE {i}", cycles=5, is_async=True, push=("s2g",)) for i in range(2)]
    with pytest.raises(TokenDeadlock, match=r"at cycle 10: op 1 \(STORE 1\) on store waits to push 's2g' "
                                            r"\(full, 1/1\)"):
        simulate(vta(TokenQueue("s2g", 1)), st)


def test_token_declarations_are_checked():
    with pytest.raises(TimingError, match="unknown token queue 'nope'"):
        simulate(vta(TokenQueue("l2g", 1)), [load(0, push=("nope",))])
    with pytest.raises(TimingError, match="no token queues"):
        simulate(vta(), [load(0, push=("l2g",))])
    with pytest.raises(TimingError, match="capacity"):
        simulate(vta(TokenQueue("l2g", 0)), [load(0)])
    with pytest.raises(TimingError, match="capacity"):
        simulate(vta(TokenQueue("l2g", 1, initial=2)), [load(0)])
    with pytest.raises(TimingError, match="command_depth"):
        simulate(vta(command_depth=0), [load(0)])
    assert simulate(vta(), [Op(0, "load", cycles=3)]).cycles == 3  # plain ops need no queues


def test_unused_tokens_leave_the_pinned_schedule_bit_identical():
    """The pinned program of test_timing (digest pinned from the pre-optimisation event loop) on the same
    machine plus a token queue nobody uses and its ops as TokenOps without tokens: the token path is
    taken (the machine has queues) and must not move a bit."""
    from .test_timing import PIN_MACHINE, pinned_program, result_digest

    m = dataclasses.replace(PIN_MACHINE, queues=(TokenQueue("idle", 4, initial=1),))
    ops = [TokenOp(**{f.name: getattr(o, f.name) for f in dataclasses.fields(Op)}) for o in pinned_program()]
    assert result_digest(simulate(m, ops)) == "1a309d6d700c959d"


@pytest.mark.parametrize(("out_buffers", "want"), [(1, 145), (2, 115)])
def test_docs_worked_example_load_gemm_store(out_buffers, want):
    """docs/timing.md's worked example: three (LOAD 10, GEMM 30, STORE 15) triples; two input buffers
    (g2l), output buffers s2g as given. One output buffer: L0 0-10, G0 10-40, S0 40-55, and each later
    GEMM waits for the previous STORE to return the buffer: G1 55-85, S1 85-100, G2 100-130,
    S2 130-145. Two: G1 40-70 and G2 70-100 back to back (L2 runs 40-50 once G0 frees an input
    buffer), S0 40-55, S1 70-85, S2 100-115."""
    m = Machine(engines=ENGINES, command_depth=8,
                queues=(TokenQueue("l2g", 2), TokenQueue("g2l", 2, initial=2),
                        TokenQueue("g2s", 2), TokenQueue("s2g", 2, initial=out_buffers)))
    ops = []
    for i in range(3):
        ops += [load(3 * i, pop=("g2l",), push=("l2g",)),
                gemm(3 * i + 1, pop=("l2g", "s2g"), push=("g2l", "g2s")),
                TokenOp(3 * i + 2, "store", f"STORE {i}", cycles=15, is_async=True, pop=("g2s",),
                        push=("s2g",))]
    r = simulate(m, ops)
    assert r.cycles == close(want)
    gemms = spans(r)[1::3]
    assert gemms == ([(10, 40), (55, 85), (100, 130)] if out_buffers == 1 else
                     [(10, 40), (40, 70), (70, 100)])
    assert spans(r)[6] == (40, 50)  # LOAD 2 waits for GEMM 0 to free an input buffer


def test_random_double_buffered_pipelines_match_the_max_plus_recurrence():
    """Random LOAD → GEMM → STORE tile pipelines (hypothesis) with B_in input and B_out output buffers.
    With every engine in order and each token a buffer, the schedule is the classic max-plus
    recurrence (an independent oracle, no event loop):
    L_i starts at max(L_{i-1} end, G_{i-B_in} end); G_i at max(G_{i-1}, L_i, S_{i-B_out} ends);
    S_i at max(S_{i-1}, G_i ends); each runs its own cycle count. (Issue is unbounded here: with
    bounded command queues and all loads listed first, the in-order issuer can deadlock, as VTA's
    fetch would.)"""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    tile = st.tuples(st.integers(1, 40), st.integers(1, 40), st.integers(1, 40))

    @settings(max_examples=80, deadline=None)
    @given(st.lists(tile, min_size=1, max_size=8), st.integers(1, 3), st.integers(1, 3), st.booleans())
    def check(tiles, b_in, b_out, interleave):
        m = vta(TokenQueue("l2g", b_in), TokenQueue("g2l", b_in, initial=b_in),
                TokenQueue("g2s", b_out), TokenQueue("s2g", b_out, initial=b_out))  # (issue never binds)
        kinds = []  # program order: tile by tile, or all loads, then GEMMs, then stores
        order = [(i, k) for i in range(len(tiles)) for k in range(3)] if interleave else \
            [(i, k) for k in range(3) for i in range(len(tiles))]
        ops = []
        for pos, (i, k) in enumerate(order):
            c = tiles[i][k]
            if k == 0:
                ops.append(load(pos, c, pop=("g2l",), push=("l2g",)))
            elif k == 1:
                ops.append(gemm(pos, c, pop=("l2g", "s2g"), push=("g2l", "g2s")))
            else:
                ops.append(TokenOp(pos, "store", "STORE", cycles=c, is_async=True, pop=("g2s",),
                                   push=("s2g",)))
            kinds.append((i, k))
        r = simulate(m, ops)
        got = {ik: (o.start, o.end) for ik, o in zip(kinds, r.ops, strict=True)}
        le, ge, se = [], [], []
        for i, (lc, gc, sc) in enumerate(tiles):
            ls = max(le[-1] if le else 0, ge[i - b_in] if i >= b_in else 0)
            le.append(ls + lc)
            gs = max(ge[-1] if ge else 0, le[i], se[i - b_out] if i >= b_out else 0)
            ge.append(gs + gc)
            ss = max(se[-1] if se else 0, ge[i])
            se.append(ss + sc)
            for k, (s0, e0) in enumerate(((ls, le[i]), (gs, ge[i]), (ss, se[i]))):
                assert got[(i, k)] == (pytest.approx(s0, abs=1e-6), pytest.approx(e0, abs=1e-6))
        assert r.cycles == pytest.approx(se[-1], abs=1e-6)

    check()
