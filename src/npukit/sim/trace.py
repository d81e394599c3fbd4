"""Chrome / Perfetto trace-event JSON for a `TimingResult` (open in ui.perfetto.dev or chrome://tracing).

Layout: one process per simulated device; one thread (track) per engine with an ``X`` (complete)
event per instruction, one thread per prefetch stream with an ``X`` event per op's fetch, and
counter (``C``) tracks for each bandwidth resource (GB/s in use) and each stream's buffer level.
Resources are counters rather than ``X`` tracks because concurrent transfers share them, and
``X`` events on one track must not overlap. Timestamps and durations are microseconds.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from npukit.sim.timing_types import TimingResult

_DIGITS = 6  # picosecond resolution in µs; keeps per-track end/start equal after rounding


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a schedule or trace is built: hundreds of thousands of
    small acyclic objects, which would otherwise trigger collections that scan every live object
    (measured: half the time of building a pccx token's schedule and trace)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def to_trace(result: TimingResult, process: str = "npu", pid: int = 1,
             metadata: dict[str, Any] | None = None, start_us: float = 0.0) -> dict[str, Any]:
    us = 1e6 / result.clock_hz

    def t(cycles: float) -> float:  # ``start_us``: where this run sits on a longer timeline
        return round(start_us + cycles * us, _DIGITS)

    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": process}},
    ]
    tids: dict[str, int] = {}

    def track(name: str) -> int:
        if name not in tids:
            tids[name] = len(tids) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tids[name],
                           "args": {"name": name}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tids[name],
                           "args": {"sort_index": tids[name]}})
        return tids[name]

    for engine in result.engines:
        track(engine)
    for f in result.fetches:
        track(f"{f.stream} fetch")
    body: list[dict[str, Any]] = []
    for o in sorted(result.ops, key=lambda o: (o.engine, o.start, o.index)):
        ts, end = t(o.start), t(o.end)
        args = {"index": o.index, "label": o.label, "cycles": o.cycles, "busy_cycles": o.busy,
                "issue_us": t(o.issue), **o.args}
        if o.stalls:
            args["stalls"] = {k: round(v, 3) for k, v in o.stalls.items()}
        body.append({"ph": "X", "name": o.label or o.engine, "cat": o.engine, "pid": pid,
                     "tid": tids[o.engine], "ts": ts, "dur": round(end - ts, _DIGITS), "args": args})
    for f in sorted(result.fetches, key=lambda f: (f.stream, f.start)):
        ts, end = t(f.start), t(f.end)
        body.append({"ph": "X", "name": f"fetch #{f.index}", "cat": "stream", "pid": pid,
                     "tid": tids[f"{f.stream} fetch"], "ts": ts, "dur": round(end - ts, _DIGITS),
                     "args": {"index": f.index, "bytes": f.bytes}})
    gbps = result.clock_hz / 1e9  # bytes/cycle -> GB/s
    # a counter holds its value until the next sample, so only changes are written (most events move
    # no rate: this keeps a decode token's trace ~10x smaller and its counters unchanged)
    _counters(body, pid, t, result.usage, "GB/s", lambda rate: round(rate * gbps, 6))
    _counters(body, pid, t, result.levels, "buffer bytes", lambda level: round(level, 3),
              arg="bytes")
    body.sort(key=lambda e: e["ts"])
    out: dict[str, Any] = {"traceEvents": events + body, "displayTimeUnit": "ns"}
    if metadata:
        out["metadata"] = metadata
    return out


def _counters(body: list[dict[str, Any]], pid: int, t: Any, samples: list[tuple[float, dict[str, float]]],
              unit: str, value: Any, arg: str | None = None) -> None:
    """``C`` events for each named series in ``samples``, one wherever its (rounded) value changes."""
    last: dict[str, float] = {}
    last_raw: dict[str, float] = {}
    labels: dict[str, str] = {}
    key = arg or unit
    for cyc, values in samples:
        ts = None
        for name, raw in values.items():
            if last_raw.get(name) == raw:  # (an unchanged sample rounds to the value written last)
                continue
            last_raw[name] = raw
            v = value(raw)
            if last.get(name) != v:
                last[name] = v
                if ts is None:
                    ts = t(cyc)
                label = labels.get(name) or labels.setdefault(name, f"{name} {unit}")
                body.append({"ph": "C", "name": label, "pid": pid, "ts": ts, "args": {key: v}})


def encode_each(items: Sequence[Any], encode: Callable[[Any], bytes]) -> list[bytes]:
    """``[encode(x) for x in items]``, the first half in a forked child where there are two cores to use
    (Linux): a trace's runs are independent and building their events is pure Python, so the two
    halves take half the time. A child that fails leaves its half to the parent."""
    k = len(items) // 2
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    if k < 1 or cores < 2 or not hasattr(os, "fork"):
        return [encode(x) for x in items]
    fd, tmp = tempfile.mkstemp(prefix="npukit-trace-")
    pid = os.fork()
    if pid == 0:  # the child: encode the first half into the temp file, length-prefixed, and leave
        code = 1
        try:
            with os.fdopen(fd, "wb") as f:
                for x in items[:k]:
                    data = encode(x)
                    f.write(len(data).to_bytes(8, "little") + data)
            code = 0
        finally:
            os._exit(code)
    os.close(fd)
    try:
        rest = [encode(x) for x in items[k:]]
        first = _read_chunks(tmp, k) if os.waitpid(pid, 0)[1] == 0 else None
        return (first if first is not None else [encode(x) for x in items[:k]]) + rest
    finally:
        os.unlink(tmp)


def _read_chunks(path: str, count: int) -> list[bytes] | None:
    data, out, i = Path(path).read_bytes(), [], 0
    while i + 8 <= len(data):
        n = int.from_bytes(data[i:i + 8], "little")
        out.append(data[i + 8:i + 8 + n])
        i += 8 + n
    return out if len(out) == count and i == len(data) else None


def dumps(obj: Any) -> bytes:
    """Trace JSON as bytes (orjson: the same document as json.dumps, several times faster)."""
    try:
        import orjson

        return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    except (ImportError, TypeError):  # (orjson is a core dependency; a value only json can write)
        return json.dumps(obj, separators=(",", ":")).encode()


def write_trace(result: TimingResult, path: str | Path, **kw: Any) -> Path:
    path = Path(path)
    path.write_bytes(dumps(to_trace(result, **kw)))
    return path
