"""benchmarks/gemma3n_cli.py runs end to end on tiny settings and reports every figure the issue asks
for: CLI, decode-loop and driver marginals, transformers, the INT4 floor, prefill, the program switch
and setup, with the CPU line (model, numba target, kernel paths)."""

import json

import pytest


@pytest.mark.slow
@pytest.mark.hf
def test_reports_every_figure_with_the_machine(capsys, load_benchmark):
    mod = load_benchmark("gemma3n_cli")
    assert mod.main(["--hidden", "256", "--layers", "5", "--vocab", "2048", "--tokens", "7",
                     "--prefill", "12", "--repeats", "1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["machine"].startswith("CPU ") and "int4-gemv" in res["machine"]
    m = res["marginal_s_per_token"]
    assert m["transformers"] > 0 and m["driver"] > 0
    assert res["driver_vs_transformers"] == pytest.approx(m["transformers"] / m["driver"])
    assert res["cli_vs_transformers"] == pytest.approx(m["transformers"] / m["cli"])
    assert res["cli_from_start_vs_transformers"] == pytest.approx(m["transformers"] / m["cli_from_start"])
    # the window on the N-token run's own clock: its decode_s over its N - 1 decode steps
    assert res["cli_window_vs_transformers"] == pytest.approx(m["transformers"] / m["cli_window"])
    assert len(res["rounds_s_per_token"]["cli_window"]) == 1 and m["cli_window"] > 0
    assert res["host_floor_s_per_token"] > 0
    assert res["cli_decode_over_floor"] == pytest.approx(m["cli_decode"] / res["host_floor_s_per_token"])
    assert 0 < res["setup_s"] < res["outside_generation_s"]
    for name in ("switch", "switch_cpu"):  # wall and CPU time
        # the probe decodes to position 18: the step at 16 (span 17) enters bucket 32, the only switch
        # (buckets start at 16, so position 8 is none: it was counted as one before)
        assert list(res[f"{name}_ms_by_position"]) == ["16"]
        assert res[f"{name}_ms"] == pytest.approx(res[f"{name}_ms_by_position"]["16"])
        ahead = res[f"{name}_ahead"]  # the steps that built a next bucket's program ahead (none this short)
        assert ahead["steps"] >= 0 and (ahead["ms_per_step"] is None) == (ahead["steps"] == 0)
    pf = res["prefill"]
    assert pf["prompt_tokens"] == 12 and pf["cli_tok_per_s"] > 0 and pf["transformers_tok_per_s"] > 0
    assert pf["cli_vs_transformers"] == pytest.approx(pf["cli_tok_per_s"] / pf["transformers_tok_per_s"])
    assert "measured" in res["tier"] and "derived" in res["tier"]
    # the CLI processes' own CPU time, beside the wall figures: one value per round, the medians reported
    cpu, rounds = res["cli_cpu_s_per_token"], res["rounds_s_per_token"]
    assert len(rounds["cli_cpu"]) == len(rounds["cli_from_start_cpu"]) == 1
    assert cpu["marginal"] == pytest.approx(rounds["cli_cpu"][0])
    assert cpu["from_start"] == pytest.approx(rounds["cli_from_start_cpu"][0])
    args = mod.parse(["--hidden", "256"])
    assert f"{cpu['marginal'] * 1e3:.1f} ms/tok marginal" in mod.summary(args, res | {"machine": "CPU x"})


def test_transformers_marginal_is_the_second_half_of_one_run(load_benchmark):
    """transformers' marginal s/token: steps N to 2N − 1 of one 2N-token run, each timed, so the spread
    between two runs cannot make it negative (a difference of two runs' walls came out −9.9 ms in CI)."""
    mod = load_benchmark("gemma3n_cli")
    peer = object.__new__(mod.Peer)  # no child process: its replies are given
    asked = []

    def reply(request):
        asked.append(request)
        return {"wall_s": 15.0, "steps_s": [9.0, 1.0, 1.0, 2.0, 3.0, 4.0]}

    peer.reply = reply
    assert peer.marginal(3) == pytest.approx(3.0)
    assert asked == [{"decode": 6}]
    assert peer.ask(decode=6) == 15.0
