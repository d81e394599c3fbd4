"""The rk3588 hardware description: every number tiered and sourced; the values the refs publish."""

from __future__ import annotations

import json

import pytest

from npukit import registry
from npukit.cli.main import main
from npukit.errors import ConfigError
from npukit.hw import load_hw
from npukit.targets.rk3588.hw import TIERS


def test_registered_through_the_registry():
    target = registry.get("rk3588", "hw")
    assert target.resolve("hw").__name__ == "RK3588HW"


def test_every_number_has_a_tier_and_a_source(hw):
    led = hw.ledger()
    assert len(led) >= 15
    for name, fig in led.items():
        assert str(fig.tier) in TIERS, name
        assert fig.source and fig.source != "presets/hw/rk3588.toml", name


def test_values_match_the_published_rk3588_facts(hw):
    # refs/fp8_shard_formats.md §1.2 (opennpu_rk3588 CNA guide, SHARD blog): spec-table oracle
    assert hw.n_cores == 3
    assert (hw.banks, hw.bank_bytes) == (12, 32 * 1024)
    assert hw.scratchpad == 32 * 1024
    assert hw.k_per_pass == 768
    assert hw.dma.dram_gbps.value == 1.0 and hw.dma.l3_gbps.value == 3.0
    assert hw.core.scratchpad_bytes.tier == "measured"


def test_override_and_validation():
    hw2 = load_hw("rk3588", ["core.scratchpad_bytes.value=65536"])
    assert hw2.scratchpad == 65536
    with pytest.raises(ConfigError):
        load_hw("rk3588", ["core.cbuf_banks.value=0"])
    with pytest.raises(ConfigError):
        load_hw("rk3588", ["dma.dram_gbps.tier='guessed'"])


def test_npukit_hw_shows_it(capsys):
    assert main(["hw", "rk3588", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["description"]["core"]["max_input_channels"]["value"] == 768
