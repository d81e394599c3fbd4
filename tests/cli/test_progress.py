"""Progress on every slow path: under a pseudo-terminal no command is silent for more than 2 s; off
a terminal a step that runs past 2 s writes plain lines; --quiet silences both."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from ptyrun import run_on_pty

from npukit import progress

MAX_GAP_S = 2.0


SLOW_PATHS = [
    pytest.param(["generate", "--prompt-ids", "2,651", "--max-new-tokens", "4", "--target", "pccx"], 0,
                 id="generate-pccx"),
    # (2 layers: the same steps as the whole encoder, ~10 s instead of ~50-100 s; the README test runs it all)
    pytest.param(["shard", "compile", "smolvlm-siglip-base-512", "--no-tiling", "--layers", "2"], 2,
                 id="shard-compile"),
    pytest.param(["shard", "run", "minilm", "--text", "Three NPU cores share one encoder."], 0,
                 id="shard-run"),
    pytest.param(["demo", "shard"], 0, id="demo-shard"),
    pytest.param(["demo", "alkali"], 0, id="demo-alkali"),
    pytest.param(["demo", "vta"], 0, id="demo-vta"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("argv", "status"), SLOW_PATHS)
def test_no_silent_gap_on_a_terminal(argv: list[str], status: int, tmp_path: Path) -> None:
    rc, out, gap, around = run_on_pty(argv, tmp_path)
    assert rc == status, out.decode(errors="replace")[-2000:]
    assert gap <= MAX_GAP_S, f"silent for {gap:.1f} s at: {around!r}"
    assert b"Traceback" not in out


@pytest.mark.slow
def test_quiet_draws_nothing_but_the_output(tmp_path: Path) -> None:
    rc, out, _, _ = run_on_pty(["generate", "--quiet", "--prompt-ids", "2,651", "--max-new-tokens", "2",
                             "--target", "golden"], tmp_path)
    assert rc == 0
    assert b"\x1b[?25l" not in out and b"loading model" not in out  # no live display, no step lines


def test_plain_lines_off_a_terminal_only_past_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NPUKIT_QUIET", raising=False)
    monkeypatch.setattr(progress, "PLAIN_AFTER", 0.2)
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    log = io.StringIO()
    with progress.step("quick", stream=log):
        pass
    with progress.step("slow work", stream=log):
        time.sleep(0.5)
    lines = log.getvalue().splitlines()
    assert lines[0] == "npukit: slow work ..." and lines[1].startswith("npukit: slow work: 0.")
    assert len(lines) == 2  # the quick step said nothing
    log = io.StringIO()
    with progress.Progress(4, "decode", stream=log) as bar:
        for _ in range(4):
            time.sleep(0.1)
            bar.update()
    lines = log.getvalue().splitlines()
    assert lines and lines[-1].startswith("npukit: decode 4/4") and lines[-1].endswith("done")
    assert any("ETA" in line for line in lines[:-1])
    progress.set_quiet()
    try:
        log = io.StringIO()
        with progress.step("slow work", stream=log):
            time.sleep(0.3)
        assert log.getvalue() == ""
    finally:
        progress.set_quiet(False)
