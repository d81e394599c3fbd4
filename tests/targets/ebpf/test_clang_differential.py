"""Differential test against clang: one C file of mixed 32/64-bit arithmetic, shifts, extensions,
byte swaps, compares and a loop, compiled by clang for BPF (v1, v2, v3) and natively; the VM's output
must equal the native function's on random inputs (clang's C semantics are the oracle)."""

from __future__ import annotations

import ctypes
import random
import struct
import subprocess
from pathlib import Path

import pytest

from npukit.targets.ebpf.elf import load_elf
from npukit.targets.ebpf.helpers import alkali_helpers
from npukit.targets.ebpf.vm import Machine

from .conftest import CPUS, clang

SRC = Path(__file__).parent / "c" / "arith_mix.c"
NIN, NOUT = 4, 24


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> tuple[ctypes.CDLL, dict[str, Machine]]:
    cc = clang()
    if cc is None:
        pytest.fail("clang is needed for the differential test (apt-get install clang-14)")
    d = tmp_path_factory.mktemp("arith")
    subprocess.run([cc, "-O2", "-DNATIVE", "-shared", "-fPIC", str(SRC), "-o", str(d / "a.so")], check=True)
    native = ctypes.CDLL(str(d / "a.so"))
    native.arith_native.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    machines = {}
    for cpu in CPUS:
        obj = d / f"a.{cpu}.o"
        subprocess.run(
            [cc, "-target", "bpf", "-O2", f"-mcpu={cpu}", "-c", str(SRC), "-o", str(obj)], check=True
        )
        loaded = load_elf(obj.read_bytes(), helper_names={})
        machines[cpu] = Machine(loaded.program, alkali_helpers(), loaded.sections, entry=loaded.entry)
    return native, machines


def _inputs(rng: random.Random) -> list[int]:
    edge = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 63, (1 << 64) - 1)
    return [
        rng.choice(edge) if rng.random() < 0.3 else rng.getrandbits(rng.choice((8, 16, 32, 64)))
        for _ in range(NIN)
    ]


@pytest.mark.parametrize("cpu", CPUS)
def test_vm_matches_native_clang(cpu: str, builds: tuple[ctypes.CDLL, dict[str, Machine]]) -> None:
    native, machines = builds
    rng = random.Random(hash(cpu) & 0xFFFF)
    for trial in range(60):
        values = _inputs(rng)
        data = struct.pack(f"<{NIN}Q", *values)
        out = ctypes.create_string_buffer(8 * NOUT)
        want_r0 = native.arith_native(data, out)
        engine = "fast" if trial % 2 else "interp"
        res = machines[cpu].run(data, 8 * NOUT, "alkali", engine=engine)
        got, want = struct.unpack(f"<{NOUT}Q", res.output), struct.unpack(f"<{NOUT}Q", out.raw)
        diff = [i for i in range(NOUT) if got[i] != want[i]]
        assert not diff, f"out[{diff[0]}] for inputs {[hex(v) for v in values]} ({engine})"
        assert res.r0 & 0xFFFFFFFF == want_r0 & 0xFFFFFFFF
