"""NVMe/TCP PDUs (NVM Express TCP Transport Specification 1.0).

Every PDU starts with an 8-byte common header ``type, flags, hlen, pdo, plen(le32)``; PLEN counts the
whole PDU with digests and padding. Digests are CRC32C (the ``crc32c`` package), stored little endian.
Encoding returns a list of buffers so data travels as the caller's memoryview (no copy).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import crc32c

from npukit.devices.nvme.spec import ProtocolError

CH = struct.Struct("<BBBBI")
FLAG_HDGST = 0x01
FLAG_DDGST = 0x02
FLAG_DATA_LAST = 0x04
FLAG_DATA_SUCCESS = 0x08
DIGEST_SIZE = 4
MAX_TERM_HEADER = 152  # a C2HTermReq carries at most this much of the offending PDU header


class PduType(enum.IntEnum):
    IC_REQ = 0x00
    IC_RESP = 0x01
    H2C_TERM_REQ = 0x02
    C2H_TERM_REQ = 0x03
    CAPSULE_CMD = 0x04
    CAPSULE_RESP = 0x05
    H2C_DATA = 0x06
    C2H_DATA = 0x07
    R2T = 0x09


HLEN = {PduType.IC_REQ: 128, PduType.IC_RESP: 128, PduType.H2C_TERM_REQ: 24, PduType.C2H_TERM_REQ: 24,
        PduType.CAPSULE_CMD: 72, PduType.CAPSULE_RESP: 24, PduType.H2C_DATA: 24, PduType.C2H_DATA: 24,
        PduType.R2T: 24}
# PDU types that may carry data, i.e. have a data digest when DDGST is negotiated
DATA_PDUS = {PduType.CAPSULE_CMD, PduType.H2C_DATA, PduType.C2H_DATA}


class Fes(enum.IntEnum):
    """Fatal error status of a termination request."""

    INVALID_HEADER_FIELD = 0x01
    PDU_SEQUENCE_ERROR = 0x02
    HEADER_DIGEST_ERROR = 0x03
    DATA_OUT_OF_RANGE = 0x04
    DATA_LIMIT_EXCEEDED = 0x05
    UNSUPPORTED_PARAMETER = 0x06


class FatalPduError(ProtocolError):
    """A PDU error that ends the connection with a termination request."""

    def __init__(self, fes: Fes, fei: int, header: bytes, reason: str) -> None:
        self.fes, self.fei, self.header = fes, fei, header
        super().__init__(f"{fes.name} at byte {fei}: {reason}")


def crc(data: bytes | memoryview) -> bytes:
    return struct.pack("<I", crc32c.crc32c(data))


@dataclass
class Pdu:
    type: int
    flags: int
    hlen: int
    pdo: int
    plen: int
    header: bytes  # the first hlen bytes (common + PDU specific header)
    data: memoryview

    def u16(self, offset: int) -> int:
        return struct.unpack_from("<H", self.header, offset)[0]

    def u32(self, offset: int) -> int:
        return struct.unpack_from("<I", self.header, offset)[0]


def encode(ptype: PduType, specific: bytes, data: bytes | memoryview = b"", *, hdgst: bool = False,
           ddgst: bool = False, flags: int = 0, data_alignment: int = 4) -> list[bytes | memoryview]:
    """Buffers of one PDU. ``specific`` is the header after the 8-byte common header."""
    hlen = HLEN[ptype]
    if len(specific) != hlen - CH.size:
        raise ProtocolError(f"{ptype.name} header must be {hlen - CH.size} bytes after the common header")
    is_ic = ptype in (PduType.IC_REQ, PduType.IC_RESP)
    use_hd = hdgst and not is_ic
    use_dd = ddgst and bool(len(data)) and ptype in DATA_PDUS
    flags |= (FLAG_HDGST if use_hd else 0) | (FLAG_DDGST if use_dd else 0)
    after_header = hlen + (DIGEST_SIZE if use_hd else 0)
    pdo = 0
    pad = 0
    if len(data):
        pdo = -(-after_header // data_alignment) * data_alignment
        pad = pdo - after_header
    plen = after_header + pad + len(data) + (DIGEST_SIZE if use_dd else 0)
    header = CH.pack(ptype, flags, hlen, pdo, plen) + specific
    out: list[bytes | memoryview] = [header]
    if use_hd:
        out.append(crc(header))
    if pad:
        out.append(bytes(pad))
    if len(data):
        out.append(data)
        if use_dd:
            out.append(crc(data))
    return out


def parse(raw: bytes | bytearray, *, hdgst: bool, ddgst: bool) -> Pdu:
    """Split a whole received PDU (PLEN bytes) into header and data, checking the digests.

    A data digest mismatch is returned as ``Pdu.flags`` with bit 7 set instead of raised: the spec
    makes it a per-command error (Transient Transport Error), not a fatal one."""
    ptype, flags, hlen, pdo, plen = CH.unpack_from(raw, 0)
    header = bytes(raw[:hlen])
    is_ic = ptype in (PduType.IC_REQ, PduType.IC_RESP)
    want_hd = hdgst and not is_ic
    if bool(flags & FLAG_HDGST) != want_hd:
        raise FatalPduError(Fes.INVALID_HEADER_FIELD, 1, header,
                            "HDGSTF does not match the negotiated digest")
    pos = hlen
    if want_hd:
        if bytes(raw[hlen:hlen + DIGEST_SIZE]) != crc(memoryview(raw)[:hlen]):
            raise FatalPduError(Fes.HEADER_DIGEST_ERROR, 0, header, "header digest mismatch")
        pos += DIGEST_SIZE
    view = memoryview(raw)
    if pdo == 0:
        if plen != pos or flags & FLAG_DDGST:
            raise FatalPduError(Fes.INVALID_HEADER_FIELD, 4, header, f"PLEN {plen} for a PDU without data")
        return Pdu(ptype, flags, hlen, pdo, plen, header, view[pos:pos])
    if pdo < pos or pdo > plen:
        raise FatalPduError(Fes.INVALID_HEADER_FIELD, 3, header, f"PDO {pdo} outside {pos}..{plen}")
    has_dd = bool(flags & FLAG_DDGST)
    if has_dd != (ddgst and ptype in DATA_PDUS):
        raise FatalPduError(Fes.INVALID_HEADER_FIELD, 1, header,
                            "DDGSTF does not match the negotiated digest")
    end = plen - (DIGEST_SIZE if has_dd else 0)
    if end < pdo:
        raise FatalPduError(Fes.INVALID_HEADER_FIELD, 4, header, f"PLEN {plen} too short for PDO {pdo}")
    data = view[pdo:end]
    if has_dd and bytes(view[end:plen]) != crc(data):
        flags |= 0x80
    return Pdu(ptype, flags, hlen, pdo, plen, header, data)


def validate_common(ch: bytes, *, max_data: int) -> tuple[int, int]:
    """Check a common header before reading the rest; returns (type, plen)."""
    ptype, _flags, hlen, _pdo, plen = CH.unpack(ch)
    try:
        kind = PduType(ptype)
    except ValueError:
        raise FatalPduError(Fes.INVALID_HEADER_FIELD, 0, ch, f"unknown PDU type {ptype:#x}") from None
    if hlen != HLEN[kind]:
        raise FatalPduError(Fes.INVALID_HEADER_FIELD, 2, ch, f"HLEN {hlen} for {kind.name}")
    overhead = hlen + 2 * DIGEST_SIZE + 128  # digests and the largest padding a PDO can ask for
    if plen < hlen:
        raise FatalPduError(Fes.INVALID_HEADER_FIELD, 4, ch, f"PLEN {plen} below HLEN {hlen}")
    if plen > overhead + max_data:
        raise FatalPduError(Fes.DATA_LIMIT_EXCEEDED, 4, ch,
                            f"PLEN {plen} above the {max_data}-byte data limit")
    return kind, plen


# ---- PDU-specific headers ---------------------------------------------------------------------------
def ic_req(hpda: int = 0, hdgst: bool = False, ddgst: bool = False, maxr2t: int = 0) -> list[bytes]:
    dgst = (1 if hdgst else 0) | (2 if ddgst else 0)
    specific = struct.pack("<HBBI", 0, hpda, dgst, maxr2t).ljust(120, b"\0")
    return encode(PduType.IC_REQ, specific)


def ic_resp(cpda: int, hdgst: bool, ddgst: bool, maxh2cdata: int) -> list[bytes]:
    specific = struct.pack("<HBBI", 0, cpda, (1 if hdgst else 0) | (2 if ddgst else 0), maxh2cdata)
    return encode(PduType.IC_RESP, specific.ljust(120, b"\0"))


def term_req(ptype: PduType, fes: int, fei: int, offending: bytes, hdgst: bool = False) -> list[bytes]:
    # A termination request is sent without digests (the error may be a digest error itself)
    specific = struct.pack("<HI", fes, fei).ljust(16, b"\0")
    body = bytes(offending[:MAX_TERM_HEADER])
    hlen = HLEN[ptype]
    plen = hlen + len(body)
    return [CH.pack(ptype, 0, hlen, hlen if body else 0, plen) + specific, body]


def capsule_cmd(sqe: bytes, data: bytes | memoryview = b"", *, hdgst: bool = False,
                ddgst: bool = False) -> list[bytes | memoryview]:
    return encode(PduType.CAPSULE_CMD, sqe, data, hdgst=hdgst, ddgst=ddgst)


def capsule_resp(cqe: bytes, *, hdgst: bool = False) -> list[bytes | memoryview]:
    return encode(PduType.CAPSULE_RESP, cqe, hdgst=hdgst)


def _data_header(cccid: int, ttag: int, offset: int, length: int) -> bytes:
    return struct.pack("<HHII4x", cccid, ttag, offset, length)


def r2t(cccid: int, ttag: int, offset: int, length: int, *, hdgst: bool = False) -> list[bytes | memoryview]:
    return encode(PduType.R2T, _data_header(cccid, ttag, offset, length), hdgst=hdgst)


def data_pdu(ptype: PduType, cccid: int, ttag: int, offset: int, data: bytes | memoryview, *, last: bool,
             hdgst: bool = False, ddgst: bool = False, alignment: int = 4,
             success: bool = False) -> list[bytes | memoryview]:
    """H2CData / C2HData. ``success`` (C2HData only, with ``last``): the command completed successfully
    and no CapsuleResp follows, allowed once the host disabled SQ flow control in Connect."""
    flags = (FLAG_DATA_LAST if last else 0) | (FLAG_DATA_SUCCESS if success else 0)
    return encode(ptype, _data_header(cccid, ttag, offset, len(data)), data, hdgst=hdgst, ddgst=ddgst,
                  flags=flags, data_alignment=alignment)


def data_fields(pdu: Pdu) -> tuple[int, int, int, int]:
    """(CCCID, TTAG, DATAO/R2TO, DATAL/R2TL) of H2CData, C2HData and R2T PDUs."""
    return struct.unpack_from("<HHII", pdu.header, 8)
