"""`npukit bpf disasm` needs no helper table: an object calling a helper the VM does not know
(examples/alkali/filter.v3.o calls `print`) disassembles, each call named where LLVM's own
disassembler (llvm-objdump) puts its R_BPF_64_32 relocation, and the text assembles back."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from npukit.targets.ebpf import isa
from npukit.targets.ebpf.asm import assemble

OBJ = Path(__file__).resolve().parents[3] / "examples" / "alkali" / "filter.v3.o"


def test_disasm_of_an_object_with_an_unknown_helper() -> None:
    objdump = shutil.which("llvm-objdump") or shutil.which("llvm-objdump-14")
    if objdump is None:
        pytest.fail("llvm-objdump missing: scripts/ensure_debian_deps.sh installs clang-14 (llvm)")
    dump = subprocess.run([objdump, "-dr", str(OBJ)], capture_output=True, text=True, check=True).stdout
    relocs = re.findall(r"([0-9a-f]{16}):\s+R_BPF_64_32\s+(\w+)", dump)
    expect = {int(off, 16) // 8: name for off, name in relocs}
    assert "print" in expect.values()
    run = subprocess.run([sys.executable, "-m", "npukit", "bpf", "disasm", str(OBJ)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("    ")]
    slot, named = 0, {}
    for ln in lines:
        if "# helper " in ln:
            named[slot] = ln.split("# helper ")[1]
        slot += 2 if ln.split()[0] == "lddw" else 1  # lddw is the one two-slot instruction
    assert named == {slot: name for slot, name in expect.items() if name == "print"}
    slots = isa.encode(assemble(run.stdout))
    assert len(slots) // 8 == slot


def test_asm_and_disasm_json(tmp_path: Path) -> None:
    import json

    def npukit(*argv: str) -> str:
        out = subprocess.run([sys.executable, "-m", "npukit", *argv], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout

    plain = npukit("bpf", "disasm", str(OBJ))
    obj = json.loads(npukit("bpf", "disasm", str(OBJ), "--json"))
    assert obj["text"] == plain and obj["kind"] == "elf" and set(obj["helper_calls"].values()) == {"print"}
    src = tmp_path / "p.s"
    src.write_text("mov r0, 7\nexit\n")
    npukit("bpf", "asm", str(src), "-o", str(tmp_path / "p.bin"))
    obj = json.loads(npukit("bpf", "asm", str(src), "--json"))
    assert bytes.fromhex("".join(obj["hex"])) == (tmp_path / "p.bin").read_bytes() and obj["slots"] == 2
    assert obj["hex"][0] == "b700000007000000"  # RFC 9669: opcode 0xb7 (MOV64 K), imm 7 little-endian
