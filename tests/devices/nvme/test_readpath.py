"""Reads on an I/O queue, byte for byte on the wire: the short way (readpath.py), also with header
digests, and with data digests (which take the general path); with SQ flow control on (a CapsuleResp
after every Read) and disabled by the host's Connect (C2HData with SUCCESS and no CapsuleResp).

Oracles: the NVMe/TCP transport specification's PDU layouts (C2HData: type 07h, LAST_PDU flag 04h,
HLEN 24, PDO after the header and its digest, PLEN, CCCID, DATAO, DATAL; CapsuleResp: type 05h,
HLEN 24, the 16-byte CQE with SQ head, SQ ID, CID and status), header and data digests recomputed with the
``crc32c`` package, the NVMe base specification's SQ head (one entry consumed per command, wrapping
at the queue size the Connect gave) and LBA Out of Range status, TP 8005's SQ flow control disable
(Connect CATTR bit 2; the Connect response's SQHD FFFFh; C2HData's SUCCESS flag 08h only with LAST_PDU,
only for a successful command, only where the host disabled flow control), and the data as written to
the namespace file with ``os.pwrite`` (not through the target).
"""

import os
import socket
import struct

import crc32c
import pytest

from npukit.devices.nvme import fuzz, pdu
from npukit.devices.nvme.client import NvmeTcpHost

from .conftest import NQN, NS_BYTES

C2H_DATA, CAPSULE_RESP, LAST_PDU = 0x07, 0x05, 0x04
QUEUE_ENTRIES = 32  # fuzz.connect_pdu asks SQSIZE 31
STATUS_LBA_OUT_OF_RANGE = 0x4000 | 0x80  # DNR, generic status 80h
DISABLE_SQFLOW = 0x04  # Connect CDW11 bits 23:16 (CATTR), bit 2 (TP 8005; Linux's --disable-sqflow)
SUCCESS = 0x08  # C2HData flag: the command completed successfully, no CapsuleResp follows
SQHD_NONE = 0xFFFF  # the Connect response's SQHD once the controller disabled SQ flow control


def _exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _pdu(s: socket.socket) -> bytes:
    head = _exactly(s, 8)
    return head + _exactly(s, struct.unpack_from("<I", head, 4)[0] - 8)


def _queue(port: int, owner: NvmeTcpHost, qid: int, hd: bool, dd: bool, cattr: int = 0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(fuzz.icreq(hd=hd, dd=dd))
    _pdu(s)
    s.sendall(fuzz.connect_pdu(qid, owner.cntlid, NQN, owner.hostnqn, owner.hostid, hd=hd, dd=dd,
                               cattr=cattr))
    resp = _pdu(s)
    sqhd, sqid, _cid, sf = struct.unpack_from("<HHHH", resp, 16)
    assert resp[0] == CAPSULE_RESP and sf >> 1 == 0
    if cattr & DISABLE_SQFLOW:
        assert (sqhd, sqid) == (SQHD_NONE, qid)
    return s


def _check_c2h_data(got: bytes, flags: int, cid: int, slba: int, n: int, image: bytes, hd: bool,
                    dd: bool) -> None:
    """One C2HData PDU carrying a whole Read: its header fields (``flags`` besides the digest flags),
    digests recomputed with crc32c, and the data equal to the namespace image's blocks."""
    ptype, got_flags, hlen, pdo, plen = struct.unpack_from("<BBBBI", got)
    cccid, datao, datal = struct.unpack_from("<H2xII", got, 8)
    digest, tail = (4 if hd else 0), (4 if dd else 0)
    digest_flags = (0x01 if hd else 0) | (0x02 if dd else 0)
    assert (ptype, got_flags, hlen, pdo) == (C2H_DATA, flags | digest_flags, 24, 24 + digest)
    assert (plen, cccid, datao, datal) == (24 + digest + n * 512 + tail, cid, 0, n * 512)
    if hd:
        assert got[24:28] == struct.pack("<I", crc32c.crc32c(got[:24]))
    data = got[pdo:plen - tail]
    assert data == image[slba * 512:(slba + n) * 512]
    if dd:
        assert got[plen - 4:] == struct.pack("<I", crc32c.crc32c(data))


def _capsule(cid: int, slba: int, blocks: int, hd: bool) -> bytes:
    sqe = fuzz._sqe(0x02, cid, 1, {10: slba & 0xFFFFFFFF, 11: slba >> 32, 12: blocks - 1},
                    sgl_len=blocks * 512)
    plen = 72 + (4 if hd else 0)
    header = struct.pack("<BBBBI", 0x04, 0x01 if hd else 0, 72, 0, plen) + sqe
    return header + (struct.pack("<I", crc32c.crc32c(header)) if hd else b"")


@pytest.mark.parametrize(("hd", "dd"), [(False, False), (True, False), (True, True)],
                         ids=["short-way", "short-way-header-digests", "general-path-data-digests"])
def test_reads_on_the_wire_match_the_spec_and_the_file(target, hd, dd):
    image = os.urandom(NS_BYTES)
    with open(target.tmp / "ns.img", "r+b") as f:  # written beside the target, not through it
        os.pwrite(f.fileno(), image, 0)
    blocks_total = NS_BYTES // 512
    # 40 Reads (the SQ head wraps at 32) of 1, 8 and 256 blocks, one of them past the end
    reads = [(100 + k, (k * 977) % (blocks_total - 256), (1, 8, 256)[k % 3]) for k in range(40)]
    reads[17] = (117, blocks_total - 4, 8)
    with NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=0) as owner:
        owner.set_features(0x07, 1 | (1 << 16))
        before = owner.smart_log()["host_read_commands"]
        s = _queue(target.port, owner, 1, hd, dd)
        # the first alone, the rest pipelined in one send: then they arrive while the queue waits for
        # its next PDU, and the short way serves them as received (ReadPath.serve_batch)
        s.sendall(_capsule(*reads[0], hd))
        digest = 4 if hd else 0
        for k, (cid, slba, n) in enumerate(reads):
            if k == 1:
                s.sendall(b"".join(_capsule(cid, slba, n, hd) for cid, slba, n in reads[1:]))
            if k != 17:
                # LAST_PDU without SUCCESS: this queue's Connect kept SQ flow control
                _check_c2h_data(_pdu(s), LAST_PDU, cid, slba, n, image, hd, dd)
            resp = _pdu(s)
            assert resp[:8] == struct.pack("<BBBBI", CAPSULE_RESP, 0x01 if hd else 0, 24, 0, 24 + digest)
            sqhd, sqid, rcid, sf = struct.unpack_from("<HHHH", resp, 16)
            assert (sqhd, sqid, rcid) == ((k + 2) % QUEUE_ENTRIES, 1, cid)  # Connect took entry 0
            assert sf >> 1 == (STATUS_LBA_OUT_OF_RANGE if k == 17 else 0)
        s.close()
        assert owner.smart_log()["host_read_commands"] - before == 39  # the failed Read not counted


# ---- SQ flow control disabled (Connect CATTR bit 2): C2HData SUCCESS instead of a CapsuleResp ---------


@pytest.mark.parametrize(("hd", "dd"), [(False, False), (True, False), (True, True)],
                         ids=["short-way", "short-way-header-digests", "general-path-data-digests"])
def test_success_flag_stands_in_for_the_response_once_sq_flow_control_is_off(target, hd, dd):
    image = os.urandom(NS_BYTES)
    with open(target.tmp / "ns.img", "r+b") as f:
        os.pwrite(f.fileno(), image, 0)
    blocks_total = NS_BYTES // 512
    reads = [(200 + k, (k * 613) % (blocks_total - 256), (1, 8, 256)[k % 3]) for k in range(40)]
    reads[11] = (211, blocks_total - 2, 8)  # past the end: fails, so it keeps its CapsuleResp
    with NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=0) as owner:
        owner.set_features(0x07, 1 | (1 << 16))
        before = owner.smart_log()["host_read_commands"]
        s = _queue(target.port, owner, 2, hd, dd, cattr=DISABLE_SQFLOW)
        plain = _queue(target.port, owner, 1, hd, dd)  # the same controller, SQ flow control kept
        s.sendall(_capsule(*reads[0], hd))
        plain.sendall(_capsule(7, 0, 8, hd))
        for k, (cid, slba, n) in enumerate(reads):
            if k == 1:  # as above: the rest arrives while the queue waits for its next PDU
                s.sendall(b"".join(_capsule(cid, slba, n, hd) for cid, slba, n in reads[1:]))
            got = _pdu(s)
            if k == 11:
                sqhd, sqid, rcid, sf = struct.unpack_from("<HHHH", got, 16)
                assert got[0] == CAPSULE_RESP and (sqhd, sqid, rcid) == (SQHD_NONE, 2, cid)
                assert sf >> 1 == STATUS_LBA_OUT_OF_RANGE
                continue
            _check_c2h_data(got, LAST_PDU | SUCCESS, cid, slba, n, image, hd, dd)
        # the queue that kept SQ flow control: LAST_PDU alone, then the CapsuleResp with the SQ head
        c2h = _pdu(plain)
        assert c2h[0] == C2H_DATA and c2h[1] & (LAST_PDU | SUCCESS) == LAST_PDU
        resp = _pdu(plain)
        assert resp[0] == CAPSULE_RESP and struct.unpack_from("<HHH", resp, 16) == (2, 1, 7)
        s.close()
        plain.close()
        assert owner.smart_log()["host_read_commands"] - before == 40  # 39 + the plain queue's one


def _write_capsule(cid: int, slba: int, data: bytes) -> bytes:
    """A Write with its data in-capsule (SGL Data Block, offset 0), no digests."""
    sqe = fuzz._sqe(0x01, cid, 1, {10: slba, 12: len(data) // 512 - 1}, sgl_len=len(data), sgl_type=0x01)
    return struct.pack("<BBBBI", 0x04, 0, 72, 72, 72 + len(data)) + sqe + data


@pytest.mark.parametrize("cattr", [0, DISABLE_SQFLOW], ids=["flow-control", "sq-flow-control-disabled"])
def test_pipelined_reads_and_writes_are_served_in_order(target, cattr):
    """One send of Reads and in-capsule Writes to the same blocks, arriving while the queue waits: the
    Reads the short way serves as received stop at each Write, so every Read returns what the Writes
    before it in the stream left there, and the completions come back in submission order."""
    old, new = os.urandom(4096), os.urandom(4096)
    with open(target.tmp / "ns.img", "r+b") as f:
        os.pwrite(f.fileno(), old, 64 * 512)
    with NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=0) as owner:
        owner.set_features(0x07, 1 | (1 << 16))
        s = socket.create_connection(("127.0.0.1", target.port), timeout=10)
        s.sendall(fuzz.icreq())
        _pdu(s)
        s.sendall(fuzz.connect_pdu(1, owner.cntlid, NQN, owner.hostnqn, owner.hostid, cattr=cattr))
        _pdu(s)
        s.sendall(_capsule(1, 64, 8, False))  # the queue is live and has served a Read
        assert _pdu(s)[24:] == old
        if not cattr:
            _pdu(s)
        stream = [("r", 2, old), ("r", 3, old), ("w", 4, new), ("r", 5, new), ("r", 6, new), ("w", 7, old),
                  ("r", 8, old)]
        s.sendall(b"".join(_capsule(cid, 64, 8, False) if kind == "r" else _write_capsule(cid, 64, data)
                           for kind, cid, data in stream))
        for kind, cid, data in stream:
            got = _pdu(s)
            if kind == "r":
                assert got[0] == C2H_DATA and struct.unpack_from("<H", got, 8)[0] == cid and got[24:] == data
                if cattr:
                    continue
                got = _pdu(s)
            assert got[0] == CAPSULE_RESP and struct.unpack_from("<HH", got, 20) == (cid, 0)
        s.close()


def test_reads_honour_the_hosts_data_alignment(target):
    """ICReq HPDA 7: the host wants PDU data at a multiple of 32 bytes, so every C2HData pads its header
    to PDO 32 (NVMe/TCP 1.0, HPDA), also Reads pipelined while the queue waits for its next PDU."""
    image = os.urandom(64 * 512)
    with open(target.tmp / "ns.img", "r+b") as f:
        os.pwrite(f.fileno(), image, 0)
    with NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=0) as owner:
        owner.set_features(0x07, 1 | (1 << 16))
        s = socket.create_connection(("127.0.0.1", target.port), timeout=10)
        s.sendall(b"".join(pdu.ic_req(hpda=7)))
        _pdu(s)
        s.sendall(fuzz.connect_pdu(1, owner.cntlid, NQN, owner.hostnqn, owner.hostid))
        _pdu(s)
        reads = [(cid, 8 * (cid - 1), 8) for cid in range(1, 9)]
        s.sendall(_capsule(*reads[0], False))
        for k, (cid, slba, n) in enumerate(reads):
            if k == 1:
                s.sendall(b"".join(_capsule(*r, False) for r in reads[1:]))
            c2h = _pdu(s)
            assert (c2h[0], c2h[3], struct.unpack_from("<H", c2h, 8)[0]) == (C2H_DATA, 32, cid)
            assert c2h[24:32] == bytes(8) and c2h[32:] == image[slba * 512:(slba + n) * 512]
            assert _pdu(s)[0] == CAPSULE_RESP
        s.close()


def test_a_failure_while_serving_received_pdus_drops_that_connection_only(target, monkeypatch, caplog):
    """An exception in the receive-time short way (here the file read) ends its own connection, logged,
    as the connection loop's last line of defence does; the controller's other queue reads on."""
    from npukit.devices.nvme import readpath

    with NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=1, spare_queues=1) as owner:
        s = _queue(target.port, owner, 2, False, False)
        s.sendall(_capsule(1, 0, 8, False))
        assert _pdu(s)[0] == C2H_DATA and _pdu(s)[0] == CAPSULE_RESP  # the queue is live and served
        real = os.preadv

        def failing(*args):
            raise OSError(5, "injected I/O error")
        monkeypatch.setattr(readpath.os, "preadv", failing)
        s.sendall(_capsule(2, 0, 8, False))
        with pytest.raises(ConnectionError):
            _pdu(s)
        monkeypatch.setattr(readpath.os, "preadv", real)
        assert "serving received PDUs failed" in caplog.text
        assert owner.read(0, 8, qid=1) == (target.tmp / "ns.img").read_bytes()[:4096]
        s.close()
