"""Figures: the roofline with every op placed on it, a stacked per-layer time chart, and the
Pareto plot of a sweep. matplotlib is the optional ``plot`` extra, imported only here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError
from npukit.perf.roofline import Analysis


def _plt() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'npukit[plot]'") from None
    return plt


def plot_file(a: Analysis, path: str | Path) -> Path:
    """``layers*.png`` → per-layer chart; any other name → roofline."""
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ConfigError(f"--plot {path}: use a .png, .svg or .pdf file name")
    if path.stem.lower().startswith("layer"):
        return plot_layers(a, path)
    return plot_roofline(a, path)


def plot_roofline(a: Analysis, path: str | Path) -> Path:
    """x: MACs per off-chip byte; y: attained MAC/s. Ceilings: peak MAC rate and each
    memory level carrying weights/KV. Ops with no off-chip bytes or no MACs are left out."""
    plt = _plt()
    m = a.machine
    po = a.per_op
    off = po["op_w_bytes"] + po["op_kv_bytes"]
    macs, sec = po["op_macs"], po["op_seconds"]
    ok = (off > 0) & (macs > 0) & (sec > 0)
    x, y = macs[ok] / off[ok], macs[ok] / sec[ok]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    peak = m.mac_rate(_mac_kind(a.weights))
    # span the ops and every ridge point (peak / bandwidth), so each sloped ceiling is visible
    ridges = [peak / lv.bps(a.basis) for lv in m.levels
              if ("weights" in lv.carries or "kv" in lv.carries) and lv.bps(a.basis) > 0]
    lo = min([*(x.tolist() if ok.any() else [1.0]), *ridges]) / 4
    hi = max([*(x.tolist() if ok.any() else [1.0]), *ridges]) * 4
    xs = np.logspace(np.log10(max(lo, 1e-4)), np.log10(max(hi, 10)), 200)
    ax.plot(xs, np.full_like(xs, peak), "k-", lw=1.5, label=f"peak {peak / 1e9:.3g} GMAC/s")
    for lv in m.levels:
        if "weights" in lv.carries or "kv" in lv.carries:
            bw = lv.bps(a.basis)
            ax.plot(xs, np.minimum(xs * bw, peak), "--", lw=1.2, label=f"{lv.name} {bw / 1e9:.3g} GB/s")
    groups = a.table.groups[ok]
    names = sorted(set(groups))
    colors = _colors(len(names))
    spots: dict[tuple[float, float], list[str]] = {}  # points within ~25% of each other share a label
    for k, g in enumerate(names):
        sel = groups == g
        ax.scatter(x[sel], y[sel], s=16, alpha=0.8, label=g, color=colors[k],
                   marker=MARKERS[k % len(MARKERS)])
        for xi, yi in zip(x[sel], y[sel], strict=True):
            spots.setdefault((round(float(np.log10(xi)), 1), round(float(np.log10(yi)), 1)), []).append(g)
    # op classes often sit on the same point (same intensity, same bound): one label names them all
    for (lx, ly), gs in spots.items():
        ax.annotate(", ".join(dict.fromkeys(gs)), (10 ** lx, 10 ** ly), fontsize=6, xytext=(6, -2),
                    textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (MAC per off-chip byte)")
    ax.set_ylabel("attained MAC/s")
    ax.set_title(f"{a.table.model} on {m.name}: {a.weights}/{a.kv} KV, ctx {a.context} "
                 f"(roofline, tier: {_time_tier(a)})", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def _mac_kind(weights: str) -> str:
    from npukit.perf.roofline import weight_format

    return weight_format(weights).mac


def layer_times(a: Analysis) -> tuple[list[str], list[str], np.ndarray]:
    """(column labels, groups, seconds[group, column]); column 'pre'/'post' hold layer -1 ops
    before/after the layer loop."""
    t = a.table
    sec = a.per_op["op_seconds"]
    n = t.n_layers()
    first_layer_op = int(np.argmax(t.layers >= 0)) if (t.layers >= 0).any() else len(t)
    col = np.where(t.layers >= 0, t.layers + 1, np.where(np.arange(len(t)) < first_layer_op, 0, n + 1))
    groups = sorted(set(t.groups.tolist()))
    out = np.zeros((len(groups), n + 2))
    gi = np.asarray([groups.index(g) for g in t.groups])
    np.add.at(out, (gi, col), sec)
    labels = ["pre", *[str(i) for i in range(n)], "post"]
    return labels, groups, out


def layers_figure(a: Analysis) -> Any:
    """The stacked per-layer chart: one distinct colour per op group, the y range holding the
    tallest column (lm_head's 'post' column included), the legend outside the bars."""
    plt = _plt()
    labels, groups, data = layer_times(a)
    fig, ax = plt.subplots(figsize=(max(9, len(labels) * 0.25 + 2), 5))
    bottom = np.zeros(data.shape[1])
    colors = _colors(len(groups))
    for k, (g, row) in enumerate(zip(groups, data, strict=True)):
        ax.bar(range(len(labels)), row * 1e3, bottom=bottom * 1e3, label=g, width=0.8, color=colors[k])
        bottom += row
    ax.set_ylim(0, float(bottom.max()) * 1e3 * 1.08 or 1.0)
    ax.set_xticks(range(len(labels)), labels, fontsize=6, rotation=90)
    ax.set_ylabel("ms per token (cycles = ms × clock)")
    ax.set_xlabel("layer")
    ax.set_title(f"{a.table.model} on {a.machine.name}: per-layer time, "
                 f"{a.totals['seconds_per_token'] * 1e3:.1f} ms/token (roofline, tier: {_time_tier(a)})",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


def plot_layers(a: Analysis, path: str | Path) -> Path:
    fig = layers_figure(a)
    fig.savefig(path, dpi=120)
    _plt().close(fig)
    return Path(path)


def _time_tier(a: Analysis) -> str:
    """The tier the ledger gives this analysis's time figures (the title says the same as the table)."""
    from npukit.perf.ledger import build_ledger

    return str(build_ledger(a)["tokens_per_second"].tier)


def plot_pareto(rows: list[dict[str, Any]], front: list[int], path: str | Path,
                refs: dict[str, tuple[float, float]] | None = None, title: str | None = None) -> Path:
    fig = pareto_figure(rows, front, refs, title)
    fig.savefig(path, dpi=120)
    _plt().close(fig)
    return Path(path)


def pareto_figure(rows: list[dict[str, Any]], front: list[int],
                  refs: dict[str, tuple[float, float]] | None = None, title: str | None = None) -> Any:
    """tok/s vs J/token on log axes with plain-number tick labels (2.2, not 2.2×10⁰); the front's
    fastest point and its least-energy point are marked, ``title`` (model and hardware) on top."""
    plt = _plt()
    tps = np.asarray([r["tokens_per_second"] for r in rows])
    jpt = np.asarray([r["joules_per_token"] for r in rows])
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter(tps, jpt, s=8, alpha=0.35, label="design points (projected energy)")
    f = sorted(front, key=lambda i: tps[i])
    ax.plot(tps[f], jpt[f], "r.-", label="Pareto front")
    if f:
        fast, frugal = f[-1], min(f, key=lambda i: jpt[i])
        for i, what in ((fast, "fastest"), (frugal, "least J/token")):
            ax.scatter([tps[i]], [jpt[i]], s=60, facecolors="none", edgecolors="k")
            ax.annotate(f"{what}: {tps[i]:.3g} tok/s, {jpt[i]:.3g} J", (tps[i], jpt[i]), fontsize=7,
                        xytext=(6, 6), textcoords="offset points")
    tiers = sorted({str(r.get("time_tier", "")) for r in rows} - {""})
    head = f"{title}: " if title else ""
    ax.set_title(f"{head}{len(rows)} points, Pareto front of {len(f)} (time tier {'/'.join(tiers) or '?'}, "
                 "energy projected)", fontsize=9)
    for name, (x, y) in (refs or {}).items():
        ax.scatter([x], [y], marker="*", s=80)
        ax.annotate(name, (x, y), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens per second")
    ax.set_ylabel("joules per token")
    _plain_ticks(ax)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    return fig


def _plain_ticks(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator

    fmt = FuncFormatter(lambda v, _: f"{v:.3g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(fmt)
        axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def _colors(n: int) -> list[Any]:
    """n distinct colours (tab10, then tab20 for up to 20 groups)."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]
