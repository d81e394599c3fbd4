"""I/O queues served by worker processes (``npukit nvme serve --workers N``), against a real serve process.

Oracles: the durability contract (an acknowledged write reads back exactly, here after kill -9 of the
worker that acknowledged it); the NVMe base specification's Error Information log entry (SQID of the
lost queue, CID FFFFh: not one command's) and Error asynchronous event (type 0, Transient Internal
Error 04h, log page 01h); the Alkali vendor commands' own round trip (firmware sent = firmware read)
through a queue whose worker forwards them to the main process.
"""

import json
import os
import re
import signal
import socket
import struct
import threading
import time

import pytest

from npukit.devices.alkali.host import AlkaliHost
from npukit.devices.nvme import fuzz
from npukit.devices.nvme.client import NvmeStatusError, NvmeTcpHost
from npukit.devices.nvme.command import Command

from .conftest import raw_io_queue

NQN = fuzz.GUEST_NQN
STATUS_LBA_OUT_OF_RANGE = 0x80
STATUS_INTERNAL_ERROR = 0x06
WRITE_SPAN = 32768  # the writer's blocks (16 MiB of the 64 MiB namespace); the bystander's lie above


@pytest.fixture
def server(tmp_path):
    srv = fuzz.ServerProcess(tmp_path, extra=("--workers", "2"))
    yield srv
    srv.stop()
    assert "connection handler failed" not in srv.log_text() and "Traceback" not in srv.log_text()


def _worker_of(srv: fuzz.ServerProcess, cntlid: int, qid: int) -> int:
    """The pid serving a queue, as the target logged the hand-over."""
    pattern = rf"I/O queue {qid} of controller {cntlid} handed to worker \d+ \(pid (\d+)\)"
    for _ in range(100):
        found = re.findall(pattern, srv.log_text())
        if found:
            return int(found[-1])
        time.sleep(0.05)
    raise AssertionError(f"no hand-over logged for controller {cntlid} queue {qid}")


def _error_entries(h: NvmeTcpHost) -> list[tuple[int, int, int, int]]:
    """(count, SQID, CID, status field) of each Error Information log entry (64 bytes each)."""
    page = h.get_log(0x01, 64 * 16)
    out = []
    for i in range(16):
        count, sqid, cid, status = struct.unpack_from("<QHHH", page, 64 * i)
        if count:
            out.append((count, sqid, cid, status >> 1))
    return out


def test_serve_announces_its_workers_and_they_serve_io(server):
    assert len(server.workers) == 2 and all(os.path.exists(f"/proc/{pid}") for pid in server.workers)
    data = os.urandom(256 * 1024)
    with NvmeTcpHost("127.0.0.1", server.port, NQN, io_queues=2) as h:
        h.write(2048, data[:131072], qid=1)
        h.write(2304, data[131072:], qid=2, fua=True)
        # written through one worker, read through the other
        assert h.read(2048, 256, qid=2) + h.read(2304, 256, qid=2) == data
        assert {_worker_of(server, h.cntlid, 1), _worker_of(server, h.cntlid, 2)} == set(server.workers)
        smart = h.smart_log()  # the workers' counters reach the main process's SMART log
        assert smart["host_write_commands"] >= 2 and smart["host_read_commands"] >= 1
        with pytest.raises(NvmeStatusError) as err:  # a worker queue's error: in the error log at once
            h.read((64 << 20) // 512 - 4, 8, qid=1)  # 4 blocks past the 64 MiB namespace's end
        assert err.value.cqe.status & 0x7FF == STATUS_LBA_OUT_OF_RANGE
        assert any(sqid == 1 and cid == err.value.cqe.cid and status & 0x7FF == STATUS_LBA_OUT_OF_RANGE
                   for _, sqid, cid, status in _error_entries(h))


def _exact_pdu(s: socket.socket) -> bytes:
    buf = bytearray()
    while len(buf) < 8 or len(buf) < struct.unpack_from("<I", buf, 4)[0]:
        want = 8 - len(buf) if len(buf) < 8 else struct.unpack_from("<I", buf, 4)[0] - len(buf)
        chunk = s.recv(want)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def test_a_worker_queue_whose_host_disabled_sq_flow_control_ends_reads_with_success(server):
    """NVMe/TCP C2HData SUCCESS (flag 08h with LAST_PDU 04h) in place of the CapsuleResp on a queue whose
    Connect set CATTR bit 2 (TP 8005), also once a worker serves the queue; a failing Read keeps its
    CapsuleResp (LBA Out of Range, SQHD FFFFh)."""
    data = os.urandom(8192)
    with NvmeTcpHost("127.0.0.1", server.port, NQN, io_queues=1, spare_queues=1) as h:
        h.write(64, data)
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.sendall(fuzz.icreq())
        _exact_pdu(s)
        s.sendall(fuzz.connect_pdu(2, h.cntlid, NQN, h.hostnqn, h.hostid, cattr=0x04))
        resp = _exact_pdu(s)
        assert resp[0] == 0x05 and struct.unpack_from("<HHHH", resp, 16)[::3] == (0xFFFF, 0)
        _worker_of(server, h.cntlid, 2)  # handed over: a worker serves what follows
        end = (64 << 20) // 512 - 4
        for cid, slba in ((5, 64), (6, 72), (7, end)):
            sqe = fuzz._sqe(0x02, cid, 1, {10: slba, 12: 7}, sgl_len=4096)
            s.sendall(struct.pack("<BBBBI", 0x04, 0, 72, 0, 72) + sqe)
        for cid, part in ((5, data[:4096]), (6, data[4096:])):
            c2h = _exact_pdu(s)
            assert c2h[:2] == bytes((0x07, 0x04 | 0x08)) and struct.unpack_from("<H", c2h, 8)[0] == cid
            assert c2h[24:] == part
        resp = _exact_pdu(s)
        sqhd, sqid, cid, sf = struct.unpack_from("<HHHH", resp, 16)
        assert (resp[0], sqhd, sqid, cid, (sf >> 1) & 0xFF) == (0x05, 0xFFFF, 2, 7, STATUS_LBA_OUT_OF_RANGE)
        s.close()


def test_vendor_commands_on_a_worker_queue_run_in_the_main_process(server):
    """Alkali's Send Firmware (data in, through R2T) and Read Firmware (data out) on an I/O queue that
    a worker serves: the worker forwards them, the accelerator in the main process answers."""
    image = os.urandom(12 * 1024)
    nvme = NvmeTcpHost("127.0.0.1", server.port, NQN, io_queues=1)
    with AlkaliHost(nvme) as host:
        host.enable()
        host.send_firmware(0, 1, image)
        assert host.read_firmware(0, 1, len(image)) == image
        _worker_of(server, nvme.cntlid, 1)  # the queue was a worker's


def _write_until_dropped(h: NvmeTcpHost, acked: dict[int, bytes], pending: dict[int, bytes],
                         stop: threading.Event) -> None:
    lba = 0
    while not stop.is_set():
        data = struct.pack("<I", lba) + os.urandom(64 * 1024 - 4)
        pending.clear()
        pending[lba] = data  # in flight: not acknowledged, so it may land whole, in part or not at all
        try:
            h.write(lba, data, qid=1)
        except Exception:  # the queue dropped: what was acknowledged before is the oracle
            return
        acked[lba] = data  # the last write acknowledged at each LBA
        pending.clear()
        lba = (lba + 128) % WRITE_SPAN


def _holds(read: bytes, acked: bytes, in_flight: bytes | None) -> bool:
    """The blocks read are the acknowledged data, except that a write still in flight at the kill may
    have replaced any of them (NVMe promises one block atomic, AWUN 0: per 512-byte block)."""
    if in_flight is None:
        return read == acked
    return all(read[i:i + 512] in (acked[i:i + 512], in_flight[i:i + 512]) for i in range(0, len(acked), 512))


def test_kill_9_of_a_worker_loses_no_acknowledged_write_and_is_reported(server):
    with NvmeTcpHost("127.0.0.1", server.port, NQN, io_queues=1) as h, \
            NvmeTcpHost("127.0.0.1", server.port, NQN, io_queues=1) as bystander:
        victim = _worker_of(server, h.cntlid, 1)
        aer = Command.build(0x0C, cid=900)
        h.admin_q.send_command(aer)  # an AER outstanding: the worker's death must complete it
        acked: dict[int, bytes] = {}
        pending: dict[int, bytes] = {}
        stop = threading.Event()
        writer = threading.Thread(target=_write_until_dropped, args=(h, acked, pending, stop))
        writer.start()
        time.sleep(0.5)
        os.kill(victim, signal.SIGKILL)
        writer.join(20)
        stop.set()
        assert not writer.is_alive() and len(acked) > 3
        # the controller reports it: an Error event (type 0, info 04h, log page 01h) ...
        reply = h.admin_q.wait(900)
        dw0 = reply.cqe.dw0
        assert (dw0 & 0x7, (dw0 >> 8) & 0xFF, (dw0 >> 16) & 0xFF) == (0, 0x04, 0x01)
        # ... and an Error Information entry for the lost queue, not for one command
        assert any(sqid == 1 and cid == 0xFFFF and status & 0x7FF == STATUS_INTERNAL_ERROR
                   for _, sqid, cid, status in _error_entries(h))
        # the device serves on: the other controller, a new association, and the freed QID
        bystander.write(WRITE_SPAN + 8, b"\x5a" * 4096)
        assert bystander.read(WRITE_SPAN + 8, 8) == b"\x5a" * 4096
        with NvmeTcpHost("127.0.0.1", server.port, NQN, io_queues=1) as fresh:
            for lba, data in acked.items():  # every acknowledged write is there
                assert _holds(fresh.read(lba, 128), data, pending.get(lba)), lba
        again = raw_io_queue(server.port, h, qid=1)
        again.close()
        assert server.alive()
        died = rf"worker \d \(pid {victim}\) died \(killed by SIGKILL\); 1 I/O queue\(s\) dropped: \S+ qid 1"
        for _ in range(100):
            if re.search(died, server.log_text()):
                break
            time.sleep(0.05)
        assert re.search(died, server.log_text())


def test_workers_0_serves_every_queue_in_the_main_process(tmp_path):
    srv = fuzz.ServerProcess(tmp_path, extra=("--workers", "0"))
    try:
        assert srv.workers == []
        with NvmeTcpHost("127.0.0.1", srv.port, NQN, io_queues=1) as h:
            h.write(8, b"\x11" * 4096)
            assert h.read(8, 8) == b"\x11" * 4096
        assert "handed to worker" not in srv.log_text()
    finally:
        srv.stop()


def _saved_counters(srv: fuzz.ServerProcess) -> dict[str, int]:
    """The SMART counters in the state file the running target last wrote (state.json)."""
    return json.loads((srv.directory / "state" / "state.json").read_text())["counters"]


@pytest.mark.parametrize("workers", ["2", "0"])
def test_flush_on_an_io_queue_saves_the_state_file_in_either_process(tmp_path, workers):
    """NVMe's Flush makes the device's state durable with the data: after a Flush on an I/O queue the
    state file holds every write the host had completed, whether a worker or the main process
    served the queue (a worker asks the main process, which sums all workers' counters)."""
    srv = fuzz.ServerProcess(tmp_path, extra=("--workers", workers))
    try:
        with NvmeTcpHost("127.0.0.1", srv.port, NQN, io_queues=2) as h:
            before = _saved_counters(srv)
            for i in range(5):  # 5 writes of 8 blocks on queue 1, 3 of 16 blocks on queue 2
                h.write(64 * i, os.urandom(4096), qid=1)
            for i in range(3):
                h.write(4096 + 64 * i, os.urandom(8192), qid=2)
            h.flush(qid=1)
            after = _saved_counters(srv)
            if workers != "0":
                assert {_worker_of(srv, h.cntlid, 1), _worker_of(srv, h.cntlid, 2)} == set(srv.workers)
        assert after["host_write_commands"] - before["host_write_commands"] == 8
        assert after["data_units_written"] - before["data_units_written"] == 5 * 8 + 3 * 16
    finally:
        srv.stop()
