"""A first run on a fresh machine is never silent: `npukit demo` on a terminal, with empty numba and
npukit caches (so every kernel compiles and every CPU trial runs), prints something at least every
3 seconds, names the kernel compiles as such, and still ends well."""

from __future__ import annotations

import os
import pty
import select
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[2]
MAX_SILENCE_S = 3.0


def run_on_a_terminal(argv: list[str], env: dict[str, str], limit_s: float = 900
                      ) -> tuple[int, str, float, str]:
    """(exit code, everything printed, the longest silence in seconds, what was printed around it) for
    ``argv`` on a pseudo-terminal."""
    pid, fd = pty.fork()
    if pid == 0:  # child: stdout and stderr are the terminal
        os.chdir(ROOT)
        os.execve(argv[0], argv, env)
    out, last, start, longest, where = b"", time.monotonic(), time.monotonic(), 0.0, 0
    while time.monotonic() - start < limit_s:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            continue
        try:
            data = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        now = time.monotonic()
        if now - last > longest:
            longest, where = now - last, len(out)
        last, out = now, out + data
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    around = out[max(0, where - 300): where].decode(errors="replace") + " <SILENCE> " + \
        out[where: where + 200].decode(errors="replace")
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace"), longest, around


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_first_demo_on_a_fresh_machine_is_never_silent(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "NUMBA_CPU_"))}
    env.pop("NPUKIT_QUIET", None)
    env.update(NUMBA_CACHE_DIR=str(tmp_path / "numba"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               NPUKIT_PROGRAM_CACHE="off", TERM="xterm", COLUMNS="120")
    argv = [sys.executable, "-m", "npukit", "demo", "--max-new-tokens", "8"]
    rc, out, longest, around = run_on_a_terminal(argv, env)
    assert rc == 0, out[-3000:]
    assert "compiling kernels for this CPU" in out
    assert "Performance summary" in out
    assert longest <= MAX_SILENCE_S, f"silent for {longest:.1f} s: {around!r}"
