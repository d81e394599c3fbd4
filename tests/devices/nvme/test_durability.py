"""The durability contract with a real ``npukit nvme serve`` process: data acknowledged by Flush, and by
writes while the volatile write cache is off (write-through), reads back exactly after kill -9."""

import os
import signal
import subprocess
import sys

import pytest

from npukit.devices.nvme.client import NvmeTcpHost

from .conftest import read_ready_line

NQN = "nqn.2026-11.io.npukit:durable"


def start_server(tmp_path, size="16M"):
    cmd = [sys.executable, "-m", "npukit", "nvme", "serve", "--listen", "127.0.0.1:0", "--no-discovery",
           "--nqn", NQN, "--namespace", str(tmp_path / "ns.img"), "--state-dir", str(tmp_path / "state")]
    if size:
        cmd += ["--size", size]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, read_ready_line(proc)


@pytest.mark.slow
def test_acknowledged_data_survives_kill_9(tmp_path):
    proc, ready = start_server(tmp_path)
    try:
        assert ready["blocks"] == 16 * 2048
        h = NvmeTcpHost("127.0.0.1", ready["port"], NQN, io_queues=1)
        flushed = os.urandom(96 * 1024)
        h.write(100, flushed)
        h.flush()  # contract: durable once Flush completes
        h.set_features(0x06, 0)  # volatile write cache off: every write is write-through
        through = os.urandom(32 * 1024)
        h.write(5000, through)
        fua = os.urandom(4096)
        h.set_features(0x06, 1)
        h.write(7000, fua, fua=True)  # FUA: durable when acknowledged
        h.close()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL

    proc, ready = start_server(tmp_path, size=None)
    try:
        h = NvmeTcpHost("127.0.0.1", ready["port"], NQN, io_queues=1)
        assert h.read(100, len(flushed) // 512) == flushed
        assert h.read(5000, len(through) // 512) == through
        assert h.read(7000, 8) == fua
        smart = h.smart_log()
        assert smart["unsafe_shutdowns"] == 1 and smart["power_cycles"] == 2
        h.close()
    finally:
        proc.send_signal(signal.SIGTERM)  # a clean stop this time
        proc.wait(10)
    assert proc.returncode == 0

    proc, ready = start_server(tmp_path, size=None)
    try:
        h = NvmeTcpHost("127.0.0.1", ready["port"], NQN, io_queues=0)
        assert h.smart_log()["unsafe_shutdowns"] == 1  # no increment after SIGTERM
        h.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    # the size is fixed at creation
    result = subprocess.run([sys.executable, "-m", "npukit", "nvme", "serve", "--listen", "127.0.0.1:0",
                             "--no-discovery", "--namespace", str(tmp_path / "ns.img"), "--size", "32M"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.startswith("npukit: error: namespace file")
