"""Ctrl-C anywhere: exit status 130, one line, no traceback (workers included), no partial output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")


def interrupt(argv: list[str], cwd: Path, after: float, ready: Path | None = None) -> tuple[int, str]:
    """Start ``npukit argv``, send SIGINT ``after`` seconds (once ``ready`` exists, when given)."""
    env = dict(os.environ, PYTHONPATH=SRC, NPUKIT_QUIET="1")
    proc = subprocess.Popen([sys.executable, "-m", "npukit", *argv], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while ready is not None and not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(after)
    assert proc.poll() is None, "finished before the interrupt: pick a longer run"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.slow
def test_interrupted_vectors_leave_no_partial_folder(tmp_path: Path) -> None:
    out = tmp_path / "vec"
    rc, err = interrupt(["vectors", "--token", "--out-dir", str(out), "--every", "1"], tmp_path, 0.3,
                        ready=out)
    assert rc == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("npukit: interrupted")
    assert not out.exists()


@pytest.mark.slow
def test_interrupted_sweep_with_workers_prints_no_traceback(tmp_path: Path) -> None:
    rc, err = interrupt(["sweep", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e4b", "--grid",
                         "clock_mhz=100:400:400000", "--workers", "2", "-o", "s.csv"], tmp_path, 4.0)
    assert rc == 130 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert not (tmp_path / "s.csv").exists()
