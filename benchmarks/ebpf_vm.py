"""eBPF VM speed on loop-heavy firmware against the same C compiled natively by clang, in one run.

Run: ``python benchmarks/ebpf_vm.py [--checksum-bytes N] [--sort-words N] [--repeats R] [--json]``.

Programs: ``examples/alkali/checksum.v2.o`` (Fletcher-style sum over 1 MiB) and ``sort.v2.o``
(insertion sort of 32-bit words), both clang-14 ``-target bpf -O2``. The peer is the same C kernel
(``checksum_core.h`` / ``sort_core.h``) built here with ``clang -O2 -shared`` and called through ctypes.
Both sides are checked to produce the same result before anything is timed. Throughput is BPF
instructions retired per second; the native figure is the same instruction count divided by the native
time (BPF-equivalent instructions per second), so the ratio is native time / VM time. The reference
interpreter runs on a 1/16 slice to show what the translated fast path buys. Figures: ``measured``;
ratios ``derived``.
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from npukit.cli import ui
from npukit.evidence import Figure, Tier
from npukit.sim.cpu import describe as machine_line
from npukit.targets.ebpf.elf import load_elf
from npukit.targets.ebpf.helpers import alkali_helpers
from npukit.targets.ebpf.vm import Machine

SOURCE = "benchmarks/ebpf_vm.py"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "alkali"


def native_library(workdir: Path) -> ctypes.CDLL:
    cc = shutil.which("clang-14") or shutil.which("clang")
    if cc is None:
        raise SystemExit("clang is needed for the native peer (apt-get install clang-14)")
    src = workdir / "native.c"
    src.write_text(
        '#include "checksum_core.h"\n#include "sort_core.h"\n'
        "unsigned long checksum(const unsigned char *b, unsigned long n) { return checksum_words(b, n); }\n"
        "void sort(unsigned int *v, unsigned long n) { sort_words(v, n); }\n"
    )
    lib = workdir / "libnative.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{EXAMPLES}", str(src), "-o", str(lib)], check=True)
    dll = ctypes.CDLL(str(lib))
    dll.checksum.restype, dll.checksum.argtypes = ctypes.c_ulong, [ctypes.c_char_p, ctypes.c_ulong]
    dll.sort.restype, dll.sort.argtypes = None, [ctypes.c_void_p, ctypes.c_ulong]
    return dll


def machine(name: str) -> Machine:
    helpers = alkali_helpers()
    loaded = load_elf(
        (EXAMPLES / f"{name}.v2.o").read_bytes(), helper_names={n: i for i, n in helpers.names().items()}
    )
    return Machine(loaded.program, helpers, loaded.sections, entry=loaded.entry)


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_checksum(dll: ctypes.CDLL, nbytes: int, repeats: int) -> dict[str, Any]:
    data = random.Random(1).randbytes(nbytes)
    m = machine("checksum")
    res = m.run(data, 8, "alkali", budget=1 << 40)
    want = dll.checksum(data, len(data))
    if struct.unpack("<Q", res.output)[0] != want:
        raise SystemExit("checksum: the VM and native C disagree")
    t_vm = median_time(lambda: m.run(data, 8, "alkali", budget=1 << 40), repeats)
    t_native = median_time(lambda: dll.checksum(data, len(data)), max(repeats, 20))
    piece = data[: max(4, nbytes // 16)]
    n_piece = m.run(piece, 8, "alkali", engine="interp", budget=1 << 40).instructions
    t_interp = median_time(lambda: m.run(piece, 8, "alkali", engine="interp", budget=1 << 40), 1)
    return {
        "name": f"checksum {nbytes} B",
        "insns": res.instructions,
        "t_vm": t_vm,
        "t_native": t_native,
        "interp_ips": n_piece / t_interp,
    }


def bench_sort(dll: ctypes.CDLL, nwords: int, repeats: int) -> dict[str, Any]:
    rng = random.Random(2)
    words = [rng.getrandbits(32) for _ in range(nwords)]
    data = struct.pack(f"<{nwords}I", *words)
    m = machine("sort")
    res = m.run(data, len(data), "alkali", budget=1 << 40)
    buf = (ctypes.c_uint * nwords)(*words)
    dll.sort(buf, nwords)
    if list(struct.unpack(f"<{nwords}I", res.output)) != list(buf):
        raise SystemExit("sort: the VM and native C disagree")

    def native() -> None:
        b = (ctypes.c_uint * nwords)(*words)
        dll.sort(b, nwords)

    t_vm = median_time(lambda: m.run(data, len(data), "alkali", budget=1 << 40), repeats)
    t_native = median_time(native, max(repeats, 20))
    piece = data[: 4 * max(2, nwords // 4)]
    n_piece = m.run(piece, len(piece), "alkali", engine="interp", budget=1 << 40).instructions
    t_interp = median_time(lambda: m.run(piece, len(piece), "alkali", engine="interp", budget=1 << 40), 1)
    return {
        "name": f"insertion sort {nwords} words",
        "insns": res.instructions,
        "t_vm": t_vm,
        "t_native": t_native,
        "interp_ips": n_piece / t_interp,
    }


def figures(row: dict[str, Any]) -> dict[str, Figure]:
    src = f"{SOURCE}; {platform.python_implementation()} {platform.python_version()}, {platform.machine()}"
    vm = Figure(row["insns"] / row["t_vm"], "insn/s", Tier.MEASURED, f"fast path; {src}")
    native = Figure(
        row["insns"] / row["t_native"],
        "insn/s",
        Tier.MEASURED,
        f"clang -O2 native, BPF-equivalent instructions; {src}",
    )
    interp = Figure(row["interp_ips"], "insn/s", Tier.MEASURED, f"reference interpreter; {src}")
    return {
        "vm": vm,
        "native": native,
        "interp": interp,
        "vm_over_native": Figure(vm.value / native.value, "x", Tier.DERIVED, "vm insn/s / native insn/s"),
        "fast_over_interp": Figure(vm.value / interp.value, "x", Tier.DERIVED, "fast path / interpreter"),
    }


def main(argv: list[str] | None = None) -> int:
    print(machine_line(), file=sys.stderr)  # the CPU and kernel paths measured
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checksum-bytes", type=int, default=1 << 20)
    p.add_argument("--sort-words", type=int, default=600)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        dll = native_library(Path(tmp))
        rows = [
            bench_checksum(dll, args.checksum_bytes, args.repeats),
            bench_sort(dll, args.sort_words, args.repeats),
        ]
    out = [
        {"program": r["name"], "instructions": r["insns"], **{k: f.to_json() for k, f in figures(r).items()}}
        for r in rows
    ]
    if args.json:
        ui.emit_json({"benchmark": "ebpf_vm", "rows": out})
        return 0
    print("npukit eBPF VM vs native clang -O2 (same C, same run); median of", args.repeats)
    table = []
    for r in rows:
        f = figures(r)
        table.append(
            [
                r["name"],
                f"{r['insns']:,}",
                f["vm"].fmt(3),
                f["interp"].fmt(3),
                f["native"].fmt(3),
                f"1/{1 / f['vm_over_native'].value:,.0f}",
                f["fast_over_interp"].fmt(3),
            ]
        )
    ui.table(
        table,
        ["program", "BPF insns", "fast path", "interpreter", "native C", "VM/native", "fast/interp"],
        align="lrrrrrr",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
