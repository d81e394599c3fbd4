"""Reading a simulator sweep's output back: the Pareto front for chosen objectives, and where the
roofline is optimistic — per parameter value, the simulator/roofline time ratio and the stall that
dominates there (`npukit sweep report FILE`)."""

from __future__ import annotations

import csv
import math
from collections import Counter
from pathlib import Path
from statistics import median
from typing import Any

from npukit.errors import ConfigError
from npukit.evidence import Tier
from npukit.perf.simrun import typed
from npukit.perf.simsweep import STATUS_OK

DEFAULT_OBJECTIVES = ("time_s", "energy_j")


def load(path: str | Path) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns and typed rows of a sweep's CSV or Parquet output."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq  # type: ignore[import-not-found]
        except ImportError:
            raise ConfigError("reading Parquet needs the 'pyarrow' package") from None
        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow's own error types
            raise ConfigError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
        cols, rows = list(table.column_names), table.to_pylist()
    else:
        try:
            with path.open(newline="") as fh:
                reader = csv.DictReader(fh)
                cols = list(reader.fieldnames or [])
                raw = [r for r in reader if None not in r.values()]
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise ConfigError(f"{path}: not a readable CSV file ({exc})") from None
        rows = typed(raw, cols)
    if "point_id" not in cols or "sim_over_roofline" not in cols:
        raise ConfigError(f"{path}: not the output of 'npukit sweep --level sim'")
    return cols, rows


def parameters(cols: list[str]) -> list[str]:
    return cols[:cols.index("point_id")]


def objectives_from(text: str | None, cols: list[str]) -> tuple[str, ...]:
    objs = tuple(s.strip() for s in text.split(",")) if text else DEFAULT_OBJECTIVES
    if len(objs) != 2 or any(o.removeprefix("max:") not in cols for o in objs):
        raise ConfigError(f"--objectives {text!r}: two column names, each minimised (or max:NAME), "
                          f"e.g. time_s,energy_j")
    return objs


def _has(v: Any) -> bool:
    return v not in (None, "") and not (isinstance(v, float) and math.isnan(v))


def _key(row: dict[str, Any], obj: str) -> float:
    return -float(row[obj[4:]]) if obj.startswith("max:") else float(row[obj])


def pareto(rows: list[dict[str, Any]], objectives: tuple[str, ...]) -> list[int]:
    """Indices of the ok rows no other ok row beats on both objectives (first objective's order);
    rows without a value for an objective (rk3588 has no energy model) take no part."""
    a, b = objectives
    ok = [i for i, r in enumerate(rows) if r.get("status") == STATUS_OK
          and all(_has(r[o.removeprefix("max:")]) for o in objectives)]
    order = sorted(ok, key=lambda i: (_key(rows[i], a), _key(rows[i], b)))
    front, best = [], float("inf")
    for i in order:
        if _key(rows[i], b) < best:
            front.append(i)
            best = _key(rows[i], b)
    return front


def deviation(rows: list[dict[str, Any]], params: list[str]) -> list[dict[str, Any]]:
    """Per parameter and value: how many points, the median/max simulator ÷ roofline time (its tier:
    the weaker of the two times'), the stall that dominates most of them and its median share of
    engine-cycles, and the error count."""
    out = []
    for p in params:
        values = sorted({str(r[p]) for r in rows}, key=_sortable)
        if len(values) < 2:
            continue
        for v in values:
            sel = [r for r in rows if str(r[p]) == v]
            ok = [r for r in sel if r.get("status") == STATUS_OK]
            ratios = [float(r["sim_over_roofline"]) for r in ok]
            stalls = Counter(r["dominant_stall"] for r in ok if r.get("dominant_stall"))
            top = stalls.most_common(1)[0][0] if stalls else ""
            shares = [float(r["dominant_stall_share"]) for r in ok if r.get("dominant_stall") == top]
            tiers = {Tier(r[c]) for r in ok for c in ("time_tier", "roofline_tier") if r.get(c)}
            out.append({"parameter": p, "value": v, "points": len(sel), "errors": len(sel) - len(ok),
                        "tier": str(Tier.weakest(*tiers)) if tiers else "",
                        "median_ratio": median(ratios) if ratios else None,
                        "max_ratio": max(ratios) if ratios else None, "dominant_stall": top,
                        "stall_share": median(shares) if shares else None})
    return out


def _sortable(v: str) -> tuple:
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)


def plot_front(rows: list[dict[str, Any]], front: list[int], objectives: tuple[str, ...],
               path: str | Path) -> Path:
    from npukit.perf.plot import _plt

    plt = _plt()
    a, b = (o.removeprefix("max:") for o in objectives)
    ok = [r for r in rows if r.get("status") == STATUS_OK]
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    ax.scatter([r[a] for r in ok], [r[b] for r in ok], s=8, color="0.7", label="points")
    fr = sorted((rows[i] for i in front), key=lambda r: r[a])
    ax.plot([r[a] for r in fr], [r[b] for r in fr], "o-", color="C3", label="Pareto front")
    tiers = sorted({f"{r.get('time_tier')}/{r.get('energy_tier')}" for r in ok})
    ax.set_xlabel(f"{a} ({'max' if objectives[0].startswith('max:') else 'min'})")
    ax.set_ylabel(f"{b} ({'max' if objectives[1].startswith('max:') else 'min'})")
    ax.set_title(f"simulator sweep, {len(ok)} points (tiers time/energy: {', '.join(tiers)})", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
