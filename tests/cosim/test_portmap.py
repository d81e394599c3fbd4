"""Port maps are checked before anything is built: each malformed map is a ConfigError naming the
problem, and ``npukit cosim`` turns it into one line and exit status 2 (no Verilator needed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from npukit.cli.main import main
from npukit.cosim import portmap
from npukit.cosim.run import check_fields, load_unit
from npukit.errors import ConfigError
from npukit.targets.tern.rtl import port_maps

GOOD = """
unit = "unpack"
top = "dec"
sources = ["dec.sv"]
[[in]]
field = "bytes"
port = "b"
[[out]]
field = "codes"
port = "c"
per_word = 5
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "dec.sv").write_text("module dec(input [7:0] b, output [9:0] c); endmodule\n")
    p = tmp_path / "map.toml"
    p.write_text(text)
    return p


def test_a_good_map_loads(tmp_path):
    pm = portmap.load(write(tmp_path, GOOD))
    assert (pm.unit, pm.top, pm.mode) == ("unpack", "dec", "case")
    assert pm.sources == [(tmp_path / "dec.sv").resolve()]
    assert pm.outputs[0].per_word == 5 and pm.outputs[0].kind == "port"


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace('top = "dec"\n', ""), "'top' is required"),
    (lambda t: t.replace('"dec.sv"', '"missing.sv"'), "RTL source"),
    (lambda t: t + "colour = 3\n", "unknown key(s) colour"),
    (lambda t: t.replace('port = "c"', 'kind = "memory"\ndata = "c"'), "needs addr"),
    (lambda t: t.replace('port = "b"', 'kind = "fifo"'), "kind 'fifo'"),
    (lambda t: t.replace('field = "bytes"', 'field = "codes"'), "bound twice"),
    (lambda t: t + '[control]\nstart = "go"\n', "needs [clock] port"),
    (lambda t: t.replace("per_word = 5", "per_word = 0"), "per_word, bits and addr_step must be >= 1"),
    (lambda t: t.replace("unit", "unit = ", 1), "not valid TOML"),
    (lambda t: t + '[control]\nmode = "burst"\n', "control.mode"),
    (lambda t: t.replace("per_word = 5", "per_word = 5\ntranspose = true"), "transpose applies to input"),
    (lambda t: t.replace('port = "b"', 'port = "b"\nonce = true'), "once applies to input memories"),
])
def test_bad_maps_are_config_errors(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        portmap.load(write(tmp_path, edit(GOOD)))


def tiny_vectors(tmp_path: Path) -> Path:
    """A one-case unpack unit in the vectors format (hand-written: byte 5 = digits 2, 1)."""
    d = tmp_path / "vec"
    (d / "unpack").mkdir(parents=True)
    (d / "unpack" / "b.hex").write_text("05\n")
    (d / "unpack" / "c.hex").write_text("2\n1\n0\n0\n0\n")
    fields = {"n": {"dir": "in", "bits": 16, "signed": False, "shape": ""},
              "bytes": {"dir": "in", "bits": 8, "signed": False, "shape": "[n]"},
              "codes": {"dir": "out", "bits": 2, "signed": False, "shape": "[n, 5]"}}
    case = {"label": "five", "cycles": None, "values": {
        "n": {"value": 1, "shape": []}, "bytes": {"file": "unpack/b.hex", "shape": [1]},
        "codes": {"file": "unpack/c.hex", "shape": [1, 5]}}}
    man = {"format": "npukit-unit-vectors/1", "units": {"unpack": {"fields": fields, "cases": [case]}}}
    (d / "manifest.json").write_text(json.dumps(man))
    return d


def test_fields_are_checked_against_the_vectors(tmp_path):
    vec = tiny_vectors(tmp_path)
    fields, cases = load_unit(vec, "unpack")
    assert cases[0]["values"]["codes"] == [2, 1, 0, 0, 0] and cases[0]["values"]["n"] == 1
    assert check_fields(portmap.load(write(tmp_path, GOOD)), fields) == []
    wrong = write(tmp_path, GOOD.replace('field = "codes"', 'field = "n"'))
    with pytest.raises(ConfigError, match="an input of 'unpack', bound as"):
        check_fields(portmap.load(wrong), fields)
    unknown = write(tmp_path, GOOD.replace('field = "bytes"', 'field = "bites"'))
    with pytest.raises(ConfigError, match="no field 'bites'"):
        check_fields(portmap.load(unknown), fields)
    limited = write(tmp_path, GOOD + "[limits]\nbytes = 4\n")
    with pytest.raises(ConfigError, match="'bytes' is not a scalar field"):
        check_fields(portmap.load(limited), fields)


@pytest.mark.parametrize("argv", [
    ["--port-map", "nowhere.toml"],
    ["--shipped", "pccx"],
    ["--shipped", "tern", "--unit", "softmax"],
    [],
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    vec = tiny_vectors(tmp_path)
    assert main(["cosim", str(vec), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err and err


def test_cli_wrong_field_in_map_is_exit_2(tmp_path, capsys):
    vec = tiny_vectors(tmp_path)
    bad = write(tmp_path, GOOD.replace('field = "bytes"', 'field = "bites"'))
    assert main(["cosim", str(vec), "--port-map", str(bad)]) == 2
    assert "no field 'bites'" in capsys.readouterr().err


def test_every_shipped_map_loads_and_binds_every_output():
    """Each shipped map parses, names RTL that exists, and checks every output field of its unit."""
    from npukit.targets.tern.vectors import FIELDS

    maps = port_maps()
    assert set(maps) == set(FIELDS)
    for unit, path in maps.items():
        pm = portmap.load(path)
        assert pm.unit == unit
        outs = {n for n, f in FIELDS[unit].items() if f.direction == "out"}
        assert {b.field for b in pm.outputs} == outs
