"""Throughput of `npukit sweep --level sim`: 1 vs 2 local workers, compile sharing on and off, and
local workers vs a two-node Ray cluster on loopback.

Run: ``python benchmarks/sweep_sim.py [--repeats R] [--ray] [--json]``. Each figure is the wall clock
of `npukit.perf.simrun.execute` (pool start included, workload load excluded), the median of R runs
whose order alternates; the 1-minute load average before each run is printed with it, since the
machine's other users change what 2 workers can get. Workloads:

* ``vta`` — the embedded digits model through the VTA delegate on 120 configurations, compiled
  afresh per point (``use_cache=False``): each point a compile plus a timing run (~10 ms);
* ``rk3588`` — a one-layer SigLIP at 64 px, 4 schedules × 3 batches × 2 scratchpads: ~0.3 s a point;
* ``tern`` — one BitNet b1.58 2B-4T block at context 32, 2 lane counts × 4 phases × 2 clocks: two
  programs, with and without sharing them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from npukit.perf.simrun import execute, order_and_chunk
from npukit.perf.simsweep import Evaluator, SimSpec, adapter_for, grid
from npukit.sim.cpu import host_cpu_model

VTA_AXES = {"log_block": [4, 5], "timing.clock_mhz": [100 + 20 * i for i in range(12)],
            "timing.dram_bytes_per_cycle": [4, 8, 16, 32, 64]}
RK_AXES = {"schedule": ["single", "round-robin", "pipeline", "data-parallel"], "batch": [1, 2, 3],
           "core.scratchpad_bytes.value": [16384, 32768]}
TERN_AXES = {"engine.lanes": [8, 32], "phase": ["host-split", "fabric-attention", "fabric-ffn-glue",
                                                "engine-bound"], "clock_mhz": [100, 150]}


def cpu_seconds() -> float:
    """CPU time of this process and its waited-for children (the pool's workers, once shut down)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def one_run(spec: SimSpec, workers: int = 1, ray: str | None = None) -> tuple[float, int, float, float]:
    """(seconds, points, load average before, CPU seconds here) of one sweep."""
    adapter = adapter_for(spec.target)
    workload = adapter.load_workload(spec.model)
    points = grid(spec, adapter)
    load = os.getloadavg()[0]
    c0, t0 = cpu_seconds(), time.perf_counter()
    chunks = order_and_chunk(Evaluator(spec, workload), points, 8 if ray else workers)
    rows: list[dict[str, Any]] = []
    execute(spec, workload, chunks, workers=workers, ray_address=ray, on_rows=rows.extend)
    dt = time.perf_counter() - t0
    assert len(rows) == len(points)
    return dt, len(points), load, cpu_seconds() - c0


def compare(name: str, runs: dict[str, tuple[SimSpec, int, str | None]], repeats: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {k: [] for k in runs}
    loads: dict[str, list[float]] = {k: [] for k in runs}
    cpus: dict[str, list[float]] = {k: [] for k in runs}
    n = 0
    for r in range(repeats):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for k in order:
            spec, workers, ray = runs[k]
            dt, n, load, cpu = one_run(spec, workers, ray)
            times[k].append(dt)
            cpus[k].append(cpu)
            loads[k].append(load)
    out = {"workload": name, "points": n, "cpu": host_cpu_model(), "tier": "measured", "runs": {}}
    for k in runs:
        med = statistics.median(times[k])
        out["runs"][k] = {"median_s": med, "points_per_s": n / med, "all_s": times[k], "load1": loads[k],
                          "cpu_s": statistics.median(cpus[k])}
    return out


class LoopbackRay:
    """A head and one worker node (1 CPU each) on 127.0.0.1, in their own process groups and temp dir."""

    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="nb", dir="/tmp")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []

    def _start(self, args: list[str]) -> None:
        src = str(Path(__file__).resolve().parents[1] / "src")
        env = {**os.environ, "RAY_TMPDIR": self.tmp, "RAY_USAGE_STATS_ENABLED": "0",
               "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
        ray = str(Path(sys.executable).with_name("ray"))
        self.procs.append(subprocess.Popen([ray, "start", "--block", "--num-cpus=1", *args], env=env,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                           start_new_session=True))

    def __enter__(self) -> LoopbackRay:
        import ray

        self._start(["--head", f"--port={self.port}", "--node-ip-address=127.0.0.1", f"--temp-dir={self.tmp}",
                     "--include-dashboard=false", "--disable-usage-stats"])
        for want in (1, 2):
            if want == 2:
                self._start([f"--address={self.address}", "--node-ip-address=127.0.0.1"])
            for _ in range(120):
                try:
                    ray.init(address=self.address, logging_level="error", log_to_driver=False)
                    alive = sum(1 for n in ray.nodes() if n["Alive"])
                    ray.shutdown()
                    if alive >= want:
                        break
                except (ConnectionError, RuntimeError, ValueError):
                    pass
                time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
        shutil.rmtree(self.tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ray", action="store_true", help="also time a two-node loopback Ray cluster")
    ap.add_argument("--only", default="vta,vta-sharing,rk3588,tern", help="workloads to run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    only = set(args.only.split(","))
    vta = SimSpec("vta-alkali", "zoo:digits", VTA_AXES, use_cache=False)
    rk = SimSpec("rk3588", "smolvlm-siglip-base-512:px=64", RK_AXES)
    tern = SimSpec("tern-arty-a7-100t", "bitnet-b1.58-2b-4t", TERN_AXES, fixed={"context": 32})
    one_run(SimSpec("vta-alkali", "zoo:digits", {"log_block": [4, 5]}))  # warm: imports, compiled caches
    results = []
    if "vta" in only:
        results.append(compare("vta digits, no sharing", {"1 worker": (vta, 1, None),
                                                          "2 workers": (vta, 2, None)}, args.repeats))
    if "vta-sharing" in only:
        shared = SimSpec(**{**vars(vta), "use_cache": True})
        results.append(compare("vta digits, 1 worker", {"shared programs": (shared, 1, None),
                                                        "no sharing": (vta, 1, None)}, args.repeats))
    if "rk3588" in only:
        results.append(compare("rk3588 siglip 1 layer 64 px", {"1 worker": (rk, 1, None),
                                                                "2 workers": (rk, 2, None)}, args.repeats))
    if "tern" in only:
        cold = SimSpec(**{**vars(tern), "use_cache": False})
        results.append(compare("tern 2B block, 1 worker", {"shared programs": (tern, 1, None),
                                                            "no sharing": (cold, 1, None)}, args.repeats))
    if args.ray:
        with LoopbackRay() as cluster:
            runs = {"2 local workers": (vta, 2, None), "ray 2 nodes x 1 CPU": (vta, 1, cluster.address)}
            results.append(compare("vta digits, no sharing", runs, args.repeats))
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    for res in results:
        print(f"{res['workload']}: {res['points']} points on {res['cpu']} "
              f"(measured, median of {args.repeats})")
        base = None
        for k, r in res["runs"].items():
            base = base or r["points_per_s"]
            loads = ", ".join(f"{x:.1f}" for x in r["load1"])
            print(f"  {k:22s} {r['median_s']:8.2f} s  {r['points_per_s']:8.2f} points/s  "
                  f"x{r['points_per_s'] / base:.2f}  CPU {r['cpu_s']:.2f} s  load1 before runs {loads}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
