"""npukit's smoke set on aarch64 (user-mode QEMU) against the same commands run natively: bit-identical.

    .venv/bin/python scripts/aarch64_smoke.py [--only fp8-gemm] [--fresh-numba-cache] [--report FILE]

Sets up (or finds cached) an arm64 Debian Python with npukit's dependencies from the registries
(scripts/aarch64_root.py says how), then runs each smoke command twice, natively with this Python and
under ``qemu-aarch64-static``, both from the same source tree (``--src``, default this checkout's
src/, run from a content-addressed copy: scripts/staged_src.py), and compares their ``--json`` results
field by field: tokens, cycles, check verdicts, every derived figure must be equal as parsed JSON
(floats too: JSON keeps a float's shortest round-trip form, so equal text is equal bits). Fields
that are host measurements (wall times, RSS) or name the host's kernel path are listed per command
in ``SMOKE`` and left out of the comparison; host-BLAS statistics are compared to 1e-12 relative.

Each side gets its own numba cache in the cache folder (``numba-x86_64``, ``numba-aarch64``, or
``numba-aarch64-<cpu>`` with ``--guest-cpu``); the first emulated run compiles every kernel under
emulation (minutes), later runs load the cache.

Exit status: 0 every command identical; 1 a command failed or differed; 3 the recipe could not be
set up here (the report names the step and why). ``--report FILE`` writes the whole result as JSON.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aarch64_root import RecipeError, Root, default_cache, log
from npukit.sim.cpu import host_cpu_model
from staged_src import stage_source

REPO = Path(__file__).resolve().parent.parent
CLOSE_REL = 1e-12  # relative; host-BLAS float64 statistics only (Smoke.host_blas)
HEARTBEAT_S = 20.0  # a still-running command says so this often
RESULT_KEYS = ("rc", "seconds", "cpu_seconds", "timed_out", "stderr_tail")


@dataclass(frozen=True)
class Smoke:
    """One smoke command: its npukit argv, the JSON fields that are host facts (not compared), the
    verdict fields that must be true on both sides, and host-BLAS statistics (compared to CLOSE_REL)."""

    name: str
    argv: tuple[str, ...]
    host_fields: tuple[str, ...] = ()
    verdicts: tuple[str, ...] = ()
    # float64 statistics computed with numpy's matmul/dot, i.e. OpenBLAS, whose kernels (summation
    # order, FMA) are picked per CPU at run time: numpy promises no bits across CPUs for them, so
    # they are compared to CLOSE_REL, not bit for bit
    host_blas: tuple[str, ...] = ()


MEASURED = "<tier measured>"  # every figure whose tier is "measured" (wall times, RSS, ms)
SMOKE = (
    Smoke("demo-tern", ("demo", "tern", "--json")),
    Smoke("fp8-gemm", ("fp8", "gemm", "--m", "16", "--n", "512", "--k", "512", "--check", "--json"),
          # simd: the kernel path this CPU takes (x86 VNNI/VBMI or portable); tops = work / measured ms
          host_fields=(MEASURED, "simd", "tops"), verdicts=("bit_identical",),
          host_blas=("vs_fp64_of_fp8_weights.*",)),
    Smoke("pccx-generate", ("generate", "--target", "pccx", "--max-new-tokens", "4", "--json"),
          # throughputs are prompt tokens / measured seconds; setup_seconds is measured too
          host_fields=(MEASURED, "stats.figures.*_tok_per_s", "stats.backend.setup_seconds")),
    Smoke("formats", ("formats", "--json")),
)


def parse_json(stdout: str) -> object:
    """The JSON object a command printed (`demo tern` prints a title line before it)."""
    start = stdout.find("{")
    if start < 0:
        raise ValueError("no JSON object in the output")
    return json.loads(stdout[start:])


def host_paths(obj: object, patterns: tuple[str, ...], path: str = "") -> set[str]:
    """Dotted paths in ``obj`` that ``patterns`` (fnmatch globs) match; the pattern MEASURED matches
    every figure whose evidence tier is "measured" (docs/evidence.md), wherever it is."""
    hits: set[str] = set()
    if isinstance(obj, dict):
        for key, value in obj.items():
            sub = f"{path}.{key}" if path else str(key)
            measured = isinstance(value, dict) and value.get("tier") == "measured"
            if (measured and MEASURED in patterns) or any(fnmatch.fnmatchcase(sub, p) for p in patterns):
                hits.add(sub)
            else:
                hits |= host_paths(value, patterns, sub)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            hits |= host_paths(value, patterns, f"{path}[{i}]")
    return hits


def differences(a: object, b: object, skip: set[str], close: frozenset[str] = frozenset(),
                path: str = "") -> list[str]:
    """Every path where ``a`` and ``b`` differ in value or JSON type (1 and 1.0 differ), except
    ``skip``; floats at a path in ``close`` may differ by CLOSE_REL (relative)."""
    if path in skip:
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        def at(k: object) -> str:
            return f"{path}.{k}" if path else str(k)
        out = [f"{at(k)}: only on one side" for k in sorted(set(a) ^ set(b), key=str) if at(k) not in skip]
        for k in sorted(set(a) & set(b), key=str):
            out += differences(a[k], b[k], skip, close, at(k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, skip, close, f"{path}[{i}]")]
    if path in close and type(a) is float and type(b) is float and abs(a - b) <= CLOSE_REL * max(
            abs(a), abs(b)):
        return []
    if type(a) is not type(b) or a != b:
        return [f"{path}: native {json.dumps(a)[:120]} != aarch64 {json.dumps(b)[:120]}"]
    return []


def lookup(obj: object, dotted: str) -> object:
    for key in dotted.split("."):
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def run_command(label: str, cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, object]:
    """Run one command with a deadline, saying every HEARTBEAT_S that it still runs. ``cpu_seconds``
    (user + system of the child) is the figure to compare across runs on a shared, loaded machine."""
    t0, cpu0 = time.perf_counter(), children_cpu()
    killed = False
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=REPO, text=True)
        while True:
            try:
                proc.wait(timeout=HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                elapsed = time.perf_counter() - t0
                if elapsed > timeout:
                    proc.kill()
                    proc.wait()
                    killed = True
                    break
                log(f"{label}: still running ({elapsed:.0f} s of at most {timeout:.0f} s)")
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    seconds = time.perf_counter() - t0
    return {"rc": proc.returncode, "seconds": round(seconds, 2), "timed_out": killed,
            "cpu_seconds": round(children_cpu() - cpu0, 2),
            "stdout": stdout, "stderr_tail": "\n".join(stderr.strip().splitlines()[-12:])}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cache_files(folder: Path) -> int:
    return sum(1 for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def compare(smoke: Smoke, native: dict[str, object], emulated: dict[str, object]) -> dict[str, object]:
    """The verdict for one command: both ran, both printed JSON, verdicts true, fields identical."""
    problems: list[str] = []
    parsed = {}
    for side, res in (("native", native), ("aarch64", emulated)):
        if res["timed_out"]:
            problems.append(f"{side}: timed out after {res['seconds']} s")
        elif res["rc"] != 0:
            problems.append(f"{side}: exit {res['rc']}: {res['stderr_tail'][-600:]}")
        else:
            try:
                parsed[side] = parse_json(str(res["stdout"]))
            except ValueError as e:
                problems.append(f"{side}: output is not JSON ({e})")
    ignored: list[str] = []
    if len(parsed) == 2:
        a, b = parsed["native"], parsed["aarch64"]
        skip = host_paths(a, smoke.host_fields) | host_paths(b, smoke.host_fields)
        ignored = sorted(skip)
        close = frozenset(host_paths(a, smoke.host_blas))
        problems += differences(a, b, skip, close)
        for field in smoke.verdicts:
            for side, obj in parsed.items():
                if lookup(obj, field) is not True:
                    problems.append(f"{side}: {field} is {lookup(obj, field)!r}, not true")
    return {"identical": not problems, "problems": problems, "not_compared": ignored,
            "compared_to_rel_1e-12": sorted(host_paths(parsed.get("native"), smoke.host_blas)),
            "aarch64_path": {f: lookup(parsed.get("aarch64"), f) for f in ("simd",)
                             if lookup(parsed.get("aarch64"), f) is not None}}


def guest_numba_cache(cache: Path, guest_cpu: str | None) -> Path:
    return cache / ("numba-aarch64" + (f"-{guest_cpu}" if guest_cpu else ""))


def run_smoke(root: Root, smoke: Smoke, src: Path, timeout: float, guest_cpu: str | None = None
              ) -> dict[str, object]:
    common = {"NPUKIT_INT4_CACHE": "off"}  # each side quantizes the checkpoint itself, every run
    native_env = {**os.environ, **common, "PYTHONPATH": str(src),
                  "NUMBA_CACHE_DIR": str(root.cache / "numba-x86_64")}
    nb_cache = guest_numba_cache(root.cache, guest_cpu)
    guest_env = root.guest_env(src, {**common, "NUMBA_CACHE_DIR": str(nb_cache)})
    if guest_cpu:  # numba compiles for this core (QEMU's default "max" CPU runs every ARMv8 extension)
        guest_env["NUMBA_CPU_NAME"] = guest_cpu
    log(f"{smoke.name}: native: npukit {' '.join(smoke.argv)}")
    native = run_command(f"{smoke.name} (native)", [sys.executable, "-m", "npukit", *smoke.argv],
                         native_env, timeout)
    before = cache_files(nb_cache)
    log(f"{smoke.name}: aarch64 under QEMU ({before} numba cache files before"
        f"{'; compiles under emulation, minutes' if before == 0 else ''})")
    emulated = run_command(f"{smoke.name} (aarch64)", root.guest_command("-m", "npukit", *smoke.argv),
                           guest_env, timeout)
    verdict = compare(smoke, native, emulated)
    log(f"{smoke.name}: {'identical' if verdict['identical'] else 'DIFFERENT/FAILED'} "
        f"(wall native {native['seconds']} s, aarch64 {emulated['seconds']} s; "
        f"CPU native {native['cpu_seconds']} s, aarch64 {emulated['cpu_seconds']} s)")
    for problem in verdict["problems"]:
        log(f"{smoke.name}:   {problem}")
    return {"name": smoke.name, "argv": list(smoke.argv), **verdict,
            "native": {k: native[k] for k in RESULT_KEYS}, "aarch64": {k: emulated[k] for k in RESULT_KEYS},
            "numba_cache_files": {"before": before, "after": cache_files(nb_cache)}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=default_cache(), help="cache folder (default %(default)s)")
    ap.add_argument("--src", type=Path, default=REPO / "src",
                    help="npukit source tree to run (default %(default)s)")
    ap.add_argument("--only", action="append", choices=[s.name for s in SMOKE],
                    help="run only these commands")
    ap.add_argument("--timeout", type=float, default=900.0,
                    help="per command and side, seconds (default 900)")
    ap.add_argument("--fresh-numba-cache", action="store_true",
                    help="empty the aarch64 numba cache first (measures the cold compile under emulation)")
    ap.add_argument("--guest-cpu", metavar="LLVM_CPU",
                    help="NUMBA_CPU_NAME for the aarch64 side, e.g. neoverse-n1 or apple-m1 (default: what "
                    "LLVM detects under QEMU, 'generic')")
    ap.add_argument("--setup-only", action="store_true", help="build the aarch64 root and stop")
    ap.add_argument("--report", type=Path, help="write the result as JSON here")
    args = ap.parse_args(argv)
    report: dict[str, object] = {"host_cpu": host_cpu_model(), "host_machine": platform.machine(),
                                 "guest_numba_cpu": args.guest_cpu or "detected",
                                 "cache": str(args.cache), "src": str(args.src.resolve())}
    t0 = time.perf_counter()
    root = Root(args.cache, REPO)
    try:
        root.ensure()
    except RecipeError as e:
        log(str(e))
        report.update(ok=False, recipe_error={"step": e.step, "reason": e.reason}, setup=root.steps)
        return finish(report, args.report, 3)
    report.update(setup=root.steps, guest=root.probe,
                  qemu=next((s["note"] for s in root.steps if s["step"] == "qemu"), ""))
    if args.setup_only:
        return finish({**report, "ok": True}, args.report, 0)
    if args.fresh_numba_cache:
        shutil.rmtree(guest_numba_cache(args.cache, args.guest_cpu), ignore_errors=True)
    chosen = [s for s in SMOKE if not args.only or s.name in args.only]
    src = stage_source(args.src.resolve(), args.cache)
    log(f"source {args.src.resolve()} staged as {src} (numba caches survive fresh clones)")
    report["staged_src"] = str(src)
    results = [run_smoke(root, s, src, args.timeout, args.guest_cpu) for s in chosen]
    report.update(commands=results, ok=all(r["identical"] for r in results),
                  total_seconds=round(time.perf_counter() - t0, 1))
    log(f"{sum(r['identical'] for r in results)}/{len(results)} identical; wall times are measured "
        f"on {report['host_cpu']} (aarch64 = QEMU user-mode emulation), total {report['total_seconds']} s")
    return finish(report, args.report, 0 if report["ok"] else 1)


def finish(report: dict[str, object], path: Path | None, rc: int) -> int:
    if path:
        path.write_text(json.dumps(report, indent=2) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
