"""Reads on an I/O queue, byte for byte on the wire: the short way (readpath.py), also with header
digests, and with data digests (which take the general path).

Oracles: the NVMe/TCP transport specification's PDU layouts (C2HData: type 07h, LAST_PDU flag 04h,
HLEN 24, PDO after the header and its digest, PLEN, CCCID, DATAO, DATAL; CapsuleResp: type 05h,
HLEN 24, the 16-byte CQE with SQ head, SQ ID, CID and status), header and data digests recomputed with the
``crc32c`` package, the NVMe base specification's SQ head (one entry consumed per command, wrapping
at the queue size the Connect gave) and LBA Out of Range status, and the data as written to the
namespace file with ``os.pwrite`` (not through the target).
"""

import os
import socket
import struct

import crc32c
import pytest

from npukit.devices.nvme import fuzz
from npukit.devices.nvme.client import NvmeTcpHost

from .conftest import NQN, NS_BYTES

C2H_DATA, CAPSULE_RESP, LAST_PDU = 0x07, 0x05, 0x04
QUEUE_ENTRIES = 32  # fuzz.connect_pdu asks SQSIZE 31
STATUS_LBA_OUT_OF_RANGE = 0x4000 | 0x80  # DNR, generic status 80h


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


def _queue(port: int, owner: NvmeTcpHost, qid: int, hd: bool, dd: bool) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(fuzz.icreq(hd=hd, dd=dd))
    _pdu(s)
    s.sendall(fuzz.connect_pdu(qid, owner.cntlid, NQN, owner.hostnqn, owner.hostid, hd=hd, dd=dd))
    resp = _pdu(s)
    assert resp[0] == CAPSULE_RESP and struct.unpack_from("<H", resp, 22)[0] >> 1 == 0
    return s


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
        s.sendall(b"".join(_capsule(cid, slba, n, hd) for cid, slba, n in reads))  # pipelined
        digest = 4 if hd else 0
        for k, (cid, slba, n) in enumerate(reads):
            if k != 17:
                c2h = _pdu(s)
                ptype, flags, hlen, pdo, plen = struct.unpack_from("<BBBBI", c2h)
                cccid, datao, datal = struct.unpack_from("<H2xII", c2h, 8)
                assert (ptype, flags & LAST_PDU, hlen, pdo) == (C2H_DATA, LAST_PDU, 24, 24 + digest)
                tail = 4 if dd else 0
                assert (plen, cccid, datao, datal) == (24 + digest + n * 512 + tail, cid, 0, n * 512)
                if hd:
                    assert c2h[24:28] == struct.pack("<I", crc32c.crc32c(c2h[:24]))
                data = c2h[pdo:plen - tail]
                assert data == image[slba * 512:(slba + n) * 512]
                if dd:
                    assert c2h[plen - 4:] == struct.pack("<I", crc32c.crc32c(data))
            resp = _pdu(s)
            assert resp[:8] == struct.pack("<BBBBI", CAPSULE_RESP, 0x01 if hd else 0, 24, 0, 24 + digest)
            sqhd, sqid, rcid, sf = struct.unpack_from("<HHHH", resp, 16)
            assert (sqhd, sqid, rcid) == ((k + 2) % QUEUE_ENTRIES, 1, cid)  # Connect took entry 0
            assert sf >> 1 == (STATUS_LBA_OUT_OF_RANGE if k == 17 else 0)
        s.close()
        assert owner.smart_log()["host_read_commands"] - before == 39  # the failed Read not counted
