"""npukit.sim.threads: numba's pool starts under npukit's libgomp policy; the environment is left as it was.

Each case runs in a fresh child process (libgomp reads its settings once, when it loads). libgomp's own
report of the settings it read (``OMP_DISPLAY_ENV=VERBOSE``, printed by the runtime when it loads) is the
oracle for what the runtime uses; torch, imported in a grandchild, is the peer that must see the user's
environment: its report is compared with the same import run from a process that never saw npukit.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from npukit.sim import threads

_CHILD = r"""
import ctypes, json, os, subprocess, sys
from npukit.sim import threads
if sys.argv[2] != "-":  # the CPUs as the test wants them seen (idle cores at the pool's start)
    threads.idle_cores = lambda *a: float(sys.argv[2])
before = dict(os.environ)
start = threads.start()
after = dict(os.environ)
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
c_env = {k: libc.getenv(k.encode()) is not None for k in threads.POLICY}
sys.stderr.flush()
peer = None
if sys.argv[1] == "peer":
    peer = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True).stderr
print(json.dumps({"same": before == after, "c_env": c_env, "applied": start.applied, "user": start.user,
                  "layer": start.layer, "threads": start.threads, "line": start.describe(),
                  "again": threads.start() is start, "peer": peer}))
"""


def _env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in threads.USER_KEYS}
    src = os.path.join(os.path.dirname(threads.__file__), "..", "..")
    env["PYTHONPATH"] = os.path.abspath(src) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_DISPLAY_ENV"] = "VERBOSE"  # libgomp prints the settings it read when it loads
    env.update(overrides)
    return env


def _spincounts(stderr: str) -> list[str]:
    """GOMP_SPINCOUNT of each libgomp report in ``stderr``, in load order."""
    return re.findall(r"GOMP_SPINCOUNT = '(\d+)'", stderr)


def _child(env: dict[str, str], peer: bool = False, idle: float | None = None) -> tuple[dict, list[str]]:
    args = ["peer" if peer else "-", "-" if idle is None else str(idle)]
    r = subprocess.run([sys.executable, "-c", _CHILD, *args], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), _spincounts(r.stderr)


@pytest.mark.slow
def test_policy_reaches_libgomp_and_leaves_the_environment_alone() -> None:
    env = _env(NUMBA_NUM_THREADS="2")
    got, spins = _child(env, peer=True, idle=2.0)  # an idle 2-core machine: the spin
    assert got["layer"] == "omp" and got["threads"] >= 1
    assert got["same"], "os.environ changed"
    assert not any(got["c_env"].values()), "the C environment still holds npukit's policy"
    assert got["applied"] == threads.POLICY and got["user"] == {}
    assert spins[:1] == [threads.POLICY["GOMP_SPINCOUNT"]], "numba's libgomp did not read the policy"
    assert got["again"], "a second start() launched again"
    # torch in a child of that process reads the user's environment: the same report as from a clean process
    clean = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert _spincounts(got["peer"]) == _spincounts(clean.stderr) != []
    assert _spincounts(clean.stderr) != [threads.POLICY["GOMP_SPINCOUNT"]]


def test_busy_cpus_start_the_pool_passive() -> None:
    """Where another process holds a core, a spinning worker loses it and stalls every region: passive."""
    got, spins = _child(_env(NUMBA_NUM_THREADS="2"), idle=0.9)
    assert got["applied"] == threads.BUSY_POLICY and got["same"] and not any(got["c_env"].values())
    assert spins[:1] == ["0"]  # libgomp's passive spin count
    assert "OMP_WAIT_POLICY=PASSIVE" in got["line"] and "0.9 idle cores" in got["line"]


@pytest.mark.parametrize(("key", "value", "spin"), [("GOMP_SPINCOUNT", "12345", "12345"),
                                                    ("OMP_WAIT_POLICY", "PASSIVE", "0")])
def test_the_users_own_setting_wins(key: str, value: str, spin: str) -> None:
    got, spins = _child(_env(**{key: value}), idle=2.0)
    assert got["same"] and got["applied"] == {} and got["user"] == {key: value}
    assert spins[:1] == [spin]
    assert f"the user's {key}={value}" in got["line"]


def test_another_threading_layer_is_left_alone() -> None:
    got, spins = _child(_env(NUMBA_THREADING_LAYER="workqueue"))
    assert got["layer"] == "workqueue" and got["applied"] == {} and got["same"]
    assert spins == [], "libgomp was loaded for the workqueue layer"
    assert "does not apply" in got["line"]


def test_policy_for_spins_only_with_a_core_per_thread_and_steps_aside_for_the_user() -> None:
    spin, passive = threads.POLICY, threads.BUSY_POLICY
    assert threads.policy_for({}, 2.0, 2) == spin and threads.policy_for({"PATH": "/bin"}, 1.6, 2) == spin
    assert threads.policy_for({}, 1.4, 2) == passive and threads.policy_for({}, 0.0, 2) == passive
    assert threads.policy_for({}, 12.0, 16) == passive and threads.policy_for({}, 15.8, 16) == spin
    assert threads.policy_for({}, None, 2) == spin  # unknown (no /proc/stat): the spin, as on an idle machine
    for key in threads.USER_KEYS:
        assert threads.policy_for({key: "1"}, 0.0, 2) == {} and threads.policy_for({key: "1"}, 2.0, 2) == {}


def test_idle_cores_counts_idle_ticks_over_the_window(monkeypatch) -> None:
    samples = iter([(1000, 300), (1100, 350)])  # 100 jiffies over all CPUs, 50 of them idle
    monkeypatch.setattr(threads, "_cpu_ticks", lambda: next(samples))
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
    assert threads.idle_cores(0.0) == pytest.approx(2.0)
    monkeypatch.setattr(threads, "_cpu_ticks", lambda: None)
    assert threads.idle_cores(0.0) is None


def test_cpu_ticks_reads_this_machine() -> None:
    got = threads._cpu_ticks()
    if os.path.exists("/proc/stat"):
        assert got is not None and got[0] >= got[1] > 0
    else:
        assert got is None


def test_describe_names_the_source_of_the_settings() -> None:
    mine = threads.ThreadStart("omp", 2, {"GOMP_SPINCOUNT": "100000"}, idle=1.9)
    assert mine.describe() == "2 threads (omp, npukit's GOMP_SPINCOUNT=100000, 1.9 idle cores at start)"
    early = threads.ThreadStart("omp", 2, {}, {}, preloaded=True)
    assert "loaded before" in early.describe()


def test_importing_the_parallel_kernels_starts_no_pool() -> None:
    """A forked child that runs a parallel region dies once its parent launched numba's OpenMP pool, so
    importing the modules that hold parallel kernels must not launch it (`start` runs at first use)."""
    code = ("import npukit.targets.pccx.fast._nbkernels, npukit.targets.pccx.fast._nbgroup, "
            "npukit.kernels.fp8._nb, npukit.kernels.fp8.fast, npukit.targets.pccx.fast.fastsim\n"
            "from npukit.sim import threads\n"
            "print(threads.libgomp_loaded(), threads._started)")
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "None"]
