import dataclasses
import tomllib
from importlib import resources

import pytest

from npukit import hw
from npukit.errors import ConfigError
from npukit.targets.pccx.hw import PccxHw

PRESET = "pccx-v002-kv260"


def test_preset_loads_with_spec_numbers():
    h = hw.load_hw(PRESET, expect="pccx")
    assert isinstance(h, PccxHw)
    # Spec numbers (refs §3) recomputed by hand, not read back from the class.
    assert h.l2.size_bytes == 114_688 * 16 == 1_835_008
    assert h.weight_buffer.fifo_bytes == 4096 * 16 == 64 * 1024
    assert h.weight_buffer.total_bytes == 4 * 64 * 1024
    assert h.gemv.macs_per_clk == 4 * 32
    assert h.gemv_peak_macs_per_s == pytest.approx(4 * 32 * 400e6)  # 51.2 GMAC/s
    assert h.gemm.macs_per_clk == 32 * 32 * 2
    assert h.gemm_peak_macs_per_s == pytest.approx(819.2e9)
    assert h.hp_ports.peak_bytes_per_s(h.clocks) == pytest.approx(4 * 16 * 250e6)
    assert h.clocks.core_per_axi == pytest.approx(1.6)
    assert h.constant_cache.entries == 64 and h.constant_cache.entry_bits == 48
    assert h.l2.addr_space_words == 131_072 and h.l2.elems_per_word == 8
    assert h.ddr.size_bytes == 4 * 1024**3
    assert h.sfu.max_length == 65_535


def test_override_changes_derived_rates():
    h = hw.load_hw(PRESET, ["ddr.bandwidth_gbps=12.8"])
    assert h.ddr.bandwidth_gbps == 12.8
    assert h.weight_stream_bytes_per_s == pytest.approx(12.8e9)  # DDR below the 16 GB/s HP peak
    assert h.gemv_ridge_macs_per_byte == pytest.approx(51.2e9 / 12.8e9)
    two_ports = hw.load_hw(PRESET, ["hp_ports.count_log2=1", "ddr.bandwidth_gbps=12.8"])
    assert two_ports.weight_stream_bytes_per_s == pytest.approx(2 * 16 * 250e6)  # ports now bind: 8 GB/s
    one_core = hw.load_hw(PRESET, ["gemv.cores_log2=0"])
    assert one_core.gemv.macs_per_clk == 32


def _fields(cls, prefix=""):
    out = set()
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default):
            out |= _fields(type(default), f"{prefix}{f.name}.")
        else:
            out.add(f"{prefix}{f.name}")
    return out


def _keys(d, prefix=""):
    out = set()
    for k, v in d.items():
        out |= _keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}"}
    return out


def test_preset_sets_every_field_explicitly():
    text = (resources.files("npukit") / "presets" / "hw" / f"{PRESET}.toml").read_text()
    data = tomllib.loads(text)
    assert data.pop("target") == "pccx"
    data.pop("description")
    assert _keys(data) == _fields(PccxHw)
    # every numeric line cites something
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "target", "description", "name")):
            assert "#" in line, line


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("ddr.bandwidth_gbps=25", "exceeds ddr.peak_gbps"),
        ("ddr.bandwidth_gbps=0", "must be > 0"),
        ("clocks.core_mhz=-1", "must be > 0"),
        ("gemv.cores_log2=9", "gemv.cores_log2 must be in"),
        ("l2.words=200000", "l2.words must be in"),
        ("hp_ports.count_log2=7", "hp_ports.count_log2"),
        ("dma.setup_cycles=-3", "dma.setup_cycles must be >= 0"),
        ("gemv.bogus=1", "unknown key 'bogus'"),
    ],
)
def test_bad_overrides_raise_one_line(override, needle):
    with pytest.raises(ConfigError, match=needle) as ei:
        hw.load_hw(PRESET, [override])
    assert "\n" not in str(ei.value)
