"""Vendor command set of the Alkali document (``nvme-commands.rst``) as data: opcodes, IDs and the
byte layouts of Accelerator Identify, Get Accelerator Status and the accelerator log page 0xC0.

`Flavor` holds the few field choices where the reference firmware (alkali-csd-fw) disagrees with the
document; ``Flavor.doc()`` is the default, ``Flavor.reference()`` is ``--compat reference``.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

# admin (vendor range C0h..FFh) and I/O (80h..FFh) opcodes; bits 1:0 give the data direction
ADMIN_GLOBAL_CONTROL = 0xC0
ADMIN_IDENTIFY = 0xC2
ADMIN_STATUS = 0xC6
LOG_ACCELERATOR = 0xC0
IO_SEND_DATA = 0x81
IO_READ_DATA = 0x82
IO_SEND_FIRMWARE = 0x85
IO_READ_FIRMWARE = 0x86
IO_STORAGE_INPUT = 0x88
IO_STORAGE_OUTPUT = 0x8C
IO_CONTROL = 0x91

SUBSYSTEM_LOG_ID = 0xFFFF  # LSI of the log that holds errors naming no existing accelerator
IDENTIFY_HEADER = 16
STATUS_HEADER = 32
STATUS_DESCRIPTOR = 32
LOG_HEADER = 16
LOG_ENTRY_HEADER = 16
FIRMWARE_SLOTS = 8


class GlobalOp(enum.IntEnum):
    ENABLE = 0
    DISABLE = 1


class ControlOp(enum.IntEnum):
    RESET = 0
    START = 1
    STOP = 2
    SET_ACTIVE_FIRMWARE = 3


class Capability(enum.IntEnum):
    FIRMWARE = 0  # data: largest firmware image in bytes (0 in the reference)
    INPUT_BUFFER = 1  # data: input buffer bytes
    OUTPUT_BUFFER = 2  # data: output buffer bytes
    VTA = 3  # npukit: the accelerator reports simulated VTA cycles (data: VTA clock in Hz)


class StatusId(enum.IntEnum):
    IDLE = 0
    RUNNING = 1
    DONE = 2
    FAIL = 3


class LogType(enum.IntEnum):
    INVALID_FIRMWARE_ID = 0
    INVALID_INPUT_BUFFER = 1
    INVALID_OUTPUT_BUFFER = 2
    ACCELERATOR_ERROR = 3
    FIRMWARE_MESSAGE = 4  # npukit: text the firmware printed with helper 1
    RUN_REPORT = 5  # npukit: end of a run: r0, output bytes, cycles and times with their tiers


class TierCode(enum.IntEnum):
    """Evidence tier of a number in a status descriptor (npukit.evidence.Tier as one byte)."""

    MEASURED = 0
    DERIVED = 1
    PROJECTED = 2


@dataclass(frozen=True)
class Flavor:
    """Per-field choice between the document and the reference firmware."""

    name: str = "doc"
    magic: bytes = b"WDC\0"
    control_accel_dword: int = 12  # Basic Accelerator Control: the reference reads the ID from CDW14
    status_descriptors: bool = True  # the reference always answers length 8 and no descriptors
    storage_unit: int = 512  # 0x88/0x8C LBA unit: the namespace's LBA (doc) or the RAM disk page (4096)
    storage_nlb_zero_based: bool = True  # doc: the Read command's layout; reference: a plain page count
    capabilities: tuple[int, ...] = field(default=(0, 1, 2, 3))

    @classmethod
    def doc(cls) -> Flavor:
        return cls()

    @classmethod
    def reference(cls) -> Flavor:
        return cls("reference", b"WDC0", 14, False, 4096, False, (0, 1, 2))


FLAVORS = {"doc": Flavor.doc, "reference": Flavor.reference}


# ---- Accelerator Identify ------------------------------------------------------------------------
@dataclass(frozen=True)
class AcceleratorInfo:
    accel_id: int
    capabilities: dict[int, int]  # capability id -> 64-bit data


def encode_identify(magic: bytes, accels: list[AcceleratorInfo]) -> bytes:
    body = b""
    for a in accels:
        caps = b"".join(struct.pack("<IIQ", cid, 0, value) for cid, value in a.capabilities.items())
        body += struct.pack("<IHH", 8 + len(caps), a.accel_id, 0) + caps
    return magic + struct.pack("<I8x", IDENTIFY_HEADER + len(body)) + body


def parse_identify(data: bytes) -> tuple[bytes, int, list[AcceleratorInfo]]:
    """(magic, total length, accelerators) of an Identify buffer (as long as its length field says)."""
    magic, total = data[:4], struct.unpack_from("<I", data, 4)[0]
    accels, pos = [], IDENTIFY_HEADER
    while pos + 8 <= min(total, len(data)):
        length, accel_id, _ = struct.unpack_from("<IHH", data, pos)
        if length < 8:
            break
        caps = {}
        for off in range(pos + 8, pos + length - 15, 16):
            cid, _r, value = struct.unpack_from("<IIQ", data, off)
            caps[cid] = value
        accels.append(AcceleratorInfo(accel_id, caps))
        pos += length
    return magic, total, accels


# ---- Get Accelerator Status -----------------------------------------------------------------------
@dataclass
class StatusReport:
    status: StatusId
    active_firmware: int = 0
    r0: int = 0
    instructions: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    vta_cycles: int = 0
    vta_tier: TierCode = TierCode.PROJECTED
    host_ns: int = 0  # host TFLite interpreter time (measured)
    run_ns: int = 0  # whole firmware run, wall clock (measured)
    length: int = 0


def encode_status(s: StatusReport, descriptors: bool) -> bytes:
    if not descriptors:  # the reference: length 8, no descriptors (it leaves the rest uninitialised)
        return struct.pack("<II24x", 8, s.status)
    d = [struct.pack("<IIQQ8x", Capability.FIRMWARE, s.active_firmware, s.r0, s.instructions),
         struct.pack("<I4xQ16x", Capability.INPUT_BUFFER, s.input_bytes),
         struct.pack("<I4xQ16x", Capability.OUTPUT_BUFFER, s.output_bytes),
         struct.pack("<IBB2xQQQ", Capability.VTA, s.vta_tier, TierCode.MEASURED, s.vta_cycles, s.host_ns,
                     s.run_ns)]
    body = b"".join(d)
    return struct.pack("<II24x", STATUS_HEADER + len(body), s.status) + body


def parse_status(data: bytes) -> StatusReport:
    length, sid = struct.unpack_from("<II", data, 0)
    rep = StatusReport(StatusId(sid) if sid in StatusId._value2member_map_ else sid, length=length)
    for pos in range(STATUS_HEADER, min(length, len(data)) - STATUS_DESCRIPTOR + 1, STATUS_DESCRIPTOR):
        cid = struct.unpack_from("<I", data, pos)[0]
        if cid == Capability.FIRMWARE:
            _, rep.active_firmware, rep.r0, rep.instructions = struct.unpack_from("<IIQQ", data, pos)
        elif cid == Capability.INPUT_BUFFER:
            rep.input_bytes = struct.unpack_from("<Q", data, pos + 8)[0]
        elif cid == Capability.OUTPUT_BUFFER:
            rep.output_bytes = struct.unpack_from("<Q", data, pos + 8)[0]
        elif cid == Capability.VTA:
            _, tier, _h, rep.vta_cycles, rep.host_ns, rep.run_ns = struct.unpack_from("<IBB2xQQQ", data, pos)
            rep.vta_tier = TierCode(tier)
    return rep


# ---- log page 0xC0 ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LogEntry:
    timestamp_us: int  # microseconds since the Unix epoch (the document leaves the unit open)
    type: int
    text: str = ""

    def encode(self) -> bytes:
        info = self.text.encode("utf-8", "replace") + b"\0"
        info += bytes(-len(info) % 4)
        return struct.pack("<IQI", LOG_ENTRY_HEADER + len(info), self.timestamp_us, self.type) + info


def encode_log(entries: list[LogEntry]) -> bytes:
    body = b"".join(e.encode() for e in entries)
    return struct.pack("<I12x", LOG_HEADER + len(body)) + body


def parse_log(data: bytes) -> list[LogEntry]:
    total = struct.unpack_from("<I", data, 0)[0]
    out, pos = [], LOG_HEADER
    while pos + LOG_ENTRY_HEADER <= min(total, len(data)):
        length, ts, typ = struct.unpack_from("<IQI", data, pos)
        if length < LOG_ENTRY_HEADER:
            break
        text = data[pos + LOG_ENTRY_HEADER: pos + length].split(b"\0", 1)[0].decode("utf-8", "replace")
        out.append(LogEntry(ts, typ, text))
        pos += length
    return out


def type_name(t: int) -> str:
    try:
        return LogType(t).name.lower()
    except ValueError:
        return f"type {t}"


# ---- argument list (Basic Accelerator Control, start) -------------------------------------------------
def encode_args(values: list[bytes]) -> bytes:
    """Entries ``0:3`` entry length in bytes (this header included), ``4:N`` value, padded to dwords."""
    out = b""
    for v in values:
        v = bytes(v) + bytes(-len(v) % 4)
        out += struct.pack("<I", 4 + len(v)) + v
    return out


def parse_args(data: bytes) -> list[bytes]:
    """The entries of an argument list; a zero length ends it (the rest is dword padding)."""
    values, pos = [], 0
    while pos + 4 <= len(data):
        length = struct.unpack_from("<I", data, pos)[0]
        if length == 0:
            break
        if length < 4 or pos + length > len(data):
            raise ValueError(f"argument entry at byte {pos} claims {length} bytes, {len(data) - pos} left")
        values.append(bytes(data[pos + 4: pos + length]))
        pos += length
    return values
