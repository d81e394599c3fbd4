"""The CNN example on the device: images written to the namespace with NVM Write, handed to the
accelerator with Use Local Storage as Input (0x88), classified by the committed firmware through the
VTA delegate (exact mode); every output equal to LiteRT's reference kernels, and the example's
accuracy claim recomputed by LiteRT."""

import json
import struct

import numpy as np

from npukit.devices.alkali.spec import StatusId

from .conftest import EXAMPLES, make_rig

CNN = EXAMPLES / "cnn"


def _litert(model: bytes):
    from ai_edge_litert import interpreter as litert

    it = litert.Interpreter(model_content=model,
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    inp, out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]

    def run(image: np.ndarray) -> np.ndarray:
        it.set_tensor(inp, image.reshape(1, 8, 8, 1))
        it.invoke()
        return it.get_tensor(out).ravel()
    return run


def test_cnn_over_local_storage_equals_litert(tmp_path):
    model = (CNN / "model.tflite").read_bytes()
    images = np.frombuffer((CNN / "images.bin").read_bytes(), np.int8).reshape(-1, 64)
    data = (CNN / "input.bin").read_bytes()
    assert data == model + images.tobytes()
    rig = make_rig(tmp_path, accelerators=1)
    try:
        rig.host.write_blocks(64, data)  # NVM Write first, then 0x88 points the accelerator at the blocks
        args = [struct.pack("<I", v) for v in (len(model), len(images), 64, 10)]
        flow = rig.host.run((CNN / "cnn_classify.v1.o").read_bytes(), storage=(64, len(data)), args=args)
    finally:
        rig.host.close()
        rig.dev.wait_idle(60)
        rig.thread.stop()
        rig.sub.close()
    assert flow.status.status == StatusId.DONE and flow.status.r0 == len(images)
    assert flow.status.output_bytes == 10 * len(images) and flow.status.vta_cycles > 0
    ref = _litert(model)
    got = np.frombuffer(flow.output, np.int8).reshape(-1, 10)
    for k, image in enumerate(images):
        assert got[k].tolist() == ref(image).tolist(), f"image {k}"
    labels = json.loads((CNN / "labels.json").read_text())
    assert got.argmax(axis=1).tolist() == labels["classes"]


def test_cnn_accuracy_claim_holds_under_litert():
    from npukit.models.tflite import digits

    split = digits.load_split()
    ref = _litert((CNN / "model.tflite").read_bytes())
    images = digits.quantize_images(split.x_test)
    classes = np.array([int(np.argmax(ref(im))) for im in images])
    claim = json.loads((CNN / "metrics.json").read_text())
    assert claim["held_out_images"] == len(images)
    assert round(float((classes == split.y_test).mean()), 4) == claim["int8_accuracy"] >= 0.9


def test_committed_firmware_is_what_clang_builds(tmp_path):
    import shutil
    import subprocess

    import pytest

    if shutil.which("clang-14") is None:
        pytest.fail("clang-14 missing: run scripts/ensure_debian_deps.sh (make test runs it)")
    subprocess.run(["sh", str(CNN / "build.sh"), str(tmp_path)], check=True, capture_output=True)
    assert (tmp_path / "cnn_classify.v1.o").read_bytes() == (CNN / "cnn_classify.v1.o").read_bytes()
