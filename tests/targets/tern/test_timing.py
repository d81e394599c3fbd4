"""The tern timing adapter on the shared timing core against the ledger's composition for the same
shapes and context (a decode step's simulated cycles vs ledger cycles_per_token per phase)."""

import numpy as np
import pytest

from npukit.hw import load_hw
from npukit.models.bitnet import BitNet, load_bitnet
from npukit.sim.work import Work
from npukit.targets.tern.ledger import PHASES, build_ledger
from npukit.targets.tern.ops import TernOps
from npukit.targets.tern.timing import op_for, simulate_work

SHAPES = dict(vocab_size=300, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=64)


@pytest.mark.parametrize("lanes", [8, 128])
def test_decode_step_cycles_match_ledger(lanes):
    hw = load_hw("tern-arty-a7-35t", [f"engine.lanes={lanes}"])
    m = load_bitnet("bitnet-b1.58-2b-4t", overrides=SHAPES, seed=2)
    ops = TernOps(hw, gather=False)
    net = BitNet(m.cfg, m.w, mode="quant", ops=ops)
    cache = net.new_cache()
    net.forward(list(range(1, 10)), cache)  # prefill 9 tokens
    start = len(ops.work)
    net.forward([11], cache)  # decode at position 9: 10 keys
    ops.lm_head(m.cfg.vocab_size, m.cfg.hidden_size)
    step = ops.work[start:]
    led = build_ledger(hw, dict(SHAPES), context=10)
    sub = led["host_glue_cycles_per_layer.sub_norm"].value  # host work ternfpga's composition omits
    for ph in PHASES:
        got = simulate_work(step, hw, ph).cycles
        want = led[f"cycles_per_token.{ph}"].value + (0 if ph == "engine-bound" else 2 * sub)
        assert abs(got - want) / want < 0.02, f"{ph}: timing core {got:,.0f} vs ledger {want:,.0f}"
    # K=128 outruns DDR3 (1,423 MB/s at 100 MHz = 14.2 B/cycle < 128 lanes × 1.6 bit): bandwidth-bound
    eng = simulate_work(step, hw, "engine-bound")
    tiles = sum(w.macs // w.lanes for w in step if w.engine == "engine")
    assert (eng.cycles > tiles * 1.01) == (lanes == 128)


def test_phase_mapping_and_host_costs():
    hw = load_hw("tern-arty-a7-35t")
    h = hw.host
    att = Work(0, "attention", "a", macs=2 * 64 * 128, sfu_elems=64)
    ffn = Work(1, "ffn_glue", "f", sfu_elems=6912)
    norm = Work(2, "norm", "n", sfu_elems=2560)
    # at the measured shapes the per-op costs add up to the measured per-layer host glue
    assert op_for(att, hw, "host-split", 0).cycles * 20 == pytest.approx(h.attention_cycles)
    assert op_for(ffn, hw, "host-split", 1).cycles == pytest.approx(h.ffn_glue_cycles)
    assert op_for(norm, hw, "fabric-ffn-glue", 2).cycles * 2 == pytest.approx(h.norm_cycles)
    assert op_for(att, hw, "fabric-attention", 0).engine == "attention"
    assert op_for(att, hw, "fabric-attention", 0).cycles == 16456  # the board's counter
    assert op_for(ffn, hw, "fabric-attention", 1).engine == "host"
    assert op_for(ffn, hw, "fabric-ffn-glue", 1).cycles == 13974
    assert op_for(norm, hw, "engine-bound", 2) is None
    res = simulate_work([att, ffn, norm], hw, "fabric-ffn-glue")
    assert res.cycles == pytest.approx(16456 + 13974 + h.norm_cycles / 2)
    assert np.isclose(res.engines["host"].busy, h.norm_cycles / 2)


def test_pinned_decode_step_is_the_reference_model():
    """The decode step above (8 lanes), every phase: `simulate` (the compiled loop) and the readable
    loop return what the plain reference model (`npukit.sim.timing_ref`) does, every figure by repr."""
    import json

    from npukit.sim.timing_ref import simulate_reference
    from npukit.sim.timing_state import Sim
    from npukit.targets.tern.timing import machine

    hw = load_hw("tern-arty-a7-35t", ["engine.lanes=8"])
    m = load_bitnet("bitnet-b1.58-2b-4t", overrides=SHAPES, seed=2)
    ops = TernOps(hw, gather=False)
    net = BitNet(m.cfg, m.w, mode="quant", ops=ops)
    cache = net.new_cache()
    net.forward(list(range(1, 6)), cache)
    start = len(ops.work)
    net.forward([11], cache)
    step = ops.work[start:]
    for ph in PHASES:
        timed = [o for i, w in enumerate(step) if (o := op_for(w, hw, ph, i)) is not None]
        want = simulate_reference(machine(hw), timed)
        got = simulate_work(step, hw, ph)
        assert json.dumps(got.to_json()) == json.dumps(want.to_json()), ph
        assert [list(o.stalls) for o in got.ops] == [list(o.stalls) for o in want.ops], ph
        assert json.dumps(Sim(machine(hw), timed).run().to_json()) == json.dumps(want.to_json()), ph
