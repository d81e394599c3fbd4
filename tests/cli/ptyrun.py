"""Run an npukit command on a pseudo-terminal and measure its longest silence (the progress tests)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run_on_pty(argv: list[str], cwd: Path, timeout: float = 400.0, extra_env: dict[str, str] | None = None,
               drop_env: tuple[str, ...] = ()) -> tuple[int, bytes, float, bytes]:
    """Run ``npukit argv`` with stdout and stderr on a pseudo-terminal; (exit status, output, the
    longest stretch without output from the start to the exit, the output around it). The child
    gets this environment less ``NPUKIT_QUIET`` and the variables starting with ``drop_env``, plus
    ``extra_env``."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items()
           if k != "NPUKIT_QUIET" and not (drop_env and k.startswith(drop_env))}
    env.update(PYTHONPATH=SRC, COLUMNS="120", LINES="40", TERM="xterm-256color", **(extra_env or {}))
    proc = subprocess.Popen([sys.executable, "-m", "npukit", *argv], stdin=follower, stdout=follower,
                            stderr=follower, cwd=cwd, env=env, close_fds=True)
    os.close(follower)
    out, last, gap, t_end = bytearray(), time.monotonic(), 0.0, time.monotonic() + timeout
    where = 0
    try:
        while time.monotonic() < t_end:
            ready, _, _ = select.select([leader], [], [], 0.25)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                now = time.monotonic()
                if now - last > gap:
                    gap, where = now - last, len(out)
                last = now
                out += chunk
            elif proc.poll() is not None:
                break
        rc = proc.wait(timeout=max(1.0, t_end - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    return rc, bytes(out), gap, bytes(out[max(0, where - 300):where + 100])
