"""One address form (``tcp://HOST:PORT``) for every NVMe command; a busy port fails before any file
is made; Ctrl-C stops ``nvme serve`` with status 130 and no traceback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from npukit.cli.main import main

from .conftest import NQN, read_ready_line

SRC = str(Path(__file__).resolve().parents[3] / "src")


def test_connect_url_equals_traddr_trsvcid(capsys, target) -> None:
    assert main(["nvme", "id-ctrl", "--connect", f"tcp://127.0.0.1:{target.port}", "--nqn", NQN,
                 "--json"]) == 0
    by_url = json.loads(capsys.readouterr().out)
    assert main(["nvme", "id-ctrl", "--traddr", "127.0.0.1", "--trsvcid", str(target.port), "--nqn", NQN,
                 "--json"]) == 0
    by_flags = json.loads(capsys.readouterr().out)
    by_url.pop("cntlid"), by_flags.pop("cntlid")  # (each connection gets its own controller id)
    assert by_flags == by_url and by_url["subnqn"] == NQN
    assert main(["nvme", "id-ctrl", "--connect", "udp://127.0.0.1:1", "--nqn", NQN]) == 2
    assert capsys.readouterr().err.startswith("npukit: error: --connect 'udp://127.0.0.1:1': expected")


def _serve(tmp_path: Path, port: int, disc: str = "--no-discovery") -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.Popen([sys.executable, "-m", "npukit", "nvme", "serve", "--listen",
                             f"tcp://127.0.0.1:{port}", "--namespace", str(tmp_path / "disk.img"),
                             "--size", "1M", disc], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def test_busy_port_fails_before_creating_files(tmp_path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc = _serve(tmp_path, busy.getsockname()[1])
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and err.startswith("npukit: error: cannot listen on 127.0.0.1:")
    assert not (tmp_path / "disk.img").exists() and not (tmp_path / "disk.img.state").exists()


def test_ctrl_c_stops_serve_with_130(tmp_path) -> None:
    proc = _serve(tmp_path, 0)
    ready = read_ready_line(proc)
    assert ready["event"] == "ready" and ready["port"] > 0
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "Traceback" not in err
