"""The pccx timing model off the generation loop: each run's schedule computed in worker processes.

The event-driven timing model (`npukit.sim.timing`) costs more per decode token than the functional
simulation, and every run's schedule is independent of the others (each is timed from cycle 0). So
the driver hands each run's ops (`timing.to_ops`, plain tuples) to worker processes and goes on with
the next token; the same `simulate` on the same ops gives the same floating-point schedule in any
process, so the cycles are bit-identical to timing in line.

Workers are ``python -m npukit.targets.pccx.timing_pool`` children (not `multiprocessing`, whose
spawn would re-import the caller's ``__main__``) speaking length-prefixed pickles over their
stdin/stdout; a feeder thread per worker keeps the driver from blocking on a full pipe. Workers
return the cycle count; the full `TimingResult` (for ``--trace`` and the utilisation figures) stays
in the worker, which keeps its latest ``keep``, until `results` asks for it.
"""

from __future__ import annotations

import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections import OrderedDict
from typing import Any, BinaryIO

from npukit.sim.timing import TimingError, TimingResult

_LEN = struct.Struct("<Q")


def default_workers() -> int:
    return max(1, min(4, (os.cpu_count() or 2) - 1))


def _send(f: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_LEN.pack(len(data)) + data)
    f.flush()


def _recv(f: BinaryIO) -> Any:
    head = f.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError("timing worker closed its pipe")
    return pickle.loads(f.read(_LEN.unpack(head)[0]))


class _Worker:
    def __init__(self, hw: Any, keep: int, done: queue.Queue) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.proc = subprocess.Popen([sys.executable, "-m", "npukit.targets.pccx.timing_pool"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.jobs: queue.Queue = queue.Queue()
        self.jobs.put(("init", keep, hw))
        threading.Thread(target=self._feed, daemon=True).start()
        threading.Thread(target=self._read, args=(done,), daemon=True).start()

    def _feed(self) -> None:
        while (msg := self.jobs.get()) is not None:
            try:
                _send(self.proc.stdin, msg)
            except (OSError, ValueError):
                return
        self.proc.stdin.close()

    def _read(self, done: queue.Queue) -> None:
        while True:
            try:
                done.put(_recv(self.proc.stdout))
            except (EOFError, OSError, pickle.UnpicklingError):
                done.put(("exit", -1, None))
                return


class TimingPool:
    def __init__(self, hw: Any, workers: int | None = None, keep: int = 17) -> None:
        self.done: queue.Queue = queue.Queue()
        self.workers = [_Worker(hw, keep, self.done) for _ in range(workers or default_workers())]
        self.cycles: dict[int, float] = {}
        self._results: dict[int, TimingResult | None] = {}
        self.pending = 0

    def _worker(self, key: int) -> _Worker:
        return self.workers[key % len(self.workers)]

    def submit(self, key: int, ops: list[Any]) -> None:
        """Time one run (``ops``: `Op` field tuples in `Op`'s order) under ``key``."""
        self._worker(key).jobs.put(("time", key, [tuple(o) for o in ops]))
        self.pending += 1

    def _take(self) -> None:
        kind, key, value = self.done.get()
        if kind == "exit":
            raise TimingError("a timing worker process exited")
        if kind == "error":
            self.pending -= 1
            raise TimingError(f"timing run {key}: {value}")
        if kind == "cycles":
            self.pending -= 1
            self.cycles[key] = value
        else:
            self._results[key] = value

    def wait(self) -> dict[int, float]:
        """Every submitted run's cycles (blocks until the workers are through their queues)."""
        while self.pending:
            self._take()
        return self.cycles

    def results(self, keys: list[int]) -> dict[int, TimingResult | None]:
        """The full schedules of these (recent) runs; None for one no worker keeps any more."""
        self.wait()
        for k in keys:
            self._worker(k).jobs.put(("result", k, None))
        while any(k not in self._results for k in keys):
            self._take()
        return {k: self._results.pop(k) for k in keys}

    def close(self) -> None:
        for w in self.workers:
            w.jobs.put(None)
        for w in self.workers:
            try:
                w.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                w.proc.kill()


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """The worker loop: ("init", keep, hw), then ("time", key, op tuples) and ("result", key, _)."""
    from npukit.sim.timing import simulate
    from npukit.targets.pccx.timing import _OpRecord, machine

    _, keep, hw = _recv(inp)
    m = machine(hw)
    kept: OrderedDict[int, TimingResult] = OrderedDict()
    while True:
        try:
            kind, key, payload = _recv(inp)
        except EOFError:
            return
        if kind == "time":
            try:
                res = simulate(m, [_OpRecord(*t) for t in payload])
            except Exception as e:  # reported to the driver, which raises it
                _send(out, ("error", key, f"{type(e).__name__}: {e}"))
                continue
            kept[key] = res
            while len(kept) > keep:
                kept.popitem(last=False)
            _send(out, ("cycles", key, res.cycles))
        else:
            _send(out, ("result", key, kept.get(key)))


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
