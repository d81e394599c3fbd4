"""The pccx instruction decoder under ``npukit cosim`` (slow: two Verilator builds). Oracle: the RTL is
SystemVerilog written from the ISA definition (docs/isa.md), the vectors are `isa.decode`'s verdicts
on generated words, so agreement is two implementations of the error interrupt agreeing on every
word; a one-bit change to the RTL must be caught, naming the case, with the expected value the
vectors' own file holds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from npukit.cli.main import main
from npukit.targets.pccx.rtl import port_maps

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vec(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pccx") / "vec"
    assert main(["vectors", "--decoder", "-o", str(d)]) == 0
    return d


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["cosim", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_vectors_cover_both_verdicts_in_every_case(vec):
    man = json.loads((vec / "manifest.json").read_text())["units"]["decoder"]
    assert len(man["cases"]) == 3
    for c in man["cases"]:
        err = [int(t, 16) for t in (vec / c["values"]["err"]["file"]).read_text().split()]
        words = [int(t, 16) for t in (vec / c["values"]["word"]["file"]).read_text().split()]
        assert len(err) == len(words) >= 500
        assert 0.2 < sum(err) / len(err) < 0.8  # valid and rejected words both well represented
        assert any(w >> 60 > 4 for w in words)  # undefined opcodes are in


def test_shipped_decoder_is_bit_exact_and_a_bug_is_caught(vec, tmp_path, capsys):
    builds = tmp_path / "builds"
    rc, rep = run_json(capsys, str(vec), "--shipped", "pccx", "--build-dir", str(builds))
    (u,) = rep["units"]
    assert rc == 0 and u["unit"] == "decoder" and u["exact"] == u["cases"] == 3
    src = port_maps()["decoder"].parent
    for f in src.glob("pccx_decoder.*"):
        shutil.copy(f, tmp_path / f.name)
    sv = tmp_path / "pccx_decoder.sv"
    old = "mat_err = word[2:1] != 2'b0"  # GEMV/GEMM reserved bits [2:1]; the bug takes in async (bit 0)
    assert sv.read_text().count(old) == 1
    sv.write_text(sv.read_text().replace(old, "mat_err = word[2:0] != 2'b0"))
    rc, rep = run_json(capsys, str(vec), "--port-map", str(tmp_path / "pccx_decoder.toml"),
                       "--build-dir", str(builds))
    (u,) = rep["units"]
    m = u["first_mismatch"]
    assert rc == 1 and m["field"] == "err" and (m["got"], m["expected"]) == (1, 0)
    # strict rejects async GEMV words anyway: the first case that differs is an extended one
    assert m["label"].startswith("extended")
    man = json.loads((vec / "manifest.json").read_text())["units"]["decoder"]["cases"][m["case"]]
    word = int((vec / man["values"]["word"]["file"]).read_text().split()[m["index"]], 16)
    assert word >> 61 == 0 and word & 1  # a GEMV/GEMM word with the async bit: valid in extended
