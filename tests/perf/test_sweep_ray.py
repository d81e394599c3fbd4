"""`npukit sweep --ray ADDRESS` on a real Ray cluster: a head and one worker node started on loopback
(`conftest.py`: their own temp dir and process groups, so stopping them touches nothing else), a sweep of
240 points through the CLI, equal row for row to the local process-pool sweep; the Parquet output read
back by pyarrow equals the rows."""

from __future__ import annotations

import csv
import socket
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
