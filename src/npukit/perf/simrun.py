"""Where simulator-sweep points run, and how their rows reach the output file.

Executors (each yields one chunk's rows as soon as that chunk finishes):

* in-process — one `Evaluator`;
* a local process pool (``workers`` processes) — the spec and the workload go to each worker once,
  through the pool's initializer; each distinct program is built once, by whichever worker is free,
  and sent with the chunks that need it;
* a Ray cluster — the spec and the workload are put in the object store once; each distinct program
  is compiled once, by a task whose result stays in the object store, and every chunk is one task
  that takes the workload and the programs it needs from there (a worker process keeps its
  `Evaluator`, and the programs it has fetched, from one task to the next).

Points are ordered by program before chunking, so a chunk mostly compiles once. `RowSink` appends
each finished chunk to the output and flushes it: a CSV is valid after every chunk, even after a
kill; a Parquet file is written from a CSV journal beside it when the sweep ends or is interrupted.
``--resume`` reads what the output (and a leftover journal) holds and skips those ``point_id``\\ s.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npukit.errors import ConfigError, NpukitError
from npukit.perf.simsweep import Evaluator, SimSpec, digest

Chunk = list[dict[str, Any]]


@dataclass
class CacheStats:
    compiles: int = 0
    hits: int = 0
    compile_s: float = 0.0

    def add(self, other: tuple[int, int, float]) -> None:
        self.compiles += other[0]
        self.hits += other[1]
        self.compile_s += other[2]


def order_and_chunk(ev: Evaluator, points: list[dict[str, Any]], parallel: int, size: int | None = None
                    ) -> list[Chunk]:
    """Chunks of points that share compiled programs; about 8 chunks per worker unless ``size``."""
    keys = [ev.program_id(p) for p in points]
    order = sorted(range(len(points)), key=lambda i: keys[i])
    pts = [points[i] for i in order]
    if size is None:
        size = max(1, min(64, math.ceil(len(pts) / max(1, 8 * parallel))))
    return [pts[s:s + size] for s in range(0, len(pts), size)]


def _stats_delta(ev: Evaluator, before: tuple[int, int, float]) -> tuple[int, int, float]:
    return ev.compiles - before[0], ev.hits - before[1], ev.compile_s - before[2]


def _run_chunk(ev: Evaluator, points: Chunk) -> tuple[Chunk, tuple[int, int, float]]:
    before = (ev.compiles, ev.hits, ev.compile_s)
    rows = ev.rows(points)
    return rows, _stats_delta(ev, before)


def run_local(spec: SimSpec, workload: Any, chunks: list[Chunk]) -> Iterator[tuple[Chunk, tuple]]:
    ev = Evaluator(spec, workload)
    for ch in chunks:
        yield _run_chunk(ev, ch)


_WORKER: dict[str, Evaluator] = {}


def _worker_init(spec: SimSpec, workload: Any) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    _WORKER["ev"] = Evaluator(spec, workload)


_HERE = "built where it is needed"  # a program pickle cannot carry (VTA's ISA classes are made at run time)


def _pool_compile(params: dict[str, Any]) -> tuple[Any, float]:
    """Build one program; it goes back to the driver when pickle can carry it, else it stays here
    (kept under its key) and a worker that lacks it builds it itself."""
    import pickle

    ev = _WORKER["ev"]
    before = ev.compile_s
    prog = ev.compile(params)
    ev.adopt(ev.program_id(params), prog)
    try:
        pickle.dumps(prog)
    except (pickle.PicklingError, TypeError, AttributeError):
        prog = _HERE
    return prog, ev.compile_s - before


def _pool_chunk(points: Chunk, programs: dict[str, Any]) -> tuple[Chunk, tuple]:
    ev = _WORKER["ev"]
    for pid, prog in programs.items():
        if pid not in ev.programs and not (isinstance(prog, str) and prog == _HERE):
            ev.adopt(pid, prog)
    return _run_chunk(ev, points)


@dataclass
class _PoolPlan:
    """What the pool still has to do: programs to build (each once, on whichever worker is free) and
    chunks, each sent once the programs it needs are built."""

    to_build: list[tuple[str, dict[str, Any]]]
    needs: list[list[str]]
    waiting: list[int]
    built: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, ev: Evaluator, chunks: list[Chunk]) -> _PoolPlan:
        if not ev.spec.use_cache:
            return cls([], [[] for _ in chunks], list(range(len(chunks))))
        ids = [[ev.program_id(p) for p in ch] for ch in chunks]
        first: dict[str, dict[str, Any]] = {}
        for ch, pids in zip(chunks, ids, strict=True):
            for p, pid in zip(ch, pids, strict=True):
                if pid:
                    first.setdefault(pid, p)
        needs = [sorted({i for i in pids if i}) for pids in ids]
        return cls(list(first.items()), needs, list(range(len(chunks))))

    def next_chunk(self) -> int | None:
        for n, i in enumerate(self.waiting):
            if all(pid in self.built for pid in self.needs[i]):
                return self.waiting.pop(n)
        return None


def run_pool(spec: SimSpec, workload: Any, chunks: list[Chunk], workers: int
             ) -> Iterator[tuple[Chunk, tuple]]:
    """Ready chunks go first; otherwise the next program is built; at most two jobs per worker are
    queued, so rows keep coming while programs are still being built."""
    plan = _PoolPlan.of(Evaluator(spec, workload), chunks)
    ex = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init, initargs=(spec, workload))
    finished = False
    try:
        building: dict[Any, str] = {}
        running: set[Any] = set()
        while plan.waiting or building or running:
            while len(building) + len(running) < 2 * workers:
                i = plan.next_chunk()
                if i is not None:
                    need = {pid: plan.built[pid] for pid in plan.needs[i]}
                    running.add(ex.submit(_pool_chunk, chunks[i], need))
                elif plan.to_build:
                    pid, params = plan.to_build.pop(0)
                    building[ex.submit(_pool_compile, params)] = pid
                else:
                    break
            done, _ = wait({*building, *running}, return_when=FIRST_COMPLETED)
            for f in done:
                if f in building:
                    prog, seconds = f.result()
                    plan.built[building.pop(f)] = prog
                    yield [], (1, 0, seconds)
                else:
                    running.discard(f)
                    yield f.result()
        finished = True
    finally:
        if not finished:  # interrupted: the jobs in flight are not waited for
            for proc in list(getattr(ex, "_processes", {}).values()):
                proc.terminate()
        ex.shutdown(wait=finished, cancel_futures=True)


def _ray_evaluator(key: str, spec: SimSpec, workload: Any) -> Evaluator:
    """The worker process's Evaluator for this sweep (``key``), kept from one task to the next."""
    ev = _WORKER.get(key)
    if ev is None:
        _WORKER.clear()
        ev = _WORKER[key] = Evaluator(spec, workload)
    return ev


def _ray_compile(key: str, spec: SimSpec, workload: Any, params: dict[str, Any]) -> tuple[Any, float]:
    """One Ray task per distinct program: (the program, its compile seconds) into the object store."""
    ev = _ray_evaluator(key, spec, workload)
    before = ev.compile_s
    return ev.compile(params), ev.compile_s - before


def _ray_chunk(key: str, spec: SimSpec, workload: Any, points: Chunk, pids: list[str], *programs: Any
               ) -> tuple[Chunk, tuple]:
    """One Ray task per chunk: the programs its points need come from the object store (arguments,
    so the task starts once they are built)."""
    ev = _ray_evaluator(key, spec, workload)
    for pid, prog in zip(pids, programs, strict=True):
        if pid not in ev.programs:
            ev.adopt(pid, prog)
    return _run_chunk(ev, points)


def run_ray(spec: SimSpec, workload: Any, chunks: list[Chunk], address: str
            ) -> Iterator[tuple[Chunk, tuple]]:
    """Each distinct program is compiled once on the cluster (a task whose result stays in the object
    store), then each chunk is a task that takes the programs it needs from there."""
    from npukit.perf.sweep import ray_session

    ev = Evaluator(spec, workload)
    key = digest([repr(spec), ev.workload_digest])
    with ray_session(address) as ray:
        spec_ref, wl_ref = ray.put(spec), ray.put(workload)
        ids = [[ev.program_id(p) if spec.use_cache else "" for p in ch] for ch in chunks]
        first = {pid: p for ch, pids in zip(chunks, ids, strict=True) for p, pid in zip(ch, pids, strict=True)
                 if pid}
        compile_task = ray.remote(_ray_compile).options(num_returns=2)
        made = {pid: compile_task.remote(key, spec_ref, wl_ref, p) for pid, p in first.items()}
        task = ray.remote(_ray_chunk)
        pending = []
        for ch, pids in zip(chunks, ids, strict=True):
            need = sorted({pid for pid in pids if pid})
            pending.append(task.remote(key, spec_ref, wl_ref, ch, need, *(made[pid][0] for pid in need)))
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    yield ray.get(ref)
            yield [], (len(made), 0, float(sum(ray.get([m[1] for m in made.values()]))))
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)


# --- output ------------------------------------------------------------------------------------


def _journal(path: Path) -> Path:
    return path.with_name(path.name + ".partial.csv")


def _read_csv(path: Path, cols: list[str]) -> list[dict[str, str]]:
    """The complete rows of a CSV written by a sweep (a row cut short by a kill is dropped)."""
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            return []
        if header != cols:
            raise ConfigError(f"--resume {path}: written by a different sweep (its columns differ)")
        status = cols.index("status")
        return [dict(zip(cols, r, strict=True)) for r in reader if len(r) == len(cols) and r[status]]


def _read_parquet(path: Path, cols: list[str]) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    import pyarrow.parquet as pq  # type: ignore[import-not-found]

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow's own error types: an unreadable file
        raise ConfigError(f"--resume {path}: not a readable Parquet file ({exc})") from None
    if rows and list(rows[0]) != cols:
        raise ConfigError(f"--resume {path}: written by a different sweep (its columns differ)")
    return [{k: _text(v) for k, v in r.items()} for r in rows]


def _text(v: Any) -> str:
    return "" if v is None else repr(v) if isinstance(v, float) else str(v)


def typed(rows: list[dict[str, str]], cols: list[str]) -> list[dict[str, Any]]:
    """CSV text back to numbers column by column (a column is numeric when every value parses)."""
    out: list[dict[str, Any]] = [dict(r) for r in rows]
    for c in cols:
        vals = [r.get(c, "") for r in rows]
        for cast in (int, float):
            try:
                conv = [cast(v) if v not in ("", None) else None for v in vals]
            except (TypeError, ValueError):
                continue
            for r, v in zip(out, conv, strict=True):
                r[c] = v
            break
    return out


@dataclass
class RowSink:
    """Appends rows to ``path`` (CSV directly; Parquet through a CSV journal), flushing per chunk."""

    path: Path
    cols: list[str]
    resume: bool = False
    done: set[str] = field(default_factory=set)
    written: int = 0
    _fh: Any = None
    _writer: Any = None

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.parquet = self.path.suffix == ".parquet"
        if self.parquet:
            try:
                import pyarrow  # type: ignore[import-not-found]  # noqa: F401
            except ImportError:
                raise ConfigError("Parquet output needs the 'pyarrow' package; write .csv instead") from None
        self.csv_path = _journal(self.path) if self.parquet else self.path
        kept: list[dict[str, str]] = []
        if self.resume:
            kept = _read_parquet(self.path, self.cols) if self.parquet else []
            kept += _read_csv(self.csv_path, self.cols)
            seen: dict[str, dict[str, str]] = {}
            for r in kept:
                seen.setdefault(r["point_id"], r)
            kept = list(seen.values())
            self.done = set(seen)
        tmp = self.csv_path.with_name(self.csv_path.name + ".tmp")
        with tmp.open("w", newline="") as fh:  # rewritten whole: no cut-off line is left behind
            w = csv.DictWriter(fh, fieldnames=self.cols)
            w.writeheader()
            w.writerows(kept)
        os.replace(tmp, self.csv_path)
        self.kept = len(kept)
        self._fh = self.csv_path.open("a", newline="")
        self._writer = csv.DictWriter(self._fh, fieldnames=self.cols, extrasaction="ignore")

    def write(self, rows: Chunk) -> None:
        self._writer.writerows({c: _text(r.get(c)) for c in self.cols} for r in rows)
        self._fh.flush()
        self.written += len(rows)

    def close(self) -> None:
        """Flush; for Parquet, write the file from the journal and remove the journal."""
        if self._fh is None:
            return
        self._fh.close()
        self._fh = None
        if self.parquet:
            import pyarrow as pa  # type: ignore[import-not-found]
            import pyarrow.parquet as pq  # type: ignore[import-not-found]

            rows = typed(_read_csv(self.csv_path, self.cols), self.cols)
            tmp = self.path.with_name(self.path.name + ".tmp")
            table = pa.Table.from_pylist(rows) if rows else \
                pa.table({c: pa.array([], pa.string()) for c in self.cols})
            pq.write_table(table, tmp)
            os.replace(tmp, self.path)
            self.csv_path.unlink()


@dataclass
class Progress:
    """Done/total, rate and ETA: redrawn on a terminal, one line every ``every_s`` off it."""

    total: int
    stream: Any
    every_s: float = 10.0
    done: int = 0
    t0: float = field(default_factory=time.perf_counter)
    _last: float = -math.inf  # the first update always prints

    def update(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        tty = self.stream.isatty()
        if now - self._last < (0.2 if tty else self.every_s) and self.done < self.total:
            return
        self._last = now
        rate = self.done / (now - self.t0) if now > self.t0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        text = (f"sweep {self.done}/{self.total} points  {rate:.1f} points/s  "
                f"ETA {_hms(eta)}")
        self.stream.write(f"\r{text}\033[K" if tty else text + "\n")
        if tty and self.done >= self.total:
            self.stream.write("\n")
        self.stream.flush()


def _hms(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    n = round(s)
    return f"{n // 3600}:{n % 3600 // 60:02d}:{n % 60:02d}"


def execute(spec: SimSpec, workload: Any, chunks: list[Chunk], *, workers: int = 1,
            ray_address: str | None = None, on_rows: Callable[[Chunk], None]) -> CacheStats:
    """Run every chunk where asked, handing each finished chunk's rows to ``on_rows``."""
    stats = CacheStats()
    if ray_address:
        it = run_ray(spec, workload, chunks, ray_address)
    elif workers > 1 and len(chunks) > 1:
        it = run_pool(spec, workload, chunks, workers)
    else:
        it = run_local(spec, workload, chunks)
    try:
        for rows, delta in it:
            on_rows(rows)
            stats.add(delta)
    except BrokenProcessPool as exc:  # a worker killed (out of memory, a signal): what is written stays
        raise NpukitError(f"a sweep worker process died ({exc}); rerun with --resume to finish") from None
    return stats
