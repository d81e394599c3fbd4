"""Every registered target keeps the typed contract of each capability it names (`npukit.registry`):
references import, callables accept the calls the CLI and perf make, hw is a dataclass, isa has a
word width. The toy target (registered from outside the package) keeps them too, and a broken record
is reported capability by capability."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from npukit import registry

sys.path.insert(0, str(Path(__file__).resolve().parent / "targets" / "toy"))
import toy_target


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_target_keeps_its_contracts(name: str) -> None:
    assert registry.check(registry.get(name)) == []


def test_the_toy_target_keeps_its_contracts() -> None:
    assert registry.check(toy_target.TARGET) == []


def _wrong_arity(text):  # assemble without the hardware description
    return []


def test_a_broken_record_is_reported_per_capability() -> None:
    broken = replace(toy_target.TARGET, assemble=f"{__name__}:_wrong_arity",
                     disassemble="npukit.no_such_module:f", hw="npukit.errors:NpukitError",
                     isa="npukit.errors:ConfigError")
    problems = registry.check(broken)
    assert any(p.startswith("toy.assemble:") and "Assemble" in p for p in problems)
    assert any(p.startswith("toy.disassemble:") and "does not import" in p for p in problems)
    assert any(p.startswith("toy.hw:") and "dataclass" in p for p in problems)
    assert any(p.startswith("toy.isa:") and "word_bits" in p for p in problems)
    assert len(problems) == 4


def _cli_without_command(group):  # the CLI hook must take (group, command)
    return None


class _HalfAdapter:  # a simulator-sweep adapter missing `time`
    target = "toy"
    engines = ("x",)
    workload_axes = None  # present; its type is not checked

    def load_workload(self, spec): ...
    def workload_digest(self, workload): ...
    def program_key(self, hw, params): ...
    def compile(self, workload, hw, params): ...


HALF_ADAPTER = _HalfAdapter()


def test_every_extra_string_is_loaded_and_shared_ones_keep_their_protocol() -> None:
    named = {name for n in registry.names() for name in registry.get(n).extra}
    shared = named & set(registry.EXTRA_CONTRACTS)
    assert {"cli", "rtl", "vectors", "sim_sweep", "tflite_delegate"} <= shared  # the test covers them
    broken = replace(toy_target.TARGET, extra={
        "cli": f"{__name__}:_cli_without_command", "sim_sweep": f"{__name__}:HALF_ADAPTER",
        "vectors": "npukit.errors", "own_thing": "npukit.no_such_module:f",
        "tflite_delegate": f"{__name__}:_wrong_arity"})
    problems = registry.check(broken)
    assert any(p.startswith("toy.extra['cli']:") and "CliArguments" in p for p in problems)
    assert any(p.startswith("toy.extra['sim_sweep']:") and "time" in p for p in problems)
    assert any(p.startswith("toy.extra['vectors']:") and "export" in p for p in problems)
    assert any(p.startswith("toy.extra['own_thing']:") and "does not import" in p for p in problems)
    assert any(p.startswith("toy.extra['tflite_delegate']:") and "DelegateFactory" in p for p in problems)
    assert len(problems) == 5
