"""``npukit bpf`` end to end (subprocess for the exit status and the one-line errors) and the docs tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from npukit.cli.main import main
from npukit.targets.ebpf.isa import docs_tables

from .conftest import EXAMPLES

ROOT = Path(__file__).resolve().parents[3]


def _npukit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "npukit", *args], capture_output=True, text=True, timeout=60)


def test_run_json_and_fault_exit_status(tmp_path: Path) -> None:
    prog = tmp_path / "p.s"
    prog.write_text("ldxh %r0, [%r1+1]\nexit\n")
    mem = tmp_path / "m.hex"
    mem.write_text("aa bb\ncc dd\n")
    ok = _npukit(
        "bpf", "run", str(prog), "--mem", str(mem), "--abi", "ubpf", "--helpers", "conformance", "--json"
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {"r0": 0xCCBB, "output": "", "printed": [], "instructions": 2}
    prog.write_text("ldxw %r0, [%r1+1]\nexit\n")
    bad = _npukit("bpf", "run", str(prog), "--mem", str(mem), "--json")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "memory fault at pc 0 (ldxw %r0, [%r1+1])" in bad.stderr


def test_program_formats_are_detected(tmp_path: Path, capsys) -> None:
    words = tmp_path / "w.txt"
    words.write_text("0x00000007000000b7\n0x0000000000000095\n")  # mov r0, 7; exit as 64-bit words
    raw = tmp_path / "p.bin"
    raw.write_bytes(bytes.fromhex("b7000000090000009500000000000000"))
    hexbytes = tmp_path / "b.txt"
    hexbytes.write_text("b7 00 00 00 0b 00 00 00\n95 00 00 00 00 00 00 00\n")
    for path, want in ((words, 7), (raw, 9), (hexbytes, 11)):
        assert main(["bpf", "run", str(path), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["r0"] == want


def test_asm_disasm_and_elf_run(tmp_path: Path, capsys) -> None:
    src = tmp_path / "p.s"
    src.write_text("mov %r0, 3\nl:\nsub %r0, 1\njne %r0, 0, l\nexit\n")
    assert main(["bpf", "asm", str(src), "-o", str(tmp_path / "p.bin")]) == 0
    assert main(["bpf", "disasm", str(tmp_path / "p.bin")]) == 0
    text = capsys.readouterr().out
    assert "jne %r0, 0, L1" in text
    data = tmp_path / "in.bin"
    data.write_bytes(bytes([3, 1, 5, 9]))
    assert (
        main(
            [
                "bpf",
                "run",
                str(EXAMPLES / "filter.v2.o"),
                "--input",
                str(data),
                "--output-size",
                "8",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["r0"] == 2 and out["output"] == "0200000005090000"
    assert out["printed"] == ["filter: kept some bytes\n"]


def test_bad_inputs_are_one_line_errors(tmp_path: Path, capsys) -> None:
    junk = tmp_path / "x.o"
    junk.write_bytes(b"\x7fELF" + bytes(40))
    assert main(["bpf", "run", str(junk)]) == 2
    assert main(["bpf", "run", str(tmp_path / "missing.s")]) == 2
    (tmp_path / "m.hex").write_text("zz")
    assert main(["bpf", "run", str(EXAMPLES / "filter.v1.o"), "--mem", str(tmp_path / "m.hex")]) == 2
    err = capsys.readouterr().err
    assert err.count("npukit: error:") == 3 and "Traceback" not in err


def test_docs_tables_in_sync() -> None:
    doc = (ROOT / "docs" / "targets" / "ebpf.md").read_text()
    assert docs_tables() in doc


def test_registry_record() -> None:
    from npukit import registry

    target = registry.get("ebpf", "simulate")
    words = target.resolve("assemble")("mov %r0, 6\nmul %r0, 7\nexit")
    assert target.resolve("simulate")(words)["r0"] == 42
    assert "mul %r0, 7" in target.resolve("disassemble")(words)


def test_generic_asm_disasm_sim_with_target_ebpf(tmp_path: Path, capsys) -> None:
    src = tmp_path / "p.s"
    src.write_text("ldxb %r0, [%r1+1]\nadd %r0, %r2\nexit\n")
    mem = tmp_path / "m.hex"
    mem.write_text("10 20 30")
    assert main(["asm", "--target", "ebpf", str(src), "-o", str(tmp_path / "p.bin")]) == 0
    assert main(["disasm", "--target", "ebpf", str(tmp_path / "p.bin")]) == 0
    assert "ldxb %r0, [%r1+1]" in capsys.readouterr().out
    assert main(["sim", "--target", "ebpf", str(tmp_path / "p.bin"), "--bpf-mem", str(mem), "--json"]) == 0
    assert '"r0": 35' in capsys.readouterr().out  # 0x20 + length 3


def test_conformance_runner_tool(tmp_path: Path) -> None:
    """tools/run_bpf_conformance.py on a two-file corpus in the public format (one result, one error)."""
    for name in ("callx-gather.data", "oob-load.data"):
        (tmp_path / name).write_text((ROOT / "tests" / "targets" / "ebpf" / "data" / name).read_text())
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "run_bpf_conformance.py"), str(tmp_path), "--jobs", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("2/2 passed")
