"""What a newcomer hits (issue 13): each silent or misleading case now ends in one line that names the
real problem, and human tables fit 100 columns. The oracle is the user's input itself: the message must
name the flag, key or file the user gave (not an internal option name or a downstream symptom)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from npukit.cli.main import main
from npukit.models.embedded import default_model_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import bitnet_tiny as tiny


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = int(exc.code)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def one_error(capsys, *argv: str) -> str:
    rc, _, err = run(capsys, *argv)
    lines = err.strip().splitlines()
    assert rc == 2, err
    return lines[-1]


def test_sim_empty_program_is_an_error(tmp_path, capsys):
    prog = tmp_path / "empty.hex"
    prog.write_text("")
    assert one_error(capsys, "sim", str(prog)) == f"npukit: error: {prog}: the program has no instructions"


@pytest.mark.parametrize("ids", ["2,,3", "2,", ",2"])
def test_prompt_ids_with_an_empty_item(ids, capsys):
    err = one_error(capsys, "generate", "--prompt-ids", ids, "--max-new-tokens", "1")
    assert "--prompt-ids must be comma-separated integers (no empty items)" in err and repr(ids) in err


@pytest.mark.parametrize(("flag", "value", "why"), [("--target-tps", "-5", "must be > 0, got -5"),
                                                    ("--target-tps", "0", "must be > 0, got 0"),
                                                    ("--ops", "-1", "must be >= 0, got -1")])
def test_perf_numbers_out_of_range(flag, value, why, capsys):
    err = one_error(capsys, "perf", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e2b", flag, value)
    assert err == f"npukit perf: error: argument {flag}: {why}"


def test_missing_hw_file_says_so(tmp_path, capsys):
    missing = str(tmp_path / "nope.toml")
    assert one_error(capsys, "hw", missing) == f"npukit: error: preset {missing}: no such file"
    err = one_error(capsys, "perf", "--hw", missing, "--model", "gemma3n-e2b")
    assert err == f"npukit: error: --hw {missing}: no such file"


def test_missing_model_config_says_so(capsys):
    err = one_error(capsys, "perf", "--hw", "pccx-v002-kv260", "--model", "/nonexistent/config.json")
    assert err == "npukit: error: --model /nonexistent/config.json: no such file"


@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size"])
def test_generate_names_the_missing_config_key(key, tmp_path, capsys):
    src = default_model_dir()
    cfg = json.loads((src / "config.json").read_text())
    del cfg[key]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shutil.copy(src / "model.safetensors", tmp_path)
    err = one_error(capsys, "generate", str(tmp_path), "--prompt-ids", "2", "--max-new-tokens", "1")
    assert err == f"npukit: error: model config lacks {key!r}"
    # perf says the same of the same file
    err = one_error(capsys, "perf", "--hw", "pccx-v002-kv260", "--model", str(tmp_path / "config.json"))
    assert key in err


@pytest.mark.parametrize(("target", "argv", "flag"), [("quant", ["--trace", "t.json"], "--trace"),
                                                      ("golden", ["--set", "a=1"], "--set")])
def test_generate_names_the_flag_a_target_does_not_take(target, argv, flag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = one_error(capsys, "generate", "--target", target, "--prompt-ids", "2", "--max-new-tokens", "1",
                    *argv)
    assert err == f"npukit: error: --target {target} does not take {flag}"
    assert not (tmp_path / "t.json").exists()


def test_top_level_set_unknown_key_has_no_stray_colon(capsys):
    err = one_error(capsys, "hw", "pccx-v002-kv260", "--set", "nope=1")
    assert err.startswith("npukit: error: unknown key 'nope' (known: ")


def test_hw_shows_a_string_without_quotes(capsys):
    rc, out, _ = run(capsys, "hw", "pccx-v002-kv260")
    name = next(line.split() for line in out.splitlines() if line.startswith("name "))
    assert rc == 0 and name == ["name", "pccx-v002-kv260"]


def test_tern_outgrowing_the_attention_unit(tmp_path, capsys):
    c = tiny.config("online")
    path = tiny.write_online(tmp_path / "hf", c, tiny.float_weights(c, seed=3))
    rc, out, err = run(capsys, "generate", str(path), "--target", "tern", "--prompt-ids", "5",
                       "--max-new-tokens", "70", "--ignore-eos")
    assert rc == 2
    assert len(out.split()) == 64 and out.endswith("\n")  # 64 keys fit; the error starts its own line
    msg = err.strip().splitlines()[-1]
    assert msg.startswith("npukit: error: tern: the context outgrew the attention unit "
                          "(attention_unit: 65 keys")
    for hint in ("attention.t_max=64", "--max-new-tokens", "tern-arty-a7-100t", "--set attention.t_max=N"):
        assert hint in msg


def test_tern_perf_energy_and_headline(capsys):
    rc, out, _ = run(capsys, "perf", "--hw", "tern-arty-a7-35t", "--model", "bitnet-b1.58-2b-4t",
                     "--context", "64", "--json")
    figs = json.loads(out)["figures"]
    # the preset gives a total power and no per-action energies: no 0 J/token dynamic figure
    assert "dynamic_joules_per_token" not in figs and "static_joules_per_token" not in figs
    j = figs["joules_per_token"]
    assert j["value"] == pytest.approx(figs["power.static"]["value"] / figs["tokens_per_second"]["value"])
    assert "no per-action energies" in j["source"]
    assert figs["tokens_per_second"]["source"].startswith("analytic roofline, no target phase")
    rc, out, _ = run(capsys, "perf", "--hw", "tern-arty-a7-35t", "--model", "bitnet-b1.58-2b-4t",
                     "--context", "64")
    assert rc == 0
    assert "is the analytic roofline (no target phase)" in out and "engine-bound" in out


@pytest.mark.parametrize("argv", [
    ["perf", "--hw", "tern-arty-a7-35t", "--model", "bitnet-b1.58-2b-4t", "--context", "64", "--ops", "5"],
    ["perf", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e4b"],
    ["sweep", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e2b", "--grid", "kv=int4,int8",
     "--workers", "1"],
    ["hw", "pccx-v002-kv260"],
    ["formats", "--size", "1024"],
])
def test_tables_fit_a_100_column_terminal_without_cutting(argv, capsys, monkeypatch):
    from npukit.cli import ui

    monkeypatch.setattr(ui, "terminal_width", lambda out: 100)  # as on a 100-column terminal
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    widest = max(len(line) for line in out.splitlines())
    assert widest <= 100, max(out.splitlines(), key=len)
    assert "…" not in out  # long cells wrap onto more lines; none is cut


def test_tables_piped_keep_every_cell_whole(capsys):
    rc, out, _ = run(capsys, "perf", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e4b", "--json")
    sources = [f["source"] for f in json.loads(out)["figures"].values()]
    rc, out, _ = run(capsys, "perf", "--hw", "pccx-v002-kv260", "--model", "gemma3n-e4b")
    assert rc == 0 and "…" not in out
    lines = out.splitlines()
    assert all(any(src in line for line in lines) for src in sources)


def test_sweep_basis_has_help(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = capsys.readouterr().out
    assert "--basis {peak,effective}" in out and "sustained" in out
