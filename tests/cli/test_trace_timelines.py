"""Traces read as one run: a pccx generation's runs follow each other on one time axis; a VTA trace
names the device, not its first op, and shows each TFLite op on its own track."""

from __future__ import annotations

import itertools
import json

import pytest

from npukit.cli.main import main


@pytest.mark.slow
def test_pccx_runs_share_one_timeline(tmp_path, capsys) -> None:
    trace = tmp_path / "t.json"
    assert main(["generate", "--prompt-ids", "2,651", "--max-new-tokens", "4", "--target", "pccx",
                 "--trace", str(trace), "--json"]) == 0
    capsys.readouterr()
    spans: dict[int, list[float]] = {}
    for e in json.loads(trace.read_text())["traceEvents"]:
        if e.get("ph") == "X":
            lo, hi = spans.setdefault(e["pid"], [float("inf"), 0.0])
            spans[e["pid"]] = [min(lo, e["ts"]), max(hi, e["ts"] + e["dur"])]
    runs = [spans[p] for p in sorted(spans)]
    assert len(runs) >= 3  # the prompt chunk and the decode tokens
    for (lo0, hi0), (lo1, _) in itertools.pairwise(runs):
        assert lo1 >= hi0 - 1e-3 > lo0  # each run starts where the one before ended, none at 0 again


def test_vta_trace_names_the_device_and_every_op(tmp_path, capsys) -> None:
    trace = tmp_path / "v.json"
    assert main(["demo", "vta", "--trace", str(trace)]) == 0
    delegated = 2  # the digits MLP's two FULLY_CONNECTED layers go to VTA
    capsys.readouterr()
    events = json.loads(trace.read_text())["traceEvents"]
    names = [e["args"]["name"] for e in events if e.get("name") == "process_name"]
    assert len(set(names)) == 1 and names[0].startswith("VTA ") and "op " not in names[0]
    ops = [e for e in events if e.get("ph") == "X" and e["name"].startswith("op ")]
    assert len(ops) == delegated and all("FULLY_CONNECTED" in e["name"] for e in ops)
    assert ops[1]["ts"] >= ops[0]["ts"] + ops[0]["dur"] - 1e-6
