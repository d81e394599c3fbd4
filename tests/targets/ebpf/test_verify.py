"""The static verifier (``npukit bpf verify``): labelled safe/unsafe programs, exact rejection pcs.

Labels are the programs' own: C firmware under ``verify/`` (``safe_*`` / ``unsafe_*``, built here by
clang-14 for BPF) and assembler texts whose safety follows from RFC 9669 and the ABI (r1 input, length
in r2 for ubpf, r3 for alkali). Nothing is compared with output of the verifier itself.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from npukit.cli.main import main
from npukit.targets.ebpf import isa
from npukit.targets.ebpf.analysis import Options, analyze
from npukit.targets.ebpf.asm import assemble
from npukit.targets.ebpf.helpers import alkali_helpers, conformance_helpers

from .conftest import clang

C_DIR = Path(__file__).parent / "verify"
C_FILES = sorted(C_DIR.glob("*.c"))


def verdict(text: str, **options):
    program = isa.decode(isa.encode(assemble(text)))
    helpers = alkali_helpers() if options.get("abi") == "alkali" else conformance_helpers()
    return analyze(program, helpers, options=Options(**options))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    cc = clang()
    if cc is None:
        pytest.fail("clang-14 is needed to build the labelled C programs (scripts/ensure_debian_deps.sh)")
    out = tmp_path_factory.mktemp("bpf")
    objs = {}
    for src in C_FILES:
        obj = out / f"{src.stem}.o"
        subprocess.run([cc, "-O2", "-target", "bpf", "-mcpu=v2", "-c", str(src), "-o", str(obj)], check=True)
        objs[src.stem] = obj
    return objs


def test_c_corpus_has_both_labels() -> None:
    names = [p.stem for p in C_FILES]
    assert sum(n.startswith("safe_") for n in names) >= 4 and sum(n.startswith("unsafe_") for n in names) >= 4


@pytest.mark.parametrize("name", [p.stem for p in C_FILES])
def test_c_program_verdict(name: str, built: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bpf", "verify", str(built[name]), "--json"])
    report = json.loads(capsys.readouterr().out)
    expected = "accept" if name.startswith("safe_") else "reject"
    assert report["verdict"] == expected, report
    assert rc == (0 if expected == "accept" else 1)
    assert all(isinstance(e["pc"], int) and e["message"] for e in report["errors"])


CHECKSUM = """
    mov %r0, 0
    mov %r4, 0
loop:
    jge %r4, %r2, done
    mov %r5, %r1
    add %r5, %r4
    ldxb %r6, [%r5]
    add %r0, %r6
    add %r4, 1
    ja loop
done:
    exit
"""


def test_bounded_checksum_loop_is_accepted() -> None:
    assert verdict(CHECKSUM).accepted


def test_the_alkali_length_register_is_r3() -> None:
    assert not verdict(CHECKSUM, abi="alkali", output_size=8).accepted  # r2 is the output buffer there
    assert verdict(CHECKSUM.replace("%r2, done", "%r3, done"), abi="alkali", output_size=8).accepted


def test_read_one_past_the_checked_length_is_rejected_at_its_pc() -> None:
    text = """
    jlt %r2, 8, short
    ldxdw %r0, [%r1]
    ldxb %r3, [%r1+8]
    exit
short:
    mov %r0, 0
    exit
"""
    v = verdict(text)
    assert [e.pc for e in v.errors] == [2]
    assert "input length r2" in v.errors[0].message


@pytest.mark.parametrize(
    ("text", "pc", "phrase"),
    [
        ("mov %r0, %r3\nexit", 0, "r3 is read before it is written"),
        ("mov %r1, 0\nexit", 1, "r0 is not set before exit"),
        ("ldxdw %r0, [%r10-8]\nexit", 0, "not initialised"),
        ("stdw [%r10-520], 1\nmov %r0, 0\nexit", 0, "outside the 512-byte frame"),
        ("mov %r2, 5\nldxb %r0, [%r2]\nexit", 1, "not a pointer"),
        ("mov %r0, %r1\nmul %r0, 2\nexit", 1, "mul on a pointer"),
        ("mov %r2, 100\ncall 1\nmov %r0, 0\nexit", 1, "cannot hold r2"),
        ("mov %r0, 0\nl:\nadd %r0, 1\nja l\nexit", 1, "infinite loop"),
        ("mov %r0, 5\nl:\njeq %r0, 5, l\nexit", 1, "infinite loop"),
        ("stxdw [%r10-8], %r1\nldxdw %r2, [%r10-8]\nmul %r2, 3\nmov %r0, 0\nexit", 2, "mul on a pointer"),
    ],
)
def test_unsafe_assembler_is_rejected_with_its_reason(text: str, pc: int, phrase: str) -> None:
    v = verdict(text)
    assert not v.accepted
    assert any(e.pc == pc and phrase in e.message for e in v.errors), v.errors


@pytest.mark.parametrize(
    ("text", "safe"),
    [
        # end = input + len, then a pointer compared against it (the packet-pointer idiom)
        ("mov %r3, %r1\nadd %r3, %r2\nmov %r4, %r1\nadd %r4, 8\njgt %r4, %r3, out\nldxdw %r0, [%r1]\nexit\n"
         "out:\nmov %r0, 0\nexit", True),
        ("mov %r3, %r1\nadd %r3, %r2\nmov %r4, %r1\nadd %r4, 8\njgt %r4, %r3, out\nldxdw %r0, [%r1+1]\nexit\n"
         "out:\nmov %r0, 0\nexit", False),
        # a pointer walking to the end
        ("mov %r0, 0\nmov %r3, %r1\nadd %r3, %r2\nmov %r4, %r1\nl:\njge %r4, %r3, out\nldxb %r5, [%r4]\n"
         "add %r0, %r5\nadd %r4, 1\nja l\nout:\nexit", True),
        ("mov %r0, 0\nmov %r3, %r1\nadd %r3, %r2\nmov %r4, %r1\nl:\njgt %r4, %r3, out\nldxb %r5, [%r4]\n"
         "add %r0, %r5\nadd %r4, 1\nja l\nout:\nexit", False),
        # a 32-bit loop index, and a BPF-to-BPF callee that checks the length itself
        ("mov %r0, 0\nmov32 %r4, 0\nl:\njge %r4, %r2, out\nmov %r5, %r1\nadd %r5, %r4\nldxb %r6, [%r5]\n"
         "add %r0, %r6\nadd32 %r4, 1\nja l\nout:\nexit", True),
        ("call local f\nexit\nf:\nmov %r0, 0\njlt %r2, 1, r\nldxb %r0, [%r1]\nr:\nexit", True),
        ("call local f\nexit\nf:\nmov %r0, 0\njlt %r2, 1, r\nldxh %r0, [%r1]\nr:\nexit", False),
        # a helper reading the stack
        ("stdw [%r10-8], 0\nmov %r1, %r10\nadd %r1, -8\nmov %r2, 8\ncall 1\nmov %r0, 0\nexit", True),
        ("stw [%r10-8], 0\nmov %r1, %r10\nadd %r1, -8\nmov %r2, 8\ncall 1\nmov %r0, 0\nexit", False),
    ],
)
def test_length_idioms(text: str, safe: bool) -> None:
    assert verdict(text).accepted == safe


def test_a_helper_call_sets_r0_and_clobbers_r1_to_r5() -> None:
    assert verdict("mov %r1, 3\ncall 3\nadd %r0, 1\nexit").accepted  # sqrti's result in r0
    v = verdict("mov %r1, 3\ncall 3\nmov %r0, %r1\nexit")
    assert [(e.pc, e.message) for e in v.errors] == [(2, "r1 is read before it is written")]


def test_helper_size_argument_tied_to_the_length_is_accepted() -> None:
    assert verdict("call 1\nmov %r0, 0\nexit").accepted  # memfrob(input, len): r2 is the length


def test_division_is_never_a_fault_under_rfc9669_but_is_under_the_fork() -> None:
    text = "mov %r0, 7\ndiv %r0, %r2\nexit"
    assert verdict(text).accepted
    forked = verdict(text, profile="alkali-fork")
    assert [e.pc for e in forked.errors] == [1] and "may be 0" in forked.errors[0].message


def test_unbounded_recursion_exceeds_eight_frames() -> None:
    v = verdict("f:\ncall local f\nmov %r0, 0\nexit")
    assert any("8 frames" in e.message for e in v.errors)


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.s", tmp_path / "bad.s"
    good.write_text(CHECKSUM)
    bad.write_text("ldxw %r0, [%r1+4]\nexit\n")
    assert main(["bpf", "verify", str(good)]) == 0
    assert main(["bpf", "verify", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "pc 0:" in out and "reject (1 reason)" in out
    assert main(["bpf", "verify", str(tmp_path / "missing.s")]) == 2
    (tmp_path / "junk.s").write_text("frobnicate %r0\n")
    assert main(["bpf", "verify", str(tmp_path / "junk.s")]) == 2


EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "alkali"
SHIPPED = sorted(EXAMPLES.glob("*.o")) + sorted(EXAMPLES.glob("*/*.o"))


def test_every_example_folder_ships_firmware() -> None:
    names = {p.relative_to(EXAMPLES).as_posix() for p in SHIPPED}
    assert {"checksum.v1.o", "sort.v3.o", "filter.v2.o", "add_vta.v2.o", "cnn/cnn_classify.v1.o"} <= names


@pytest.mark.parametrize("obj", SHIPPED, ids=lambda p: p.relative_to(EXAMPLES).as_posix())
def test_shipped_alkali_firmware_is_accepted(obj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the device's own sizes (64 MiB in and out) are the default for --abi alkali
    rc = main(["bpf", "verify", str(obj), "--abi", "alkali", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert (rc, report["verdict"], report["errors"]) == (0, "accept", [])


def test_alkali_store_one_past_the_device_output_is_rejected_at_its_pc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # r2 is the 64 MiB output buffer: its last byte is r2+0x3ffffff (pc 3), the store at pc 4 one past it
    src = tmp_path / "oob.s"
    src.write_text("mov %r0, 7\nmov %r4, %r2\nadd %r4, 0x3ffffff\nstxb [%r4], %r0\nstxb [%r4+1], %r0\nexit\n")
    rc = main(["bpf", "verify", str(src), "--abi", "alkali", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and [e["pc"] for e in report["errors"]] == [4]
    assert "may pass the end of output, 67108864 bytes" in report["errors"][0]["message"]


def test_helper_4_get_args_is_an_alkali_helper() -> None:
    assert alkali_helpers().names()[4] == "get_args"
    ok = verdict("mov %r1, %r2\nmov %r2, 64\ncall 4\nexit\n", abi="alkali", output_size=64)
    too_long = verdict("mov %r1, %r2\nmov %r2, 65\ncall 4\nexit\n", abi="alkali", output_size=64)
    assert ok.accepted and [f.pc for f in too_long.errors] == [2]
