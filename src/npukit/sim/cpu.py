"""Which CPU numba compiles for, and which path each compiled kernel family takes there.

npukit's kernels come in families (the pccx INT4 GEMV, the FP8-as-storage GEMM): one portable build
that LLVM can compile for any CPU, and where it pays, a build that calls x86 intrinsics (``vpdpbusd``,
``vpermi2b``). A family's fast build is used only when two independent questions both say yes:

1. *Can LLVM compile it for the target numba compiles for?* numba compiles for the host CPU unless
   ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` say otherwise (to build caches for other machines, or
   to emulate them); an intrinsic that the target lacks is not an error LLVM reports, it aborts the
   process (``LLVM ERROR: Cannot select``). So the question is asked of LLVM itself, in a child process,
   with exactly numba's CPU name and feature string, before any kernel is compiled (`llvm_compiles`).
2. *Does this silicon run it, exactly?* A VM can advertise a feature it faults on (AMX, here), so the
   family's own trial runs in a child process and must reproduce a NumPy result (`choose`).

Both answers are remembered on disk (``~/.cache/npukit/cpu-paths.json``), keyed by everything they
depend on: the host's CPU model and flags, numba's target CPU and features, the numba/llvmlite/Python
versions and the family's own fingerprint; each costs a fraction of a second to a few seconds once.
The portable build is never a different answer, only a slower one: every family's builds are tested
bit-identical against the same NumPy reference (tests/sim/test_cpu.py, the CPU matrix).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

PORTABLE = "portable"
_TRIAL_TIMEOUT_S = 300.0  # a trial compiles its kernel first (seconds; minutes on a loaded machine)

# One tiny LLVM function per intrinsic a fast build calls: compiling it for the target is the test.
# Each entry: (result type, operand types, LLVM name).
INTRINSIC_IR = {
    "vpdpbusd": ("<16 x i32>", ("<16 x i32>",) * 3, "llvm.x86.avx512.vpdpbusd.512"),  # AVX-512 VNNI
    "vpermi2b": ("<64 x i8>", ("<64 x i8>",) * 3, "llvm.x86.avx512.vpermi2var.qi.512"),  # AVX-512 VBMI
    "vpmaddubsw": ("<16 x i16>", ("<32 x i8>",) * 2, "llvm.x86.avx2.pmadd.ub.sw"),  # AVX2 (256-bit)
    "vpmaddwd": ("<8 x i32>", ("<16 x i16>",) * 2, "llvm.x86.avx2.pmadd.wd"),  # AVX2 (256-bit)
    "pmaddubsw": ("<8 x i16>", ("<16 x i8>",) * 2, "llvm.x86.ssse3.pmadd.ub.sw.128"),  # SSSE3 (128-bit)
    "pmaddwd": ("<4 x i32>", ("<8 x i16>",) * 2, "llvm.x86.sse2.pmadd.wd"),  # SSE2 (128-bit)
}
# the feature names doctor shows for the target (LLVM's spelling)
SHOWN_FEATURES = ("ssse3", "sse4.2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni",
                  "avx512vbmi", "avxvnni", "amx-int8", "neon")


# the modules of the INT4 row-dot families (pccx GEMV/GEMM), fastest first: the kernels take the first
# one whose path is fast here (`npukit.targets.pccx.fast._nbkernels.SIMD`); speed figures name them all
INT4_FAMILIES = ("npukit.sim.nb_simd", "npukit.sim.nb_avx2", "npukit.sim.nb_ssse3")


def cache_dir() -> Path:
    """npukit's cache folder (``$XDG_CACHE_HOME/npukit`` or ``~/.cache/npukit``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "npukit"


@dataclass(frozen=True)
class CompileTarget:
    """The CPU numba generates code for: LLVM's CPU name and the feature string it is given."""

    arch: str  # platform.machine(): x86_64, aarch64, ...
    cpu: str  # LLVM CPU name (host's, or NUMBA_CPU_NAME)
    features: str  # LLVM feature string ("" = the CPU name's own defaults)
    origin: str  # "host" or the environment variables that chose it

    def explicit(self) -> dict[str, bool]:
        """Features the string switches on (+) or off (-); the rest follow the CPU name."""
        out: dict[str, bool] = {}
        for item in self.features.split(","):
            item = item.strip()
            if len(item) > 1 and item[0] in "+-":
                out[item[1:]] = item[0] == "+"
        return out

    def shown_features(self) -> dict[str, bool | None]:
        """The features doctor lists: True/False where the string says, None where the CPU name decides."""
        told = self.explicit()
        return {f: told.get(f) for f in SHOWN_FEATURES if f in told or not told}

    def key(self) -> str:
        return _digest(self.arch, self.cpu, self.features)


def compile_target() -> CompileTarget:
    """numba's JIT target, computed the way numba's CPU codegen computes it (``NUMBA_CPU_NAME`` and
    ``NUMBA_CPU_FEATURES`` honoured; ``generic`` alone means no extra features)."""
    import llvmlite.binding as ll
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features

    cpu = config.CPU_NAME or ll.get_host_cpu_name()
    if config.CPU_FEATURES is not None:
        features = config.CPU_FEATURES
        origin = "NUMBA_CPU_FEATURES" if "NUMBA_CPU_FEATURES" in os.environ else "NUMBA_CPU_NAME=generic"
    else:
        features = get_host_cpu_features()
        origin = "NUMBA_CPU_NAME + host features" if config.CPU_NAME else "host"
    return CompileTarget(platform.machine().lower(), cpu, features, origin)


def host_cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo``), or what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model name", "Hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _host_signature() -> str:
    """What a trial's outcome depends on besides the compile target: the silicon and the software."""
    import llvmlite
    import numba

    try:
        info = [ln for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith(("model name", "flags", "Features", "CPU part"))][:3]
    except OSError:
        info = [platform.processor()]
    return _digest(*info, sys.version, numba.__version__, llvmlite.__version__)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:24]


# ---------------------------------------------------------------------------------------- memo on disk
def _memo_path() -> Path:
    return cache_dir() / "cpu-paths.json"


def _memo_get(key: str) -> dict | None:
    try:
        entry = json.loads(_memo_path().read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return entry if isinstance(entry, dict) else None


def _memo_put(key: str, value: dict) -> None:
    path = _memo_path()
    try:
        try:
            known = json.loads(path.read_text())
            known = known if isinstance(known, dict) else {}
        except (OSError, ValueError):
            known = {}
        known[key] = value
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home only costs the checks again next time


# ------------------------------------------------------------------------------ question 1: LLVM
_LLVM_CHILD = """
import sys, llvmlite.binding as ll
ll.initialize_native_target(); ll.initialize_native_asmprinter()
rt, name, ops = sys.argv[3], sys.argv[4], sys.argv[5].split(";")
args = ", ".join(f"{t} %a{i}" for i, t in enumerate(ops))
ir = (f"declare {rt} @{name}({', '.join(ops)})\\n"
      f"define {rt} @f({args}) {{\\n"
      f"  %r = call {rt} @{name}({args})\\n  ret {rt} %r\\n}}\\n")
m = ll.parse_assembly(ir)
m.triple = ll.get_process_triple()
ll.Target.from_default_triple().create_target_machine(cpu=sys.argv[1], features=sys.argv[2]).emit_object(m)
"""


def llvm_compiles(intrinsic: str, target: CompileTarget | None = None) -> tuple[bool, str]:
    """(yes, why): whether LLVM can select ``intrinsic`` (a key of `INTRINSIC_IR`) for ``target``,
    asked of LLVM in a child process (a missing feature aborts the compiler, not raises)."""
    target = target or compile_target()
    if target.arch not in ("x86_64", "amd64"):
        return False, f"{target.arch} is not x86-64"
    import llvmlite

    key = "llvm:" + _digest(intrinsic, target.key(), llvmlite.__version__)
    known = _memo_get(key)
    if known is None:
        rt, ops, name = INTRINSIC_IR[intrinsic]
        try:
            done = subprocess.run([sys.executable, "-c", _LLVM_CHILD, target.cpu, target.features, rt, name,
                                   ";".join(ops)],
                                  capture_output=True, text=True, timeout=120)
            ok, err = done.returncode == 0, done.stderr
        except subprocess.TimeoutExpired:
            return False, f"LLVM did not compile {intrinsic} for {target.cpu} within 120 s"
        last = [ln for ln in err.splitlines() if "LLVM ERROR" in ln or "error" in ln.lower()]
        known = {"ok": ok, "error": (last[0] if last else err.strip()[-120:])[:160]}
        _memo_put(key, known)
    if known["ok"]:
        return True, f"LLVM selects {intrinsic} for {target.cpu}"
    return False, f"LLVM cannot select {intrinsic} for target {target.cpu} ({known['error']})"


# ------------------------------------------------------------------------ question 2: the silicon
@dataclass(frozen=True)
class Family:
    """A kernel family with a fast build: the intrinsics it needs and its trial
    (``module:function`` returning True when the fast build reproduces NumPy exactly)."""

    name: str
    fast: str  # the fast path's name, e.g. "avx512-vnni"
    intrinsics: tuple[str, ...]
    trial: str
    version: str = "1"  # bump when the fast build changes in a way the trial must see again
    doc: str = ""


@dataclass(frozen=True)
class KernelPath:
    """The path a family takes on this compile target and host, and why."""

    family: str
    path: str
    reason: str

    @property
    def fast(self) -> bool:
        return self.path != PORTABLE


_FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Make ``family`` known to `describe` and ``npukit doctor`` (each kernel module registers its own)."""
    _FAMILIES[family.name] = family
    return family


def describe(*modules: str) -> str:
    """One line for every printed speed figure: the CPU, numba's target and the path of each kernel
    family registered so far (``modules``: import these first, e.g. ``"npukit.sim.nb_simd"``)."""
    import importlib

    for module in modules:
        importlib.import_module(module)
    t = compile_target()
    target = t.cpu if t.origin == "host" else f"{t.cpu} via {t.origin}"
    paths = ", ".join(f"{name} {choose(fam).path}" for name, fam in sorted(_FAMILIES.items()))
    return f"CPU {host_cpu_model()} ({t.arch}, {os.cpu_count()} cores; numba target {target})" + (
        f"; kernels: {paths}" if paths else "")


def _forced_portable() -> bool:
    return os.environ.get("NPUKIT_SIMD", "").lower() in ("portable", "off", "0", "none")


_CHOSEN: dict[str, KernelPath] = {}


def choose(family: Family) -> KernelPath:
    """The path ``family`` takes here: its fast build when LLVM can compile every intrinsic it needs
    for numba's target *and* its trial ran exactly in a child process; else the portable build.
    Decided once per process, remembered on disk per host and target. ``NPUKIT_SIMD=portable``
    forces the portable builds everywhere."""
    if family.name in _CHOSEN:
        return _CHOSEN[family.name]
    target = compile_target()
    if _forced_portable():
        return _CHOSEN.setdefault(family.name, KernelPath(family.name, PORTABLE, "NPUKIT_SIMD=portable"))
    for intrinsic in family.intrinsics:
        ok, why = llvm_compiles(intrinsic, target)
        if not ok:
            return _CHOSEN.setdefault(family.name, KernelPath(family.name, PORTABLE, why))
    if in_trial():  # the trial's own child: it is here to run the fast build
        return _CHOSEN.setdefault(family.name, KernelPath(family.name, family.fast, "trial child"))
    key = "trial:" + _digest(family.name, family.version, family.trial, target.key(), _host_signature())
    known = _memo_get(key)
    if known is None:
        from npukit.progress import step

        with step(f"checking whether this CPU runs {family.name}'s {family.fast} build (once: a trial "
                  f"in a child process)"):
            known = _run_trial(family)
        if known.get("remember"):
            _memo_put(key, known)
    else:
        known = {**known, "reason": known["reason"] + " (remembered for this CPU and target)"}
    path = family.fast if known["ok"] else PORTABLE
    return _CHOSEN.setdefault(family.name, KernelPath(family.name, path, known["reason"]))


def _run_trial(family: Family) -> dict:
    """Run ``family.trial`` in a fresh interpreter (same environment, so the same compile target):
    an illegal instruction or an LLVM abort ends the child, not this process."""
    module, func = family.trial.split(":")
    code = f"import sys; from {module} import {func} as t; sys.exit(0 if t() else 3)"
    env = dict(os.environ, NPUKIT_CPU_TRIAL="1")  # a trial never recurses into another trial
    what = f"{family.fast} trial ({'+'.join(family.intrinsics)})"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=_TRIAL_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:  # a loaded machine, not a property of the CPU: not remembered
        why = f"{what} did not finish in {_TRIAL_TIMEOUT_S:.0f} s"
        return {"ok": False, "reason": why, "remember": False}
    rc = done.returncode
    if rc == 0:
        return {"ok": True, "reason": f"{what} ran exactly", "remember": True}
    if rc == 3:
        return {"ok": False, "reason": f"{what} gave a wrong result", "remember": True}
    if rc < 0:
        import signal

        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        return {"ok": False, "reason": f"{what} killed by {name}", "remember": True}
    tail = (done.stderr.strip().splitlines() or [""])[-1][:160]
    return {"ok": False, "reason": f"{what} failed (exit {rc}: {tail})", "remember": rc != 1}


def in_trial() -> bool:
    """True inside a trial's child process (its kernels must not ask for a trial again)."""
    return os.environ.get("NPUKIT_CPU_TRIAL") == "1"


# ------------------------------------------------------------------------------- separate builds
def njit_variant(f, name: str, options: dict, **bound):
    """``f`` (a plain Python function) compiled by numba under its own name with some globals bound,
    e.g. the intrinsic wrapper it calls (or none: the same code under another name, e.g. a serial twin
    of a parallel kernel). Each variant is a separate compiled function, so a portable build never
    types an intrinsic, and numba's disk cache (keyed by the qualified name) keeps the variants apart."""
    import numba as nb

    # nothing bound: the module's own globals (names defined later in the module still resolve)
    glb = {**f.__globals__, **bound} if bound else f.__globals__
    g = types.FunctionType(f.__code__, glb, name, f.__defaults__, f.__closure__)
    g.__qualname__ = name
    g.__doc__ = f.__doc__
    return nb.njit(**options)(g)
