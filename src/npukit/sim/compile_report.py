"""Say so while numba compiles npukit's kernels (the first run on a machine, or for a new target).

A first run compiles tens of kernels for this CPU (tens of seconds), then numba's disk cache makes every
later start fast. Without a word this looked like a slow prefill. numba broadcasts a ``numba:compile``
event around every real compilation (a cache hit broadcasts none), so a listener sees exactly the
compiles and nothing else. The first one prints a line saying what is happening; each top-level
compile is then a named `npukit.progress.step` (a spinner with elapsed time on a terminal, plain lines
off it once it passes 2 s). ``npukit --quiet`` / ``NPUKIT_QUIET=1`` silences it; `compile_seconds`
tells callers how much of their time was compiling.
"""

from __future__ import annotations

import sys
import time

from numba.core import event

from npukit import progress
from npukit.sim import numba_blas, numba_cache


class CompileReporter(event.Listener):
    """A numba event listener reporting top-level compiles (nested ones are part of their caller's)."""

    def __init__(self) -> None:
        self.depth = 0
        self.total_s = 0.0
        self.count = 0
        self._t0 = 0.0
        self._step = None
        self._said_header = False

    def on_start(self, ev: event.Event) -> None:
        self.depth += 1
        if self.depth == 1:
            self._t0 = time.perf_counter()
            if progress.quiet():
                return
            if not self._said_header:
                self._said_header = True
                print(f"npukit: compiling kernels for this CPU ({_cpu_label()}), once; numba caches them "
                      f"for later runs ({_cache_label()})", file=sys.stderr, flush=True)
            self._step = progress.step(f"compiling kernel {_kernel_name(ev.data)} (once)")
            self._step.__enter__()

    def on_end(self, ev: event.Event) -> None:
        self.depth = max(0, self.depth - 1)
        if self.depth == 0:
            self.total_s += time.perf_counter() - self._t0
            self.count += 1
            step, self._step = self._step, None
            if step is not None:
                step.__exit__(None, None, None)


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
        numba_blas.defer_probe()  # (before any kernel loads: numba's BLAS probe then imports no SciPy)
        numba_cache.install()  # (before any kernel is defined: its cache entry is stamped with its callees)
    return _REPORTER


def compile_seconds() -> float:
    """Seconds this process has spent compiling kernels so far (0 when every kernel came from cache)."""
    return _REPORTER.total_s if _REPORTER else 0.0
