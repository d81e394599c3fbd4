"""`npukit sweep --level sim`: each point a compile plus a timing run of the target's model.

Oracles: the VTA delegate's own report of the same model on the same configuration (`npukit tflite run
--target vta`'s figures: cycles, energy, MACs, DRAM bytes), the roofline formula written out here from
the preset's peak rates, the tern timing core's ordering of phases and its attention unit's capacity,
Python's csv and pyarrow reading the files back, and the set of points the grid names."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from npukit.cli.main import main
from npukit.errors import ConfigError
from npukit.hw import load_hw
from npukit.models.tflite import read_model, zoo
from npukit.perf.simsweep import Evaluator, SimSpec, adapter_for, grid
from npukit.targets.vta.delegate import VtaDelegate

VTA = ["sweep", "--level", "sim", "--hw", "vta-alkali", "--model", "zoo:digits"]
VTA_GRID = ["--grid", "log_block=4,5", "--grid", "log_wgt_buff_size=6,10,18", "--grid",
            "timing.clock_mhz=100,333", "--grid", "timing.dram_bytes_per_cycle=8,16"]
N_VTA = 2 * 3 * 2 * 2


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _by_id(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    out = {r["point_id"]: r for r in rows}
    assert len(out) == len(rows), "a point appears twice"
    return out


def test_vta_rows_agree_with_the_delegate_report(tmp_path, capsys):
    out = tmp_path / "vta.csv"
    assert main([*VTA, *VTA_GRID, "--workers", "1", "--out", str(out)]) == 0
    rows = _rows(out)
    assert len(rows) == N_VTA
    model = read_model(zoo.resolve("zoo:digits"))
    errors = 0
    for r in rows:
        over = [f"{k}={r[k]}" for k in ("log_block", "log_wgt_buff_size", "timing.clock_mhz",
                                        "timing.dram_bytes_per_cycle")]
        if r["status"] == "error":  # a weight buffer of less than two elements cannot be built
            with pytest.raises(ConfigError) as exc:
                load_hw("vta-alkali", over)
            assert r["error"] == f"ConfigError: {exc.value}" and "wgt buffer" in r["error"]
            errors += 1
            continue
        hw = load_hw("vta-alkali", over)
        d = VtaDelegate(hw)
        d.partition(model)
        fig = d.figures()
        assert r["status"] == "ok"
        assert float(r["cycles"]) == pytest.approx(fig["vta_cycles"].value, rel=1e-12)
        assert float(r["time_s"]) == pytest.approx(fig["vta_time"].value * 1e-6, rel=1e-12)
        assert float(r["energy_j"]) == pytest.approx(fig["vta_energy"].value * 1e-6, rel=1e-12)
        assert r["time_tier"] == str(fig["vta_time"].tier) and r["energy_tier"] == str(fig["vta_energy"].tier)
        macs, dram = fig["vta_gemm_macs"].value, fig["vta_dram_bytes"].value
        clock = float(r["timing.clock_mhz"]) * 1e6
        roof = max(macs / (hw.batch * hw.block ** 2 * clock),
                   dram / (float(r["timing.dram_bytes_per_cycle"]) * clock))
        assert float(r["roofline_s"]) == pytest.approx(roof, rel=1e-12)
        assert float(r["sim_over_roofline"]) == pytest.approx(float(r["time_s"]) / roof, rel=1e-12)
        assert float(r["sim_over_roofline"]) > 1.0  # a roofline is a lower bound on time
        utils = [float(r[f"util.{e}"]) for e in ("load", "compute", "store")]
        assert all(0.0 < u <= 100.0 for u in utils)
        stalls = dict(kv.split("=") for kv in r["stalls"].split(";"))
        assert r["dominant_stall"] == max(stalls, key=lambda k: float(stalls[k]))
        assert r["time_tier"] in ("measured", "derived", "projected")
        assert (r["ratio_tier"], r["counts_tier"], r["util_tier"]) == ("projected", "derived", r["time_tier"])
    assert errors == N_VTA // 2  # log_wgt_buff_size 6 for both blocks, 10 for block 5
    assert "Pareto points of" in capsys.readouterr().out


def test_compile_sharing_and_executors_give_identical_rows(tmp_path, capsys):
    spec = SimSpec("vta-alkali", "zoo:digits", {"log_block": [4, 5], "timing.clock_mhz": [100, 200, 333]})
    adapter = adapter_for(spec.target)
    ev = Evaluator(spec, adapter.load_workload(spec.model))
    rows = ev.rows(grid(spec, adapter))
    assert (ev.compiles, ev.hits) == (2, 4)  # one program per block size; clocks do not recompile
    cold = Evaluator(SimSpec(**{**vars(spec), "use_cache": False}), ev.workload)
    assert cold.rows(grid(spec, adapter)) == rows and cold.compiles == 6
    a, b, c = (tmp_path / n for n in ("one.csv", "two.csv", "nocache.csv"))
    assert main([*VTA, *VTA_GRID, "--workers", "1", "--out", str(a)]) == 0
    capsys.readouterr()
    assert main([*VTA, *VTA_GRID, "--workers", "2", "--out", str(b), "--json"]) == 0
    pool = json.loads(capsys.readouterr().out)["timing"]
    assert main([*VTA, *VTA_GRID, "--workers", "1", "--no-compile-cache", "--out", str(c)]) == 0
    capsys.readouterr()
    assert _by_id(_rows(a)) == _by_id(_rows(b)) == _by_id(_rows(c))
    programs = {r["program_id"] for r in _rows(a) if r["program_id"]}
    assert pool["compiles"] == len(programs) == 3  # each program built once, by one of the two workers


def test_tern_block_phases_and_a_context_the_unit_cannot_hold(tmp_path, capsys):
    from npukit.models.presets import model_preset

    cfg = model_preset("bitnet-b1.58-2b-4t")
    cfg.update(vocab_size=300, hidden_size=256, intermediate_size=512, num_attention_heads=4,
               num_key_value_heads=2, head_dim=64)
    (tmp_path / "block.json").write_text(json.dumps(cfg))
    out = tmp_path / "tern.parquet"
    assert main(["sweep", "--level", "sim", "--hw", "tern-arty-a7-100t", "--model",
                 str(tmp_path / "block.json"), "--grid", "engine.lanes=8,32", "--grid", "context=16,129",
                 "--grid", "phase=host-split,fabric-ffn-glue", "--workers", "1", "--out", str(out),
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["timing"]["compiles"] == 4 and summary["errors"] == 4
    pq = pytest.importorskip("pyarrow.parquet")
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 8 and not Path(str(out) + ".partial.csv").exists()
    hw = load_hw("tern-arty-a7-100t")
    for r in rows:
        if r["context"] == 129:  # attention.t_max = 128 keys
            assert r["status"] == "error" and "128" in r["error"]
            continue
        assert r["time_s"] == pytest.approx(r["cycles"] / hw.clock_hz)
        assert r["energy_j"] == pytest.approx(r["time_s"] * hw.power.total_w)
        assert r["sim_over_roofline"] > 1.0 and r["dominant_stall"]
    ok = {(r["engine.lanes"], r["phase"]): r for r in rows if r["status"] == "ok"}
    for lanes in (8, 32):  # the soft CPU's attention and FFN glue cost more than the fabric units ...
        host, fabric = ok[(lanes, "host-split")], ok[(lanes, "fabric-ffn-glue")]
        assert host["cycles"] > fabric["cycles"]
        # ... which the roofline (engine and DDR only) does not see: it is further off, and the engine
        # waiting for the host's glue is what dominates there
        assert host["sim_over_roofline"] > fabric["sim_over_roofline"]
        assert host["dominant_stall"] == "engine.sync"
    assert ok[(32, "fabric-ffn-glue")]["cycles"] < ok[(8, "fabric-ffn-glue")]["cycles"]
    assert main(["sweep", "report", str(out), "--json"]) == 0
    dev = {(d["parameter"], d["value"]): d for d in json.loads(capsys.readouterr().out)["deviation"]}
    assert dev[("phase", "host-split")]["dominant_stall"] == "engine.sync"
    assert dev[("phase", "host-split")]["median_ratio"] > dev[("phase", "fabric-ffn-glue")]["median_ratio"]


def test_resume_keeps_rows_and_drops_a_cut_line(tmp_path, capsys):
    full, part = tmp_path / "full.csv", tmp_path / "part.csv"
    assert main([*VTA, *VTA_GRID, "--workers", "1", "--out", str(full)]) == 0
    capsys.readouterr()
    lines = full.read_text().splitlines(keepends=True)
    part.write_text("".join(lines[:10]) + lines[10][:25])  # 9 rows and a row cut by a kill
    assert main([*VTA, *VTA_GRID, "--workers", "1", "--resume", "--out", str(part), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["timing"]["skipped"] == 9 and summary["timing"]["points"] == N_VTA - 9
    assert _by_id(_rows(part)) == _by_id(_rows(full))
    assert main([*VTA, *VTA_GRID, "--grid", "timing.command_depth=8", "--resume", "--out", str(part)]) == 2
    assert "different sweep" in capsys.readouterr().err


def test_report_front_and_deviation(tmp_path, capsys):
    out = tmp_path / "vta.csv"
    assert main([*VTA, *VTA_GRID, "--workers", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["sweep", "report", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    rows = [r for r in _rows(out) if r["status"] == "ok"]
    for f in rep["pareto"]:  # nothing beats a front point on both time and energy
        assert not any(float(r["time_s"]) < f["time_s"] and float(r["energy_j"]) < f["energy_j"]
                       for r in rows)
    blocks = {d["value"]: d for d in rep["deviation"] if d["parameter"] == "log_block"}
    for v, d in blocks.items():
        ratios = sorted(float(r["sim_over_roofline"]) for r in rows if r["log_block"] == v)
        assert d["max_ratio"] == ratios[-1] and d["points"] == N_VTA // 2
        assert d["dominant_stall"] in {r["dominant_stall"] for r in rows} and d["tier"] == "projected"
    assert rep["errors"] == N_VTA // 2
    assert main(["sweep", "report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "dominant stall" in text and "wgt buffer" in text
    pytest.importorskip("matplotlib")
    png = tmp_path / "front.png"
    objectives = ["--objectives", "time_s,max:util.compute"]
    assert main(["sweep", "report", str(out), *objectives, "--pareto", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["sweep", "report", str(out), "--objectives", "time_s"]) == 2
    capsys.readouterr()
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["sweep", "report", str(bad)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_progress_off_a_terminal(tmp_path, capsys):
    assert main([*VTA, "--grid", "timing.clock_mhz=100,200", "--workers", "1"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("sweep 2/2 points") and err[-1].endswith("ETA 0:00:00")
    first = err[-2].split()  # the first chunk's line: its rate and an ETA from it
    assert first[:2] == ["sweep", "1/2"] and math.isfinite(float(first[3])) and first[6].count(":") == 2


@pytest.mark.slow
def test_rk3588_schedules_and_a_scratchpad_too_small(tmp_path, capsys):
    from npukit.targets.rk3588.compile import CompileOptions
    from npukit.targets.rk3588.runner import fixed_shape_plan, resolve_model
    from npukit.targets.rk3588.timing import simulate_plan

    out = tmp_path / "rk.csv"
    assert main(["sweep", "--level", "sim", "--hw", "rk3588", "--model", "smolvlm-siglip-base-512:px=64",
                 "--grid", "schedule=single,data-parallel", "--grid",
                 "core.scratchpad_bytes.value=1024,32768", "--grid", "tiling=0,1", "--workers", "1",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    rows = {(r["schedule"], r["core.scratchpad_bytes.value"], r["tiling"]): r for r in _rows(out)}
    assert len(rows) == 8
    for (_, pad, tiling), r in rows.items():
        if pad == "1024" or tiling == "0":  # the layernorm's rows need 3 KB of scratchpad; untiled, more
            assert r["status"] == "error"
            assert r["error"].startswith("TilingError" if tiling == "1" else "PlacementError")
            assert "scratchpad" in r["error"] and r["energy_j"] == ""
    enc = resolve_model("smolvlm-siglip-base-512", 1, 64)
    for sched in ("single", "data-parallel"):
        r = rows[(sched, "32768", "1")]
        plan = fixed_shape_plan(enc, enc.config.seq_len, load_hw("rk3588"), CompileOptions(schedule=sched))
        assert float(r["cycles"]) == simulate_plan(plan, sched, 3).cycles
        assert r["time_tier"] == "projected" and float(r["sim_over_roofline"]) > 1.0
    # three cores on three inputs beat one core
    parallel, single = rows[("data-parallel", "32768", "1")], rows[("single", "32768", "1")]
    assert float(parallel["time_s"]) < float(single["time_s"])


SL, FU = "sliding_attention", "full_attention"
GEMMA = dict(  # a Gemma 3n small enough to compile in a second (synthetic weights)
    model_type="gemma3n_text", vocab_size=96, vocab_size_per_layer_input=96, hidden_size=32,
    hidden_size_per_layer_input=8, intermediate_size=[64, 64, 64], num_hidden_layers=3, num_attention_heads=2,
    num_key_value_heads=1, head_dim=16, laurel_rank=8, num_kv_shared_layers=1, sliding_window=6,
    layer_types=[SL, FU, SL], activation_sparsity_pattern=[0.95, 0, 0], max_position_embeddings=128,
    altup_num_inputs=2, final_logit_softcapping=30.0)


@pytest.mark.slow
def test_pccx_decode_token_matches_the_driver_and_shares_programs(tmp_path, capsys):
    from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
    from npukit.targets.pccx.driver import PccxDriver
    from npukit.targets.pccx.gemma3n_quant import Int4Store

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(GEMMA))
    args = ["sweep", "--level", "sim", "--hw", "pccx-v002-kv260", "--model", str(cfg), "--grid",
            "clocks.core_mhz=200,400", "--grid", "phase=decode,prefill", "--set", "ddr.bandwidth_gbps=5",
            "--set", "context=12", "--workers", "1"]
    shared, cold = tmp_path / "shared.csv", tmp_path / "cold.csv"
    assert main([*args, "--out", str(shared), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["timing"]["compiles"] == 2  # one per phase
    assert main([*args, "--no-compile-cache", "--out", str(cold), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["timing"]["compiles"] == 4
    rows = _by_id(_rows(shared))
    assert rows == _by_id(_rows(cold))  # sharing a program changes no figure
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(GEMMA), seed=0))
    for r in rows.values():
        assert r["status"] == "ok" and float(r["sim_over_roofline"]) > 1.0
        if r["phase"] != "decode":
            continue
        hw = load_hw("pccx-v002-kv260", [f"clocks.core_mhz={r['clocks.core_mhz']}",
                                         "ddr.bandwidth_gbps=5"])
        drv = PccxDriver(hw, executor="fast").open().load(store).kv_init("int8").start()
        drv.prefill([3 + i for i in range(11)])
        drv.step(5)  # the driver's own timer on its 12th position
        assert float(r["cycles"]) == drv.records[-1].cycles


@pytest.mark.slow
def test_ctrl_c_leaves_a_valid_parquet_file_and_resume_completes_it(tmp_path, capsys):
    import os
    import signal
    import subprocess
    import sys
    import time

    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "cut.parquet"
    journal = Path(str(out) + ".partial.csv")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    grid = ["--grid", "log_block=4,5", "--grid", "timing.clock_mhz=100:333:60", "--grid",
            "timing.dram_bytes_per_cycle=4,8,16,32"]
    argv = [sys.executable, "-m", "npukit", *VTA, *grid, "--workers", "2", "--out", str(out)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60 and proc.poll() is None:
        if journal.is_file() and journal.read_text().count("\n") > 1 + 30:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "rerun with --resume" in err
    rows = pq.read_table(out).to_pylist()  # a valid file, whatever was done when Ctrl-C came
    assert 30 <= len(rows) < 2 * 60 * 4 and len({r["point_id"] for r in rows}) == len(rows)
    assert not journal.exists()
    # --resume completes the Parquet file: every point once, the rows of an uninterrupted run
    full = tmp_path / "full.csv"
    assert main([*VTA, *grid, "--workers", "1", "--out", str(full)]) == 0
    assert main([*VTA, *grid, "--workers", "1", "--resume", "--out", str(out)]) == 0
    done = {r["point_id"]: r for r in pq.read_table(out).to_pylist()}
    want = _by_id(_rows(full))
    assert set(done) == set(want) and len(pq.read_table(out)) == len(want) == 2 * 60 * 4
    for pid, r in want.items():
        got = done[pid]
        assert {k: v for k, v in r.items() if v != ""} == {k: (repr(v) if isinstance(v, float) else str(v))
                                                          for k, v in got.items() if v is not None}
