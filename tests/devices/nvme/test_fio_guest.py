"""fio with crc32c data verification from the Linux kernel's nvme-tcp (QEMU guest) against
``npukit nvme serve``, across a disconnect, a kill -9 of the target and a restart.

The guest (tools/qemu_guest/fio_check.sh) runs a time-based mixed workload (4 jobs x QD 16, random
4 KiB..1 MiB reads and writes, verified while it runs and at the end), writes every block of its regions
once with crc32c headers saving fio's verify state, hashes the device and disconnects. The test then
kills the target with SIGKILL, restarts it on the same port and namespace, and the guest reconnects,
hashes the device again and runs fio's verify-only pass from the saved state. fio itself is the
reference for the data: 0 verify errors; the hash says no acknowledged write was lost.
"""

import json
import signal
import subprocess
import sys
import time
import uuid

import pytest

from .conftest import read_ready_line
from .test_linux_guest import GUEST_TOOLS, built_guest, parse_results

NQN = "nqn.2026-11.io.npukit:fio"
REGION = 16 << 20  # one job's share; 4 jobs
SIZE = 4 * REGION
RUNTIME_S = 60  # guest seconds of the mixed workload (the issue asks for >= 60 s)
FIO = "/usr/bin/fio"


def _serve(tmp_path, listen: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "npukit", "nvme", "serve", "--listen", listen, "--discovery-port", "0",
         "--advertise-addr", "10.0.2.2", "--nqn", NQN, "--namespace", str(tmp_path / "ns.img"),
         "--size", str(SIZE), "--state-dir", str(tmp_path / "state")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for(results, marker: str, qemu: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if results.exists() and marker in results.read_text(errors="replace"):
            return
        if qemu.poll() is not None:
            break
        time.sleep(0.5)
    text = results.read_text(errors="replace") if results.exists() else ""
    raise AssertionError(f"the guest never printed {marker!r}; results so far:\n{text[-3000:]}")


def _fio_errors(blocks, name: str) -> tuple[int, dict]:
    text, rc = blocks[name]
    report = json.loads(text[text.index("{"):])
    return rc, report


@pytest.mark.slow
def test_fio_verify_across_kill_9_and_restart(tmp_path):
    builder, manifest = built_guest()
    try:
        fio_archive = builder.tool_archive([FIO])
    except builder.GuestBuildError as exc:
        pytest.fail(str(exc))
    serve = _serve(tmp_path, "127.0.0.1:0")
    qemu = None
    try:
        port = read_ready_line(serve)["port"]
        hostid = str(uuid.uuid4())
        env = (f"HOST=10.0.2.2\nPORT={port}\nNQN={NQN}\nHOSTNQN=nqn.2014-08.org.nvmexpress:uuid:{hostid}\n"
               f"HOSTID={hostid}\nREGION={REGION}\nRUNTIME={RUNTIME_S}\n")
        initrd = builder.script_archive(manifest, {"/test.env": env,
                                                   "/test.sh": (GUEST_TOOLS / "fio_check.sh").read_text()},
                                        tmp_path / "initrd.gz", extra=[fio_archive])
        results = tmp_path / "results.txt"
        qemu = subprocess.Popen(builder.qemu_command(manifest, initrd, results, memory_mb=1024),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        _wait_for(results, "@@VALUE waiting_for_restart 1", qemu, timeout=RUNTIME_S + 300)
        serve.send_signal(signal.SIGKILL)  # no shutdown path runs: only what was acknowledged counts
        serve.wait()
        serve = _serve(tmp_path, f"127.0.0.1:{port}")
        read_ready_line(serve)
        console, _ = qemu.communicate(timeout=300)
        blocks, values = parse_results(results.read_text(errors="replace"))
        assert values.get("done") == "1", f"the guest did not finish; console tail:\n{console[-3000:]}"

        rc, mixed = _fio_errors(blocks, "mixed")
        assert rc == 0 and mixed["jobs"][0]["error"] == 0, blocks["mixed"][0][-2000:]
        job = mixed["jobs"][0]
        assert job["job_runtime"] >= RUNTIME_S * 1000 * 4 * 0.95  # 4 jobs' milliseconds, group reported
        assert job["write"]["total_ios"] > 0 and job["read"]["total_ios"] > 0
        rc, fill = _fio_errors(blocks, "fill")
        assert rc == 0 and fill["jobs"][0]["error"] == 0
        assert fill["jobs"][0]["write"]["io_kbytes"] == SIZE // 1024  # every block of the 4 regions
        assert blocks["disconnect"][1] == 0 and blocks["reconnect"][1] == 0, blocks["reconnect"][0]
        assert values["sha_before"] == values["sha_after"] and len(values["sha_before"]) == 64
        rc, verify = _fio_errors(blocks, "verify")
        assert rc == 0 and verify["jobs"][0]["error"] == 0, blocks["verify"][0][-2000:]
        assert verify["jobs"][0]["read"]["io_kbytes"] == SIZE // 1024  # every block read back and checked
    finally:
        if qemu is not None and qemu.poll() is None:
            qemu.kill()
            qemu.wait()
        _stop(serve)
