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
