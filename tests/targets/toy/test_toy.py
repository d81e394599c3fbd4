"""The toy accumulator machine (``toy_target.py``, one file, registered through ``NPUKIT_TARGETS``)
gets ``npukit asm``, ``disasm`` and ``sim`` without any edit inside npukit: run as a user would, in
subprocesses. Oracles: the word layout in the toy's docstring packed with `struct`, plain Python
arithmetic for the results, and the per-instruction cycle rule for the timing."""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SOURCE = """
ldi imm=100      ; mem[0] = 100
store addr=0
ldi imm=-3       ; mem[1] = -3 (wrapped to acc_bits)
store addr=1
ldi imm=3
mul addr=0       ; 300
add addr=0       ; 400
add addr=1       ; 397
store addr=15
halt
"""
WORDS = [0x1000 | 100, 0x4000, 0x1000 | (-3 & 0xFFF), 0x4001, 0x1003, 0x3000, 0x2000, 0x2001, 0x400F, 0x0000]


def npukit(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NPUKIT_TARGETS": "toy_target",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "npukit", *argv], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.slow  # five CLI subprocesses
def test_toy_asm_disasm_sim_through_the_cli(tmp_path):
    (tmp_path / "p.s").write_text(SOURCE)
    out = npukit("asm", "--target", "toy", str(tmp_path / "p.s"), "-o", str(tmp_path / "p.bin"), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["words"] == len(WORDS)
    assert (tmp_path / "p.bin").read_bytes() == struct.pack(f"<{len(WORDS)}H", *WORDS)

    out = npukit("disasm", "--target", "toy", str(tmp_path / "p.bin"))
    assert out.returncode == 0, out.stderr
    (tmp_path / "q.s").write_text(out.stdout)
    out = npukit("asm", "--target", "toy", str(tmp_path / "q.s"), "-o", str(tmp_path / "q.hex"))
    assert out.returncode == 0, out.stderr
    assert [int(s, 16) for s in (tmp_path / "q.hex").read_text().split()] == WORDS

    out = npukit("sim", "--target", "toy", str(tmp_path / "p.bin"), "--set", "acc_bits=8", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    mask = 0xFF
    m0, m1 = 100, -3 & mask
    acc = ((3 * m0) + m0 + m1) & mask
    assert res["state"]["acc"] == acc
    assert res["state"]["mem"][:2] == [m0, m1] and res["state"]["mem"][15] == acc
    # every instruction depends on the accumulator, so they run back to back; a memory operand of
    # acc_bits/8 bytes crosses the 1 B/cycle bus: max(engine cycles, bytes) each
    alu, mul, bus = 1, 4, 1
    assert res["timing"]["cycles"] == 2 * alu + 3 * max(alu, bus) + alu + max(mul, bus) + 2 * max(alu, bus)
    fig = res["ledger"]["figures"]["total cycles"]
    assert fig["tier"] == "derived" and "toy defaults (acc_bits=8)" in fig["source"]


def test_toy_flags_invalid_words_and_derives_widths(tmp_path):
    (tmp_path / "bad.bin").write_bytes(struct.pack("<3H", 0x1001, 0x2010, 0x9000))
    out = npukit("disasm", "--target", "toy", str(tmp_path / "bad.bin"), "--json")
    assert out.returncode == 1
    rows = json.loads(out.stdout)["instructions"]
    assert [r["valid"] for r in rows] == [True, False, False]
    assert rows[1]["error"] == "unassigned bits [11:4] are nonzero" and rows[2]["error"] == "unknown op 0x9"
    # with 32 memory words the address field is 5 bits wide: 0x10 is an address
    out = npukit("disasm", "--target", "toy", "--set", "mem_log2=5", str(tmp_path / "bad.bin"), "--json")
    assert [r["text"] for r in json.loads(out.stdout)["instructions"][:2]] == ["ldi imm=1", "add addr=0x10"]
    (tmp_path / "e.s").write_text("store addr=16\n")
    out = npukit("asm", "--target", "toy", str(tmp_path / "e.s"), "-o", str(tmp_path / "e.bin"))
    assert out.returncode == 2 and out.stderr == "npukit: error: line 1: addr=16 does not fit in 4 bits\n"
