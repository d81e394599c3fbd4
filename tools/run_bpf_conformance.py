#!/usr/bin/env python3
"""Run a bpf_conformance corpus (``tests/*.data``) through ``npukit bpf run`` and report the pass count.

Usage: ``tools/run_bpf_conformance.py /path/to/bpf_conformance/tests [--jobs 2] [--engine fast]``.
Each test's ``-- asm`` section (or ``-- raw`` when present) becomes a program file, ``-- mem`` a hex
file; the CLI runs with ``--abi ubpf --helpers conformance --json`` and its ``r0`` is compared with
``-- result``. A test with an ``-- error`` section passes when the CLI exits 2 with one line.
The corpus is read from the directory given; nothing of it is stored in this project.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def parse(path: Path) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in path.read_text().splitlines():
        body = line.split("#", 1)[0].rstrip()
        if body.startswith("--"):
            current = body[2:].strip()
            sections[current] = []
            continue
        if current is not None:
            sections[current].append(line)
    return sections


def run_one(path: Path, npukit: list[str], engine: str, workdir: Path) -> tuple[str, bool, str]:
    sec = parse(path)
    stem = workdir / path.stem
    if "raw" in sec:
        prog = stem.with_suffix(".raw")
        prog.write_text("\n".join(sec["raw"]) + "\n")
    else:
        prog = stem.with_suffix(".s")
        prog.write_text("\n".join(sec.get("asm", [])) + "\n")
    cmd = [
        *npukit,
        "bpf",
        "run",
        str(prog),
        "--abi",
        "ubpf",
        "--helpers",
        "conformance",
        "--json",
        "--engine",
        engine,
    ]
    if "mem" in sec:
        mem = stem.with_suffix(".mem")
        mem.write_text("\n".join(sec["mem"]) + "\n")
        cmd += ["--mem", str(mem)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    expected_error = "error" in sec
    if expected_error:
        ok = proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
        return path.name, ok, proc.stderr.strip() or proc.stdout.strip()
    results = [x.split("#")[0].strip() for x in sec.get("result", []) if x.split("#")[0].strip()]
    if proc.returncode != 0 or not results:
        return path.name, False, (proc.stderr or proc.stdout).strip()
    want = int(results[-1], 0)
    got = json.loads(proc.stdout)["r0"]
    return path.name, got == want, f"r0 {got:#x}, expected {want:#x}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", help="directory holding the corpus's *.data files")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--engine", choices=("jit", "fast", "interp"), default="jit")
    ap.add_argument("--npukit", default=None, help="npukit command (default: this Python's -m npukit)")
    args = ap.parse_args()
    files = sorted(Path(args.corpus).glob("*.data"))
    if not files:
        print(f"no *.data files in {args.corpus}", file=sys.stderr)
        return 2
    npukit = args.npukit.split() if args.npukit else [sys.executable, "-m", "npukit"]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        outcomes = list(pool.map(lambda f: run_one(f, npukit, args.engine, Path(tmp)), files))
    failed = [(n, why) for n, ok, why in outcomes if not ok]
    for name, why in failed:
        print(f"FAIL {name}: {why}")
    print(f"{len(files) - len(failed)}/{len(files)} passed")
    return 0 if not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
