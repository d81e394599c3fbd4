"""``npukit nvme serve --accelerators`` and ``npukit alkali`` as a user runs them (separate processes)."""

import json
import signal
import subprocess
import sys

import numpy as np
import pytest

from .conftest import EXAMPLES

ADD = EXAMPLES / "add"


def board_result() -> list[int]:
    """The ADD example under the board's delegate arithmetic (the emulation in test_add_example)."""
    from .test_add_example import _make_example, board_add

    q = _make_example().QUANT
    vec = np.frombuffer((ADD / "input-vector.bin").read_bytes(), np.int8).tolist()
    f32 = [float(np.float32(q[k][0])) for k in ("in0", "in1", "out")]
    return board_add(vec[4:], q["in0"][1], f32[0], vec[:4], q["in1"][1], f32[1], q["out"][1], f32[2])


def _npukit(*args, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "npukit", *map(str, args)], capture_output=True, text=True,
                          timeout=120)
    if check and proc.returncode:
        raise AssertionError(f"npukit {' '.join(map(str, args))} failed: {proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from tests.devices.nvme.conftest import read_ready_line

    tmp = tmp_path_factory.mktemp("alkali-serve")
    proc = subprocess.Popen([sys.executable, "-m", "npukit", "nvme", "serve", "--listen", "127.0.0.1:0",
                             "--no-discovery", "--namespace", tmp / "ns.img", "--size", "16M",
                             "--accelerators", "2", "--delegate", "alkali"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready = read_ready_line(proc)
    yield f"tcp://127.0.0.1:{ready['port']}", ready, tmp
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.mark.slow
def test_serve_and_the_alkali_verbs(served):
    url, ready, tmp = served
    assert (ready["accelerators"], ready["delegate"], ready["compat"]) == (2, "alkali", "doc")
    ident = json.loads(_npukit("alkali", "identify", "--connect", url, "--json").stdout)
    assert [a["accel"] for a in ident["accelerators"]] == [0, 1]
    assert ident["accelerators"][1]["capabilities"]["input_buffer"] == 64 << 20

    out = tmp / "y.bin"
    run = json.loads(_npukit("alkali", "run", "--connect", url, "--accel", 1,
                             "--fw", EXAMPLES / "add_vta.v1.o", "--model", ADD / "model.tflite",
                             "--input", ADD / "input-vector.bin", "--out", out, "--json").stdout)
    assert np.frombuffer(out.read_bytes(), np.int8).tolist() == board_result()  # --delegate alkali
    assert run["status"]["status"] == "done"
    assert run["status"]["vta_cycles"]["tier"] in ("derived", "projected")
    commands = [s["command"] for s in run["timeline"]]
    assert commands[:5] == ["accelerator identify", "accelerator identify", "global control: enable",
                            "send firmware", "send data"]
    assert commands[-3:] == ["get log page C0h (RAE=1)", "get log page C0h (RAE=0)", "read data"]
    assert any(e["kind"] == "run_report" for e in run["log"])

    _npukit("alkali", "disable", "--connect", url)
    refused = _npukit("alkali", "load-fw", "--connect", url, "--fw", EXAMPLES / "add_vta.v1.o", check=False)
    assert refused.returncode == 2 and refused.stderr.startswith("npukit: error:")
    assert "COMMAND_SEQUENCE_ERROR" in refused.stderr and "Traceback" not in refused.stderr
    log = json.loads(_npukit("alkali", "log", "--connect", url, "--json").stdout)["entries"]
    assert log[-1]["kind"] == "accelerator_error" and "disabled" in log[-1]["text"]
    _npukit("alkali", "enable", "--connect", url)
    status = json.loads(_npukit("alkali", "status", "--connect", url, "--accel", 1, "--json").stdout)
    assert status["status"] == "done" and status["output_bytes"] == 4


def test_bad_input_is_one_line(tmp_path):
    missing = _npukit("alkali", "run", "--connect", "tcp://127.0.0.1:1", "--fw", tmp_path / "nope.o",
                      check=False)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "--fw" in missing.stderr
    bad_url = _npukit("alkali", "identify", "--connect", "http://x", check=False)
    assert bad_url.returncode == 2 and "tcp://HOST:PORT" in bad_url.stderr
