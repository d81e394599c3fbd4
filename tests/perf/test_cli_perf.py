"""`npukit perf` / `npukit sweep` end to end: JSON shape, tiers, the 20 tok/s verdict, plots, errors."""

import csv
import importlib.util
import json

import numpy as np
import pytest

from npukit.cli.main import main
from npukit.evidence import Figure, Ledger, Tier
from npukit.perf.ledger import merge
from npukit.perf.sweep import pareto_front, parse_axis

ACCEPT = ["perf", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e4b", "--weights", "int4", "--kv", "int4",
          "--context", "8192", "--json"]


def _run(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_acceptance_command_reports_tiered_figures_bound_and_20_tok_s_verdict(capsys):
    rc, out, _ = _run(capsys, ACCEPT)
    assert rc == 0
    js = json.loads(out)
    figs = js["figures"]
    for name in ("tokens_per_second", "bytes_per_token", "joules_per_token"):
        assert set(figs[name]) == {"value", "unit", "tier", "source"}
        assert figs[name]["tier"] in ("measured", "derived", "projected") and figs[name]["source"]
    assert figs["joules_per_token"]["tier"] == "projected"  # energies per action are projections
    assert js["bound"] in ("ddr", "hp_ports")
    bpt = figs["bytes_per_token"]["value"]
    assert 2.24e9 < bpt < 2.32e9  # refs §7.1: 2.243 GB weights + scales + 37 MB INT4 KV
    # DDR ceiling at 19.2 GB/s
    assert figs["ddr_ceiling_tokens_per_second"]["value"] == pytest.approx(19.2e9 / bpt)
    # the seed's 20 tok/s: not reachable; the required DDR bandwidth is 20 × bytes/token
    assert figs["target.tokens_per_second"]["value"] == 20
    assert figs["target.reachable"]["value"] == 0.0
    assert figs["target.required_ddr_bandwidth"]["value"] == pytest.approx(20 * bpt / 1e9)
    assert any("NOT reachable" in n for n in js["notes"])
    assert figs["with_model_sparsity.tokens_per_second"]["value"] > figs["tokens_per_second"]["value"]


def test_bitnet_on_tern_merges_target_ledger_and_reference_points(capsys):
    rc, out, _ = _run(capsys, ["perf", "--hw", "tern-arty-a7-35t", "--model", "bitnet-b1.58-2b-4t",
                               "--context", "64", "--json"])
    js = json.loads(out)
    assert rc == 0 and js["target_ledger"] is True
    f = js["figures"]
    # seeds/002 and refs/ternary.md §1.6
    tps = (f["ref.cpu_5950x.tokens_per_second"]["value"], f["ref.rtx3060.tokens_per_second"]["value"])
    assert tps == (28.4, 23.5)
    assert (f["ref.cpu_5950x.power"]["value"], f["ref.rtx3060.power"]["value"]) == (121.0, 86.4)
    assert f["ref.rtx3060.tokens_per_second"]["tier"] == "measured"
    assert f["fits_ddr"]["value"] == 0.0  # 2.41 G × 1.6 bit ≈ 482 MB > 256 MB DDR3
    assert "analytic.weight_bytes_per_token" in f and "weight_bytes_per_token" in f


def test_merge_keeps_the_analytic_figure_under_a_prefix():
    a, t = Ledger(), Ledger()
    a.add("x", 1.0, "s", "derived", "analytic")
    a.add("y", 2.0, "s", "derived", "analytic")
    t.add("x", 1.5, "s", "measured", "board")
    m = merge(a, t)
    assert m["x"] == Figure(1.5, "s", Tier.MEASURED, "board")
    assert m["analytic.x"].value == 1.0 and m["y"].value == 2.0


def test_plots_are_written(tmp_path, capsys):
    for name in ("roofline.png", "layers.png"):
        p = tmp_path / name
        rc, _, err = _run(capsys, [*ACCEPT[:-1], "--plot", str(p)])
        assert rc == 0, err
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


@pytest.mark.parametrize(("extra", "needle"), [
    (["--weights", "int3"], "unknown weight format"),
    (["--kv", "fp8"], "unknown KV format"),
    (["--sparsity", "1.5"], "--sparsity must be in"),
    (["--context", "40000"], "exceeds the model's max_position_embeddings"),
    (["--set", "perf.lanes=-1"], "positive number"),
    (["--plot", "x.txt"], "use a .png"),
])
def test_bad_input_is_one_line_error(capsys, extra, needle):
    rc, _, err = _run(capsys, ["perf", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e4b", *extra])
    assert rc == 2 and needle in err and err.count("\n") == 1


def test_sweep_writes_csv_with_tiers_and_pareto(tmp_path, capsys):
    out, png = tmp_path / "s.csv", tmp_path / "p.png"
    rc, stdout, err = _run(capsys, ["sweep", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e2b",
                                    "--grid", "ddr_gbps=9.6,19.2", "--grid", "weights=int4,int8",
                                    "--grid", "context=512,4096", "--set", "hp_ports.count_log2=3",
                                    "--workers", "1", "--out", str(out), "--pareto", str(png)])
    assert rc == 0, err
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 8
    assert {"tokens_per_second", "joules_per_token", "time_tier", "energy_tier", "source"} <= set(rows[0])
    by = {(r["ddr_gbps"], r["weights"], r["context"]): float(r["tokens_per_second"]) for r in rows}
    # doubling DDR bandwidth never slows a point down, and speeds up a DDR-bound one
    assert all(by[("19.2", w, c)] >= by[("9.6", w, c)] for w in ("int4", "int8") for c in ("512", "4096"))
    assert by[("19.2", "int8", "512")] > 1.5 * by[("9.6", "int8", "512")]
    assert png.read_bytes()[:4] == b"\x89PNG" and "Pareto" in stdout


def test_optional_backends_fail_with_one_line(tmp_path, capsys):
    base = ["sweep", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e2b", "--grid", "context=512,1024"]
    if importlib.util.find_spec("pyarrow") is None:
        rc, _, err = _run(capsys, [*base, "--out", str(tmp_path / "x.parquet")])
        assert rc == 2 and "pyarrow" in err
    if importlib.util.find_spec("ray") is None:
        rc, _, err = _run(capsys, [*base, "--ray", "auto"])
        assert rc == 2 and "'ray' package" in err


def test_axis_parsing_and_pareto_front():
    assert parse_axis("clock_mhz=100:400:4") == ("clock_mhz", [100.0, 200.0, 300.0, 400.0])
    assert parse_axis("weights=int4,int8") == ("weights", ["int4", "int8"])
    assert parse_axis("context=512,1024") == ("context", [512, 1024])
    rows = [{"tokens_per_second": t, "joules_per_token": j} for t, j in
            [(10, 1.0), (5, 0.5), (8, 1.2), (1, 0.4), (10, 2.0)]]
    # (8, 1.2) is beaten by (10, 1.0); (10, 2.0) by (10, 1.0)
    assert sorted(pareto_front(rows)) == [0, 1, 3]


def test_fp8_storage_weights_are_one_byte_plus_a_column_scale(capsys):
    """FP8-as-storage (kernels/fp8): 8 bits per weight, so weight bytes sit between INT4 and FP16 and
    exactly double INT4's element bytes (spec arithmetic, not our own output pinned)."""
    import json

    from npukit.cli.main import main

    def weight_bytes(fmt: str) -> float:
        assert main(["perf", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e4b", "--weights", fmt,
                     "--json"]) == 0
        return json.loads(capsys.readouterr().out)["figures"]["weight_bytes_per_token"]["value"]

    int4, fp8, fp16 = weight_bytes("int4"), weight_bytes("fp8-e4m3"), weight_bytes("fp16")
    assert int4 < fp8 < fp16
    assert weight_bytes("fp8-e5m2") == fp8


def test_perf_takes_the_shape_from_a_gguf_file(capsys: pytest.CaptureFixture[str]) -> None:
    """`npukit perf FILE.gguf`: KV260 by default, the parameter count of the file's own matrices."""
    from npukit.models.gguf import GGUFFile
    from npukit.models.gguf.installed import installed_gguf

    path = installed_gguf("smollm2")
    g = GGUFFile(path)
    params = sum(int(np.prod(g.shape(n))) for n in g.tensors if len(g.shape(n)) == 2)
    rc, out, _ = _run(capsys, ["perf", str(path), "--json"])
    assert rc == 0
    data = json.loads(out)
    figs = data["figures"]
    assert data["inputs"]["hw"] == "pccx-v002-kv260"
    assert figs["model_bytes"]["value"] == pytest.approx(params / 2, rel=1e-9)  # INT4: half a byte each
    assert figs["tokens_per_second"]["tier"] in ("derived", "projected")
    assert figs["tokens_per_second"]["value"] > 0
    rc, _, err = _run(capsys, ["perf", str(path), "--model", str(path)])
    assert rc == 2 and "give the model once" in err
