"""The regenerated ternfpga ledger against its published figures (seeds/002; refs/ternary.md §1.6)."""

import json

import pytest

from npukit.cli.main import main
from npukit.errors import ConfigError
from npukit.hw import load_hw
from npukit.models.presets import model_preset
from npukit.targets.tern.hw import TernHW
from npukit.targets.tern.ledger import build_ledger

# (figure, published value, tolerance, where ternfpga states it)
PUBLISHED = [
    ("engine_cycles_per_layer", 8.68e6, 0.02, "seeds/002 Phase 4: 'The engine is 8.68M cycles per layer'"),
    ("attention_cycles_per_query", 16456, 0.02,
     "seeds/002 Phase 6: 'MEASURED attention cycles/query = 16456'"),
    ("ffn_glue_cycles_per_layer", 13974, 0.02, "seeds/002 Phase 8: 'MEASURED ffn-glue cycles/layer = 13974'"),
    ("cycles_per_token.host-split", 884e6, 0.02, "seeds/002 Phase 4: '30 × 28.1M + LM head = 884M cycles'"),
    ("cycles_per_layer.host-split", 28.1e6, 0.02, "seeds/002 cycles figure: '28.1M → 4.32 J'"),
    ("cycles_per_layer.fabric-attention", 12.2e6, 0.02, "seeds/002 Phase 5: 'The layer drops ... to 12.2M'"),
    ("cycles_per_token.fabric-attention", 407e6, 0.02, "seeds/002 Phase 5: 'the token from 884M to ~407M'"),
    ("cycles_per_layer.fabric-ffn-glue", 9.65e6, 0.02, "seeds/002 cycles figure: '9.65M → 1.62 J'"),
    ("joules_per_token.host-split", 4.32, 0.03, "seeds/002 ledger: 'System energy, host-split 4.32 J/token'"),
    ("joules_per_token.fabric-attention", 1.99, 0.03,
     "seeds/002 ledger: '+on-fabric attention 1.99 J/token'"),
    ("joules_per_token.fabric-ffn-glue", 1.62, 0.03, "seeds/002 ledger: '+on-fabric FFN glue 1.62 J/token'"),
    ("joules_per_token.engine-bound", 1.47, 0.03, "seeds/002 ledger: 'Engine-bound floor 1.47 J/token'"),
    ("whatif.sparsity_measured.joules_per_token.engine-bound", 1.28, 0.03,
     "refs/ternary.md §1.6: 'engine with down_proj gather — 1.28'"),
]


@pytest.fixture(scope="module")
def led():
    return build_ledger(load_hw("tern-arty-a7-35t"), model_preset("bitnet-b1.58-2b-4t"), context=64)


@pytest.mark.parametrize(("name", "value", "tol", "where"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_published_figures(led, name, value, tol, where):
    got = led[name].value
    assert abs(got - value) / value <= tol, f"{name}: {got:.4g} vs published {value:.4g} ({where})"


def test_tiers_follow_the_evidence(led):
    assert led["engine_cycles_per_layer"].tier == "derived"
    assert led["attention_cycles_per_query"].tier == "derived"
    assert led["host_glue_cycles_per_layer.attention"].tier == "measured"
    for ph in ("host-split", "fabric-attention", "fabric-ffn-glue"):
        assert led[f"joules_per_token.{ph}"].tier == "derived"
    assert led["joules_per_token.engine-bound"].tier == "projected"  # RMSNorm on fabric not built
    assert all(f.tier == "projected" for n, f in led.items() if n.startswith("whatif."))
    assert all(f.source for f in led.values())


def test_glue_shares_and_bram_frontier(led):
    # seeds/002: the engine's share of a layer rises 31% -> 71% -> 90%
    for ph, share in (("host-split", 0.31), ("fabric-attention", 0.71), ("fabric-ffn-glue", 0.90)):
        got = led["engine_cycles_per_layer"].value / led[f"cycles_per_layer.{ph}"].value
        assert abs(got - share) < 0.01
    assert led["bram_tiles.soc_engine+ffn_glue"].value == 45  # measured 45/50
    assert led["bram_fits.soc_engine+ffn_glue"].value == 1
    assert led["bram_fits.soc_engine+attention+ffn_glue"].value == 0  # 63 > 50
    assert led["whatif.board_tern-arty-a7-100t.bram_fits.soc_engine+attention+ffn_glue"].value == 1
    assert led["model_fits_ddr"].value == 0  # 2.41 G weights × 1.6 bit ≈ 482 MB > 256 MB
    assert abs(led["weight_bytes_per_token"].value - 2.41e9 * 1.6 / 8) / 482e6 < 0.01


def test_whatifs_move_the_right_way(led):
    base = led["cycles_per_token.fabric-ffn-glue"].value
    k16 = led["whatif.lanes_16.cycles_per_token.fabric-ffn-glue"].value
    glue = base - 30 * led["engine_cycles_per_layer"].value - led["lm_head_cycles"].value
    # doubling K halves the engine work (hand arithmetic: 301.5M engine cycles → 150.8M), glue unchanged
    assert k16 == pytest.approx(glue + (30 * 8_683_520 + 41_041_920) / 2)
    # DDR3 caps the lanes: 1423 MB/s / (1.6 bit · 100 MHz) = 71 lanes; K=128 is bandwidth-bound
    assert led["ddr_saturating_lanes"].value == pytest.approx(1423e6 / 20e6)
    assert "DDR3-bound" in led["whatif.lanes_128.cycles_per_token.fabric-ffn-glue"].source
    assert led["whatif.context_512.attention_cycles_per_query"].value == 2 * 512 * 128 + 512 + 8
    assert (led["whatif.context_512.cycles_per_token.host-split"].value
            > led["cycles_per_token.host-split"].value)


def test_other_model_shapes_and_contexts_are_projected():
    cfg = dict(model_preset("bitnet-b1.58-2b-4t"), hidden_size=1024, num_hidden_layers=4,
               intermediate_size=2048, num_attention_heads=8, num_key_value_heads=2)
    led = build_ledger(load_hw("tern-arty-a7-35t"), cfg, context=32, weights="tq2_0", kv="int8",
                       sparsity=0.5)
    assert led["host_glue_cycles_per_layer.attention"].tier == "projected"
    assert led["cycles_per_token.host-split"].tier == "projected"
    assert led["engine_cycles_per_layer"].value == (2 * 1024 * 1024 + 2 * 1024 * 256 + 3 * 1024 * 2048) / 8
    assert "whatif.sparsity_given.cycles_per_token.engine-bound" in led
    assert led["weight_bytes_per_token"].value == pytest.approx(
        (4 * (2 * 1024**2 + 2 * 1024 * 256 + 3 * 1024 * 2048) + 128256 * 1024) * 2.0625 / 8)


@pytest.mark.parametrize(("kw", "needle"), [({"weights": "int4"}, "ternary weights only"),
                                            ({"kv": "fp8"}, "unknown KV"), ({"sparsity": 1.0}, "sparsity"),
                                            ({"context": 0}, "context")])
def test_bad_arguments(kw, needle):
    args = {"context": 64, "weights": None, "kv": None, "sparsity": None} | kw
    with pytest.raises(ConfigError, match=needle):
        build_ledger(load_hw("tern-arty-a7-35t"), model_preset("bitnet-b1.58-2b-4t"), **args)


def test_presets_and_overrides():
    hw = load_hw("tern-arty-a7-35t", ["engine.lanes=16"])
    assert isinstance(hw, TernHW) and hw.engine.lanes == 16 and hw.power.total_w == pytest.approx(0.489)
    assert load_hw("tern-arty-a7-100t").bram.total == 135
    with pytest.raises(ConfigError, match="must be > 0"):
        load_hw("tern-arty-a7-35t", ["engine.lanes=0"])
    with pytest.raises(ConfigError, match="tier"):
        load_hw("tern-arty-a7-35t", ["power.tier=guess"])


def test_npukit_perf_uses_the_tern_ledger(capsys):
    rc = main(["perf", "--hw", "tern-arty-a7-35t", "--model", "bitnet-b1.58-2b-4t", "--context", "64",
               "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    figs = out["figures"]
    assert figs["joules_per_token.fabric-ffn-glue"]["tier"] == "derived"
    assert abs(figs["joules_per_token.fabric-ffn-glue"]["value"] - 1.62) / 1.62 < 0.03
