"""A real Ray cluster for the sweep tests: a head and one worker node started on loopback (their own
temp dir and process groups, so stopping them touches nothing else), shared by the session. Their
workers import npukit from this tree (an absolute PYTHONPATH), not from wherever it is installed."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import npukit

SRC = str(Path(npukit.__file__).resolve().parents[1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_bin() -> str:
    exe = Path(sys.executable).with_name("ray")
    return str(exe) if exe.exists() else shutil.which("ray") or "ray"


def _start(args: list[str], tmp: str, log: str) -> subprocess.Popen:
    path = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "RAY_TMPDIR": tmp, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": path}
    with open(os.path.join(tmp, log), "w") as fh:
        return subprocess.Popen([_ray_bin(), "start", "--block", "--num-cpus=1", *args], env=env,
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(p: subprocess.Popen) -> None:
    """End the process group this test started (ray start --block and everything it spawned)."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="session")
def cluster():
    tmp = tempfile.mkdtemp(prefix="nr", dir="/tmp")  # short: Ray's unix socket paths must fit 107 bytes
    port = free_port()
    address = f"127.0.0.1:{port}"
    procs = [_start(["--head", f"--port={port}", "--node-ip-address=127.0.0.1", f"--temp-dir={tmp}",
                     "--include-dashboard=false", "--disable-usage-stats"], tmp, "head.log")]
    try:
        _wait_nodes(address, 1, tmp)
        procs.append(_start([f"--address={address}", "--node-ip-address=127.0.0.1"], tmp, "worker.log"))
        _wait_nodes(address, 2, tmp)
        yield address
    finally:
        for p in reversed(procs):
            _stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_nodes(address: str, n: int, tmp: str, limit: float = 40.0) -> None:
    import ray

    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        try:
            ray.init(address=address, logging_level="error", log_to_driver=False)
            alive = sum(1 for node in ray.nodes() if node["Alive"])
            ray.shutdown()
            if alive >= n:
                return
        except (ConnectionError, RuntimeError, ValueError):
            pass
        time.sleep(0.5)
    logs = "".join(Path(tmp, f).read_text()[-800:] for f in ("head.log", "worker.log")
                   if Path(tmp, f).exists())
    raise AssertionError(f"Ray cluster at {address} did not reach {n} nodes: {logs}")


