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


def _child(env: dict[str, str], peer: bool = False) -> tuple[dict, list[str]]:
    r = subprocess.run([sys.executable, "-c", _CHILD, "peer" if peer else "-"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), _spincounts(r.stderr)


@pytest.mark.slow
def test_policy_reaches_libgomp_and_leaves_the_environment_alone() -> None:
    env = _env()
    got, spins = _child(env, peer=True)
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


@pytest.mark.parametrize(("key", "value", "spin"), [("GOMP_SPINCOUNT", "12345", "12345"),
                                                    ("OMP_WAIT_POLICY", "PASSIVE", "0")])
def test_the_users_own_setting_wins(key: str, value: str, spin: str) -> None:
    got, spins = _child(_env(**{key: value}))
    assert got["same"] and got["applied"] == {} and got["user"] == {key: value}
    assert spins[:1] == [spin]
    assert f"the user's {key}={value}" in got["line"]


def test_another_threading_layer_is_left_alone() -> None:
    got, spins = _child(_env(NUMBA_THREADING_LAYER="workqueue"))
    assert got["layer"] == "workqueue" and got["applied"] == {} and got["same"]
    assert spins == [], "libgomp was loaded for the workqueue layer"
    assert "does not apply" in got["line"]


def test_policy_for_steps_aside_for_any_user_setting() -> None:
    assert threads.policy_for({}) == threads.POLICY
    assert threads.policy_for({"PATH": "/bin"}) == threads.POLICY
    for key in threads.USER_KEYS:
        assert threads.policy_for({key: "1"}) == {}


def test_describe_names_the_source_of_the_settings() -> None:
    mine = threads.ThreadStart("omp", 2, {"GOMP_SPINCOUNT": "30000"})
    assert mine.describe() == "2 threads (omp, npukit's GOMP_SPINCOUNT=30000)"
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
