"""The real client: the Linux kernel's NVMe/TCP host in a QEMU guest runs the document's example flow
with ``nvme admin-passthru`` / ``nvme io-passthru`` (tools/qemu_guest/alkali_flow.sh) against
``npukit nvme serve --accelerators 2``; the guest's identify data and output bytes must equal what
npukit's own client gets from the same device."""

import json
import signal
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from npukit.devices.alkali.host import AlkaliHost
from npukit.devices.alkali.spec import LogType, parse_log
from npukit.devices.nvme.client import NvmeTcpHost

from ..nvme.conftest import read_ready_line
from ..nvme.test_linux_guest import GUEST_TOOLS, built_guest, parse_results
from .conftest import EXAMPLES

NQN = "nqn.2026-11.io.npukit:alkali-guest"
SLBA = 2048


def _guest_files(tmp: Path) -> dict[str, bytes]:
    cnn = EXAMPLES / "cnn"
    model = (cnn / "model.tflite").read_bytes()
    cnn_in = (cnn / "input.bin").read_bytes()
    args = b"".join(struct.pack("<II", 8, v) for v in (len(model), 8, 64, 10))
    return {"alkali/add.o": (EXAMPLES / "add_vta.v1.o").read_bytes(),
            "alkali/add.in": (EXAMPLES / "add" / "input.bin").read_bytes(),
            "alkali/cnn.o": (cnn / "cnn_classify.v1.o").read_bytes(),
            "alkali/cnn.in": cnn_in + bytes(-len(cnn_in) % 512),
            "alkali/cnn.args": args}


@pytest.mark.slow
def test_nvme_cli_passthru_flow_equals_npukit_client(tmp_path):
    builder, manifest = built_guest()
    serve = subprocess.Popen(
        [sys.executable, "-m", "npukit", "nvme", "serve", "--listen", "127.0.0.1:0", "--no-discovery",
         "--nqn", NQN, "--namespace", str(tmp_path / "ns.img"), "--size", "64M",
         "--state-dir", str(tmp_path / "state"), "--accelerators", "2", "--delegate", "exact"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = read_ready_line(serve)
        hostid = str(uuid.uuid4())
        env = (f"HOST=10.0.2.2\nPORT={ready['port']}\nNQN={NQN}\nSLBA={SLBA}\n"
               f"HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:{hostid}\nHOSTID={hostid}\n")
        files = _guest_files(tmp_path)
        initrd = builder.script_archive(manifest, {**files, "test.env": env,
                                                   "test.sh": (GUEST_TOOLS / "alkali_flow.sh").read_bytes()},
                                        tmp_path / "initrd.gz")
        results = tmp_path / "results.txt"
        boot = subprocess.run(builder.qemu_command(manifest, initrd, results), capture_output=True, text=True,
                              timeout=480)
        blocks, values = parse_results(results.read_text() if results.exists() else "")
        console = (boot.stdout + boot.stderr)[-3000:]
        assert values.get("done") == "1", f"the guest did not finish; console tail:\n{console}"
        steps = [line for line in blocks["steps"][0].splitlines() if line]
        assert len(steps) >= 20 and all(line.split()[1] == "rc=0" for line in steps), steps
        assert values["magic"] == b"WDC\0".hex()
        assert values["status_0"] == "2" and values["status_1"] == "2"  # done

        with AlkaliHost(NvmeTcpHost("127.0.0.1", ready["port"], NQN, io_queues=1)) as host:
            guest_identify = bytes.fromhex(values["identify"])
            assert host.identify_raw(len(guest_identify)) == guest_identify
            add = host.run(files["alkali/add.o"], accel=0, fw_id=0, data=files["alkali/add.in"])
            cnn_args = [struct.pack("<I", v) for v in struct.unpack("<8I", files["alkali/cnn.args"])[1::2]]
            host.write_blocks(SLBA, files["alkali/cnn.in"])
            cnn = host.run(files["alkali/cnn.o"], accel=1, fw_id=1,
                           storage=(SLBA, len(files["alkali/cnn.in"])), args=cnn_args)
        assert bytes.fromhex(values["output_0"]) == add.output and int(values["output_bytes_0"]) == 4
        assert bytes.fromhex(values["output_1"]) == cnn.output and int(values["output_bytes_1"]) == 80
        classes = json.loads((EXAMPLES / "cnn" / "labels.json").read_text())["classes"]
        assert np.frombuffer(cnn.output, np.int8).reshape(8, 10).argmax(1).tolist() == classes
        guest_log = parse_log(bytes.fromhex(values["log_1"]))
        assert [e.type for e in guest_log][-1] == LogType.RUN_REPORT and "tflite_vta x8" in guest_log[-1].text
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(15)
        except subprocess.TimeoutExpired:
            serve.kill()
