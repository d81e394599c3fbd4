"""The figures a newcomer looks at first: every layer column inside the y range, one colour per op
group, plain-number log ticks on the Pareto plot, and every op class named on the roofline. The oracle
is the analysis itself (its per-layer sums, its group names), read back from the matplotlib objects."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from npukit.perf import plot
from npukit.perf.machine import load_machine
from npukit.perf.ops import build_ops
from npukit.perf.roofline import analyze


@pytest.fixture(scope="module")
def analysis():
    _, m = load_machine("pccx-v002-kv260", [])
    return analyze(build_ops("gemma3n-e4b"), m, weights="int4", kv="int4", context=1024)


def test_layers_chart_holds_every_column_and_colours_differ(analysis):
    _, groups, data = plot.layer_times(analysis)
    fig = plot.layers_figure(analysis)
    ax = fig.axes[0]
    assert ax.get_ylim()[1] >= data.sum(axis=0).max() * 1e3  # lm_head's column included
    colors = {tuple(c.patches[0].get_facecolor()) for c in ax.containers}
    assert len(colors) == len(groups) == len(ax.containers)
    assert {"altup", "ple", "lm_head"} <= set(groups)
    plot._plt().close(fig)


def test_pareto_ticks_are_plain_numbers():
    rows = [{"tokens_per_second": t, "joules_per_token": j} for t, j in ((1.5, 2.2), (2.0, 2.6), (3.1, 2.4))]
    fig = plot.pareto_figure(rows, [0, 2])
    ax = fig.axes[0]
    fig.canvas.draw()
    texts = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    assert texts and not any("10^" in t or "times" in t or "×" in t for t in texts)
    assert all(float(t) > 0 for t in texts)
    plot._plt().close(fig)


def test_roofline_names_every_op_class(analysis, tmp_path):
    import matplotlib.pyplot as plt

    captured = {}
    real = plt.Figure.savefig

    def keep(fig, *a, **k):
        captured["fig"] = fig
        return real(fig, *a, **k)

    plt.Figure.savefig = keep
    try:
        plot.plot_roofline(analysis, tmp_path / "r.png")
    finally:
        plt.Figure.savefig = real
    ax = captured["fig"].axes[0]
    named = {g.strip() for t in ax.texts for g in t.get_text().split(",")}
    po = analysis.per_op
    ok = ((po["op_w_bytes"] + po["op_kv_bytes"]) > 0) & (po["op_macs"] > 0) & (po["op_seconds"] > 0)
    assert named == set(np.asarray(analysis.table.groups)[ok].tolist())
    assert (tmp_path / "r.png").stat().st_size > 0


def test_pareto_names_model_hardware_and_marks_the_optimum():
    rows = [{"tokens_per_second": t, "joules_per_token": j, "time_tier": "projected"}
            for t, j in ((1.5, 2.2), (2.0, 2.6), (3.1, 2.4), (1.0, 3.0))]
    fig = plot.pareto_figure(rows, [0, 2], title="gemma3n-e4b on pccx-v002-kv260")
    ax = fig.axes[0]
    title = ax.get_title()
    assert "gemma3n-e4b on pccx-v002-kv260" in title and "4 points" in title and "projected" in title
    notes = [t.get_text() for t in ax.texts]
    assert any(n.startswith("fastest: 3.1 tok/s") for n in notes)
    assert any(n.startswith("least J/token: 1.5 tok/s, 2.2 J") for n in notes)
    plot._plt().close(fig)


def test_roofline_title_tier_matches_the_ledger(analysis, tmp_path):
    import matplotlib.pyplot as plt

    from npukit.perf.ledger import build_ledger

    titles = []
    real = plt.Figure.savefig

    def keep(fig, *a, **k):
        titles.append(fig.axes[0].get_title())
        return real(fig, *a, **k)

    plt.Figure.savefig = keep
    try:
        plot.plot_roofline(analysis, tmp_path / "r.png")
    finally:
        plt.Figure.savefig = real
    tier = str(build_ledger(analysis)["tokens_per_second"].tier)
    assert f"tier: {tier})" in titles[0]
