"""Parallel or serial: which twin of a large GEMV kernel runs faster on this machine, right now.

A numba parallel region returns only when every worker thread has run its share. On a 2-core machine
that another process also uses, a worker is often not scheduled when the region starts, and the
calling thread then waits for it: measured here with one core busy elsewhere, the decode GEMVs took
11.6 ms per token on two threads against 5.0 ms on one. On an idle machine two threads stream the
weights faster. The twins compute the same exact integer sums (the partition of rows never changes
a row's sum), so the choice changes no bit of any result.

`TwinChooser` picks it per *site*: one call site of the decode step (a fused run from a given row,
a single-step GEMV of a given size), since the calls of different sites cost different amounts per
weight byte (a fused run also holds small rows), and comparing one site's parallel calls with another
site's serial ones locked the choice into the wrong twin (measured at hidden 1024 on the 2-core Xeon:
the serial twin chosen for 216 of 240 calls while always-parallel ran the step 2.4 ms faster). At a
site each twin keeps its last ``window`` call times; its cost is their mean less the largest one (a
call the OS preempted once does not count, a twin that stalls on every other call still does). The
cheaper twin runs; the other is tried again ``period`` calls later, then after twice as many each time
it is still the dearer (at most ``max_gap``: a lasting change in the machine's load is seen within
that many calls of the site, about as many decode steps), and again ``period`` calls after it wins.
A try that beats the cheaper twin's cost is followed by another at once, so a window filled in a busy
spell turns within a few calls once the machine is quiet again.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

PARALLEL, SERIAL = 0, 1  # the twins, as `TwinChooser.pick` names them
_PARALLEL, _SERIAL = PARALLEL, SERIAL


class _Site:
    """One call site's recent call times per twin and when its dearer twin is tried next."""

    __slots__ = ("gap", "n", "next", "times")

    def __init__(self, window: int, period: int) -> None:
        self.times: tuple[deque[float], deque[float]] = (deque(maxlen=window), deque(maxlen=window))
        self.n = 0  # calls picked here so far
        self.gap = period  # calls between two tries of the dearer twin
        self.next = period  # the call that tries it next

    def cost(self, twin: int) -> float:
        """The mean of ``twin``'s recent call times less the largest (inf: none yet)."""
        got = self.times[twin]
        if not got:
            return float("inf")
        if len(got) == 1:
            return got[0]
        return (sum(got) - max(got)) / (len(got) - 1)

    def best(self) -> int:
        return _PARALLEL if self.cost(_PARALLEL) <= self.cost(_SERIAL) else _SERIAL


class TwinChooser:
    """Shared by every large GEMV of one executor; costs are kept per call site (module docstring)."""

    def __init__(self, period: int = 8, window: int = 6, threads: int | None = None,
                 max_gap: int = 32) -> None:
        if threads is None:
            threads = _numba_threads()
        self.period, self.window, self.max_gap = period, window, max_gap
        self.cost: list[float | None] = [None, None]  # mean seconds per weight byte, per twin (report)
        self._secs, self._bytes = [0.0, 0.0], [0, 0]
        self.calls = [0, 0]
        self.single = threads <= 1  # one thread: the parallel twin has nothing to gain
        self._sites: dict[Hashable, _Site] = {}

    def _site(self, site: Hashable) -> _Site:
        got = self._sites.get(site)
        if got is None:
            got = self._sites[site] = _Site(self.window, self.period)
        return got

    def pick(self, site: Hashable = 0) -> int:
        """The twin the next call at ``site`` runs (`PARALLEL` or `SERIAL`)."""
        if self.single:
            return _SERIAL
        s = self._site(site)
        s.n += 1
        par, ser = s.times
        if not par:
            return _PARALLEL
        if not ser:
            return _SERIAL
        best = s.best()
        return best ^ 1 if s.n >= s.next else best

    def record(self, twin: int, seconds: float, nbytes: int, site: Hashable = 0) -> None:
        """A call at ``site`` on ``twin`` took ``seconds`` (``nbytes``: the weight bytes it read)."""
        self.calls[twin] += 1
        # a twin's first call in a process loads its kernel from numba's cache (milliseconds): it is
        # not a sample, or one slow load would keep that twin out for the next calls
        if self.calls[twin] == 1:
            return
        self._secs[twin] += seconds
        self._bytes[twin] += max(nbytes, 1)
        self.cost[twin] = self._secs[twin] / self._bytes[twin]
        s = self._site(site)
        best = s.best()
        s.times[twin].append(seconds)
        if twin == best or not s.times[best]:
            return
        if s.best() == twin:  # the dearer twin won: the other is the one tried from now on
            s.gap = self.period
        elif seconds < s.cost(best):  # a promising try: again at once, until its window turns or it loses
            s.next = s.n + 1
            return
        else:  # back off
            s.gap = min(2 * s.gap, self.max_gap)
        s.next = s.n + s.gap

    def wrap(self, parallel: Callable[..., Any], serial: Callable[..., Any],
             nbytes: int) -> Callable[..., Any]:
        """One callable running whichever twin `pick` says, timing it (``nbytes``: the weights it reads;
        the site: a single-step GEMV of that many weight bytes)."""
        if self.single:
            return serial
        clock, pick, record, site = time.perf_counter, self.pick, self.record, ("gemv", nbytes)

        def run(*args: Any) -> Any:
            twin = pick(site)
            t0 = clock()
            out = (parallel if twin == _PARALLEL else serial)(*args)
            record(twin, clock() - t0, nbytes, site)
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
