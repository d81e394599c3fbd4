import json
import select
import subprocess
from dataclasses import dataclass

import pytest

from npukit.devices.nvme.client import NvmeTcpHost
from npukit.devices.nvme.namespace import Namespace
from npukit.devices.nvme.state import DeviceState
from npukit.devices.nvme.subsystem import Subsystem, discovery_subsystem
from npukit.devices.nvme.tcp import TargetThread

NQN = "nqn.2026-11.io.npukit:test"
NS_BYTES = 8 << 20


@dataclass
class Target:
    thread: TargetThread
    sub: Subsystem
    port: int
    tmp: object

    def host(self, **kw) -> NvmeTcpHost:
        kw.setdefault("io_queues", 2)
        return NvmeTcpHost("127.0.0.1", self.port, NQN, **kw)


@pytest.fixture
def target(tmp_path):
    ns = Namespace(tmp_path / "ns.img", size=NS_BYTES)
    sub = Subsystem(NQN, [ns], DeviceState(tmp_path / "state"),
                    allowed_hosts=None)
    disc = discovery_subsystem([sub], "127.0.0.1", "4420")
    thread = TargetThread([sub, disc])
    yield Target(thread, sub, thread.port, tmp_path)
    thread.stop()
    sub.close()


@pytest.fixture
def host(target):
    h = target.host()
    yield h
    h.close()


def read_ready_line(proc: subprocess.Popen, timeout: float = 60.0) -> dict:
    """The JSON line ``npukit nvme serve`` prints once it listens (fails instead of hanging)."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        raise AssertionError(f"npukit nvme serve did not start: {proc.stderr.read()}")
    return json.loads(line)
