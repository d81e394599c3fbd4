"""NVMe/TCP target behaviour: data paths (in-capsule, R2T/H2CData, C2HData) with and without digests,
many hosts at once, features, SMART counters, firmware slots, keep alive and discovery."""

import hashlib
import os
import struct
import threading
import time

import pytest

from npukit.devices.nvme.client import NvmeTcpHost
from npukit.devices.nvme.command import Command
from npukit.devices.nvme.namespace import Namespace
from npukit.devices.nvme.spec import DISCOVERY_NQN, ProtocolError
from npukit.devices.nvme.state import DeviceState
from npukit.devices.nvme.subsystem import Subsystem
from npukit.devices.nvme.tcp import TargetThread

from .conftest import NQN, NS_BYTES


@pytest.mark.parametrize("digests", [False, True])
def test_data_paths_round_trip_against_the_backing_file(target, digests):
    h = target.host(hdgst=digests, ddgst=digests)
    try:
        big = os.urandom(96 * 1024)  # beyond the 8 KiB in-capsule size: R2T + H2CData
        small = os.urandom(4096)  # in-capsule
        h.write(2048, big)
        h.write(4000, small, qid=2)
        assert h.read(2048, len(big) // 512, qid=2) == big
        assert h.read(4000, 8) == small
        h.flush()
        raw = (target.tmp / "ns.img").read_bytes()  # the file itself is the independent view
        assert raw[2048 * 512: 2048 * 512 + len(big)] == big and raw[4000 * 512: 4000 * 512 + 4096] == small
    finally:
        h.close()


def test_write_zeroes_and_deallocate_read_back_zeroes(host):
    host.write(64, b"\xff" * 8192)
    host.io(Command.build(0x08, nsid=1, cdws={10: 64, 12: 3}))  # write zeroes, 4 blocks
    host.io(Command.build(0x09, nsid=1, cdws={10: 0, 11: 4}), struct.pack("<IIQ", 0, 4, 72))  # deallocate
    back = host.read(64, 16)
    assert back[:2048] == bytes(2048) and back[2048:4096] == b"\xff" * 2048
    assert back[4096:6144] == bytes(2048) and back[6144:] == b"\xff" * 2048


def test_smart_counters_move_with_io(host):
    before = host.smart_log()
    assert before["data_units_written"] == before["host_write_commands"] == 0
    for i in range(4):
        host.write(250 * i, os.urandom(512 * 250))
    host.read(0, 256)
    after = host.smart_log()
    assert after["host_write_commands"] == 4
    assert after["host_read_commands"] - before["host_read_commands"] == 1
    # data units are thousands of 512-byte units, rounded up (NVMe 1.4 SMART / Health log)
    assert after["data_units_written"] == 1
    host.write(1000, bytes(512))
    assert host.smart_log()["data_units_written"] == 2
    assert after["temperature"] == 298 and after["power_cycles"] == 1


def test_features(host):
    assert host.get_features(0x06) == 1  # volatile write cache enabled by default
    host.set_features(0x06, 0)
    assert host.get_features(0x06) == 0
    assert host.get_features(0x07) & 0xFFFF == 1  # two I/O queues granted (0-based)
    assert host.get_features(0x04) & 0xFFFF == 0x157
    assert host.get_features(0x04, cdw11=1 << 20) & 0xFFFF == 0  # under-temperature threshold
    host.set_features(0x0F, 1500)
    assert host.get_features(0x0F) == 2000  # rounded up to KAS granularity (10 x 100 ms)
    assert host.get_features(0x0F, sel=1) == 0


def test_firmware_slots_persist_across_restart(tmp_path):
    def start():
        sub = Subsystem(NQN, [Namespace(tmp_path / "ns.img", size=None if (tmp_path / "ns.img").exists()
                                        else 1 << 20)], DeviceState(tmp_path / "state"))
        return sub, TargetThread([sub])

    image = os.urandom(10000)
    sub, t = start()
    h = NvmeTcpHost("127.0.0.1", t.port, NQN, io_queues=0)
    h.fw_download(image, xfer=4096)
    h.fw_commit(3, 1)  # replace slot 3, activate at the next reset
    log = h.firmware_log()
    revision = hashlib.sha256(image + bytes(-len(image) % 4)).hexdigest()[:8].upper()
    assert log["active_slot"] == 1 and log["next_slot"] == 3 and log["frs3"] == revision
    assert h.identify["fr"] == "12.34"
    h.close()
    t.stop()
    sub.close()
    sub, t = start()
    h = NvmeTcpHost("127.0.0.1", t.port, NQN, io_queues=0)
    try:
        assert h.identify["fr"] == revision and h.firmware_log()["active_slot"] == 3
        assert (tmp_path / "state" / "fw" / "slot3.bin").read_bytes()[:len(image)] == image
    finally:
        h.close()
        t.stop()
        sub.close()


def test_many_hosts_at_once(target):
    errors = []

    def worker(i):
        try:
            h = target.host(io_queues=2)
            for k in range(6):
                data = os.urandom(16384)
                slba = i * 512 + k * 32
                h.write(slba, data, qid=1 + k % 2)
                if h.read(slba, 32, qid=2 - k % 2) != data:
                    errors.append(f"host {i} block {slba} mismatch")
            h.close()
        except Exception as exc:  # collected, asserted below
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    deadline = time.monotonic() + 5
    while target.sub.controllers and time.monotonic() < deadline:  # the target sees the EOFs
        time.sleep(0.02)
    assert target.sub.controllers == {}  # every admin connection closed → its controller went away


def test_controller_ids_are_dynamic_and_distinct(target):
    a, b = target.host(io_queues=1), target.host(io_queues=1)
    try:
        assert a.cntlid != b.cntlid and a.identify["cntlid"] == a.cntlid and b.identify["cntlid"] == b.cntlid
    finally:
        a.close()
        b.close()


def test_keep_alive_timeout_drops_the_controller(target):
    h = target.host(io_queues=1, kato_ms=1000)
    try:
        time.sleep(0.5)
        h.admin(Command.build(0x18))  # Keep Alive resets the timer
        time.sleep(0.9)
        h.read(0, 1)
        assert target.sub.controllers
        # silence from here: dropped after KATO + grace, polled rather than slept (the watchdog ticks
        # every 0.25 s, so a fixed 2 s sleep left 0.25 s of margin on a loaded machine)
        quiet = time.monotonic()
        while target.sub.controllers and time.monotonic() - quiet < 10.0:
            time.sleep(0.05)
        assert not target.sub.controllers and time.monotonic() - quiet >= 1.0
        with pytest.raises(ProtocolError):
            h.read(0, 1)
    finally:
        h.close()


def test_discovery_log_and_discovery_controller(target):
    d = NvmeTcpHost("127.0.0.1", target.port, DISCOVERY_NQN, io_queues=0)
    try:
        assert d.identify["cntrltype"] == 2 and d.identify["subnqn"] == DISCOVERY_NQN
        log = d.discovery_log()
        assert log["numrec"] == 1
        rec = log["records"][0]
        assert (rec["subnqn"], rec["trtype"], rec["adrfam"], rec["subtype"]) == (NQN, 3, 1, 2)
        # TREQ: secure channel not required (bits 1:0 = 10b), SQ flow control disable supported (bit 2),
        # as NVMe-oF's Discovery Log Page Entry defines them (libnvme: NVMF_TREQ_DISABLE_SQFLOW = 1 << 2)
        assert rec["treq"] == 0b110
        with pytest.raises(Exception, match="INVALID_OPCODE"):
            d.admin(Command.build(0x11, cdws={10: 0}), bytes(4))
    finally:
        d.close()


def test_discovery_hides_subsystems_a_host_may_not_connect_to(target):
    target.sub.allowed_hosts = {"nqn.2014-08.org.nvmexpress:uuid:friend"}
    for hostnqn, expected in (("nqn.2014-08.org.nvmexpress:uuid:friend", 1),
                              ("nqn.2014-08.org.nvmexpress:uuid:stranger", 0)):
        d = NvmeTcpHost("127.0.0.1", target.port, DISCOVERY_NQN, hostnqn=hostnqn, io_queues=0)
        try:
            assert d.discovery_log()["numrec"] == expected
        finally:
            d.close()


def test_disconnect_frees_the_io_queue(target):
    from npukit.devices.nvme.client import TcpQueue
    from npukit.devices.nvme.fabrics import ConnectData

    h = target.host(io_queues=1)
    try:
        q = h.io_qs[0]
        reply = q.submit(Command.build(0x7F, q.next_cid(), nsid=0x08))  # Disconnect (FCTYPE 08h)
        assert reply.cqe.status == 0
        with pytest.raises(ProtocolError):
            q.read_pdu()  # the target closes the connection after answering
        ctrl = target.sub.controllers[h.cntlid]
        assert 1 not in ctrl.io_queues
        again = TcpQueue("127.0.0.1", target.port)  # QID 1 can be connected again
        data = ConnectData(h.hostid, h.cntlid, NQN, h.hostnqn).encode()
        cqe = again.submit(Command.build(0x7F, 1, nsid=0x01, cdws={10: 1 << 16, 11: 31}), data).cqe
        assert cqe.status == 0 and cqe.dw0 == h.cntlid
        again.close()
    finally:
        h.close()


def test_shutdown_reports_complete(host):
    host.shutdown()
    assert (host.property_get(0x1C) >> 2) & 3 == 0b10
    assert host.property_get(0x08) == 0x00010400 and host.property_get(0x00, 8) == 0x0000002008010FFF
    assert NS_BYTES  # namespace untouched by a shutdown
