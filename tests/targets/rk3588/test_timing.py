"""Schedules on the shared timing core: 3 cores beat 1, pipelined/data-parallel beat round-robin."""

from __future__ import annotations

import json

import pytest

from npukit.sim.trace import to_trace
from npukit.targets.rk3588.compile import CompileOptions, compile_graph
from npukit.targets.rk3588.graph import build_graph
from npukit.targets.rk3588.perf import ANCHORS, compare
from npukit.targets.rk3588.timing import simulate_plan


@pytest.fixture(scope="module")
def plan(minilm, hw):
    return compile_graph(build_graph(minilm, 32), hw, CompileOptions(sandwich=False))


def test_three_cores_beat_one_and_beat_round_robin(plan):
    rep = {s: simulate_plan(plan, s, 3) for s in ("single", "round-robin", "pipeline", "data-parallel")}
    assert rep["data-parallel"].latency_ms < rep["single"].latency_ms
    assert rep["pipeline"].latency_ms < rep["single"].latency_ms
    best = min(rep["pipeline"].latency_ms, rep["data-parallel"].latency_ms)
    assert best < rep["round-robin"].latency_ms
    # work is conserved: every schedule does the same compute
    busy = {s: sum(v["compute_busy"] for v in r.core_busy().values()) for s, r in rep.items()}
    assert max(busy.values()) == pytest.approx(min(busy.values()), rel=1e-6)
    # per-shard accounting covers every shard of every input
    assert len(rep["pipeline"].shards) == 3 * len(plan.shards)
    assert all(s.end > s.start and s.dma_cycles > 0 for s in rep["pipeline"].shards)


def test_dma_bound_decode_shape_matches_bandwidth_arithmetic(plan, hw):
    """One input on one core: at least the weight bytes over the 1 GB/s DMA (a lower bound)."""
    rep = simulate_plan(plan, "single", 1)
    weight_bytes = sum(n.params["w"].nbytes for n in plan.graph.nodes if n.op == "matmul")
    floor_ms = weight_bytes / (hw.dma.dram_gbps.value * 1e9) * 1e3
    assert rep.latency_ms > floor_ms
    assert rep.latency_ms < 3 * floor_ms  # and DMA-dominated, not far above it


def test_perfetto_trace_has_three_core_tracks(plan):
    rep = simulate_plan(plan, "data-parallel", 3)
    trace = json.loads(json.dumps(to_trace(rep.result, process="rk3588")))
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"npu0", "npu1", "npu2", "dma0.in", "dma1.in", "dma2.in"} <= names
    assert sum(1 for e in trace["traceEvents"] if e.get("ph") == "X") == rep.ops


def test_anchor_rows_show_the_projection_error(plan):
    reps = {(s, 1): simulate_plan(plan, s, 1) for s in ("single", "round-robin")}
    rows = compare(reps, cpu_here_ms=123.0)
    assert len(rows) == len(ANCHORS)
    rr = next(r for r in rows if r["figure"].startswith("SHARD 3-core"))
    assert rr["error"] == pytest.approx(reps[("round-robin", 1)].latency_ms / 1800.0 - 1)
    assert all(r["published_tier"] == "measured" for r in rows)


def test_int8_weights_halve_the_dma_bound_time(plan, minilm, hw):
    from npukit.targets.rk3588.runner import calibration_inputs

    int8 = compile_graph(build_graph(minilm, 32), hw, CompileOptions(sandwich=False, dtype="int8"),
                         calibration_inputs(minilm))
    fp16_ms = simulate_plan(plan, "single", 1).latency_ms
    int8_ms = simulate_plan(int8, "single", 1).latency_ms
    assert 0.4 * fp16_ms < int8_ms < 0.8 * fp16_ms  # weight bytes halve; activations stay fp16


def test_pinned_schedules_are_the_reference_model(plan):
    """Every schedule's op list for one input on the three cores: `simulate` (the compiled loop) and
    the readable loop return what the plain reference model (`npukit.sim.timing_ref`) does, every
    figure by repr."""
    import math

    from npukit.sim.timing import simulate
    from npukit.sim.timing_ref import simulate_reference
    from npukit.sim.timing_state import Sim
    from npukit.targets.rk3588.timing import assign, build, machine

    for schedule in ("single", "round-robin", "pipeline", "data-parallel"):
        ops = build(plan, assign(plan, schedule, 1), max(1, math.ceil(3 * plan.tasks / 20000)))
        got, want = simulate(machine(plan, 96), ops), simulate_reference(machine(plan, 96), ops)
        assert json.dumps(got.to_json()) == json.dumps(want.to_json()), schedule
        assert [list(o.stalls) for o in got.ops] == [list(o.stalls) for o in want.ops], schedule
        assert json.dumps(Sim(machine(plan, 96), ops).run().to_json()) == json.dumps(want.to_json()), schedule
