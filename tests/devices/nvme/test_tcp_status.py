"""Every error status of the supported commands, produced through the NVMe/TCP path. Expected values
are (SCT, SC, DNR) as written in the status code tables of the NVMe base specification 1.4 (generic,
command specific, media errors) and the Fabrics specification (Connect), not taken from npukit's tables."""

import struct

import pytest

from npukit.devices.nvme import pdu
from npukit.devices.nvme.client import NvmeStatusError, TcpQueue
from npukit.devices.nvme.command import Command, sgl_descriptor
from npukit.devices.nvme.fabrics import ConnectData
from npukit.devices.nvme.spec import ProtocolError

from .conftest import NQN, NS_BYTES

BLOCKS = NS_BYTES // 512


def status(fn):
    """(SCT, SC, DNR) of the command ``fn`` sends; (0, 0, False) when it succeeds."""
    try:
        fn()
    except NvmeStatusError as exc:
        return exc.cqe.sct, exc.cqe.sc, exc.cqe.dnr
    return 0, 0, False


def admin(h, opcode, nsid=0, read_len=0, data=b"", **cdws):
    return lambda: h.admin(Command.build(opcode, nsid=nsid, cdws={int(k[3:]): v for k, v in cdws.items()}),
                           data, read_len)


def io(h, opcode, nsid=1, read_len=0, data=b"", **cdws):
    return lambda: h.io(Command.build(opcode, nsid=nsid, cdws={int(k[3:]): v for k, v in cdws.items()}),
                        data, read_len)


INVALID_OPCODE = (0, 0x01, True)
INVALID_FIELD = (0, 0x02, True)
INVALID_NAMESPACE = (0, 0x0B, True)
LBA_OUT_OF_RANGE = (0, 0x80, True)


def test_invalid_opcode(host):
    assert status(admin(host, 0xC2, read_len=16, cdw10=4)) == INVALID_OPCODE  # Alkali vendor, no handler
    assert status(admin(host, 0xC0)) == INVALID_OPCODE
    assert status(admin(host, 0x03)) == INVALID_OPCODE  # reserved
    assert status(io(host, 0x81, data=bytes(16), cdw10=4)) == INVALID_OPCODE
    assert status(io(host, 0x82, read_len=16, cdw10=4)) == INVALID_OPCODE
    assert status(io(host, 0x0E)) == INVALID_OPCODE
    # Fabrics: queues come from Connect, Create/Delete I/O queue opcodes are reserved
    assert status(admin(host, 0x05, cdw10=3 | (7 << 16), cdw11=1)) == INVALID_OPCODE
    assert status(admin(host, 0x00, cdw10=1)) == INVALID_OPCODE


def test_invalid_field(host):
    assert status(admin(host, 0x06, read_len=4096, cdw10=0x1F)) == INVALID_FIELD  # unknown CNS
    assert status(admin(host, 0x0A, cdw10=0x02)) == INVALID_FIELD  # unsupported feature
    assert status(admin(host, 0x0A, cdw10=0x06 | (2 << 8))) == INVALID_FIELD  # SEL=saved, ONCS.SSS=0
    assert status(admin(host, 0x09, cdw10=0x04, cdw11=(2 << 20))) == INVALID_FIELD  # THSEL 10b reserved
    assert status(lambda: host.get_log(0x02, 512, offset=4096)) == INVALID_FIELD  # offset past the log
    assert status(lambda: host.get_log(0x02, 512, offset=2)) == INVALID_FIELD  # offset not dword aligned
    assert status(lambda: host.fw_commit(2, 5)) == INVALID_FIELD  # boot partition commit action
    assert status(lambda: host.read(0, 1024)) == INVALID_FIELD  # 512 KiB > MDTS (2^5 x 4 KiB)
    fused = Command.build(0x02, nsid=1, flags=0x1, cdws={12: 0})
    assert status(lambda: host.io(fused, read_len=512)) == INVALID_FIELD


def test_invalid_namespace(host):
    assert status(lambda: host.read(0, 1, nsid=2)) == INVALID_NAMESPACE
    assert status(lambda: host.write(0, bytes(512), nsid=0)) == INVALID_NAMESPACE
    assert status(lambda: host.flush(nsid=9)) == INVALID_NAMESPACE
    assert status(admin(host, 0x06, nsid=7, read_len=4096, cdw10=0)) == INVALID_NAMESPACE
    assert status(admin(host, 0x06, nsid=0, read_len=4096, cdw10=3)) == INVALID_NAMESPACE
    assert status(admin(host, 0x06, nsid=0xFFFFFFFE, read_len=4096, cdw10=2)) == INVALID_NAMESPACE


def test_lba_out_of_range(host):
    assert status(lambda: host.read(BLOCKS - 1, 2)) == LBA_OUT_OF_RANGE
    assert status(lambda: host.write(BLOCKS, bytes(512))) == LBA_OUT_OF_RANGE
    assert status(io(host, 0x08, cdw10=BLOCKS - 4, cdw12=7)) == LBA_OUT_OF_RANGE  # write zeroes
    assert status(io(host, 0x05, data=bytes(1024), cdw10=BLOCKS - 1, cdw12=1)) == LBA_OUT_OF_RANGE
    dsm = struct.pack("<IIQ", 0, 8, BLOCKS - 2)
    assert status(io(host, 0x09, data=dsm, cdw10=0, cdw11=4)) == LBA_OUT_OF_RANGE
    # the error log records the LBA of the newest error first
    entry = host.get_log(0x01, 64)
    assert struct.unpack_from("<H", entry, 12)[0] >> 1 == 0x4080 and struct.unpack_from("<Q", entry, 16)[0]


def test_command_specific_statuses(host):
    assert status(lambda: host.get_log(0xC0, 512)) == (1, 0x09, True)  # Invalid Log Page
    assert status(lambda: host.set_features(0x06, 1, save=True)) == (1, 0x0D, True)  # not saveable
    assert status(lambda: host.set_features(0x07, 0)) == (0, 0x0C, True)  # queues already connected
    assert status(lambda: host.set_features(0x0F, 3_600_001)) == (0, 0x1A, True)  # KATO invalid
    assert status(lambda: host.fw_commit(2, 1)) == (1, 0x07, True)  # nothing downloaded
    host.fw_download(b"FWIMAGE!" * 64)
    assert status(lambda: host.fw_commit(1, 0)) == (1, 0x06, True)  # slot 1 is read-only
    assert status(lambda: host.fw_commit(6, 2)) == (1, 0x06, True)  # no slot 6
    assert status(lambda: host.fw_download(bytes(64), offset=256)) == (1, 0x14, True)  # overlapping range
    host.write(100, b"\xa5" * 512)
    assert status(io(host, 0x05, data=b"\xa5" * 512, cdw10=100)) == (0, 0, False)
    assert status(io(host, 0x05, data=b"\x5a" * 512, cdw10=100)) == (2, 0x85, True)  # Compare Failure


def _raw_submit(q: TcpQueue, cmd: Command, data: bytes = b""):
    q._send(pdu.capsule_cmd(cmd.encode(), data))
    return q.wait(cmd.cid).cqe


def test_sgl_errors(host):
    q = host.io_qs[0]
    read = Command.build(0x02, 900, nsid=1, flags=0x40, dptr=sgl_descriptor(0, 512, 0x5A), cdws={12: 7})
    cqe = _raw_submit(q, read)
    assert (cqe.sct, cqe.sc, cqe.dnr) == (0, 0x0F, True)  # Data SGL Length Invalid: 512 < 4096
    write = Command.build(0x01, 901, nsid=1, flags=0x40, dptr=sgl_descriptor(0, 512, 0x00), cdws={12: 0})
    cqe = _raw_submit(q, write, bytes(512))
    assert (cqe.sct, cqe.sc) == (0, 0x11)  # SGL Descriptor Type Invalid
    write = Command.build(0x01, 902, nsid=1, flags=0x40, dptr=sgl_descriptor(16, 512, 0x01), cdws={12: 0})
    cqe = _raw_submit(q, write, bytes(512))
    assert (cqe.sct, cqe.sc) == (0, 0x16)  # SGL Offset Invalid
    prp = Command.build(0x02, 903, nsid=1, flags=0x00, cdws={12: 0})
    cqe = _raw_submit(q, prp)
    assert (cqe.sct, cqe.sc, cqe.dnr) == INVALID_FIELD  # PSDT 00b (PRPs) on a fabrics queue


def test_async_event_limit_and_abort(host):
    q = host.admin_q
    cids = []
    for _ in range(4):  # AERL = 3: four may be outstanding
        cmd = Command.build(0x0C, q.next_cid())
        q.send_command(cmd)
        cids.append(cmd.cid)
    assert status(admin(host, 0x0C)) == (1, 0x05, True)  # Asynchronous Event Request Limit Exceeded
    abort = host.admin(Command.build(0x08, cdws={10: 0 | (cids[0] << 16)})).cqe
    assert abort.status == 0 and abort.dw0 & 1 == 0  # aborted
    aer = q.wait(cids[0]).cqe
    assert (aer.sct, aer.sc, aer.dnr) == (0, 0x07, False)  # Command Abort Requested
    assert host.admin(Command.build(0x08, cdws={10: 0 | (0x7777 << 16)})).cqe.dw0 & 1 == 1  # not found
    assert status(admin(host, 0x08, cdw10=9 | (1 << 16))) == INVALID_FIELD  # no SQ 9 (QEMU's answer)
    # a temperature threshold below the composite temperature (298 K) fires a SMART/health event
    host.set_features(0x0B, 0x2)
    host.set_features(0x04, 280)
    event = q.wait(cids[1]).cqe
    assert event.status == 0 and event.dw0 == 0x1 | (0x01 << 8) | (0x02 << 16)
    assert host.smart_log()["critical_warning"] & 0x2


def test_transient_transport_error_on_data_digest(target):
    h = target.host(hdgst=True, ddgst=True)
    try:
        q = h.io_qs[0]
        cmd = Command.build(0x01, 77, nsid=1, flags=0x40, dptr=sgl_descriptor(0, 512, 0x01), cdws={10: 5})
        buffers = [bytes(b) for b in pdu.capsule_cmd(cmd.encode(), b"\x11" * 512, hdgst=True, ddgst=True)]
        buffers[-1] = bytes(b ^ 0xFF for b in buffers[-1])  # corrupt the data digest
        q._send(buffers)
        cqe = q.wait(77).cqe
        assert (cqe.sct, cqe.sc, cqe.dnr) == (0, 0x22, False)
        assert h.read(5, 1) == bytes(512)  # nothing was written
        h.write(5, b"\x22" * 512)  # the connection still works
        assert h.read(5, 1) == b"\x22" * 512
    finally:
        h.close()


def _connect(target, subnqn=NQN, hostnqn="nqn.2014-08.org.nvmexpress:uuid:a", qid=0, cntlid=0xFFFF,
             recfmt=0, sqsize=31):
    q = TcpQueue("127.0.0.1", target.port)
    try:
        data = ConnectData(b"\x01" * 16, cntlid, subnqn, hostnqn).encode()
        cmd = Command.build(0x7F, 1, nsid=0x01, cdws={10: recfmt | (qid << 16), 11: sqsize})
        return q.submit(cmd, data).cqe
    finally:
        q.close()


def test_connect_errors(target):
    cqe = _connect(target, subnqn="nqn.2026-11.io.npukit:nope")
    assert (cqe.sct, cqe.sc, cqe.dnr, cqe.dw0) == (1, 0x82, True, (1 << 16) | 256)  # Invalid Parameters
    cqe = _connect(target, recfmt=1)
    assert (cqe.sct, cqe.sc, cqe.dnr) == (1, 0x80, True)  # Incompatible Format
    cqe = _connect(target, qid=1, cntlid=0x1234)
    assert (cqe.sct, cqe.sc, cqe.dw0) == (1, 0x82, (1 << 16) | 16)  # no such controller
    cqe = _connect(target, sqsize=0)
    assert (cqe.sct, cqe.sc, cqe.dw0) == (1, 0x82, 44)  # SQSIZE in the SQE
    target.sub.allowed_hosts = {"nqn.2014-08.org.nvmexpress:uuid:allowed"}
    cqe = _connect(target)
    assert (cqe.sct, cqe.sc, cqe.dnr, cqe.dw0) == (1, 0x84, True, (1 << 16) | 512)  # Invalid Host
    assert _connect(target, hostnqn="nqn.2014-08.org.nvmexpress:uuid:allowed").status == 0
    assert cqe.cid == 1


def test_io_connect_beyond_granted_queues(target):
    h = target.host(io_queues=1)
    try:
        cqe = _connect(target, hostnqn=h.hostnqn, qid=2, cntlid=h.cntlid)
        assert (cqe.sct, cqe.sc) == (1, 0x82)
    finally:
        h.close()


def test_command_before_connect_is_a_sequence_error(target):
    q = TcpQueue("127.0.0.1", target.port)
    try:
        cqe = q.submit(Command.build(0x06, 3, cdws={10: 1}), read_len=4096).cqe
        assert (cqe.sct, cqe.sc, cqe.dnr) == (0, 0x0C, True)
    finally:
        q.close()


@pytest.mark.parametrize("bad", ["hlen", "type", "ttag", "plen"])
def test_malformed_pdus_end_only_their_connection(target, host, bad):
    q = TcpQueue("127.0.0.1", target.port)
    try:
        if bad == "hlen":
            q.send_raw(bytes([4, 0, 70, 0]) + (72).to_bytes(4, "little") + bytes(64))
        elif bad == "type":
            q.send_raw(bytes([0x0B, 0, 24, 0]) + (24).to_bytes(4, "little") + bytes(16))
        elif bad == "ttag":
            h2c = pdu.data_pdu(pdu.PduType.H2C_DATA, 1, 42, 0, bytes(8), last=True)
            q.send_raw(b"".join(bytes(b) for b in h2c))
        else:
            q.send_raw(bytes([4, 0, 72, 72]) + (1 << 24).to_bytes(4, "little") + bytes(64))
        ch = q._recv_exact(8)
        assert ch[0] == 0x03 and ch[2] == 24  # C2HTermReq
        rest = q._recv_exact(struct.unpack_from("<I", ch, 4)[0] - 8)
        fes = struct.unpack_from("<H", rest, 0)[0]
        assert fes == {"hlen": 0x01, "type": 0x01, "ttag": 0x01, "plen": 0x05}[bad]
        with pytest.raises(ProtocolError):
            q._recv_exact(1)  # the target closed this connection
    finally:
        q.close()
    assert host.read(0, 1) == bytes(512)  # other connections keep working


def test_more_pending_transfers_than_queue_entries_is_fatal(target):
    from npukit.devices.nvme.client import NvmeTcpHost

    h = NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=1, queue_size=2)
    try:
        q = h.io_qs[0]
        for i in range(3):  # 16 KiB writes need R2T; the host never answers them
            q.send_command(Command.build(0x01, q.next_cid(), nsid=1, cdws={10: 64 * i, 12: 31}), bytes(16384))
        types = []
        with pytest.raises(ProtocolError, match="FES 0x2"):
            while True:
                types.append(q.read_pdu().type)
        assert types == [0x09, 0x09]  # two R2Ts, then the C2HTermReq (PDU Sequence Error)
    finally:
        h.close()
    with target.host(io_queues=1) as other:
        assert other.read(0, 1) == bytes(512)


def test_a_connection_that_never_connects_is_closed(target):
    target.thread.target.connect_timeout = 0.3
    q = TcpQueue("127.0.0.1", target.port)  # ICReq only
    try:
        with pytest.raises(ProtocolError, match="closed"):
            q.read_pdu()
    finally:
        q.close()
