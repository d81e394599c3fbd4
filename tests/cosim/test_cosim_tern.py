"""``npukit cosim`` end to end under Verilator + cocotb (slow: one Verilator build per design, ~10 s CPU
each, reused across the tests of this module through one build directory).

Oracles: the vectors are fresh (a BitNet run on the tern backend); the RTL is SystemVerilog written
from the unit definitions, so agreement is two implementations agreeing bit for bit. Every shipped
unit must be exact; a one-bit change in a copy of each unit must make cosim exit 1 naming the first
failing case, whose expected value the test reads from the vectors' own files; the cycle counts the
bench measures must equal the designs' own cycle counters. docs/cosim.md and the tern section of
docs/vectors.md run as written.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from npukit.cli.main import main
from npukit.targets.tern.rtl import UNITS, port_maps

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CASES = "3"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cosim")
    vec = d / "vec"
    assert main(["vectors", "--target", "tern", "--model", "bitnet-tiny", "--prompt-ids", "1,2,3",
                 "--max-new-tokens", "2", "--cases", CASES, "-o", str(vec)]) == 0
    return {"vec": vec, "cache": d / "cache", "builds": d / "cache" / "npukit" / "cosim"}


def cosim_json(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["cosim", *argv, "--json"])
    out = capsys.readouterr().out
    return rc, json.loads(out) if out.strip() else {}


def test_shipped_units_are_bit_exact(work, capsys):
    rc, rep = cosim_json(capsys, str(work["vec"]), "--shipped", "tern", "--build-dir", str(work["builds"]))
    assert rc == 0 and rep["ok"]
    assert [u["unit"] for u in rep["units"]] == list(UNITS)
    for u in rep["units"]:
        assert u["cases"] >= 1 and u["exact"] == u["cases"] and u["first_mismatch"] is None, u["unit"]
        assert u["unchecked"] == []
        for c in u["cycles"]:
            if u["unit"] == "unpack":  # combinational: nothing to count
                assert c["rtl"] is None and c["model"] is None
                continue
            assert c["rtl"] == c["dut_counter"], (u["unit"], c)  # the bench counts what the design counts
            if u["unit"] in ("engine", "attention"):  # these two follow npukit's cycle model exactly
                assert c["rtl"] == c["model"], (u["unit"], c)
            else:  # the FFN glue's pipes are shorter than ternfpga's: 14 cycles fewer per call
                assert c["model"] - c["rtl"] == 14, c


# one-bit changes: (file, text, replacement)
BUGS = {
    "unpack": ("tern_unpack5.sv", "rest % 8'd3", "rest % 8'd2"),
    "engine": ("tern_gemv.sv", "off <= off - 3'd2", "off <= off - 3'd3"),
    "attention": ("tern_attention.sv", "$signed({1'b0, emem[j]})", "$signed({1'b1, emem[j]})"),
    "ffn_glue": ("tern_ffn_glue.sv", "r_shift <= m_bits + 7'd24", "r_shift <= m_bits + 7'd25"),
}


def expected_value(vec: Path, unit: str, case: int, field: str, index: int) -> int:
    """The expected element straight from the vectors' files (manifest + $readmemh)."""
    man = json.loads((vec / "manifest.json").read_text())["units"][unit]
    f, v = man["fields"][field], man["cases"][case]["values"][field]
    if "value" in v:
        return v["value"]
    raw = int((vec / v["file"]).read_text().split()[index], 16)
    return raw - (1 << f["bits"]) if f["signed"] and raw >> (f["bits"] - 1) else raw


@pytest.mark.parametrize("unit", list(BUGS))
def test_a_one_bit_bug_is_caught_naming_the_case(unit, work, tmp_path, capsys):
    src = port_maps()[unit].parent
    name, old, new = BUGS[unit]
    for f in src.glob(f"{UNITS[unit]}.*"):
        shutil.copy(f, tmp_path / f.name)
    text = (tmp_path / name).read_text()
    assert text.count(old) == 1
    (tmp_path / name).write_text(text.replace(old, new))
    rc, rep = cosim_json(capsys, str(work["vec"]), "--port-map", str(tmp_path / f"{UNITS[unit]}.toml"),
                         "--build-dir", str(work["builds"]))
    assert rc == 1 and not rep["ok"]
    (u,) = rep["units"]
    m = u["first_mismatch"]
    assert u["exact"] < u["cases"]
    manifest = json.loads((work["vec"] / "manifest.json").read_text())
    labels = [c["label"] for c in manifest["units"][unit]["cases"]]
    assert m["label"] == labels[m["case"]]
    assert m["expected"] == expected_value(work["vec"], unit, m["case"], m["field"], m["index"])
    assert m["got"] != m["expected"]
    if unit == "unpack":  # byte 2 (case 0 holds 0..255) is digit 2 in lane 0: 2 % 2 = 0 instead
        assert (m["case"], m["field"], m["port"], m["index"], m["got"], m["expected"]) == (
            0, "codes", "codes", 10, 0, 2)
    # the text report names the case as well
    assert main(["cosim", str(work["vec"]), "--port-map", str(tmp_path / f"{UNITS[unit]}.toml"),
                 "--build-dir", str(work["builds"])]) == 1
    assert f"first mismatch: case {m['case']} ({m['label']})" in capsys.readouterr().out


def test_rtl_that_does_not_build_is_one_line_exit_2(work, tmp_path, capsys):
    src = port_maps()["unpack"]
    shutil.copy(src, tmp_path / src.name)
    (tmp_path / "tern_unpack5.sv").write_text("module tern_unpack5 (input logic [7:0] byte_in\n")
    capsys.readouterr()
    assert main(["cosim", str(work["vec"]), "--port-map", str(tmp_path / src.name),
                 "--build-dir", str(work["builds"])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("npukit: error: Verilator could not build tern_unpack5: %Error")


def test_a_port_the_design_lacks_is_one_line_exit_2(work, tmp_path, capsys):
    src = port_maps()["unpack"]
    text = src.read_text().replace('port = "codes"', 'port = "lanes"')
    text = text.replace('sources = ["tern_unpack5.sv"]', f'sources = ["{src.parent / "tern_unpack5.sv"}"]')
    (tmp_path / "map.toml").write_text(text)
    capsys.readouterr()
    assert main(["cosim", str(work["vec"]), "--port-map", str(tmp_path / "map.toml"),
                 "--build-dir", str(work["builds"])]) == 2
    assert "has no port 'lanes'" in capsys.readouterr().err


def doc_commands(doc: str, after: str = "") -> list[list[str]]:
    text = (ROOT / "docs" / doc).read_text()
    text = text[text.index(after):] if after else text
    out = []
    for block in text.split("```bash")[1:]:
        for line in block.split("```", 1)[0].replace("\\\n", " ").splitlines():
            argv = shlex.split(line.split("#", 1)[0])
            if argv[:1] == ["npukit"]:
                out.append(argv[1:])
    return out


def test_docs_commands_run_as_written(work, tmp_path, monkeypatch, capsys):
    """docs/cosim.md top to bottom, then docs/vectors.md's tern section, from a clone's layout."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(work["cache"]))  # the default build root: builds reused
    cosim = doc_commands("cosim.md")
    assert any(c[:1] == ["cosim"] and "--port-map" in c for c in cosim)
    assert any(c[:1] == ["vectors"] for c in cosim)
    tern = doc_commands("vectors.md", "## ternfpga units")[:1]
    assert tern and "bitnet-tiny" in tern[0]
    for argv in cosim + tern:
        assert main(argv) == 0, (argv, capsys.readouterr())


def test_another_interface_is_checked_through_its_port_map_alone(work, capsys):
    """tests/cosim/rtl/alt_attention.sv wraps the attention unit in another interface: active-low
    enables and go, a shared K/V write port with a bank select (`set`), byte addresses (`addr_step`),
    V stored d-major (`transpose`), q four to a 64-bit word, a reset before every case, a done pulse
    and num as an unpacked array port. Its map alone makes every case exact; its cycles include the
    wrapper's q feed and copy."""
    alt = ROOT / "tests" / "cosim" / "rtl" / "alt_attention.toml"
    rc, rep = cosim_json(capsys, str(work["vec"]), "--port-map", str(alt), "--build-dir", str(work["builds"]))
    (u,) = rep["units"]
    assert rc == 0 and u["exact"] == u["cases"] >= 1
    for c in u["cycles"]:  # the wrapper feeds q (D cycles, + 1 to start) and copies 16 num words (+ 1)
        d = 16
        assert c["rtl"] == c["model"] + d + 1 + 16 + 1 + 1, c


@pytest.mark.parametrize("design", ["unpack_piped", "unpack_mem", "unpack_array"])
def test_port_map_paths_the_shipped_designs_leave_out(design, work, capsys):
    """tests/cosim/rtl/unpack_variants.sv: a clocked elementwise pipeline (latency 2, a tie-off, an
    unpacked array output port), a memory design (read enable, read latency 2, active-low start,
    busy instead of done) and one taking the bytes on an unpacked array input port: every case exact
    through the map alone."""
    pmap = ROOT / "tests" / "cosim" / "rtl" / f"{design}.toml"
    rc, rep = cosim_json(capsys, str(work["vec"]), "--port-map", str(pmap),
                         "--build-dir", str(work["builds"]))
    (u,) = rep["units"]
    assert rc == 0 and u["exact"] == u["cases"] >= 1
    if design == "unpack_mem":  # one byte a cycle after the start edge: n cycles
        cases = json.loads((work["vec"] / "manifest.json").read_text())["units"]["unpack"]["cases"]
        assert [c["rtl"] for c in u["cycles"]] == [c["values"]["n"]["value"] for c in cases]


def test_a_done_that_never_comes_is_a_mismatch_after_the_timeout(work, tmp_path, capsys):
    text = (ROOT / "tests/cosim/rtl/unpack_mem.toml").read_text()
    text = text.replace('busy = "busy"', 'done = "stuck"\ntimeout_cycles = 50')
    text = text.replace('sources = ["unpack_variants.sv"]',
                        f'sources = ["{ROOT / "tests/cosim/rtl/unpack_variants.sv"}"]')
    (tmp_path / "map.toml").write_text(text)
    rc, rep = cosim_json(capsys, str(work["vec"]), "--port-map", str(tmp_path / "map.toml"),
                         "--build-dir", str(work["builds"]))
    m = rep["units"][0]["first_mismatch"]
    assert rc == 1 and (m["case"], m["port"], m["got"]) == (0, "stuck", "not seen in 50 cycles")


def test_cases_beyond_the_maps_limits_are_skipped_and_named(work, tmp_path, capsys):
    """[limits] n = 256 on the shipped decoder: case 0 (the 256 byte values) runs, the weight-byte
    cases (more bytes) are skipped and reported; with a limit no case meets, nothing runs and the
    report says so."""
    src = port_maps()["unpack"]
    text = src.read_text().replace('sources = ["tern_unpack5.sv"]',
                                   f'sources = ["{src.parent / "tern_unpack5.sv"}"]')
    (tmp_path / "map.toml").write_text(text + "\n[limits]\nn = 256\n")
    rc, rep = cosim_json(capsys, str(work["vec"]), "--port-map", str(tmp_path / "map.toml"),
                         "--build-dir", str(work["builds"]))
    (u,) = rep["units"]
    man = json.loads((work["vec"] / "manifest.json").read_text())["units"]["unpack"]["cases"]
    sizes = [c["values"]["n"]["value"] for c in man]
    assert rc == 0 and u["cases"] == u["exact"] == sum(n <= 256 for n in sizes) >= 1
    assert [s["case"] for s in u["skipped"]] == [i for i, n in enumerate(sizes) if n > 256]
    (tmp_path / "map.toml").write_text(text + "\n[limits]\nn = 100\n")
    capsys.readouterr()
    assert main(["cosim", str(work["vec"]), "--port-map", str(tmp_path / "map.toml"),
                 "--build-dir", str(work["builds"])]) == 0
    out = capsys.readouterr().out
    assert "0/0" in out and f"unpack: {len(sizes)} cases skipped" in out and "case 0, n 256 > 100" in out
