"""The readable loop (`timing_state.Sim`) and the compiled one (`timing_fast`) against the plain
reference (`timing_ref.simulate_reference`): identical results, floats by repr — cycles, every op's
issue/start/end/busy/stalls (key order too), engine busy/idle/stalls, resource bytes, usage samples —
on seeded random machines and programs inside the reference's scope, and on VTA-free pinned shapes."""

from __future__ import annotations

import json
import random

import pytest

from npukit.sim import timing_fast
from npukit.sim.timing import Machine, Op, Resource, TimingError, TimingResult
from npukit.sim.timing_ref import simulate_reference
from npukit.sim.timing_state import Sim


def dump(r: TimingResult) -> str:
    return json.dumps({**r.to_json(), "usage": [(t, list(u.items())) for t, u in r.usage],
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


def test_outside_its_scope_it_says_so():
    with pytest.raises(TimingError, match="reference model does not state"):
        simulate_reference(Machine(engines=("a",), command_depth=2), [Op(0, "a", cycles=1)])
