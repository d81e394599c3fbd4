"""Roofline and energy against hand arithmetic from spec numbers (refs/pccx_gemma3n.md §7.1,
Horowitz ISSCC 2014, seeds/002)."""

import pytest

import npukit.targets.pccx  # noqa: F401  registers the pccx description
from npukit.errors import ConfigError
from npukit.perf import energy
from npukit.perf.machine import Machine, MemLevel, load_machine
from npukit.perf.ops import build_ops
from npukit.perf.roofline import analyze, evaluate, points_for

E4B = build_ops("gemma3n-e4b")


def test_dense_int4_e4b_on_kv260_is_ddr_bound_at_8_6_tok_s():
    # widen the HP ports so DDR (19.2 GB/s peak) is the only off-chip limit, as in refs §7.1
    _, m = load_machine("pccx-v002-kv260", ["hp_ports.count_log2=3"])
    a = analyze(E4B, m, weights="int4", kv="int4", context=8192)
    assert a.bound == "ddr"
    w = a.totals["weight_bytes_per_token"]
    assert w == pytest.approx(4.486e9 * 0.5, rel=4e-3)  # 2.243 GB + FP32 row scales
    assert 19.2e9 / w == pytest.approx(8.56, rel=5e-3)  # refs §7.1 W4 ceiling
    # KV at 8K in INT4: 146.8 MB / 4 = 36.7 MB plus scales (refs §5.5)
    assert a.totals["kv_bytes_per_token"] == pytest.approx(36.7e6, rel=0.04)
    tps = a.totals["tokens_per_second"]
    ceiling = 19.2e9 / a.totals["bytes_per_token"]
    # per-op max(compute, memory): compute-bound attention ops at 8K cost a few % over the DDR ceiling
    assert ceiling * 0.95 < tps <= ceiling
    assert 8.0 < tps < 8.6


def test_default_kv260_preset_is_bound_by_its_hp_ports():
    _, m = load_machine("pccx-v002-kv260")
    a = analyze(E4B, m, weights="int4", kv="int4", context=8192)
    assert a.bound == "hp_ports"
    # 4 ports × 128 bit × 250 MHz = 16 GB/s
    assert m.level("hp_ports").peak_bps == 4 * 16 * 250e6
    assert a.totals["tokens_per_second"] <= 16e9 / a.totals["bytes_per_token"] + 1e-9
    eff = analyze(E4B, m, weights="int4", kv="int4", context=8192, basis="effective")
    assert eff.bound == "ddr"
    assert eff.totals["tokens_per_second"] == pytest.approx(10e9 / eff.totals["bytes_per_token"], rel=0.02)


def test_model_topk_skipping_saves_95_percent_of_up_down_in_ten_layers():
    _, m = load_machine("pccx-v002-kv260")
    dense = analyze(E4B, m, weights="int4", context=512)
    sparse = analyze(E4B, m, weights="int4", context=512, model_sparsity=True)
    saved = dense.totals["weight_bytes_per_token"] - sparse.totals["weight_bytes_per_token"]
    assert saved == pytest.approx(10 * 2 * 16384 * 2048 * 0.95 * 0.5, rel=1e-9)  # refs §7.1: −0.638 G weights


def _toy(rate=1.0, bw=1e9, static=0.0, pj=10.0) -> Machine:
    return Machine("toy", "roofline", 1e9, 1, {"int8": rate}, 1.0,
                   (MemLevel("dram", 1e12, bw, ("weights", "kv"), pj), MemLevel("sram", 1e6, 1e15, ("act",))),
                   {"int8": 0.3}, 1.0, static, sfu_overlaps_mac=True)


def test_compute_bound_and_energy_arithmetic():
    t = build_ops({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                   "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 32})
    m = _toy(rate=1.0, bw=1e12, static=2.0)  # 1 GMAC/s, effectively free memory
    a = analyze(t, m, weights="int8", kv="int8", context=1)
    assert a.bound == "compute"
    macs = 4 * 64 * 64 + 3 * 64 * 128 + 32 * 64 + 2 * 64  # q,k,v,o; FFN; lm_head; attention (1 key)
    assert a.totals["macs_per_token"] == macs
    assert a.totals["seconds_per_token"] == pytest.approx(macs / 1e9, rel=1e-3)  # SFU < MAC time here
    dram_bits = a.totals["bytes.dram"] * 8
    dyn = (macs * 0.3 + a.totals["sfu_elems_per_token"] * 1.0 + dram_bits * 10.0) * 1e-12
    assert a.totals["dynamic_joules_per_token"] == pytest.approx(dyn, rel=1e-9)
    assert a.totals["static_joules_per_token"] == pytest.approx(2.0 * a.totals["seconds_per_token"])


def test_vectorized_points_match_single_points_and_reject_bad_input():
    _, m = load_machine("pccx-v002-kv260")
    pts = points_for(m, weights=["int4", "int8"], kv=["fp16", "int4"], context=[512, 8192], sparsity=[0, 0.5])
    res = evaluate(E4B, pts)
    for i, (w, k, c, s) in enumerate([("int4", "fp16", 512, 0), ("int8", "int4", 8192, 0.5)]):
        one = analyze(E4B, m, weights=w, kv=k, context=c, sparsity=s)
        assert res["tokens_per_second"][i] == pytest.approx(one.totals["tokens_per_second"])
    # INT8 weights are twice the INT4 bytes (same row scales)
    assert res["weight_bytes_per_token"][1] > 1.4 * res["weight_bytes_per_token"][0]
    with pytest.raises(ConfigError, match="unknown weight format"):
        points_for(m, weights="int3", kv="fp16", context=1)
    with pytest.raises(ConfigError, match="sparsity"):
        points_for(m, weights="int4", kv="fp16", context=1, sparsity=1.0)
    with pytest.raises(ConfigError, match="unknown perf override"):
        load_machine("pccx-v002-kv260", ["perf.warp_drive=1"])


def test_energy_defaults_follow_horowitz_and_the_stated_scaling_rule():
    assert energy.MAC45["int8"].value == pytest.approx(0.2 + 0.1)  # int8 mult + int32 add, 45 nm
    assert energy.MAC45["int4"].value == pytest.approx(0.2 * 0.5 + 0.1)
    assert energy.MAC45["fp16"].value == pytest.approx(1.1 + 0.4)
    assert energy.MAC45["ternary"].value < energy.MAC45["int4"].value
    s = energy.Scale(16, 0.85, fpga=True)
    assert s.factor == pytest.approx(16 / 45 * (0.85 / 0.9) ** 2 * 14)
    assert energy.dram_pj_per_bit("ddr4").value == pytest.approx(1300 / 64)
    # SRAM per bit at Horowitz's own sizes, unscaled
    one = energy.Scale()
    assert energy.sram_pj_per_bit(8e3, one).value == pytest.approx(10 / 64)
    assert energy.sram_pj_per_bit(1e6, one).value == pytest.approx(100 / 64)
    assert all(f.source for f in energy.default_figures().values())


def test_tern_adapter_reproduces_ternfpga_engine_floor():
    # ternfpga engine-bound: (30·8.68 M + 41.0 M) cycles at 100 MHz × 0.489 W = 1.47 J/token (seeds/002)
    _, m = load_machine("tern-arty-a7-35t")
    t = build_ops("bitnet-b1.58-2b-4t")
    a = analyze(t, m, weights="ternary", kv="fp16", context=64)
    engine_s = (30 * 69_468_160 + 128256 * 2560) / 8 / 100e6
    assert a.totals["mac_seconds"] == pytest.approx(engine_s, rel=0.01)  # + attention MACs at 64 keys
    assert a.totals["joules_per_token"] == pytest.approx(1.47, rel=0.03)


ROOFLINE_TOML = """
target = "roofline"
name = "toy-npu"
clock_mhz = 1000.0
lanes = 4
macs_per_lane_cycle_int8 = 64.0
static_power_w = 1.5
[[memories]]
name = "dram"
capacity_mb = 8000.0
bandwidth_gbps = 50.0
carries = ["weights", "kv"]
pj_per_bit = 10.0
[[memories]]
name = "sram"
capacity_mb = 4.0
bandwidth_gbps = 1000.0
carries = ["act"]
"""


def test_roofline_description_from_toml(tmp_path):
    p = tmp_path / "toy.toml"
    p.write_text(ROOFLINE_TOML)
    _, m = load_machine(str(p), ["perf.dram_gbps=25"])
    assert m.mac_rate("int8") == 4 * 64 * 1e9 and m.level("dram").peak_bps == 25e9
    t = build_ops("bitnet-b1.58-2b-4t")
    a = analyze(t, m, weights="int8", kv="int8", context=256)
    assert a.bound == "dram"
    # INT8 weights: 2.412 G bytes + row scales over 25 GB/s
    assert a.totals["tokens_per_second"] == pytest.approx(25e9 / a.totals["bytes_per_token"], rel=0.02)
    with pytest.raises(ConfigError, match="no memory level carries 'act'"):
        p.write_text(ROOFLINE_TOML.replace('carries = ["act"]', 'carries = ["kv"]'))
        load_machine(str(p))
