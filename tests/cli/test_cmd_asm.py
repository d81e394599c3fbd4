"""``npukit asm`` / ``npukit disasm`` end to end through the CLI entry point."""

import json

from npukit.cli.main import main

SRC = """
memset cache=fmap slot=0 a=16 b=1 c=32
gemv dest=0x100 src=0x0 flags=findemax size=1 shape=0 lanes=4
cvo.exp src=0x100 dst=0x200 len=16 flags=sub_emax async
cvo.tanh src=0x200 dst=0x300 len=16
"""


def test_asm_then_disasm_round_trip(tmp_path, capsys):
    (tmp_path / "p.s").write_text(SRC)
    assert main(["asm", str(tmp_path / "p.s"), "-o", str(tmp_path / "p.bin"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["words"] == 4 and info["format"] == "bin"
    raw = (tmp_path / "p.bin").read_bytes()
    assert len(raw) == 32
    # memset (opcode 3) fmap slot 0, a=16 b=1 c=32: little-endian word, opcode in the top nibble of byte 7
    assert int.from_bytes(raw[:8], "little") == (3 << 60) | (16 << 36) | (1 << 20) | (32 << 4)
    assert main(["disasm", str(tmp_path / "p.bin")]) == 0
    text = capsys.readouterr().out
    assert "cvo.exp src=0x100 dst=0x200 len=16 flags=sub_emax async" in text
    (tmp_path / "q.s").write_text(text)
    assert main(["asm", str(tmp_path / "q.s"), "-o", str(tmp_path / "q.hex")]) == 0
    capsys.readouterr()
    hex_words = [int(line, 16) for line in (tmp_path / "q.hex").read_text().split()]
    assert hex_words == [int.from_bytes(raw[i:i + 8], "little") for i in range(0, 32, 8)]


def test_strict_profile_and_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "p.s").write_text(SRC)
    assert main(["asm", str(tmp_path / "p.s"), "-o", str(tmp_path / "p.bin"), "--profile", "strict"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("npukit: error: line 5: cvo_func 0x8 is reserved") and err.count("\n") == 1
    assert main(["asm", str(tmp_path / "missing.s"), "-o", str(tmp_path / "x.bin")]) == 2
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "e.bin").write_bytes((0x5 << 60).to_bytes(8, "little"))
    assert main(["disasm", str(tmp_path / "e.bin"), "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)["instructions"]
    assert rows == [{"index": 0, "word": "0x5000000000000000", "text": ".word 0x5000000000000000",
                     "valid": False, "error": "unknown opcode 0x5"}]
    (tmp_path / "odd.bin").write_bytes(b"\0" * 5)
    assert main(["disasm", str(tmp_path / "odd.bin")]) == 2
