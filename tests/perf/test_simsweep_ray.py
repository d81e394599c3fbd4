"""`npukit sweep --level sim --ray ADDRESS` on a real two-node Ray cluster on loopback (conftest.py):
216 VTA simulator points give the rows of the in-process sweep, each distinct program compiled once on
the cluster; a sweep whose driver is killed midway
(SIGKILL) and rerun with ``--resume`` ends with every point exactly once, equal to the in-process rows.
Oracles: the in-process sweep's file and the set of points the grid names, read back by Python's csv."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from npukit.cli.main import main

pytest.importorskip("ray")

GRID = ["--grid", "log_block=4,5", "--grid", "log_wgt_buff_size=9,10,14", "--grid",
        "timing.clock_mhz=100:333:12", "--grid", "timing.dram_bytes_per_cycle=4,8,16"]
BASE = ["sweep", "--level", "sim", "--hw", "vta-alkali", "--model", "zoo:digits", *GRID]
N = 2 * 3 * 12 * 3


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    by_id = {r["point_id"]: r for r in rows}
    assert len(by_id) == len(rows), "a point appears twice"
    return by_id


@pytest.fixture(scope="module")
def in_process(tmp_path_factory) -> dict[str, dict[str, str]]:
    out = tmp_path_factory.mktemp("local") / "local.csv"
    assert main([*BASE, "--workers", "1", "--out", str(out)]) == 0
    return _rows(out)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ray_sim_sweep_equals_in_process(cluster, in_process, tmp_path, capsys):
    out = tmp_path / "ray.csv"
    assert main([*BASE, "--ray", cluster, "--out", str(out), "--json"]) == 0
    timing = json.loads(capsys.readouterr().out)["timing"]
    assert "Ray cluster" in timing["source"] and timing["tier"] == "measured"
    assert len(in_process) == N >= 200
    assert _rows(out) == in_process  # every column of every row, as written
    programs = {r["program_id"] for r in in_process.values() if r["program_id"]}
    assert timing["compiles"] == len(programs) == 4  # each compiled once on the cluster (log_block x buffer)
    assert sum(r["status"] == "ok" for r in in_process.values()) > N // 2


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ray_sim_sweep_killed_then_resumed(cluster, in_process, tmp_path, capsys):
    out = tmp_path / "killed.csv"
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    argv = [*BASE, "--ray", cluster, "--no-compile-cache", "--out", str(out)]  # slower: killed midway
    proc = subprocess.Popen([sys.executable, "-m", "npukit", *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120 and proc.poll() is None:
            if out.is_file() and out.read_text().count("\n") > 1 + 20:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the sweep ended before it could be killed"
        proc.send_signal(signal.SIGKILL)  # the driver only: its Ray tasks die with its job
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = _rows(out)
    assert 20 <= len(before) < N
    assert main([*BASE, "--ray", cluster, "--resume", "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    after = _rows(out)
    assert after == in_process
