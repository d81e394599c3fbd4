"""``npukit demo alkali``: runs offline from the package's data (the same files as examples/alkali/cnn),
classifies the images as the labels say, and writes one Perfetto trace holding the host's NVMe commands,
the device's vendor commands and eBPF run, and the VTA modules."""

import json
import subprocess
import sys
from importlib import resources

import pytest

from .conftest import EXAMPLES

PAIRS = {"cnn_model.tflite": "model.tflite", "cnn_images.bin": "images.bin", "cnn_labels.json": "labels.json",
         "cnn_classify.v1.o": "cnn_classify.v1.o"}


def test_packaged_demo_data_is_the_example():
    root = resources.files("npukit.devices.alkali") / "data"
    for packaged, example in PAIRS.items():
        assert (root / packaged).read_bytes() == (EXAMPLES / "cnn" / example).read_bytes(), packaged


@pytest.mark.slow
def test_demo_alkali(tmp_path):
    trace = tmp_path / "t.json"
    proc = subprocess.run([sys.executable, "-m", "npukit", "demo", "alkali", "--trace", str(trace)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    labels = json.loads((EXAMPLES / "cnn" / "labels.json").read_text())
    assert f"predictions {labels['classes']}" in proc.stdout
    assert "VTA cycle summary" in proc.stdout and "projected" in proc.stdout
    events = json.loads(trace.read_text())["traceEvents"]
    names = {(e["pid"], e["name"]) for e in events if e["ph"] == "X"}
    assert {(1, "send firmware"), (1, "local storage as input"), (2, "basic accelerator control"),
            (2, "firmware 0"), (2, "tflite_vta")} <= names
    threads = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"load", "compute", "store", "accel 0: eBPF firmware", "vendor commands"} <= threads
    run = next(e for e in events if e["ph"] == "X" and e["name"] == "firmware 0")
    vta = [e for e in events if e["ph"] == "X" and e["pid"] == 3]
    assert vta and all(run["ts"] <= e["ts"] <= run["ts"] + run["dur"] for e in vta)
