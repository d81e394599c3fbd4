"""Say so while numba compiles npukit's kernels (the first run on a machine, or for a new target).

A first run compiles tens of kernels for this CPU (tens of seconds), then numba's disk cache makes every
later start fast. Without a word this looked like a slow prefill. numba broadcasts a ``numba:compile``
event around every real compilation (a cache hit broadcasts none), so a listener sees exactly the
compiles and nothing else: on a terminal one status line redrawn twice a second with the kernel and
the time spent; off a terminal one line per kernel and a reminder every few seconds. ``NPUKIT_QUIET=1``
silences it; `compile_seconds` tells callers how much of their time was compiling.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

from numba.core import event

_TICK_S = 0.5  # terminal redraw
_REMIND_S = 5.0  # off a terminal: "still compiling" after this long


class CompileReporter(event.Listener):
    """A numba event listener reporting top-level compiles (nested ones are part of their caller's)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.depth = 0
        self.total_s = 0.0
        self.count = 0
        self._name = ""
        self._t0 = 0.0
        self._said_header = False
        self._ticker: threading.Thread | None = None
        self._lock = threading.Lock()

    def on_start(self, ev: event.Event) -> None:
        self.depth += 1
        if self.depth == 1:
            self._begin(_kernel_name(ev.data))

    def on_end(self, ev: event.Event) -> None:
        self.depth = max(0, self.depth - 1)
        if self.depth == 0:
            self._end()

    def _out(self) -> TextIO:
        return self.stream or sys.stderr

    def _tty(self) -> bool:
        try:
            return self._out().isatty()
        except (AttributeError, ValueError):
            return False

    def _begin(self, name: str) -> None:
        self._name, self._t0 = name, time.perf_counter()
        if os.environ.get("NPUKIT_QUIET"):
            return
        if not self._said_header:
            self._said_header = True
            self._write(f"npukit: compiling kernels for this CPU ({_cpu_label()}), once; numba caches them "
                        f"for later runs ({_cache_label()})\n")
        if not self._tty():
            self._write(f"  compiling {name} ...\n")
        self._start_ticker()

    def _end(self) -> None:
        spent = time.perf_counter() - self._t0
        with self._lock:
            self.total_s += spent
            self.count += 1
            name, self._name = self._name, ""
        if os.environ.get("NPUKIT_QUIET"):
            return
        if self._tty():
            self._write(f"\r\x1b[2K  compiled {name} in {spent:.1f} s ({self.count} kernels, "
                        f"{self.total_s:.0f} s so far)")
        elif spent >= 1.0:
            self._write(f"  compiled {name} in {spent:.1f} s\n")

    def _start_ticker(self) -> None:
        if self._ticker is not None and self._ticker.is_alive():
            return
        self._ticker = threading.Thread(target=self._tick, name="npukit-compile-report", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        tty, last, remind = self._tty(), time.perf_counter(), _REMIND_S
        while True:
            time.sleep(_TICK_S)
            with self._lock:
                name, t0 = self._name, self._t0
            if not name:
                remind = _REMIND_S
                if tty and time.perf_counter() - last > 2 * _TICK_S:
                    self._write("\r\x1b[2K")
                    return
                continue
            now = time.perf_counter()
            last = now
            if tty:
                self._write(f"\r\x1b[2K  compiling {name} ... {now - t0:.0f} s "
                            f"({self.count} kernels done, {self.total_s + now - t0:.0f} s so far)")
            elif now - t0 >= remind:
                remind += _REMIND_S
                self._write(f"  still compiling {name} ({now - t0:.0f} s)\n")

    def _write(self, text: str) -> None:
        try:
            out = self._out()
            out.write(text)
            out.flush()
        except (OSError, ValueError):
            pass


def _kernel_name(data) -> str:
    disp = (data or {}).get("dispatcher")
    func = getattr(disp, "py_func", None)
    return getattr(func, "__qualname__", None) or str(disp)


def _cpu_label() -> str:
    from npukit.sim import cpu

    t = cpu.compile_target()
    return t.cpu if t.origin == "host" else f"{t.cpu}, {t.origin}"


def _cache_label() -> str:
    from numba.core import config

    return config.CACHE_DIR or "beside the sources in __pycache__"


_REPORTER: CompileReporter | None = None


def install() -> CompileReporter:
    """Install the reporter once per process (idempotent); every numba-kernel module calls it."""
    global _REPORTER
    if _REPORTER is None:
        _REPORTER = CompileReporter()
        event.register("numba:compile", _REPORTER)
    return _REPORTER


def compile_seconds() -> float:
    """Seconds this process has spent compiling kernels so far (0 when every kernel came from cache)."""
    return _REPORTER.total_s if _REPORTER else 0.0
