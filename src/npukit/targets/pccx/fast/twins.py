"""Parallel or serial: which twin of a large GEMV kernel runs faster on this machine, right now.

A numba parallel region returns only when every worker thread has run its share. On a 2-core machine
that another process also uses, a worker is often not scheduled when the region starts, and the
calling thread then waits for it: measured here with one core busy elsewhere, the decode GEMVs took
11.6 ms per token on two threads against 5.0 ms on one. On an idle machine two threads stream the
weights faster. The twins compute the same exact integer sums (the partition of rows never changes
a row's sum), so the choice changes no bit of any result; `TwinChooser` picks it from what the calls
cost: a running mean of seconds per weight byte for each twin, the cheaper one used, the other tried
after ``period`` calls, then after twice as many each time it is still the dearer one (up to
``max_gap``: a stalled parallel call costs milliseconds on a busy machine), and again after ``period``
calls once it has won, so that a change in the machine's load is seen within a few tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

PARALLEL, SERIAL = 0, 1  # the twins, as `TwinChooser.pick` names them
_PARALLEL, _SERIAL = PARALLEL, SERIAL
_OUTLIER = 4.0  # a call costing more than this times its twin's mean counts as this much


class TwinChooser:
    """Shared by every large GEMV of one executor (costs are per byte, so sizes share them)."""

    def __init__(self, period: int = 16, weight: float = 0.25, threads: int | None = None,
                 max_gap: int = 512) -> None:
        if threads is None:
            threads = _numba_threads()
        self.period, self.weight, self.max_gap = period, weight, max_gap
        self.cost: list[float | None] = [None, None]  # running mean of seconds per byte, per twin
        self.calls = [0, 0]
        self.single = threads <= 1  # one thread: the parallel twin has nothing to gain
        self._n = 0
        self._gap = period  # calls between two tries of the dearer twin
        self._next = period  # the call that tries it next

    def _best(self) -> int:
        par, ser = self.cost
        return _PARALLEL if par is not None and (ser is None or par <= ser) else _SERIAL

    def pick(self) -> int:
        """The twin the next call runs (`_PARALLEL` or `_SERIAL`)."""
        if self.single:
            return _SERIAL
        self._n += 1
        if self.cost[_PARALLEL] is None:
            return _PARALLEL
        if self.cost[_SERIAL] is None:
            return _SERIAL
        best = self._best()
        return best ^ 1 if self._n >= self._next else best

    def record(self, twin: int, seconds: float, nbytes: int) -> None:
        best = self._best()
        per = seconds / max(nbytes, 1)
        old = self.cost[twin]
        # a twin's first call in a process loads its kernel from numba's cache (milliseconds): its
        # second call replaces that figure instead of averaging with it, or one slow load would keep
        # that twin from being chosen for the rest of the run
        fresh = old is None or self.calls[twin] == 1
        if not fresh:  # a call the OS preempted (tens of times the usual) moves the mean as 4x would:
            per = min(per, _OUTLIER * old)  # several in a row still follow a real change within calls
        self.cost[twin] = per if fresh else old + self.weight * (per - old)
        self.calls[twin] += 1
        if twin != best and None not in self.cost:  # a try of the dearer twin: back off unless it won
            self._gap = self.period if self._best() == twin else min(2 * self._gap, self.max_gap)
            self._next = self._n + self._gap

    def wrap(self, parallel: Callable[..., Any], serial: Callable[..., Any],
             nbytes: int) -> Callable[..., Any]:
        """One callable running whichever twin `pick` says, timing it (``nbytes``: the weights it reads)."""
        if self.single:
            return serial
        clock, pick, record = time.perf_counter, self.pick, self.record

        def run(*args: Any) -> Any:
            twin = pick()
            t0 = clock()
            out = (parallel if twin == _PARALLEL else serial)(*args)
            record(twin, clock() - t0, nbytes)
            return out

        return run

    def report(self) -> dict[str, Any]:
        """Calls and mean ns per weight byte of each twin so far (for stats and benchmarks)."""
        return {name: {"calls": self.calls[t], "ns_per_byte": None if self.cost[t] is None
                       else round(self.cost[t] * 1e9, 4)}
                for name, t in (("parallel", _PARALLEL), ("serial", _SERIAL))}


def _numba_threads() -> int:
    try:
        import numba

        from npukit.sim import threads

        threads.start()  # numba's pool under npukit's OpenMP policy, if this starts it
        return int(numba.get_num_threads())  # the count now (as `kernels.one_thread` reads it)
    except ImportError:  # pragma: no cover - numba absent: the NumPy backend never asks
        return 1
