"""benchmarks/decode_window.py: its timed backend decodes the tokens a plain backend decodes, each step's
parts fit inside its main-thread CPU, and the ranges are the outside check's window and what follows."""

import numpy as np
import pytest


def test_ranges_are_the_first_token_the_window_and_32_positions_each(load_benchmark):
    window = load_benchmark("decode_window")
    assert window.ranges(68) == [(4, 4), (4, 35), (36, 67)]
    assert window.ranges(100) == [(4, 4), (4, 35), (36, 67), (68, 99)]
    steps = [{"pos": p, "wall": 2.0, "thread": 1.0, "process": 1.5, "run": 0.5, "timer": 0.1, "ahead": 0.0,
              "other": 0.4, "faults": 3} for p in range(4, 40)]
    rows = window.summarise(steps, 40)
    assert [r["range"] for r in rows] == ["4-4", "4-35"]  # (36-39 is no whole range)
    assert rows[1]["steps"] == 32 and rows[1]["wall"] == 64.0 and rows[1]["faults"] == 96
    assert rows[0]["median_thread"] == 1.0


@pytest.mark.slow
@pytest.mark.hf
def test_timed_decode_matches_the_plain_backend(tmp_path, load_benchmark, capsys):
    from npukit.api.models import Model
    from npukit.cli.cmd_generate import resolve_model
    from npukit.runtime import backends
    from npukit.runtime.generate import long_lived_frozen

    load_benchmark("gemma3n_cli").save_model(256, 5, 2048, tmp_path)
    window = load_benchmark("decode_window")
    got = window.measure(str(tmp_path), last=12)
    with long_lived_frozen():
        plain = backends.create_backend(Model(resolve_model(str(tmp_path))).loaded, "pccx", kv="fp16")
        plain.reset()
        want = [int(np.argmax(plain.prefill(window.PROMPT)))]
        while plain.drv.position < 12:
            want.append(int(np.argmax(plain.step(want[-1]))))
    assert got["tokens"] == want
    assert [s["pos"] for s in got["steps"]] == list(range(4, 12))
    for s in got["steps"]:
        assert s["run"] > 0 and s["timer"] > 0
        assert s["other"] >= -0.05  # the parts are timed inside the step, on the same thread's clock
    window.main([str(tmp_path), "--last", "6"])
    out = capsys.readouterr().out
    assert "main-thread CPU" in out and "4-4" in out and "CPU " in out
