"""``npukit tflite info|run``: JSON contracts, input binding, --out/--trace files, one-line errors,
and the delegate hook as the CLI sees it (a stand-in VTA delegate registered by the test)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from _litert_models import run_ref
from test_tflite_front_end import _tanh_model

from npukit.cli import cmd_tflite
from npukit.errors import NpukitError
from npukit.evidence import Ledger, Tier
from npukit.models.tflite import delegates, digits, read_model
from npukit.models.tflite.delegates import Plan, op_segments
from npukit.models.tflite.interpreter import prepare_op

DIGITS = digits.asset_dir() / "digits_int8.tflite"


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """The subcommand as `npukit.cli.main` runs it: typed errors become one line and exit 2."""
    parser = argparse.ArgumentParser(prog="npukit")
    cmd_tflite.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    try:
        rc = int(args.func(args) or 0)
    except NpukitError as exc:
        print(f"npukit: error: {exc}", file=__import__("sys").stderr)
        rc = 2
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def sample(tmp_path):
    with np.load(digits.asset_dir() / "samples.npz") as s:
        image = s["images"][:1]
    path = tmp_path / "x.npy"
    np.save(path, image)
    return path, image


def test_info_json_lists_ops_tensors_quantization(capsys):
    rc, out, _ = cli(["tflite", "info", "zoo:digits", "--json"], capsys)
    assert rc == 0
    info = json.loads(out)
    model = read_model(DIGITS)
    assert [o["name"] for o in info["ops"]] == [o.name for o in model.ops]
    in_scale = model.input_tensors()[0].quant.s
    assert info["inputs"][0]["quantization"] == {"per_channel": False, "scale": in_scale, "zero_point": -128}
    fc1_w = info["tensors"][model.ops[1].inputs[1]]
    assert fc1_w["quantization"]["per_channel"] and len(fc1_w["quantization"]["scales"]) == 32
    rc, text, _ = cli(["tflite", "info", str(DIGITS)], capsys)
    assert rc == 0 and "FULLY_CONNECTED" in text and "per-channel axis 0: 32 scales" in text


def test_run_json_out_and_trace(capsys, sample, tmp_path):
    path, image = sample
    out_npz, trace = tmp_path / "o.npz", tmp_path / "t.json"
    rc, out, _ = cli(["tflite", "run", "zoo:digits", "--input", f"image={path}", "--out", str(out_npz),
                      "--trace", str(trace), "--json"], capsys)
    assert rc == 0
    res = json.loads(out)
    expect = run_ref(DIGITS.read_bytes(), image)
    assert res["outputs"]["probs"] == {"shape": [1, 10], "dtype": "int8", "data": expect.ravel().tolist()}
    assert (res["delegated_ops"], res["host_ops"]) == (0, 4)
    assert res["figures"]["run_wall_ms"]["tier"] == "measured"
    with np.load(out_npz) as z:
        assert np.array_equal(z["probs"], expect)
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in events] == ["RESHAPE", "FULLY_CONNECTED", "FULLY_CONNECTED", "SOFTMAX"]
    rc, text, _ = cli(["tflite", "run", str(DIGITS), "--input", str(path)], capsys)
    row = text.splitlines()[2].split()  # probs [1, 10] int8 ARGMAX values...
    assert rc == 0 and (row[0], row[3], row[4]) == ("probs", "int8", str(int(expect.argmax())))


@pytest.mark.parametrize("argv,message", [
    (["--target", "vta"], "the VTA delegate is not available yet"),
    (["--delegate", "exact"], "--delegate, --hw and --set apply to --target vta"),
    (["--input", "/nonexistent.npy"], "cannot load input /nonexistent.npy"),
])
def test_run_errors_are_one_line(capsys, sample, monkeypatch, argv, message):
    monkeypatch.setattr(delegates, "_DELEGATES", {})
    monkeypatch.setattr(delegates, "_from_registry", lambda target: None)
    rc, _, err = cli(["tflite", "run", "zoo:digits", "--input", str(sample[0]), *argv], capsys)
    assert rc == 2 and err.startswith("npukit: error: ") and message in err and err.count("\n") == 1


def test_unsupported_op_from_the_cli(capsys, sample, tmp_path):
    model = tmp_path / "tanh.tflite"
    model.write_bytes(_tanh_model())
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.int8))
    rc, _, err = cli(["tflite", "run", str(model), "--input", str(tmp_path / "x.npy")], capsys)
    assert rc == 2
    assert err == "npukit: error: op 0 LEAKY_RELU: not supported by the int8 reference interpreter\n"


class _StandIn:
    """Takes every FULLY_CONNECTED (runs it with the host kernel) and reports one projected figure."""

    name = "vta-standin"

    def __init__(self, variant, hw, overrides):
        self.config = (variant, hw, overrides)

    def partition(self, model):
        fcs = [op.index for op in model.ops if op.name == "FULLY_CONNECTED"]
        segs = op_segments(model, fcs, lambda op, ins: prepare_op(model, op.index)(ins), "vta")
        ledger = Ledger()
        ledger.add("vta_cycles", 1234, "cycles", Tier.PROJECTED, f"stand-in {self.config}")
        return Plan(segs, ledger)


def test_a_registered_delegate_plugs_into_the_cli(capsys, sample, monkeypatch):
    monkeypatch.setattr(delegates, "_DELEGATES", {})
    delegates.register_delegate("vta", lambda variant, hw, overrides: _StandIn(variant, hw, overrides))
    rc, out, _ = cli(["tflite", "run", "zoo:digits", "--input", str(sample[0]), "--target", "vta",
                      "--delegate", "alkali", "--hw", "vta-default", "--set", "a=1", "--json"], capsys)
    assert rc == 0
    res = json.loads(out)
    assert (res["delegated_ops"], res["host_ops"]) == (2, 2)
    assert res["figures"]["vta_cycles"]["source"] == "stand-in ('alkali', 'vta-default', ['a=1'])"
    assert res["outputs"]["probs"]["data"] == run_ref(DIGITS.read_bytes(), sample[1]).ravel().tolist()


def test_discovered_by_the_npukit_entry_point(capsys, sample):
    from npukit.cli.main import main

    assert main(["tflite", "run", "zoo:digits", "--input", str(sample[0]), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["outputs"]["probs"]["data"] == run_ref(DIGITS.read_bytes(), sample[1]).ravel().tolist()
    assert main(["tflite", "info", "/nonexistent.tflite"]) == 2
    err = capsys.readouterr().err
    assert err == "npukit: error: cannot read /nonexistent.tflite: No such file or directory\n"
