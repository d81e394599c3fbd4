from dataclasses import dataclass, field

import pytest

from npukit import hw, registry
from npukit.errors import ConfigError


@dataclass
class _Mem:
    size_bytes: int
    bandwidth_gbps: float = 1.0


@dataclass
class _Dev:
    name: str
    mem: _Mem
    lanes_log2: int = 2
    tags: list[str] = field(default_factory=list)

    @property
    def lanes(self) -> int:
        return 1 << self.lanes_log2

    def validate(self) -> None:
        if self.lanes_log2 < 0:
            raise ConfigError("lanes_log2 must be >= 0")


registry.register(registry.Target("_testdev", "test device", hw=f"{__name__}:_Dev"))

TOML = """
target = "_testdev"
name = "t"
[mem]
size_bytes = 1024
"""


def _write(tmp_path, text):
    p = tmp_path / "dev.toml"
    p.write_text(text)
    return p


def test_load_with_overrides(tmp_path):
    d = hw.load_hw(_write(tmp_path, TOML), ["mem.bandwidth_gbps=12.8", "lanes_log2=3"])
    assert d.mem.size_bytes == 1024 and d.mem.bandwidth_gbps == 12.8 and d.lanes == 8


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["mem.nope=1"], "unknown key 'nope'"),
        (["lanes_log2=abc"], "expected an integer"),
        (["lanes_log2=-1"], "lanes_log2 must be >= 0"),
        (["name.x=1"], "is not a table"),
        (["novalue"], "not key=value"),
    ],
)
def test_bad_overrides_are_one_line_errors(tmp_path, overrides, needle):
    with pytest.raises(ConfigError, match=needle) as ei:
        hw.load_hw(_write(tmp_path, TOML), overrides)
    assert "\n" not in str(ei.value)


def test_missing_field_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="missing required field"):
        hw.load_hw(_write(tmp_path, 'target = "_testdev"\nname = "x"\n'))
    with pytest.raises(ConfigError, match="invalid TOML"):
        hw.load_hw(_write(tmp_path, "target = \n"))
    with pytest.raises(ConfigError, match="unknown hardware preset"):
        hw.load_hw("no-such-preset")


def test_a_target_is_found_through_its_registry_record(tmp_path):
    assert hw.target_of(hw.load_hw("pccx-v002-kv260")) == "pccx"
    assert hw.target_of(hw.load_hw(_write(tmp_path, TOML))) == "_testdev"
    with pytest.raises(ConfigError, match=r"unknown target 'nosuch' .*known: .*pccx.*tern"):
        hw.load_hw(_write(tmp_path, 'target = "nosuch"\nname = "x"\n'))
    with pytest.raises(ConfigError, match="not the hardware description of any registered target"):
        hw.target_of(_Mem(1))
