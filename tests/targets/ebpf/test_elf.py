"""clang-built firmware objects (examples/alkali, -mcpu=v1/v2/v3) against the same C compiled natively."""

from __future__ import annotations

import ctypes
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from npukit.targets.ebpf.elf import load_elf
from npukit.targets.ebpf.errors import ElfError
from npukit.targets.ebpf.helpers import HelperRegistry, IdentityTflite, alkali_helpers
from npukit.targets.ebpf.vm import Machine

from .conftest import CPUS, EXAMPLES, clang


def machine(name: str, cpu: str, *, legacy: bool = False, helpers: HelperRegistry | None = None) -> Machine:
    helpers = helpers or alkali_helpers(tflite=IdentityTflite())
    names = {n: i for i, n in helpers.names().items()}
    loaded = load_elf(
        (EXAMPLES / f"{name}.{cpu}.o").read_bytes(), legacy_relocations=legacy, helper_names=names
    )
    return Machine(loaded.program, helpers, loaded.sections, entry=loaded.entry)


@pytest.mark.parametrize("cpu", CPUS)
def test_checksum_matches_native_c(cpu: str, native_lib: ctypes.CDLL) -> None:
    data = random.Random(7).randbytes(4099)
    want = native_lib.checksum(data, len(data))
    for engine in ("fast", "interp"):
        res = machine("checksum", cpu).run(data, 8, "alkali", engine=engine)
        assert struct.unpack("<Q", res.output)[0] == want
        assert res.r0 == want & 0xFFFFFFFF or res.r0 == (want & 0xFFFFFFFF) | (0xFFFFFFFF << 32)
        assert res.printed == ["checksum done\n"]


@pytest.mark.parametrize("cpu", CPUS)
def test_sort_matches_native_c(cpu: str, native_lib: ctypes.CDLL) -> None:
    words = [random.Random(3).getrandbits(32) for _ in range(1)] + random.Random(5).sample(
        range(1 << 32), 150
    )
    data = struct.pack(f"<{len(words)}I", *words)
    buf = (ctypes.c_uint * len(words))(*words)
    native_lib.sort(buf, len(words))
    res = machine("sort", cpu).run(data, len(data), "alkali")
    assert list(struct.unpack(f"<{len(words)}I", res.output)) == list(buf)
    assert res.r0 == len(words)


def test_v1_v2_v3_run_identically() -> None:
    data = bytes([40]) + random.Random(11).randbytes(300)
    runs = [machine("filter", cpu).run(data, 512, "alkali") for cpu in CPUS]
    assert len({(r.r0, r.output, tuple(r.printed)) for r in runs}) == 1
    kept = [b for b in data[1:] if b >= 40]
    assert runs[0].output[: 4 + len(kept)] == struct.pack("<I", len(kept)) + bytes(kept)
    assert runs[0].printed == ["filter: kept some bytes\n"]


def _sum_engine(model: bytes, inputs: bytes, delegate: str) -> bytes:
    """A stand-in TFLite engine: int8 element-wise sum of the two input halves."""
    half = len(inputs) // 2
    return bytes((a + b) & 0xFF for a, b in zip(inputs[:half], inputs[half:], strict=True))


@pytest.mark.parametrize("cpu", CPUS)
def test_add_firmware_strings_and_helper_call(cpu: str) -> None:
    model, vectors = bytes(1024), bytes([5, 8, 2, 3, 2, 4, 2, 2])
    res = machine("add_vta", cpu, helpers=alkali_helpers(tflite=_sum_engine)).run(
        model + vectors, 4, "alkali"
    )
    assert res.output == bytes([7, 12, 4, 5])
    assert res.printed == ["ADD on VTA: running the model\n", "ADD on VTA: all outputs match\n"]
    assert res.r0 & 0xFFFFFFFF == 0xFFFFFFFF  # return -1
    assert res.calls == [("tflite_vta", (0x2_0000_0000, 0x3_0000_0000, 8, 4, 1024))]


@pytest.mark.parametrize("cpu", CPUS)
def test_legacy_relocations_reproduce_the_forks_double_print(cpu: str) -> None:
    model, vectors = bytes(1024), bytes([5, 8, 2, 3, 2, 4, 2, 2])
    res = machine("add_vta", cpu, legacy=True).run(model + vectors, 4, "alkali")
    # identity double: output = first input vector, so the check fails; the fork prints string 0 twice
    assert res.printed == ["ADD on VTA: running the model\n"] * 2
    fixed = machine("add_vta", cpu).run(model + vectors, 4, "alkali")
    assert fixed.printed[1] == "ADD on VTA: output differs from the expected sums\n"


def _patched(name: str, offset: int, data: bytes) -> bytes:
    raw = bytearray((EXAMPLES / name).read_bytes())
    raw[offset : offset + len(data)] = data
    return bytes(raw)


def test_malformed_objects_give_typed_errors() -> None:
    good = (EXAMPLES / "filter.v1.o").read_bytes()
    with pytest.raises(ElfError, match="not BPF"):
        load_elf(_patched("filter.v1.o", 18, struct.pack("<H", 62)))  # EM_X86_64
    with pytest.raises(ElfError):
        load_elf(good[:200])
    with pytest.raises(ElfError, match="64-bit"):
        load_elf(_patched("filter.v1.o", 4, b"\x01"))  # ELFCLASS32
    with pytest.raises(ElfError, match="unknown helper 'print'"):
        load_elf(good, helper_names={})
    with pytest.raises(ElfError, match="no executable section 'xdp'"):
        load_elf(good, section="xdp", helper_names={"print": 1})


def test_unsupported_relocation_type_is_named() -> None:
    from elftools.elf.elffile import ELFFile

    raw = bytearray((EXAMPLES / "filter.v1.o").read_bytes())
    with open(EXAMPLES / "filter.v1.o", "rb") as f:
        rel = ELFFile(f).get_section_by_name(".rel.text")
        offset = rel["sh_offset"]
    raw[offset + 8] = 3  # first entry's r_info type byte: R_BPF_64_ABS32 on code
    with pytest.raises(ElfError, match="unsupported relocation type 3"):
        load_elf(bytes(raw), helper_names={"print": 1})


@pytest.mark.skipif(clang() is None, reason="clang-14 not installed")
def test_rebuild_matches_committed_objects(tmp_path: Path) -> None:
    subprocess.run(
        [str(EXAMPLES / "build.sh"), str(tmp_path)],
        check=True,
        env={"PATH": "/usr/bin:/bin", "CLANG": clang() or "clang-14"},
    )
    for obj in sorted(EXAMPLES.glob("*.o")):
        fresh = load_elf((tmp_path / obj.name).read_bytes(), helper_names={"print": 1})
        committed = load_elf(obj.read_bytes(), helper_names={"print": 1})
        assert fresh.program == committed.program, obj.name
        assert [bytes(r.data) for r in fresh.sections] == [bytes(r.data) for r in committed.sections]


def test_clang_present_for_the_suite() -> None:
    assert shutil.which("clang-14") or shutil.which("clang"), "make test installs clang-14"


def test_alkali_fork_profile_refuses_what_the_board_cannot_run() -> None:
    from npukit.targets.ebpf.errors import VerifyError

    helpers = alkali_helpers(tflite=IdentityTflite())
    names = {n: i for i, n in helpers.names().items()}

    def fork(obj: str) -> Machine:
        loaded = load_elf((EXAMPLES / obj).read_bytes(), helper_names=names)
        return Machine(loaded.program, helpers, loaded.sections, entry=loaded.entry, profile="alkali-fork")

    with pytest.raises(VerifyError, match="JMP32"):
        fork("add_vta.v3.o")
    with pytest.raises(VerifyError, match="BPF-to-BPF calls"):
        fork("filter.v1.o")
    res = fork("add_vta.v1.o").run(bytes(1024) + bytes([5, 8, 2, 3, 2, 4, 2, 2]), 4, "alkali")
    assert res.output == bytes([5, 8, 2, 3])  # the identity double: the v1 build loads and runs


def test_run_firmware_entry_point_for_the_device() -> None:
    from npukit import registry

    run_firmware = registry.get("ebpf").resolve("run_firmware")
    elf = (EXAMPLES / "add_vta.v2.o").read_bytes()
    res = run_firmware(elf, bytes(1024) + bytes([5, 8, 2, 3, 2, 4, 2, 2]), 4, tflite=_sum_engine)
    assert res.output == bytes([7, 12, 4, 5]) and res.printed[-1] == "ADD on VTA: all outputs match\n"
