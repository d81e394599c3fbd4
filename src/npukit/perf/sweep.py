"""Design-space sweeps: a grid over hardware and format parameters, evaluated in vectorized
chunks, locally on a process pool (default 2 workers) or on a Ray cluster.

Axis names:

* ``weights``, ``kv``, ``context``, ``sparsity`` — format and workload, per point;
* ``clock_mhz``, ``lanes``, ``ddr_gbps`` (the outermost memory level), ``static_power_w`` and any
  ``perf.<key>`` — Machine overrides (see `Machine.replace`);
* anything else (dotted, e.g. ``gemv.cores_log2``, ``ddr.peak_gbps``) — a hardware-description
  override, re-run through the target's adapter (one adapter call per distinct combination).
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import math
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError
from npukit.evidence import Tier
from npukit.perf.machine import Machine, load_machine
from npukit.perf.ops import OpTable
from npukit.perf.roofline import bound_names, evaluate, points_for

POINT_AXES = ("weights", "kv", "context", "sparsity")
MACHINE_AXES = ("clock_mhz", "lanes", "ddr_gbps", "static_power_w")
RESULT_COLUMNS = ("tokens_per_second", "seconds_per_token", "bytes_per_token", "weight_bytes_per_token",
                  "kv_bytes_per_token", "joules_per_token", "dynamic_joules_per_token", "macs_per_token")
SOURCE = "npukit.perf roofline (docs/evidence.md)"
CHUNK = 256


def parse_axis(text: str) -> tuple[str, list[Any]]:
    """``"name=v1,v2,..."`` or ``"name=start:stop:count"`` (numeric, inclusive, linear)."""
    if "=" not in text:
        raise ConfigError(f"--grid {text!r} is not name=v1,v2,...")
    name, raw = (s.strip() for s in text.split("=", 1))
    if not name or not raw:
        raise ConfigError(f"--grid {text!r} needs a name and values")
    if raw.count(":") == 2:
        try:
            a, b, n = raw.split(":")
            vals: list[Any] = [float(v) for v in np.linspace(float(a), float(b), int(n))]
        except ValueError:
            raise ConfigError(f"--grid {text!r}: range must be start:stop:count") from None
    else:
        vals = [_num(v.strip()) for v in raw.split(",") if v.strip()]
    if not vals:
        raise ConfigError(f"--grid {text!r} has no values")
    if name in ("context", "lanes"):
        vals = [int(v) if isinstance(v, float | int) else v for v in vals]
    return name, vals


def _num(s: str) -> Any:
    for cast in (int, float):
        try:
            return cast(s)
        except ValueError:
            pass
    return s


@dataclass
class Sweep:
    hw: str
    table: OpTable
    axes: dict[str, list[Any]]
    base: dict[str, Any]  # defaults for point axes not swept
    overrides: list[str]
    basis: str = "peak"

    def grid(self) -> list[dict[str, Any]]:
        names = list(self.axes)
        return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*self.axes.values())]


def _machine_key(p: dict[str, Any]) -> tuple:
    return tuple(sorted((k, v) for k, v in p.items() if k not in POINT_AXES))


def _machines(sw: Sweep, rows: list[dict[str, Any]]) -> tuple[list[Machine], list[str]]:
    cache: dict[tuple, tuple[Machine, str]] = {}
    out, tiers = [], []
    for p in rows:
        key = _machine_key(p)
        if key not in cache:
            hw_over = [f"{k}={v}" for k, v in key if not (k in MACHINE_AXES or k.startswith("perf."))]
            _, m = load_machine(sw.hw, sw.overrides + hw_over)
            perf = {}
            for k, v in key:
                if k == "ddr_gbps":
                    perf[f"{m.levels[0].name}_gbps"] = v
                elif k in MACHINE_AXES:
                    perf[k] = v
                elif k.startswith("perf."):
                    perf[k[5:]] = v
            m = m.replace(**perf) if perf else m
            rate = [f.tier for n, f in m.figures.items()
                    if n.startswith("hw.") and not (sw.basis == "peak" and n.endswith("_effective"))]
            cache[key] = (m, str(Tier.weakest(*rate)))
        m, tier = cache[key]
        out.append(m)
        tiers.append(tier)
    return out, tiers


def _eval_chunk(table: OpTable, machines: list[Machine], pts: dict[str, list[Any]], basis: str
                ) -> dict[str, np.ndarray]:
    p = points_for(machines[0], machines=machines, basis=basis, **pts)
    res = evaluate(table, p)
    names = bound_names(p.level_names)
    keep = {k: res[k] for k in RESULT_COLUMNS}
    keep["bound"] = np.asarray([names[i] for i in res["bound_index"]])
    return keep


def _ignore_interrupt() -> None:
    """Workers leave Ctrl-C to the parent (which stops the pool): no traceback from each of them."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_sweep(sw: Sweep, workers: int = 2, ray_address: str | None = None) -> list[dict[str, Any]]:
    rows = sw.grid()
    for r in rows:
        for k in POINT_AXES:
            r.setdefault(k, sw.base[k])
    machines, tiers = _machines(sw, rows)
    chunks = []
    for s in range(0, len(rows), CHUNK):
        part = rows[s:s + CHUNK]
        pts = {k: [r[k] for r in part] for k in POINT_AXES}
        pts["sparsity"] = [float(x) for x in pts["sparsity"]]
        chunks.append((machines[s:s + CHUNK], pts))
    if ray_address:
        results = _run_ray(sw, chunks, ray_address)
    elif workers > 1 and len(chunks) > 1:
        with ProcessPoolExecutor(max_workers=workers, initializer=_ignore_interrupt) as ex:
            futs = [ex.submit(_eval_chunk, sw.table, ms, pts, sw.basis) for ms, pts in chunks]
            results = [f.result() for f in futs]
    else:
        results = [_eval_chunk(sw.table, ms, pts, sw.basis) for ms, pts in chunks]
    out = []
    i = 0
    for res in results:
        n = len(res["bound"])
        for j in range(n):
            row = dict(rows[i])
            row.update({k: float(res[k][j]) for k in RESULT_COLUMNS})
            row["bound"] = str(res["bound"][j])
            row["time_tier"] = tiers[i]
            row["energy_tier"] = str(Tier.PROJECTED)  # energies per action are projected defaults
            row["source"] = SOURCE
            out.append(row)
            i += 1
    return out


def _run_ray(sw: Sweep, chunks: list, address: str) -> list[dict[str, np.ndarray]]:
    """Each chunk is one Ray task on the cluster at ``address``."""
    with ray_session(address) as ray:
        remote = ray.remote(_eval_chunk)
        table_ref = ray.put(sw.table)
        return ray.get([remote.remote(table_ref, ms, pts, sw.basis) for ms, pts in chunks])


@contextlib.contextmanager
def ray_session(address: str) -> Iterator[Any]:
    """The ``ray`` module connected to the cluster at ``address`` (``host:port`` of its head, or
    ``auto``); plain ``ray`` is enough (no dashboard). The driver disconnects afterwards."""
    _probe(address)  # first: importing ray takes seconds and may log before any error of ours
    try:
        import ray  # type: ignore[import-not-found]
    except ImportError:
        raise ConfigError("--ray needs the 'ray' package (pip install 'npukit[ray]')") from None
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                 logging_level="error", include_dashboard=False)
    except (ConnectionError, ValueError, RuntimeError, SystemExit) as exc:
        raise ConfigError(f"--ray {address}: cannot connect to a Ray cluster: "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds when nothing listens at host:port (Ray itself retries for minutes)."""
    import socket

    host, sep, port = address.rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.removeprefix("ray://") or "127.0.0.1", int(port)), timeout_s).close()
    except OSError as exc:
        raise ConfigError(f"--ray {address}: cannot connect to a Ray cluster: {exc.strerror or exc}"
                          ) from None


def pareto_front(rows: list[dict[str, Any]]) -> list[int]:
    """Indices of points no other point beats on both tok/s (higher) and J/token (lower)."""
    tps = np.asarray([r["tokens_per_second"] for r in rows])
    jpt = np.asarray([r["joules_per_token"] for r in rows])
    order = np.lexsort((jpt, -tps))  # by tok/s descending, ties by energy
    front, best = [], math.inf
    for i in order:
        if jpt[i] < best:
            front.append(int(i))
            best = jpt[i]
    return front


def write_table(rows: list[dict[str, Any]], path: str | Path) -> None:
    path = Path(path)
    cols = list(rows[0]) if rows else []
    if path.suffix == ".parquet":
        try:
            import pyarrow as pa  # type: ignore[import-not-found]
            import pyarrow.parquet as pq  # type: ignore[import-not-found]
        except ImportError:
            raise ConfigError("Parquet output needs the 'pyarrow' package; write .csv instead") from None
        pq.write_table(pa.Table.from_pylist(rows), path)
        return
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def read_csv(path: str | Path) -> list[dict[str, str]]:
    with Path(path).open(newline="") as fh:
        return list(csv.DictReader(fh))


def axes_from(texts: Iterable[str]) -> dict[str, list[Any]]:
    axes: dict[str, list[Any]] = {}
    for t in texts:
        name, vals = parse_axis(t)
        if name in axes:
            raise ConfigError(f"--grid {name!r} given twice")
        axes[name] = vals
    return axes
