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
