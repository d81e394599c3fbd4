"""The timing core's types, tolerances and checks (the bottom of `npukit.sim.timing`'s modules).

`npukit.sim.timing` re-exports everything here and adds `simulate`; the event loops
(`timing_state`, `timing_fast`, `timing_nb`, `timing_ref`) import from this module, so nothing
inside `npukit.sim` imports in a circle. The model itself is described in `npukit.sim.timing`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, le
from typing import Any

from npukit.errors import NpukitError
from npukit.sim.work import Range

FRACTION_EPS = 1e-9  # relative tolerance on fractions
BYTES_EPS = 1e-6  # absolute tolerance on bytes / elements


class TimingError(NpukitError):
    """A program the timing model cannot schedule (deadlock, inconsistent op description)."""


@dataclass(frozen=True)
class TokenWait:
    """One engine head stuck on a token queue: op ``index`` (``label``) on ``engine`` waits to ``action``
    ("pop": the queue is empty; "push": it is full) on ``queue``, which holds ``tokens`` of ``capacity``."""

    index: int
    label: str
    engine: str
    action: str
    queue: str
    tokens: int
    capacity: int

    def __str__(self) -> str:
        state = "empty" if self.action == "pop" else f"full, {self.tokens}/{self.capacity}"
        who = self.label or self.engine
        return f"op {self.index} ({who}) on {self.engine} waits to {self.action} {self.queue!r} ({state})"


class TokenDeadlock(TimingError):
    """No op can ever progress again and at least one engine waits on a token queue; ``waits`` lists
    every such engine head, ``queues`` the queues involved (first-seen order), ``cycle`` the time."""

    def __init__(self, cycle: float, waits: Sequence[TokenWait]) -> None:
        self.cycle, self.waits = cycle, tuple(waits)
        self.queues = tuple(dict.fromkeys(w.queue for w in self.waits))
        super().__init__(f"token deadlock at cycle {cycle:.0f}: " + "; ".join(map(str, self.waits)))


@dataclass(frozen=True)
class Resource:
    name: str
    bytes_per_cycle: float


@dataclass(frozen=True)
class Stream:
    name: str
    path: tuple[str, ...]  # resources the fetched bytes cross
    capacity_bytes: float
    bytes_per_cycle: float = math.inf  # the stream's own limit besides its path


@dataclass(frozen=True)
class TokenQueue:
    """A bounded dependency-token queue (VTA's l2g, g2l, g2s, s2g): at most ``capacity`` tokens,
    ``initial`` of them present at cycle 0."""

    name: str
    capacity: int
    initial: int = 0


@dataclass(frozen=True)
class EnginePool:
    """``count`` identical cores of one engine type, named ``<name>.0`` … ``<name>.<count-1>``."""

    name: str
    count: int

    @property
    def cores(self) -> tuple[str, ...]:
        return tuple(f"{self.name}.{i}" for i in range(self.count))


@dataclass(frozen=True)
class Machine:
    engines: tuple[str | EnginePool, ...]
    resources: tuple[Resource, ...] = ()
    streams: tuple[Stream, ...] = ()
    clock_hz: float = 1e9
    issue_cycles: float = 0.0
    issue_window: int | None = None  # issued ops not yet started, all engines together (None: no bound)
    queues: tuple[TokenQueue, ...] = ()
    command_depth: int | None = None  # issued ops queued behind each engine's head (a pool: per pool)

    def core_names(self) -> tuple[str, ...]:
        """Every engine queue: plain engines as named, a pool as its cores (the result's engine keys)."""
        return tuple(c for e in self.engines for c in ((e,) if isinstance(e, str) else e.cores))


@dataclass(frozen=True)
class Op:
    index: int
    engine: str
    label: str = ""
    cycles: float = 0.0  # engine cycles at full rate
    latency: float = 0.0  # fixed cycles before progress starts
    tail: float = 0.0  # cycles from the last unit of work to completion (pipeline drain)
    path: tuple[str, ...] = ()  # resources crossed by this op's own transfer
    xfer_bytes: float = 0.0
    stream: str | None = None
    stream_bytes: float = 0.0
    fifo_from: int | None = None  # position (in the op list) of the producer feeding this op
    fifo_depth: float = 0.0  # elements
    fifo_elems: float = 0.0  # elements passing through the FIFO
    is_async: bool = False
    reads: tuple[Range, ...] = ()
    writes: tuple[Range, ...] = ()
    args: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class TokenOp(Op):
    """An `Op` that takes part in the token handshake: it pops one token from each queue in ``pop``
    before it starts and pushes one to each queue in ``push`` once its work and tail are done (both in
    the order given). (A subclass, not two more `Op` fields: adapters build records from `Op`'s field
    list positionally, and a plain `Op` simply has no tokens.)"""

    pop: tuple[str, ...] = ()
    push: tuple[str, ...] = ()


@dataclass
class OpTiming:
    index: int
    engine: str
    label: str
    issue: float
    start: float
    end: float
    busy: float
    stalls: dict[str, float]
    args: dict[str, Any]

    @property
    def cycles(self) -> float:
        return self.end - self.start

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "engine": self.engine, "label": self.label, "issue": self.issue,
                "start": self.start, "end": self.end, "cycles": self.cycles, "busy": self.busy,
                "stalls": dict(self.stalls), "args": self.args}


@dataclass
class EngineStats:
    name: str
    busy: float = 0.0
    idle: float = 0.0
    stalls: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"busy": self.busy, "idle": self.idle, "stalls": dict(self.stalls)}


@dataclass
class Fetch:
    """One op's bytes moving through a prefetch stream."""

    stream: str
    index: int
    start: float
    end: float
    bytes: float

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "index": self.index, "start": self.start, "end": self.end,
                "bytes": self.bytes}


@dataclass
class TimingResult:
    cycles: float
    clock_hz: float
    ops: list[OpTiming]
    engines: dict[str, EngineStats]
    fetches: list[Fetch]
    resource_bytes: dict[str, float]
    # piecewise-constant samples (t, {resource: bytes/cycle}) and (t, {stream: buffered bytes})
    usage: list[tuple[float, dict[str, float]]]
    levels: list[tuple[float, dict[str, float]]]

    @property
    def seconds(self) -> float:
        return self.cycles / self.clock_hz

    def to_json(self) -> dict[str, Any]:
        return {"cycles": self.cycles, "seconds": self.seconds, "clock_hz": self.clock_hz,
                "engines": {k: v.to_json() for k, v in self.engines.items()},
                "resource_bytes": dict(self.resource_bytes),
                "ops": [o.to_json() for o in self.ops], "fetches": [f.to_json() for f in self.fetches]}


def waterfill(caps: list[float], paths: list[tuple[str, ...]], capacity: dict[str, float]) -> list[float]:
    """Max-min fair rates for flows with individual caps over shared resources."""
    n = len(caps)
    rate = [0.0] * n
    frozen = [False] * n
    left = dict(capacity)
    while not all(frozen):
        level = math.inf
        for i in range(n):
            if not frozen[i]:
                level = min(level, caps[i] - rate[i])
        for r, c in left.items():
            users = sum(1 for i in range(n) if not frozen[i] and r in paths[i])
            if users:
                level = min(level, c / users)
        if math.isinf(level):
            raise TimingError("a transfer has neither a rate cap nor a bandwidth resource on its path")
        for i in range(n):
            if not frozen[i]:
                rate[i] += level
                for r in paths[i]:
                    left[r] -= level
        for i in range(n):
            if frozen[i]:
                continue
            if (rate[i] >= caps[i] * (1 - FRACTION_EPS)
                    or any(left[r] <= capacity[r] * FRACTION_EPS for r in paths[i])):
                frozen[i] = True
    return rate


def _valid(machine: Machine, ops: list[Op], capacity: dict[str, float], streams: dict,
           names: Collection[str]) -> bool:
    """True where `validate_program` has nothing to say (checked column by column; False: look op by op)."""
    try:
        return _valid_columns(machine, ops, capacity, streams, names)
    except TypeError:  # something unhashable or not comparable: look op by op
        return False


def _valid_columns(machine: Machine, ops: list[Op], capacity: dict[str, float], streams: dict,
                   names: Collection[str]) -> bool:
    col = {a: list(map(attrgetter(a), ops)) for a in (
        "engine", "path", "stream", "fifo_from", "cycles", "latency", "tail", "xfer_bytes", "stream_bytes")}
    if not (set(col["engine"]) <= set(names) and set(col["stream"]) <= {None, *streams}
            and {r for pth in set(col["path"]) for r in pth} <= capacity.keys()
            and {r for s in machine.streams for r in s.path} <= capacity.keys()):
        return False
    for a in ("cycles", "latency", "tail", "xfer_bytes", "stream_bytes"):  # (a NaN or a negative: not >= 0)
        if col[a] and not min(col[a]) >= 0:
            return False
    for pos in [c for c, f in enumerate(col["fifo_from"]) if f is not None]:
        op = ops[pos]
        if not 0 <= op.fifo_from < pos or op.cycles <= 0 or (op.fifo_elems > 0 and op.fifo_depth <= 0):
            return False
    idle_draw = list(compress(col["stream_bytes"], map(le, col["cycles"], repeat(0))))  # ops with cycles <= 0
    return not idle_draw or max(idle_draw) <= 0


def validate_program(machine: Machine, ops: list[Op], capacity: dict[str, float], streams: dict,
              names: Collection[str]) -> None:
    """Raise `TimingError` for the first inconsistent op (``names``: the engines, pools and cores)."""
    if _valid(machine, ops, capacity, streams, names):
        return
    for pos, op in enumerate(ops):
        if op.engine not in names:
            raise TimingError(f"op {op.index} uses unknown engine {op.engine!r}")
        for r in op.path:
            if r not in capacity:
                raise TimingError(f"op {op.index} crosses unknown resource {r!r}")
        if op.stream is not None and op.stream not in streams:
            raise TimingError(f"op {op.index} draws from unknown stream {op.stream!r}")
        if op.fifo_from is not None and not 0 <= op.fifo_from < pos:
            raise TimingError(f"op {op.index}: fifo producer must be an earlier op")
        if min(op.cycles, op.latency, op.tail, op.xfer_bytes, op.stream_bytes) < 0:
            raise TimingError(f"op {op.index} has a negative cost")
        if op.cycles <= 0 and (op.stream_bytes > 0 or op.fifo_from is not None):
            raise TimingError(f"op {op.index} consumes a stream or FIFO but has no engine cycles")
        if op.fifo_from is not None and op.fifo_elems > 0 and op.fifo_depth <= 0:
            raise TimingError(f"op {op.index}: a FIFO needs a positive depth")
    for s in machine.streams:
        for r in s.path:
            if r not in capacity:
                raise TimingError(f"stream {s.name!r} crosses unknown resource {r!r}")


def ranges_conflict(early: Op, rw: tuple, wr: tuple) -> bool:
    """RAW/WAW: ``early``'s writes against the reads and writes ``rw``; WAR: its reads against ``wr``."""
    for x0, x1 in early.writes:
        for y0, y1 in rw:
            if x0 < y1 and y0 < x1:
                return True
    for x0, x1 in early.reads:
        for y0, y1 in wr:
            if x0 < y1 and y0 < x1:
                return True
    return False
