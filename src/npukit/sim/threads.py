"""Starting numba's worker threads under npukit's OpenMP wait policy, the process environment left as it was.

numba's parallel kernels run on GNU OpenMP (libgomp) here. libgomp reads its settings
(``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``, ...) once, in its load-time constructor, when numba's
threading layer is first loaded. `start` sets the variables of npukit's policy that the user did not
set, has numba load that layer and launch its threads then, and restores ``os.environ`` (and so the C
environment that ``getenv`` reads) exactly: libraries that read the environment later — torch's own
OpenMP in a child process, or one loaded into this process before numba's — see the user's settings.

The policy (docs/cpus.md, "Threads"): a worker that finds no work spins ``GOMP_SPINCOUNT`` pause
loops before it sleeps on a futex. ``OMP_WAIT_POLICY=PASSIVE`` (no spin) makes each region pay a futex
wake (45-100 µs on the 2-core Xeon VM this was measured on), which costs the parallel INT4 GEMV its
lead over the serial one; 100 000 spins (1-3 ms there) keep the workers awake across the host work
between the compiled runs of one decode step. But a spinning worker loses its core to any other busy
process (the scheduler favours a thread waking from sleep, not one that spun), and each parallel
region then waits milliseconds for it: with one core busy elsewhere a 128-token prefill took 4-5x as
long spinning as passive (its GEMMs have no serial twin to fall back on; the decode GEMVs do,
`targets.pccx.fast.twins.TwinChooser`). libgomp's settings cannot change once read, so `start` looks
at the machine once: it spins only where the CPUs were idle enough, over a short sample, for every
numba thread to have a core of its own, else it starts passive.

`start` runs where npukit first needs the pool (the pccx executor's twin chooser, the FP8 GEMM's
parallel path, `kernels.one_thread`), never at import: numba's GNU OpenMP layer terminates a forked
child that runs a parallel region once its parent has launched the pool, so a module import must not
launch it.

One caveat cannot be scoped: a library in this process that links the same ``libgomp.so.1`` *after*
numba loaded it (torch imported later, in this process) shares that runtime and its spin count.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# npukit's libgomp policy while numba's threads start (measured: docs/cpus.md "Threads"): a bounded
# spin where each numba thread finds an idle core, passive where other work holds the CPUs
POLICY: dict[str, str] = {"GOMP_SPINCOUNT": "100000"}
BUSY_POLICY: dict[str, str] = {"OMP_WAIT_POLICY": "PASSIVE"}
IDLE_SAMPLE_S = 0.05  # how long `idle_cores` watches the CPUs (5 scheduler ticks at 100 Hz)
# the user's own choice of wait policy (any of these set: npukit sets nothing)
USER_KEYS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


@dataclass(frozen=True)
class ThreadStart:
    """How numba's thread pool was started in this process."""

    layer: str  # numba's threading layer: "omp", "tbb" or "workqueue"
    threads: int  # numba's thread count
    applied: dict[str, str] = field(default_factory=dict)  # what npukit set while libgomp loaded
    user: dict[str, str] = field(default_factory=dict)  # the user's own wait settings (they win)
    preloaded: bool = False  # libgomp was already in the process: its settings came from earlier
    idle: float | None = None  # idle cores seen when the pool started (None: not sampled)

    def describe(self) -> str:
        """One line for doctor and benchmarks."""
        if self.layer != "omp":
            return f"{self.threads} threads ({self.layer}; npukit's OpenMP policy does not apply)"
        if self.user:
            how = "the user's " + " ".join(f"{k}={v}" for k, v in self.user.items())
        elif self.preloaded:
            how = "libgomp loaded before numba's threads: its own settings"
        else:
            how = "npukit's " + " ".join(f"{k}={v}" for k, v in self.applied.items())
            if self.idle is not None:
                how += f", {self.idle:.1f} idle cores at start"
        return f"{self.threads} threads (omp, {how})"


_started: ThreadStart | None = None
_lock = threading.Lock()


def policy_for(environ: dict[str, str] | os._Environ[str], idle: float | None,
               threads: int) -> dict[str, str]:
    """The variables npukit sets for numba's start: none if the user chose a wait policy, else the spin
    where ``idle`` cores (None: unknown) leave each of ``threads`` one, else passive."""
    if any(k in environ for k in USER_KEYS):
        return {}
    if idle is not None and idle < threads - 0.5:
        return dict(BUSY_POLICY)
    return dict(POLICY)


def _cpu_ticks() -> tuple[int, int] | None:
    """(all, idle) jiffies of every CPU so far, from /proc/stat (None where there is none)."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    ticks = [int(v) for v in first[1:]]
    return sum(ticks[:8]), ticks[3] + ticks[4]  # user..steal; idle + iowait (guest time is in user)


def idle_cores(window_s: float = IDLE_SAMPLE_S) -> float | None:
    """Cores left idle by everything else over ``window_s`` (this thread sleeps meanwhile)."""
    a = _cpu_ticks()
    if a is None:
        return None
    time.sleep(window_s)
    b = _cpu_ticks()
    if b is None or b[0] <= a[0]:
        return None
    return (os.cpu_count() or 1) * (b[1] - a[1]) / (b[0] - a[0])


def libgomp_loaded() -> bool:
    """Whether a libgomp is mapped into this process already (Linux; False where unknown)."""
    try:
        return "libgomp" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def start() -> ThreadStart:
    """Launch numba's threads once per process under npukit's policy; cheap after the first call."""
    global _started
    if _started is not None:
        return _started
    with _lock:
        if _started is None:
            _started = _launch()
    return _started


def _launch() -> ThreadStart:
    import numba

    environ = os.environ
    user = {k: environ[k] for k in USER_KEYS if k in environ}
    preloaded = libgomp_loaded()
    idle = None if user or preloaded else idle_cores()
    applied = policy_for(environ, idle, int(numba.config.NUMBA_NUM_THREADS))
    saved = {k: environ.get(k) for k in applied}
    environ.update(applied)
    try:
        threads = int(numba.get_num_threads())  # loads the threading layer (libgomp reads env now)
    finally:
        for key, old in saved.items():
            if old is None:
                environ.pop(key, None)
            else:
                environ[key] = old
    layer = str(numba.threading_layer())
    return ThreadStart(layer, threads, applied if layer == "omp" and not preloaded else {}, user, preloaded,
                       idle)
