"""The readable loop (`timing_state.Sim`) and the compiled one (`timing_fast`) against the plain
reference (`timing_ref.simulate_reference`): identical results, floats by repr — cycles, every op's
issue/start/end/busy/stalls (key order too), engine busy/idle/stalls, resource bytes, usage samples,
prefetches and buffer levels — or the same error, on seeded random machines and programs: plain ones,
and ones with prefetch streams, FIFO couplings, token queues, command queues and engine pools."""

from __future__ import annotations

import json
import random

from npukit.sim import timing_fast
from npukit.sim.timing import (
    EnginePool,
    Machine,
    Op,
    Resource,
    Stream,
    TimingError,
    TimingResult,
    TokenOp,
    TokenQueue,
)
from npukit.sim.timing_ref import simulate_reference
from npukit.sim.timing_state import Sim


def dump(r: TimingResult) -> str:
    return json.dumps({**r.to_json(), "usage": [(t, list(u.items())) for t, u in r.usage],
                       "levels": [(t, list(v.items())) for t, v in r.levels],
                       "stall_order": [list(o.stalls) for o in r.ops],
                       "engine_order": [list(e.stalls) for e in r.engines.values()]})


def random_case(rng: random.Random) -> tuple[Machine, list[Op]]:
    engines = tuple(f"e{i}" for i in range(rng.randint(1, 4)))
    resources = tuple(Resource(f"r{i}", rng.choice([1.0, 3.0, 7.5, 16.0])) for i in range(rng.randint(1, 3)))
    machine = Machine(engines=engines, resources=resources,
                      issue_cycles=rng.choice([0.0, 0.0, 1.0, 2.5]),
                      issue_window=rng.choice([None, None, 1, 2, 4]))
    ops = []
    for i in range(rng.randint(1, 24)):
        moves = rng.random() < 0.6
        path = tuple(rng.sample([r.name for r in resources], rng.randint(1, len(resources)))) if moves else ()
        ranges = [(a, a + rng.randint(0, 6)) for a in (rng.randint(0, 20) for _ in range(rng.randint(0, 2)))]
        cut = rng.randint(0, len(ranges))
        ops.append(Op(i, rng.choice(engines), f"op{i}", cycles=rng.choice([0.0, 1.0, 4.0, 10.0, 33.0]),
                      latency=rng.choice([0.0, 0.0, 2.0, 5.0]), tail=rng.choice([0.0, 0.0, 1.0, 3.0]),
                      path=path, xfer_bytes=rng.choice([64.0, 100.0, 512.0]) if moves else 0.0,
                      is_async=rng.random() < 0.7, reads=tuple(ranges[:cut]), writes=tuple(ranges[cut:])))
    return machine, ops


def test_readable_and_compiled_loops_are_the_reference():
    """300 seeded cases (about 2 s): both loops agree with the reference on every figure."""
    rng = random.Random(25)
    compared_compiled = 0
    for case in range(300):
        machine, ops = random_case(rng)
        want = dump(simulate_reference(machine, ops))
        assert dump(Sim(machine, ops).run()) == want, f"readable loop, case {case}"
        fast = timing_fast.try_simulate(machine, ops) if timing_fast.enabled() else None
        if fast is not None:
            compared_compiled += 1
            assert dump(fast) == want, f"compiled loop, case {case}"
    assert compared_compiled == 300 or not timing_fast.enabled()


def test_bandwidth_bound_transfers_share_a_resource():
    """Two 100-byte transfers at 1 byte/cycle each alone would take 100 cycles at full engine speed
    (cycles=10): sharing 2 bytes/cycle they each get 1, end at 100 and are stalled on bandwidth 90."""
    m = Machine(engines=("a", "b"), resources=(Resource("ddr", 2.0),))
    ops = [Op(0, "a", cycles=10, path=("ddr",), xfer_bytes=100, is_async=True),
           Op(1, "b", cycles=10, path=("ddr",), xfer_bytes=100, is_async=True)]
    r = simulate_reference(m, ops)
    assert r.cycles == 100.0
    assert [o.end for o in r.ops] == [100.0, 100.0]
    assert r.ops[0].stalls == {"bandwidth": 50.0}  # nominal rate alone: 2 bytes/cycle -> 50 cycles
    assert r.resource_bytes == {"ddr": 200.0}


def test_hazard_holds_the_reader():
    """RAW: op 1 reads what op 0 (another engine) writes; it starts when op 0 ends."""
    m = Machine(engines=("a", "b"))
    ops = [Op(0, "a", cycles=7, is_async=True, writes=((0, 4),)),
           Op(1, "b", cycles=3, is_async=True, reads=((2, 3),))]
    r = simulate_reference(m, ops)
    assert (r.ops[1].start, r.ops[1].end, r.cycles) == (7.0, 10.0, 10.0)
    assert r.engines["b"].stalls == {"dep_a": 7.0}


def outcome(run) -> str:
    """The schedule's dump, or the error it raised (type and words)."""
    try:
        return dump(run())
    except TimingError as exc:
        return f"{type(exc).__name__}: {exc}"


def full_case(rng: random.Random) -> tuple[Machine, list[Op]]:
    """A random machine and program using every feature: streams, FIFOs, tokens, command queues, pools."""
    machine, plain = random_case(rng)
    compiled_scope = rng.random() < 0.4  # streams and FIFOs only: what the compiled loop covers
    pools = tuple(EnginePool(f"p{i}", rng.randint(1, 3))
                  for i in range(0 if compiled_scope else rng.randint(0, 2)))
    engines = (*machine.engines, *pools)
    names = [*machine.engines, *(p.name for p in pools), *(c for p in pools for c in p.cores)]
    rnames = [r.name for r in machine.resources]
    streams = tuple(Stream(f"s{i}", tuple(rng.sample(rnames, rng.randint(1, len(rnames)))),
                           rng.choice([64.0, 200.0, 1000.0]), rng.choice([float("inf"), 2.0, 8.0]))
                    for i in range(rng.randint(0, 2)))
    caps = rng.choices([1, 2, 3], k=0 if compiled_scope else rng.randint(0, 2))
    queues = tuple(TokenQueue(f"q{i}", cap, rng.randint(0, cap)) for i, cap in enumerate(caps))
    machine = Machine(engines=engines, resources=machine.resources, streams=streams,
                      issue_cycles=machine.issue_cycles, issue_window=machine.issue_window, queues=queues,
                      command_depth=None if compiled_scope else rng.choice([None, None, 1, 2, 3]))
    ops: list[Op] = []
    owed = {q.name: 0 for q in queues}  # pushes not yet matched by a pop
    for i, op in enumerate(plain):
        kw = {f: getattr(op, f) for f in ("index", "label", "cycles", "latency", "tail", "path", "xfer_bytes",
                                           "is_async", "reads", "writes")}
        kw["engine"] = rng.choice(names)
        if streams and op.cycles > 0 and rng.random() < 0.5:
            kw["stream"], kw["stream_bytes"] = rng.choice(streams).name, rng.choice([0.0, 50.0, 128.0, 700.0])
        if i and op.cycles > 0 and rng.random() < 0.3:
            kw["fifo_from"] = rng.randrange(i)
            kw["fifo_depth"], kw["fifo_elems"] = rng.choice([4.0, 16.0]), rng.choice([0.0, 8.0, 64.0])
        if queues and rng.random() < 0.6:  # (mostly a pop for each earlier push: not every program deadlocks)
            kw["pop"] = tuple(q.name for q in queues if owed[q.name] > 0 and rng.random() < 0.7)
            kw["push"] = tuple(q.name for q in queues if rng.random() < 0.4)
            for q in kw["pop"]:
                owed[q] -= 1
            for q in kw["push"]:
                owed[q] += 1
            ops.append(TokenOp(**kw))
        else:
            ops.append(Op(**kw))
    return machine, ops


def test_loops_are_the_reference_on_the_whole_model():
    """600 seeded cases with streams, FIFOs, tokens, command queues and pools (about 2 s): the readable
    loop, and the compiled one where it applies, agree with the reference on every figure or error."""
    rng = random.Random(2025)
    kinds = {"ok": 0, "error": 0, "compiled": 0}
    for case in range(600):
        machine, ops = full_case(rng)
        want = outcome(lambda m=machine, o=ops: simulate_reference(m, o))
        kinds["error" if want.startswith(("TimingError", "TokenDeadlock")) else "ok"] += 1
        assert outcome(lambda m=machine, o=ops: Sim(m, o).run()) == want, f"readable loop, case {case}"
        if timing_fast.enabled() and timing_fast.Plan.of(machine) is not None:
            kinds["compiled"] += 1
            got = outcome(lambda m=machine, o=ops: timing_fast.try_simulate(m, o))
            assert got == want, f"compiled loop, case {case}"
    assert kinds["ok"] > 300 and kinds["error"] > 50
    assert kinds["compiled"] > 150 or not timing_fast.enabled()
