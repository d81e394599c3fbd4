"""Faults against a real ``npukit nvme serve`` process: hosts that vanish mid-write and mid-read, a
host that goes silent with commands outstanding until keep alive expires, and kill -9 of the server
during a write stream. The oracle is the durability contract (docs/devices/nvme.md): an acknowledged
write reads back exactly after a process crash; a write that was never acknowledged leaves every block
either as it was or as written (never torn inside a block, never elsewhere)."""

import os
import socket
import struct
import threading
import time

import pytest

from npukit.devices.nvme import fuzz, pdu
from npukit.devices.nvme.client import NvmeTcpHost
from npukit.devices.nvme.command import Command

from .conftest import io_queue_connect, raw_io_queue, read_pdu

NQN = fuzz.GUEST_NQN


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = fuzz.ServerProcess(tmp_path_factory.mktemp("faults"))
    yield srv
    srv.stop()
    assert "connection handler failed" not in srv.log_text() and "Traceback" not in srv.log_text()


def _owner(port: int) -> NvmeTcpHost:
    """An association with four I/O queues granted and none connected (the test connects them raw)."""
    h = NvmeTcpHost("127.0.0.1", port, NQN, io_queues=0)
    h.set_features(0x07, 3 | (3 << 16))
    return h


def _reset(s: socket.socket) -> None:
    """Vanish without a FIN: SO_LINGER 0 makes close() send RST."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def _connects_within(port: int, owner, qid: int, seconds: float) -> bool:
    """Whether a raw Connect as I/O queue ``qid`` succeeds within ``seconds`` (the target frees a
    vanished queue's QID once its worker has seen the FIN or RST: a loaded machine may take longer
    than the test's sleep)."""
    end = time.monotonic() + seconds
    while True:
        try:
            s, accepted = io_queue_connect(port, owner, qid)
            s.close()
        except ConnectionError:  # refused by closing: try again
            accepted = False
        if accepted:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.1)


@pytest.mark.parametrize("how", ["fin", "rst"])
def test_host_vanishing_mid_write_leaves_the_blocks_as_they_were(server, how):
    before = os.urandom(128 * 1024)
    with NvmeTcpHost("127.0.0.1", server.port, NQN, io_queues=1) as h, _owner(server.port) as owner:
        h.write(1000, before)
        s = raw_io_queue(server.port, owner, qid=2)
        assert not _connects_within(server.port, owner, qid=2, seconds=0.0)  # taken while it lives
        s.sendall(b"".join(pdu.capsule_cmd(fuzz._sqe(0x01, 9, 1, {10: 1000, 12: 255}, sgl_len=128 * 1024))))
        r2t = read_pdu(s)
        assert r2t[0] == pdu.PduType.R2T
        ttag = struct.unpack_from("<H", r2t, 10)[0]
        h2c = b"".join(bytes(b) for b in pdu.data_pdu(pdu.PduType.H2C_DATA, 9, ttag, 0,
                                                       b"\xee" * (128 * 1024), last=True))
        s.sendall(h2c[:70_000])  # half the data, then gone
        _reset(s) if how == "rst" else s.close()
        time.sleep(0.3)
        assert h.read(1000, 256) == before
        assert _connects_within(server.port, owner, qid=2, seconds=10.0)  # the vanished queue's QID is free
    assert server.alive()


def test_host_vanishing_mid_read_does_not_disturb_the_target(server):
    with NvmeTcpHost("127.0.0.1", server.port, NQN, io_queues=1) as h, _owner(server.port) as owner:
        data = os.urandom(256 * 1024)
        h.write(4000, data[:131072])
        h.write(4256, data[131072:])
        s = raw_io_queue(server.port, owner, qid=3)
        for k in range(32):  # 4 MiB of reads outstanding, then read a little and reset
            s.sendall(b"".join(pdu.capsule_cmd(fuzz._sqe(0x02, k, 1, {10: 4000, 12: 255},
                                                          sgl_len=128 * 1024))))
        s.recv(1000)
        _reset(s)
        time.sleep(0.3)
        assert h.read(4000, 256) + h.read(4256, 256) == data
    assert server.alive()


def test_keep_alive_expiry_with_outstanding_commands(server):
    """A host goes silent (sockets open) with an AER and a write waiting for its R2T data outstanding:
    after 1.5 x KATO the target tears the controller down, closes both connections, and the write
    never reaches the namespace."""
    before = os.urandom(64 * 1024)
    with NvmeTcpHost("127.0.0.1", server.port, NQN, io_queues=1) as other:
        other.write(7000, before)
        h = NvmeTcpHost("127.0.0.1", server.port, NQN, io_queues=1, kato_ms=1000)
        h.admin_q.send_command(Command.build(0x0C, cid=77))  # AER: stays outstanding
        q = h.io_qs[0]
        q._send(pdu.capsule_cmd(fuzz._sqe(0x01, 5, 1, {10: 7000, 12: 127}, sgl_len=64 * 1024)))
        assert q.read_pdu().type == pdu.PduType.R2T  # ...and the host never sends the data
        start = time.monotonic()
        for sock in (h.admin_q.sock, q.sock):
            sock.settimeout(10)
            while sock.recv(4096):
                pass  # drained until the target closes
        waited = time.monotonic() - start
        assert 1.0 <= waited < 6.0
        h.close()
        assert other.read(7000, 128) == before
        assert other.get_log(0x02, 512)  # the other controller is unaffected


def _slot_data(slot: int) -> bytes:
    """64 KiB whose every 512-byte block names its slot and block (a torn or misplaced block shows)."""
    return b"".join(struct.pack("<II", slot, b) + os.urandom(504) for b in range(128))


@pytest.mark.slow
def test_kill_9_during_a_write_stream_then_restart(tmp_path):
    srv = fuzz.ServerProcess(tmp_path)
    acked: dict[int, bytes] = {}
    issued: dict[int, bytes] = {}
    stop = threading.Event()

    def writer() -> None:
        try:
            with NvmeTcpHost("127.0.0.1", srv.port, NQN, io_queues=1, timeout=5) as h:
                for first in range(0, 900, 8):  # 8 writes of 64 KiB in flight at a time
                    if stop.is_set():
                        return
                    batch = []
                    for slot in range(first, first + 8):
                        issued[slot] = _slot_data(slot)
                        fua = (slot % 5 == 0) << 30
                        cmd = Command.build(0x01, nsid=1, cdws={10: slot * 128, 12: 127 | fua})
                        batch.append((cmd, issued[slot], 0))
                    for (cmd, _, _), reply in zip(batch, h.io_qs[0].run_batch(batch), strict=True):
                        assert reply.cqe.status == 0
                        acked[cmd.cdw10 // 128] = issued[cmd.cdw10 // 128]
        except Exception:  # the server was killed under us: expected
            return

    t = threading.Thread(target=writer)
    t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 120 and time.monotonic() < deadline:
        time.sleep(0.02)
    srv.kill9()
    stop.set()
    t.join(20)
    assert len(acked) >= 120 and len(issued) < 900

    srv = fuzz.ServerProcess(tmp_path)
    try:
        with NvmeTcpHost("127.0.0.1", srv.port, NQN, io_queues=1) as h:
            assert h.smart_log()["unsafe_shutdowns"] == 1
            lost = [s for s, data in acked.items() if h.read(s * 128, 128) != data]
            assert lost == []
            for slot in set(issued) - set(acked):  # in flight at the kill: old (zero) or new, per block
                got = h.read(slot * 128, 128)
                for b in range(128):
                    block = got[b * 512:(b + 1) * 512]
                    assert block in (bytes(512), issued[slot][b * 512:(b + 1) * 512]), (slot, b)
            never = max(issued) + 1
            assert h.read(never * 128, 128) == bytes(64 * 1024)
    finally:
        srv.stop()
