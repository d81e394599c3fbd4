"""A heartbeat on stderr while one slow step runs (a CPU trial, a full-size ledger): on a terminal one
status line redrawn twice a second with the seconds spent; off a terminal a line once the step passes
a few seconds and then every few seconds. ``NPUKIT_QUIET=1`` silences it. Nothing is printed for a
step that ends before the first beat."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_TICK_S = 0.5
_FIRST_LINE_S = 2.0  # off a terminal
_EVERY_S = 5.0


@contextmanager
def heartbeat(label: str) -> Iterator[Callable[[], None]]:
    """``with heartbeat("checking ...") as stop:`` around a step that may take seconds; ``stop()`` ends
    the beats early (e.g. when the step starts printing its own output)."""
    if os.environ.get("NPUKIT_QUIET"):
        yield lambda: None
        return
    stream = sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    done = threading.Event()
    t0 = time.monotonic()

    def beat() -> None:
        drew, next_line = False, _FIRST_LINE_S
        while not done.wait(_TICK_S):
            if _compiling():  # the compile reporter has the status line now
                continue
            spent = time.monotonic() - t0
            try:
                if tty:
                    stream.write(f"\r\x1b[2K  {label} ... {spent:.0f} s")
                    drew = True
                elif spent >= next_line:
                    stream.write(f"  {label} ... {spent:.0f} s\n")
                    next_line += _EVERY_S
                stream.flush()
            except (OSError, ValueError):
                return
        if drew:
            try:
                stream.write("\r\x1b[2K")
                stream.flush()
            except (OSError, ValueError):
                pass

    thread = threading.Thread(target=beat, name="npukit-heartbeat", daemon=True)
    thread.start()

    def stop() -> None:
        done.set()
        if thread is not threading.current_thread():
            thread.join(timeout=1.0)

    try:
        yield stop
    finally:
        stop()


def _compiling() -> bool:
    """True while numba compiles a kernel (`compile_report` draws its own status then)."""
    report = sys.modules.get("npukit.sim.compile_report")
    reporter = getattr(report, "_REPORTER", None)
    return bool(reporter is not None and reporter.depth > 0)
