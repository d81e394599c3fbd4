import json
import select
import socket
import struct
import subprocess
from dataclasses import dataclass

import pytest

from npukit.devices.nvme import fuzz, pdu
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


def io_queue_connect(port: int, owner: NvmeTcpHost, qid: int,
                     nqn: str = fuzz.GUEST_NQN) -> tuple[socket.socket, bool]:
    """A raw socket that sent a Connect as I/O queue ``qid`` of ``owner``'s association, and whether the
    target accepted it (a CapsuleResp with status 0)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(fuzz.icreq())
        read_pdu(s)
        s.sendall(fuzz.connect_pdu(qid, owner.cntlid, nqn, owner.hostnqn, owner.hostid))
        resp = read_pdu(s)
    except BaseException:
        s.close()
        raise
    return s, resp[0] == pdu.PduType.CAPSULE_RESP and struct.unpack_from("<H", resp, 22)[0] >> 1 == 0


def raw_io_queue(port: int, owner: NvmeTcpHost, qid: int, nqn: str = fuzz.GUEST_NQN) -> socket.socket:
    """A raw socket connected as I/O queue ``qid`` of ``owner``'s association (Connect checked)."""
    s, accepted = io_queue_connect(port, owner, qid, nqn)
    assert accepted
    return s


def read_pdu(s: socket.socket) -> bytes:
    """One whole PDU (its length from the common header)."""
    buf = b""
    while len(buf) < 8 or len(buf) < struct.unpack_from("<I", buf, 4)[0]:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf
