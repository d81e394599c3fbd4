"""The handler registry as an extension point (what the Alkali vendor commands will use), queue depth
on one connection, and robustness against garbage on the wire."""

import os
import random
import socket
import struct

import pytest

from npukit.devices.nvme.client import NvmeStatusError, NvmeTcpHost, TcpQueue
from npukit.devices.nvme.command import Command
from npukit.devices.nvme.namespace import Namespace
from npukit.devices.nvme.pcie import HostMemory, PcieController, PcieHost
from npukit.devices.nvme.registry import CommandSpec, LogPageSpec, QueueKind, Result, dwords_cdw10
from npukit.devices.nvme.spec import NvmeError, Status
from npukit.devices.nvme.subsystem import Subsystem
from npukit.devices.nvme.tcp import TargetThread
from npukit.errors import ConfigError

NQN = "nqn.2026-11.io.npukit:ext"


def vendor_subsystem(tmp_path):
    sub = Subsystem(NQN, [Namespace(tmp_path / "ns.img", size=1 << 20)])
    stored = {}

    def identify(req):  # 0xC2: controller → host, CDW10 dwords (Alkali convention, 1-based)
        return Result(dw0=0xC2, data=b"WDC0" + struct.pack("<I", 72) + bytes(64))

    def send(req):  # 0x85 (I/O): host → controller
        stored[req.cmd.cdw13] = bytes(req.data)
        return Result()

    def fails(req):
        raise ValueError("a bug in an extension")

    def refuses(req):
        raise NvmeError(Status.INVALID_FIELD, "accelerator id", param_loc=48)

    sub.registry.register(QueueKind.ADMIN, 0xC2, CommandSpec("accelerator identify", identify,
                                                             data_out=dwords_cdw10))
    sub.registry.register(QueueKind.IO, 0x85, CommandSpec("send firmware", send, data_in=dwords_cdw10))
    sub.registry.register(QueueKind.ADMIN, 0xC6, CommandSpec("buggy", fails, data_out=dwords_cdw10))
    sub.registry.register(QueueKind.ADMIN, 0xC0, CommandSpec("refuses", refuses))
    sub.registry.register_log_page(0xC0, LogPageSpec("accelerator log", lambda ctrl, cmd: b"LOG!" * 8))
    return sub, stored


def test_vendor_handlers_over_tcp_and_pcie(tmp_path):
    sub, stored = vendor_subsystem(tmp_path)
    t = TargetThread([sub])
    try:
        h = NvmeTcpHost("127.0.0.1", t.port, NQN, io_queues=1)
        reply = h.admin(Command.build(0xC2, cdws={10: 4}), read_len=16)
        assert reply.cqe.dw0 == 0xC2 and reply.data[:4] == b"WDC0"
        image = os.urandom(8192 + 512)  # beyond in-capsule: R2T path for a vendor command
        h.io(Command.build(0x85, nsid=1, cdws={10: len(image) // 4, 13: 7}), image)
        assert stored[7] == image
        with pytest.raises(NvmeStatusError) as exc:
            h.admin(Command.build(0xC6, cdws={10: 8}), read_len=32)
        assert (exc.value.cqe.sct, exc.value.cqe.sc, exc.value.cqe.dnr) == (0, 0x06, False)  # Internal Error
        with pytest.raises(NvmeStatusError) as exc:
            h.admin(Command.build(0xC0, cdws={12: 9}))
        assert (exc.value.cqe.sc, exc.value.cqe.dnr) == (0x02, True)
        assert h.get_log(0xC0, 16) == b"LOG!" * 4
        assert h.read(0, 1) == bytes(512)  # the connection survived the handler bug
        h.close()
    finally:
        t.stop()
    mem = HostMemory(2 << 20)
    host = PcieHost(PcieController(sub, mem), mem)
    host.enable()
    cqe, data = host.admin(Command.build(0xC2, cdws={10: 4}), read_len=16)
    assert cqe.status == 0 and data[:4] == b"WDC0"


def test_registry_rejects_clashes_and_wrong_directions(tmp_path):
    sub, _ = vendor_subsystem(tmp_path)
    with pytest.raises(ConfigError):
        sub.registry.register(QueueKind.ADMIN, 0xC2, CommandSpec("again", lambda r: Result()))
    # opcode 0xC4 has direction bits 00 (no data): a handler that returns data breaks the rule
    wrong = CommandSpec("wrong", lambda r: Result(), data_out=lambda c: 4)
    sub.registry.register(QueueKind.ADMIN, 0xC4, wrong)
    t = TargetThread([sub])
    try:
        h = NvmeTcpHost("127.0.0.1", t.port, NQN, io_queues=0)
        with pytest.raises(NvmeStatusError) as exc:
            h.admin(Command.build(0xC4), read_len=4)
        assert exc.value.cqe.sc == 0x06  # reported as Internal Error, not a crash
        h.close()
    finally:
        t.stop()


def test_queue_depth_32_on_one_connection(target):
    h = target.host(io_queues=1)
    try:
        q = h.io_qs[0]
        blobs = [os.urandom(512 * random.Random(i).choice([1, 8, 64])) for i in range(32)]
        writes = [(Command.build(0x01, nsid=1, cdws={10: 200 * i, 12: len(b) // 512 - 1}), b, 0)
                  for i, b in enumerate(blobs)]
        assert all(r.cqe.status == 0 for r in q.run_batch(writes))
        reads = [(Command.build(0x02, nsid=1, cdws={10: 200 * i, 12: len(b) // 512 - 1}), b"", len(b))
                 for i, b in enumerate(blobs)]
        assert [r.data for r in q.run_batch(reads)] == blobs
    finally:
        h.close()


def _valid_session() -> bytes:
    """ICReq, admin Connect, Property Get CAP, Property Set CC, Identify and an R2T-sized write."""
    from npukit.devices.nvme import pdu
    from npukit.devices.nvme.command import sgl_descriptor
    from npukit.devices.nvme.fabrics import ConnectData

    from .conftest import NQN as TARGET_NQN

    out = [*pdu.ic_req()]
    connect = Command.build(0x7F, 1, nsid=1, flags=0x40, dptr=sgl_descriptor(0, 1024, 0x01), cdws={11: 31})
    out += pdu.capsule_cmd(connect.encode(), ConnectData(bytes(16), 0xFFFF, TARGET_NQN, "nqn.fuzz").encode())
    prop = bytearray(Command.build(0x7F, 2, nsid=4, flags=0x40).encode())
    prop[40] = 1
    out += pdu.capsule_cmd(bytes(prop))
    setcc = bytearray(Command.build(0x7F, 3, nsid=0, flags=0x40).encode())
    struct.pack_into("<IQ", setcc, 44, 0x14, 0x460001)
    out += pdu.capsule_cmd(bytes(setcc))
    out += pdu.capsule_cmd(Command.build(0x06, 4, flags=0x40, dptr=sgl_descriptor(0, 4096, 0x5A),
                                         cdws={10: 1}).encode())
    out += pdu.data_pdu(pdu.PduType.H2C_DATA, 5, 1, 0, bytes(64), last=True)
    return b"".join(bytes(b) for b in out)


def test_mutated_sessions_never_take_the_target_down(target, host, caplog):
    rng = random.Random(1234)
    session = _valid_session()
    for trial in range(60):
        data = bytearray(session)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.getrandbits(8)
        if trial % 3 == 0:
            data = data[: rng.randrange(len(data))]
        with socket.create_connection(("127.0.0.1", target.port), timeout=5) as s:
            s.sendall(bytes(data))
            s.shutdown(socket.SHUT_WR)
            try:
                while s.recv(65536):
                    pass
            except OSError:
                pass
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert host.read(0, 1) == bytes(512)  # the target and other connections are fine
    q = TcpQueue("127.0.0.1", target.port)  # new connections are still accepted
    q.close()
