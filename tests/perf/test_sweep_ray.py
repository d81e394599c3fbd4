"""`npukit sweep --ray ADDRESS` on a real Ray cluster: a head and one worker node started by the test
on loopback (their own temp dir and process groups, so stopping them touches nothing else), a sweep of
240 points through the CLI, equal row for row to the local process-pool sweep; the Parquet output read
back by pyarrow equals the rows."""

from __future__ import annotations

import csv
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

from npukit.cli.main import main

pytest.importorskip("ray")
pq = pytest.importorskip("pyarrow.parquet")

GRID = ["--grid", "kv=int4,int8", "--grid", "clock_mhz=100:300:40", "--grid", "context=512,4096,8192"]
BASE = ["sweep", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e2b", *GRID]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_bin() -> str:
    exe = Path(sys.executable).with_name("ray")
    return str(exe) if exe.exists() else shutil.which("ray") or "ray"


def _start(args: list[str], tmp: str, log: str) -> subprocess.Popen:
    env = {**os.environ, "RAY_TMPDIR": tmp, "RAY_USAGE_STATS_ENABLED": "0"}
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


@pytest.fixture(scope="module")
def cluster():
    tmp = tempfile.mkdtemp(prefix="nr", dir="/tmp")  # short: Ray's unix socket paths must fit 107 bytes
    port = _free_port()
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


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_ray_sweep_equals_local_sweep(cluster, tmp_path, capsys):
    local, remote, parquet = tmp_path / "local.csv", tmp_path / "ray.csv", tmp_path / "ray.parquet"
    assert main([*BASE, "--workers", "2", "--out", str(local)]) == 0
    assert main([*BASE, "--ray", cluster, "--out", str(remote)]) == 0
    assert main([*BASE, "--workers", "1", "--out", str(parquet)]) == 0
    capsys.readouterr()
    a, b = _rows(local), _rows(remote)
    assert len(a) == 2 * 40 * 3 >= 200
    assert a == b  # every column of every row, as written
    back = pq.read_table(parquet).to_pylist()
    assert len(back) == len(a)
    for r_csv, r_pq in zip(a, back, strict=True):
        assert set(r_pq) == set(r_csv)
        for k, v in r_pq.items():
            assert (repr(v) if isinstance(v, float) else str(v)) == r_csv[k] or float(r_csv[k]) == v


def test_ray_address_that_is_not_a_cluster(tmp_path, capsys):
    port = _free_port()  # nothing listens there
    rc = main([*BASE[:5], "--grid", "kv=int4,int8", "--ray", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith(f"npukit: error: --ray 127.0.0.1:{port}: cannot connect")
