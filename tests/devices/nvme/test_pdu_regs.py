"""PDU layouts against the bytes Linux 6.1's nvme-tcp host sent (captured, /work/shared/refs), the
CRC32C check value, and the Alkali register block against the Chisel reset values and NVMe 1.4 tables."""

import struct

import pytest

from npukit.devices.nvme import pdu
from npukit.devices.nvme.command import Command, Completion, Cqe, sgl_descriptor
from npukit.devices.nvme.fabrics import ConnectData
from npukit.devices.nvme.pdu import FatalPduError, Fes, PduType
from npukit.devices.nvme.regs import FIFO_DEPTH, RegisterFile

# --- CRC32C: RFC 3720 / iSCSI check value of "123456789" ------------------------------------------


def test_crc32c_check_value_and_little_endian_digest():
    assert pdu.crc(b"123456789") == (0xE3069283).to_bytes(4, "little")


# --- PDUs -------------------------------------------------------------------------------------------


def test_icreq_matches_linux_bytes():
    # Linux 6.1 ICReq: type 0, flags 0, hlen 128, pdo 0, plen 128, pfv 0, hpda 0, digest 0, maxr2t 0
    raw = b"".join(pdu.ic_req())
    assert len(raw) == 128
    assert raw[:8] == bytes([0, 0, 128, 0]) + (128).to_bytes(4, "little")
    assert raw[8:] == bytes(120)
    raw = b"".join(pdu.ic_req(hpda=2, hdgst=True, ddgst=True, maxr2t=3))
    assert raw[10] == 2 and raw[11] == 3 and struct.unpack_from("<I", raw, 12)[0] == 3


def test_connect_capsule_matches_linux_layout():
    # Linux: CapsuleCmd type 4, hlen 72, pdo 72, plen 1096; SQE byte 1 = 0x40; SGL1 =
    # 00000000 00000000 00040000 00000001 (offset 0, 1024 bytes, type byte 0x01)
    cmd = Command.build(0x7F, 0, nsid=1, flags=0x40, dptr=sgl_descriptor(0, 0x400, 0x01),
                        cdws={11: 31, 12: 5000})
    data = ConnectData(bytes(16), 0xFFFF, "nqn.sub", "nqn.host").encode()
    raw = b"".join(bytes(b) for b in pdu.capsule_cmd(cmd.encode(), data))
    assert raw[:4] == bytes([4, 0, 72, 72]) and struct.unpack_from("<I", raw, 4)[0] == 1096
    sqe = raw[8:72]
    assert sqe[0] == 0x7F and sqe[1] == 0x40 and sqe[4] == 1
    assert sqe[24:40] == bytes.fromhex("0000000000000000" "00040000" "00000001")
    assert struct.unpack_from("<HH", sqe, 44) == (31, 0) and struct.unpack_from("<I", sqe, 48)[0] == 5000
    assert raw[72 + 16: 72 + 18] == b"\xff\xff" and raw[72 + 256: 72 + 263] == b"nqn.sub"


def test_digests_placed_after_header_and_data():
    data = bytes(range(100)) * 3
    raw = b"".join(bytes(b) for b in pdu.data_pdu(PduType.C2H_DATA, 7, 0, 0, data, last=True,
                                                   hdgst=True, ddgst=True))
    ptype, flags, hlen, pdo, plen = struct.unpack_from("<BBBBI", raw)
    assert (ptype, flags, hlen, pdo, plen) == (7, 0x01 | 0x02 | 0x04, 24, 28, 28 + 300 + 4)
    assert raw[24:28] == pdu.crc(raw[:24]) and raw[-4:] == pdu.crc(data)
    parsed = pdu.parse(raw, hdgst=True, ddgst=True)
    assert bytes(parsed.data) == data and not parsed.flags & 0x80
    corrupted = bytearray(raw)
    corrupted[40] ^= 1
    assert pdu.parse(bytes(corrupted), hdgst=True, ddgst=True).flags & 0x80  # data digest: not fatal
    corrupted = bytearray(raw)
    corrupted[9] ^= 1
    with pytest.raises(FatalPduError) as exc:
        pdu.parse(bytes(corrupted), hdgst=True, ddgst=True)
    assert exc.value.fes == Fes.HEADER_DIGEST_ERROR == 0x03


def test_alignment_padding_follows_hpda():
    raw = b"".join(bytes(b) for b in pdu.data_pdu(PduType.C2H_DATA, 1, 0, 0, b"abcd", last=True,
                                                   alignment=64))
    assert raw[3] == 64 and raw[64:68] == b"abcd" and raw[24:64] == bytes(40)


def test_common_header_validation():
    with pytest.raises(FatalPduError) as exc:
        pdu.validate_common(bytes([4, 0, 60, 0]) + (72).to_bytes(4, "little"), max_data=8192)
    assert exc.value.fes == 0x01 and exc.value.fei == 2
    with pytest.raises(FatalPduError) as exc:
        pdu.validate_common(bytes([4, 0, 72, 72]) + (1 << 30).to_bytes(4, "little"), max_data=8192)
    assert exc.value.fes == 0x05


def test_cqe_status_encoding_matches_linux():
    # Linux logged "ret=16386" (0x4002) for the 16-bit status word 0x8004: SC 2 with DNR
    raw = Completion(5, 0x4002, 9).encode(sqhd=3, sqid=1, phase=0)
    assert struct.unpack_from("<H", raw, 14)[0] == 0x8004
    cqe = Cqe.decode(raw)
    assert (cqe.sc, cqe.sct, cqe.dnr, cqe.sqhd, cqe.sqid, cqe.cid, cqe.dw0) == (2, 0, True, 3, 1, 5, 9)


# --- register block -------------------------------------------------------------------------------


def test_reset_values_are_alkalis():
    regs = RegisterFile()
    cap = regs.host_read(0) | (regs.host_read(4) << 32)
    assert cap == 0x0000_0020_0801_0FFF
    # NVMe 1.4 CAP fields: MQES 15:0, CQR 16, TO 31:24, DSTRD 35:32, CSS 44:37, MPSMIN 51:48
    assert cap & 0xFFFF == 4095 and cap >> 16 & 1 == 1 and cap >> 24 & 0xFF == 8
    assert cap >> 32 & 0xF == 0 and cap >> 37 & 0xFF == 1 and cap >> 48 & 0xF == 0
    assert regs.host_read(0x08) == 0x0001_0400


def test_host_writes_are_logged_as_dword_indices():
    regs = RegisterFile()
    regs.host_write(0x1000 + 8 * 4, 3)  # SQ4 tail doorbell (fifth pair)
    regs.host_write(0x1004, 1)  # CQ0 head doorbell
    regs.store(0x14, 1)  # controller-side write: not logged
    assert regs.host_read(0x1028) == 1
    assert regs.host_read(0x102C) == (0x1000 + 32) // 4
    assert regs.host_read(0x102C) == 0x1004 // 4
    assert regs.host_read(0x1028) == 0
    regs.host_write(0x0, 0xFFFF)  # CAP is read-only from the host
    assert regs.host_read(0) == 0x0801_0FFF


def test_fifo_is_128_deep_and_host_interrupt_register_raises_vectors():
    raised = []
    regs = RegisterFile(on_host_interrupt=raised.append)
    for i in range(FIFO_DEPTH + 5):
        regs.host_write(0x1000, i)
    assert FIFO_DEPTH == 128 and regs.fifo_level == 128 and regs.fifo_overflows == 5
    regs.host_write(0x1030, (1 << 3) | (1 << 0))
    assert raised == [0, 3] and regs.host_read(0x1030) == 0
