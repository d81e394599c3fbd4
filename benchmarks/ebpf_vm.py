"""eBPF VM speed: the JIT, the fast path and the interpreter against the same C compiled natively.

Run: ``python benchmarks/ebpf_vm.py [--scale S] [--repeats R] [--json]``.

Programs (the standard benchmark set: prime sieve, memcpy, strcmp-like scan, checksum, sort): each is
a C kernel (``benchmarks/ebpf_programs/*_core.h``, ``examples/alkali/{checksum,sort}_core.h``) wrapped
as Alkali firmware (``bpf_prog(in, out, len)``), built here by clang-14 ``-O2 -fno-builtin -target
bpf -mcpu=v2`` and, for the peer, by the same clang ``-O2 -fno-builtin`` natively (called through
ctypes; no libc memset/memcpy on either side). Every engine's result is checked against the native
one before anything is timed. Throughput is BPF instructions retired
per second; the native figure is the same instruction count over the native time (BPF-equivalent
instructions per second). The interpreter runs a smaller input. ``proven`` says whether the verifier
accepted the program, so the JIT ran its memory accesses unchecked. Our figures are ``measured`` on
the CPU named in the output; ratios ``derived``. Published figures of other VMs are quoted, not
measured here.
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npukit.cli import ui
from npukit.evidence import Figure, Tier
from npukit.sim.cpu import describe as machine_line
from npukit.sim.cpu import host_cpu_model
from npukit.targets.ebpf.elf import load_elf
from npukit.targets.ebpf.helpers import alkali_helpers
from npukit.targets.ebpf.vm import Machine

SOURCE = "benchmarks/ebpf_vm.py"
ROOT = Path(__file__).resolve().parents[1]
INCLUDES = (ROOT / "benchmarks" / "ebpf_programs", ROOT / "examples" / "alkali")
# eunomia-bpf/bpf-benchmark (2023), other hardware: quoted for scale, not measured here
PUBLISHED = "uBPF interpreter 169-239 M insn/s, rbpf interpreter 312-506 M, uBPF JIT ~1.8 G"


@dataclass(frozen=True)
class Program:
    name: str
    header: str
    body: str  # C statements of bpf_prog(in, out, len) returning the result as unsigned long r
    native: str  # the same call for the native peer: unsigned long run(in, out, len)
    input_bytes: Callable[[int], bytes]
    output_bytes: Callable[[int], int]
    size: int  # input bytes at scale 1


def _words(n: int) -> bytes:
    rng = random.Random(2)
    return b"".join(rng.getrandbits(32).to_bytes(4, "little") for _ in range(n // 4))


def _halves(n: int) -> bytes:
    half = random.Random(3).randbytes(n // 2)
    return half + half


SORT_BODY = (
    "for (unsigned long i = 0; i < len; i++) out[i] = in[i];"
    " sort_words((unsigned int *)out, len / 4); r = len / 4;"
)
PROGRAMS = (
    Program("prime sieve", "sieve_core.h", "r = sieve(out, len);", "r = sieve(out, len);",
            lambda n: bytes(n), lambda n: n, 1 << 16),
    Program("memcpy", "memcpy_core.h", "r = copy_bytes(out, in, len);", "r = copy_bytes(out, in, len);",
            lambda n: random.Random(1).randbytes(n), lambda n: n, 1 << 18),
    Program("strcmp-like scan", "strcmp_core.h", "r = first_difference(in, len);",
            "r = first_difference(in, len);", _halves, lambda n: 0, 1 << 18),
    Program("checksum", "checksum_core.h", "r = checksum_words(in, len);", "r = checksum_words(in, len);",
            lambda n: random.Random(1).randbytes(n), lambda n: 0, 1 << 18),
    Program("insertion sort", "sort_core.h", SORT_BODY, SORT_BODY, _words, lambda n: n, 2400),
)


def build(workdir: Path) -> tuple[dict[str, Machine], ctypes.CDLL]:
    cc = shutil.which("clang-14") or shutil.which("clang")
    if cc is None:
        raise SystemExit("clang is needed (apt-get install clang-14)")
    inc = [f"-I{d}" for d in INCLUDES]
    machines, native = {}, []
    for i, p in enumerate(PROGRAMS):
        src = workdir / f"prog{i}.c"
        src.write_text(f'#include "{p.header}"\nint bpf_prog(unsigned char *in, unsigned char *out, '
                       f"unsigned long len)\n{{ unsigned long r; {p.body} return (int)r; }}\n")
        obj = workdir / f"prog{i}.o"
        flags = ["-O2", "-fno-builtin", "-target", "bpf", "-mcpu=v2", *inc]
        subprocess.run([cc, *flags, "-c", str(src), "-o", str(obj)], check=True)
        helpers = alkali_helpers()
        loaded = load_elf(obj.read_bytes(), helper_names={n: k for k, n in helpers.names().items()})
        machines[p.name] = Machine(loaded.program, helpers, loaded.sections, entry=loaded.entry)
        native.append(f'#include "{p.header}"\nunsigned long run{i}(unsigned char *in, '
                      f"unsigned char *out, unsigned long len) {{ unsigned long r; {p.native} return r; }}\n")
    lib_src, lib = workdir / "native.c", workdir / "libnative.so"
    lib_src.write_text("\n".join(native))
    native_flags = ["-O2", "-fno-builtin", "-shared", "-fPIC", *inc]
    subprocess.run([cc, *native_flags, str(lib_src), "-o", str(lib)], check=True)
    dll = ctypes.CDLL(str(lib))
    for i in range(len(PROGRAMS)):
        fn = getattr(dll, f"run{i}")
        fn.restype, fn.argtypes = ctypes.c_ulong, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulong]
    return machines, dll


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench(i: int, p: Program, m: Machine, dll: ctypes.CDLL, scale: float, repeats: int) -> dict[str, Any]:
    n = max(8, int(p.size * scale) // 8 * 8)
    data, out_n = p.input_bytes(n), p.output_bytes(n)
    inbuf = ctypes.create_string_buffer(data, len(data))
    outbuf = ctypes.create_string_buffer(max(out_n, 1))
    fn = getattr(dll, f"run{i}")
    want = fn(inbuf, outbuf, len(data)) & 0xFFFFFFFF
    row: dict[str, Any] = {"name": f"{p.name} ({n:,} B)"}
    for engine in ("jit", "fast"):
        res = m.run(data, out_n, "alkali", budget=1 << 40, engine=engine)
        if res.r0 & 0xFFFFFFFF != want or (out_n and res.output != outbuf.raw[:out_n]):
            raise SystemExit(f"{p.name}: the {engine} engine and native C disagree")
        row["insns"] = res.instructions
        row[engine] = median_time(lambda e=engine: m.run(data, out_n, "alkali", budget=1 << 40, engine=e),
                                  repeats if engine == "jit" else 1)
    piece = data[: max(8, n // 64) // 8 * 8]
    row["interp_insns"] = m.run(piece, p.output_bytes(len(piece)), "alkali", engine="interp").instructions
    row["interp"] = median_time(
        lambda: m.run(piece, p.output_bytes(len(piece)), "alkali", engine="interp", budget=1 << 40), 1)
    row["native"] = median_time(lambda: fn(inbuf, outbuf, len(data)), max(repeats, 20))
    row["proven"] = m.jit("alkali", out_n).proven
    return row


def figures(row: dict[str, Any], cpu: str) -> dict[str, Figure]:
    src = f"{SOURCE}; {cpu}; {platform.python_implementation()} {platform.python_version()}"
    ips = {e: Figure(row["insns"] / row[e], "insn/s", Tier.MEASURED, f"{e}; {src}") for e in ("jit", "fast")}
    interp = Figure(row["interp_insns"] / row["interp"], "insn/s", Tier.MEASURED, f"interpreter; {src}")
    native = Figure(row["insns"] / row["native"], "insn/s", Tier.MEASURED,
                    f"clang -O2 native, BPF-equivalent instructions; {src}")
    return {
        **ips,
        "interp": interp,
        "native": native,
        "jit_over_native": Figure(ips["jit"].value / native.value, "x", Tier.DERIVED, "jit / native"),
    }


def main(argv: list[str] | None = None) -> int:
    print(machine_line(), file=sys.stderr)  # the CPU and kernel paths measured
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0, help="input size factor (default 1)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    cpu = host_cpu_model()
    with tempfile.TemporaryDirectory() as tmp:
        machines, dll = build(Path(tmp))
        rows = [bench(i, prog, machines[prog.name], dll, args.scale, args.repeats)
                for i, prog in ui.track(list(enumerate(PROGRAMS)), label="eBPF benchmarks")]
    out = [{"program": r["name"], "instructions": r["insns"], "proven": r["proven"],
            **{k: f.to_json() for k, f in figures(r, cpu).items()}} for r in rows]
    if args.json:
        ui.emit_json({"benchmark": "ebpf_vm", "cpu": cpu, "published": PUBLISHED, "rows": out})
        return 0
    print(f"npukit eBPF engines vs native clang -O2 (same C) on {cpu}: BPF instructions per second, "
          f"measured (JIT median of {args.repeats}); JIT/native derived")
    table = []
    for r in rows:
        f = figures(r, cpu)
        table.append([r["name"], f"{r['insns']:,}", "yes" if r["proven"] else "no",
                      *(f"{f[k].value / 1e6:,.1f}" for k in ("jit", "fast", "interp", "native")),
                      f"1/{1 / f['jit_over_native'].value:,.1f}"])
    ui.table(table, ["program", "BPF insns", "proven", "JIT M/s", "fast M/s", "interp M/s", "native M/s",
                     "JIT/native"], align="lrlrrrrr", width=None)
    print(f"published, other hardware, not measured here: {PUBLISHED} (eunomia-bpf/bpf-benchmark, 2023)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
