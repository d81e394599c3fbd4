"""Submission and completion queue entries (64-byte SQE, 16-byte CQE), little endian."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from npukit.devices.nvme.spec import SQE_SIZE, ProtocolError

_SQE = struct.Struct("<BBHIIIQ16s6I")
_CQE = struct.Struct("<IIHHHH")
_SGL = struct.Struct("<QI3xB")

# SGL descriptor type bytes (type << 4 | subtype)
SGL_DATA_BLOCK_OFFSET = 0x01  # in-capsule data (Data Block, address is an offset)
SGL_TRANSPORT_DATA_BLOCK = 0x5A  # data moved by the transport (R2T/H2CData, C2HData)


@dataclass
class Command:
    """A decoded SQE. ``raw`` keeps the 64 bytes so extensions can read any field."""

    opcode: int
    flags: int
    cid: int
    nsid: int
    cdw2: int
    cdw3: int
    mptr: int
    dptr: bytes
    cdw10: int
    cdw11: int
    cdw12: int
    cdw13: int
    cdw14: int
    cdw15: int
    raw: bytes = field(repr=False, default=b"")

    @classmethod
    def decode(cls, sqe: bytes | memoryview) -> Command:
        if len(sqe) != SQE_SIZE:
            raise ProtocolError(f"an SQE is {SQE_SIZE} bytes, got {len(sqe)}")
        raw = bytes(sqe)
        return cls(*_SQE.unpack(raw), raw=raw)

    def encode(self) -> bytes:
        return _SQE.pack(self.opcode, self.flags, self.cid, self.nsid, self.cdw2, self.cdw3, self.mptr,
                         self.dptr, self.cdw10, self.cdw11, self.cdw12, self.cdw13, self.cdw14, self.cdw15)

    @classmethod
    def build(cls, opcode: int, cid: int = 0, nsid: int = 0, *, flags: int = 0, cdw2: int = 0,
              cdw3: int = 0, dptr: bytes = bytes(16), cdws: dict[int, int] | None = None) -> Command:
        """A command with CDW10..15 given as ``{10: value, ...}``."""
        dw = [0] * 6
        for n, value in (cdws or {}).items():
            if 10 <= n <= 15:  # other keys are not command dwords 10..15 (ignored, as always)
                dw[n - 10] = value & 0xFFFFFFFF
        return cls(opcode, flags, cid, nsid, cdw2, cdw3, 0, bytes(dptr), *dw)

    @property
    def fuse(self) -> int:
        return self.flags & 0x3

    @property
    def psdt(self) -> int:
        return self.flags >> 6

    @property
    def prp1(self) -> int:
        return int.from_bytes(self.dptr[:8], "little")

    @property
    def prp2(self) -> int:
        return int.from_bytes(self.dptr[8:], "little")

    @property
    def sgl(self) -> tuple[int, int, int]:
        """(address, length, type byte) of SGL descriptor 1."""
        return _SGL.unpack(self.dptr)

    @property
    def slba(self) -> int:
        return self.cdw10 | (self.cdw11 << 32)

    @property
    def nlb(self) -> int:
        """Number of logical blocks, already made 1-based."""
        return (self.cdw12 & 0xFFFF) + 1

    def dword(self, n: int) -> int:
        """Command dword ``n`` (0..15) from the raw SQE."""
        raw = self.raw or self.encode()
        return int.from_bytes(raw[4 * n: 4 * n + 4], "little")


def sgl_descriptor(address: int, length: int, type_byte: int) -> bytes:
    return _SGL.pack(address, length, type_byte)


@dataclass
class Completion:
    """A CQE before the queue fills SQ head, SQ id and phase. ``status`` is the 15-bit field."""

    cid: int
    status: int = 0
    dw0: int = 0
    dw1: int = 0

    def encode(self, sqhd: int, sqid: int, phase: int) -> bytes:
        return _CQE.pack(self.dw0 & 0xFFFFFFFF, self.dw1 & 0xFFFFFFFF, sqhd, sqid, self.cid,
                         ((self.status & 0x7FFF) << 1) | (phase & 1))


@dataclass(frozen=True)
class Cqe:
    """A decoded CQE as a host sees it."""

    dw0: int
    dw1: int
    sqhd: int
    sqid: int
    cid: int
    phase: int
    status: int

    @classmethod
    def decode(cls, data: bytes | memoryview) -> Cqe:
        dw0, dw1, sqhd, sqid, cid, sf = _CQE.unpack(bytes(data[:16]))
        return cls(dw0, dw1, sqhd, sqid, cid, sf & 1, sf >> 1)

    @property
    def sc(self) -> int:
        return self.status & 0xFF

    @property
    def sct(self) -> int:
        return (self.status >> 8) & 0x7

    @property
    def dnr(self) -> bool:
        return bool(self.status & 0x4000)

    @property
    def more(self) -> bool:
        return bool(self.status & 0x2000)
