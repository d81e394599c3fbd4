"""The suite cannot hang: a test that kills its worker, or one that never returns, fails the run fast
and is named, under the options `make test` uses (this repository's pytest configuration, xdist with
the Makefile's worker-restart limit)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _make_test_pytest_args() -> list[str]:
    """The pytest options of the Makefile's test target (so this test follows them if they change)."""
    text = (ROOT / "Makefile").read_text()
    line = next(ln for ln in text.splitlines() if "-m pytest" in ln and "$(BIN)/python" in ln)
    return line.split("-m pytest", 1)[1].split()


@pytest.fixture
def tmp_path():  # pytest does not collect inside its own temporary folders: use a plain one
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="npukit-guard-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _clean_env() -> dict[str, str]:
    """This process's environment without pytest's own variables (an inner run must not take itself
    for a worker of this one)."""
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}


def _run(tmp_path: Path, body: str, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    (tmp_path / "test_victim.py").write_text(body)
    (tmp_path / "test_bystander.py").write_text("def test_fine():\n    assert 1 + 1 == 2\n")
    args = [a for a in _make_test_pytest_args() if not a.startswith("--durations")]
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
                           "--rootdir", str(tmp_path), "-p", "no:cacheprovider", *args, *extra,
                           str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=_clean_env())
    return done, time.monotonic() - t0


@pytest.mark.slow
def test_an_aborting_test_fails_the_run_within_three_minutes(tmp_path: Path) -> None:
    body = ("import os\n\n\ndef test_before():\n    assert True\n\n\n"
            "def test_kills_its_worker():\n    os.abort()  # as an LLVM abort or SIGILL would\n")
    done, took = _run(tmp_path, body)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert took < 180
    assert re.search(r"crashed while running 'test_victim.py::test_kills_its_worker'", out), out[-2000:]


@pytest.mark.slow
def test_a_stuck_test_fails_by_its_timeout(tmp_path: Path) -> None:
    body = "import time\n\n\ndef test_waits_forever():\n    time.sleep(3600)\n"
    done, took = _run(tmp_path, body, "-o", "timeout=5")  # the configured limit, shortened for the test
    out = done.stdout + done.stderr
    assert done.returncode != 0 and took < 120
    assert "test_waits_forever" in out and "Timeout" in out, out[-2000:]
    assert "1 passed" in out  # the bystander still ran


def test_configured_limits_are_in_force() -> None:
    """pytest-timeout's per-test limit in pyproject, xdist's restart limit and a wall-clock watchdog
    in the Makefile."""
    import tomllib

    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert 0 < int(ini["timeout"]) <= 1200
    args = _make_test_pytest_args()
    assert "--max-worker-restart" in args
    assert re.search(r"timeout\s+-k\s*\d+\s+\d+m", (ROOT / "Makefile").read_text())
