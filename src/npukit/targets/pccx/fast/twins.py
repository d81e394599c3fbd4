"""Parallel or serial: which twin of a large GEMV kernel runs faster on this machine, right now.

A numba parallel region returns only when every worker thread has run its share. On a 2-core machine
that another process also uses, a worker is often not scheduled when the region starts, and the
calling thread then waits for it: measured here with one core busy elsewhere, the decode GEMVs took
11.6 ms per token on two threads against 5.0 ms on one. On an idle machine two threads stream the
weights faster. The twins compute the same exact integer sums (the partition of rows never changes
a row's sum), so the choice changes no bit of any result.

`TwinChooser` makes one choice for the whole executor, from costs kept per call *site* (one fused run
from a given row, a single-step GEMV of a given size): the calls of different sites cost different
amounts per weight byte (a fused run also holds small rows), and comparing one site's parallel calls
with another site's serial ones, as a single running mean per twin did, locked the choice into either
twin by chance (identical runs at hidden 1024 on the 2-core Xeon: 8 to 86 of 180 calls parallel). At a
site each twin keeps its last ``window`` call times; its cost is their mean less the largest one (a
call the OS preempted once does not count, a twin that stalls on every other call still does). The
twin in use is the one whose costs, summed over the sites measured both ways, are lower. The other is
*probed* in a burst of calls, one per active site and one more: every site gets a sample, and the
workers are awake for all but the first (a parallel call right after serial ones pays the workers'
wake-up from sleep, which steady parallel calls do not: it is no sample). The next probe comes
``period`` calls later, then after twice as many each time the probed twin loses (at most
``max_gap``: a change in the machine's load is followed within that many calls, a few dozen decode
steps), and at once again (up to twice in a row) when its burst beat the twin in use but did not yet
outweigh the older times in its windows, or when the twin in use has looked the dearer at a whole
step's worth of calls in a row (the machine's load changed). The sites counted are those called
since the last probe (a program layout no longer run drops out), and a burst ends early at the first
site it calls again (that call is its "one more"): the program running now has no other sites. (The
first probe of a decode comes right after the prompt, whose chunks called ~35 sites once each; sized
by those, it ran the probed twin for 40 calls, 8 decode steps at hidden 1024.)
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

PARALLEL, SERIAL = 0, 1  # the twins, as `TwinChooser.pick` names them
_PARALLEL, _SERIAL = PARALLEL, SERIAL


class _Site:
    """One call site's recent call times per twin."""

    __slots__ = ("probe", "times")

    def __init__(self, window: int) -> None:
        self.times: tuple[deque[float], deque[float]] = (deque(maxlen=window), deque(maxlen=window))
        self.probe: list[float] = []  # the probed twin's times in the current burst

    def cost(self, twin: int) -> float | None:
        """The mean of ``twin``'s recent call times less the largest (None: none yet)."""
        got = self.times[twin]
        if not got:
            return None
        if len(got) == 1:
            return got[0]
        return (sum(got) - max(got)) / (len(got) - 1)


class TwinChooser:
    """Shared by every large GEMV of one executor (module docstring)."""

    def __init__(self, period: int = 24, window: int = 4, threads: int | None = None,
                 max_gap: int = 256) -> None:
        if threads is None:
            threads = _numba_threads()
        self.period, self.window, self.max_gap = period, window, max_gap
        self._secs, self._bytes = [0.0, 0.0], [0, 0]  # sampled seconds and weight bytes, per twin (report)
        self.calls = [0, 0]
        self.single = threads <= 1  # one thread: the parallel twin has nothing to gain
        self.twin = _PARALLEL  # the twin in use
        self._sites: dict[Hashable, _Site] = {}
        self._n = 0  # calls picked so far
        self._gap = period
        self._next = 2  # the call that starts the next probe (the first: once each twin has loaded)
        self._left = 0  # calls left in the probe under way
        self._last = -1  # the twin of the last call recorded
        self._active: set[Hashable] = set()  # the sites called since the last probe (a probe's length)
        self._burst: set[Hashable] = set()  # the sites the probe under way has called
        self._again = 0  # probes run at once in a row (`_decide`)
        self._worse = 0  # calls in a row at which the twin in use looked the dearer (`_watch`)

    def _site(self, site: Hashable) -> _Site:
        got = self._sites.get(site)
        if got is None:
            got = self._sites[site] = _Site(self.window)
        return got

    def pick(self, site: Hashable = 0) -> int:
        """The twin the next call (at ``site``) runs (`PARALLEL` or `SERIAL`)."""
        if self.single:
            return _SERIAL
        self._n += 1
        self._active.add(site)
        if not self._left and self._n >= self._next:  # a probe of the other twin begins
            self._left = len(self._active) + 1
            self._active, self._burst = {site}, set()
        if self._left:
            if site in self._burst:  # every site of the running program sampled: this call ends it
                self._left = 1
            self._burst.add(site)
            return self.twin ^ 1
        return self.twin

    def record(self, twin: int, seconds: float, nbytes: int, site: Hashable = 0) -> None:
        """A call at ``site`` on ``twin`` took ``seconds`` (``nbytes``: the weight bytes it read)."""
        last, self._last = self._last, twin
        self.calls[twin] += 1
        probing = self._left > 0 and twin != self.twin
        if probing:
            self._left -= 1
        # no sample: a twin's first call in the process (it loads its kernel from numba's cache), and a
        # parallel call right after a serial one (its workers woken from sleep)
        if self.calls[twin] > 1 and not (twin == _PARALLEL and last == _SERIAL):
            self._secs[twin] += seconds
            self._bytes[twin] += max(nbytes, 1)
            s = self._site(site)
            s.times[twin].append(seconds)
            if probing:
                s.probe.append(seconds)
            elif twin == self.twin:
                self._watch(s)
        else:
            self._site(site)  # (known: the next probe gives it its calls)
        if probing and not self._left:
            self._decide()

    def _watch(self, s: _Site) -> None:
        """The twin in use turned dearer than the other's last times at a whole step's worth of calls
        in a row (the machine's load changed): probe the other now, not at the next scheduled probe."""
        other, mine = s.cost(self.twin ^ 1), s.cost(self.twin)
        dearer = other is not None and mine is not None and other < mine
        self._worse = self._worse + 1 if dearer else 0
        if self._worse >= max(4, len(self._active)) and not self._left:
            self._worse, self._next = 0, self._n + 1

    def _score(self, probed: int, recent: bool) -> float | None:
        """Σ over the sites the probe measured of (probed twin's cost − the one in use's), from their
        windows or (``recent``) from the probe's own times; None where no such site has both."""
        total, seen = 0.0, False
        for s in self._sites.values():
            mine = s.cost(self.twin)
            if not s.probe or mine is None:
                continue
            total += (sum(s.probe) / len(s.probe) if recent else s.cost(probed)) - mine  # type: ignore[operator]
            seen = True
        return total if seen else None

    def _decide(self) -> None:
        """The end of a probe: switch to the probed twin if it is now the cheaper, else back off."""
        probed = self.twin ^ 1
        whole, recent = self._score(probed, False), self._score(probed, True)
        for s in self._sites.values():
            s.probe.clear()
        again = False
        if whole is not None and whole < 0:
            self.twin, self._gap, wait = probed, self.period, self.period
        elif whole is None:  # no site measured both ways yet: the twin in use once at every site, then again
            wait = len(self._sites) + 1
        elif recent is not None and recent < 0 and self._again < 2:  # it won this burst: again at once
            wait, again = 0, True
        else:
            self._gap = min(2 * self._gap, self.max_gap)
            wait = self._gap
        self._again = self._again + 1 if again else 0
        self._next = self._n + wait + 1

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
        return {name: {"calls": self.calls[t], "ns_per_byte": None if not self._bytes[t]
                       else round(self._secs[t] / self._bytes[t] * 1e9, 4)}
                for name, t in (("parallel", _PARALLEL), ("serial", _SERIAL))}


def _numba_threads() -> int:
    try:
        import numba

        from npukit.sim import threads

        threads.start()  # numba's pool under npukit's OpenMP policy, if this starts it
        return int(numba.get_num_threads())  # the count now (as `kernels.one_thread` reads it)
    except ImportError:  # pragma: no cover - numba absent: the NumPy backend never asks
        return 1
