"""Log pages: error information (01h), SMART / health (02h), firmware slots (03h), discovery (70h)."""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass

from npukit.devices.nvme.state import FIRMWARE_SLOTS, Counters, Firmware

ERROR_ENTRY_SIZE = 64
SMART_SIZE = 512
FW_SLOT_SIZE = 512
DISCOVERY_HEADER_SIZE = 1024
DISCOVERY_ENTRY_SIZE = 1024
TRTYPE_TCP = 3
ADRFAM_IPV4 = 1
SUBTYPE_NVM = 2
TREQ_NOT_REQUIRED = 0x2  # bits 1:0: a secure channel is not required
TREQ_SQFLOW_DISABLE = 0x4  # bit 2: the controller supports disabling SQ flow control (Connect CATTR bit 2)


@dataclass
class ErrorEntry:
    count: int
    sqid: int
    cid: int
    status: int
    param_loc: int
    lba: int
    nsid: int

    def encode(self) -> bytes:
        page = bytearray(ERROR_ENTRY_SIZE)
        struct.pack_into("<QHHHHQI", page, 0, self.count, self.sqid, self.cid, (self.status & 0x7FFF) << 1,
                         self.param_loc, self.lba, self.nsid)
        page[29] = TRTYPE_TCP
        return bytes(page)


class ErrorLog:
    """The newest ``capacity`` error entries (ELPE + 1); the page lists the newest first."""

    def __init__(self, capacity: int = 64) -> None:
        self.entries: deque[ErrorEntry] = deque(maxlen=capacity)
        self.capacity = capacity

    def page(self) -> bytes:
        body = b"".join(e.encode() for e in reversed(self.entries))
        return body.ljust(self.capacity * ERROR_ENTRY_SIZE, b"\0")


def _u128(value: int) -> bytes:
    return int(value).to_bytes(16, "little")


def smart_page(counters: Counters, power_on_hours: int, temperature_k: int,
               critical_warning: int) -> bytes:
    page = bytearray(SMART_SIZE)
    page[0] = critical_warning
    struct.pack_into("<H", page, 1, temperature_k)
    page[3] = 100  # available spare %
    page[4] = 5  # available spare threshold % (Alkali firmware's value)
    page[5] = 0  # percentage used
    # data units are thousands of 512-byte units, rounded up (NVMe 1.4 SMART / Health log)
    page[32:48] = _u128(-(-counters.data_units_read // 1000))
    page[48:64] = _u128(-(-counters.data_units_written // 1000))
    page[64:80] = _u128(counters.host_read_commands)
    page[80:96] = _u128(counters.host_write_commands)
    page[96:112] = _u128(counters.controller_busy_ns // 60_000_000_000)
    page[112:128] = _u128(counters.power_cycles)
    page[128:144] = _u128(power_on_hours)
    page[144:160] = _u128(counters.unsafe_shutdowns)
    page[160:176] = _u128(counters.media_errors)
    page[176:192] = _u128(counters.error_log_entries)
    struct.pack_into("<H", page, 200, temperature_k)  # temperature sensor 1
    return bytes(page)


def firmware_slot_page(fw: Firmware) -> bytes:
    page = bytearray(FW_SLOT_SIZE)
    page[0] = (fw.active_slot & 0x7) | ((fw.next_slot & 0x7) << 4)
    for slot in range(1, FIRMWARE_SLOTS + 1):
        rev = fw.revisions.get(slot)
        if rev:
            page[8 * slot: 8 * slot + 8] = rev.encode("ascii")[:8].ljust(8, b" ")
    return bytes(page)


@dataclass(frozen=True)
class DiscoveryEntry:
    subnqn: str
    traddr: str
    trsvcid: str
    portid: int = 1
    asqsz: int = 32


def discovery_page(entries: list[DiscoveryEntry], genctr: int) -> bytes:
    page = bytearray(DISCOVERY_HEADER_SIZE + DISCOVERY_ENTRY_SIZE * len(entries))
    struct.pack_into("<QQH", page, 0, genctr, len(entries), 0)
    for i, e in enumerate(entries):
        base = DISCOVERY_HEADER_SIZE + i * DISCOVERY_ENTRY_SIZE
        struct.pack_into("<BBBBHHH", page, base, TRTYPE_TCP, ADRFAM_IPV4, SUBTYPE_NVM,
                         TREQ_NOT_REQUIRED | TREQ_SQFLOW_DISABLE,
                         e.portid, 0xFFFF, e.asqsz)
        page[base + 32: base + 64] = e.trsvcid.encode("ascii")[:32].ljust(32, b" ")
        page[base + 256: base + 512] = e.subnqn.encode("ascii")[:256].ljust(256, b"\0")
        page[base + 512: base + 768] = e.traddr.encode("ascii")[:256].ljust(256, b" ")
        # TSAS for TCP: SECTYPE 0 (no security)
    return bytes(page)


def parse_discovery(page: bytes) -> dict:
    genctr, numrec, recfmt = struct.unpack_from("<QQH", page, 0)
    records = []
    for i in range(numrec):
        base = DISCOVERY_HEADER_SIZE + i * DISCOVERY_ENTRY_SIZE
        if base + DISCOVERY_ENTRY_SIZE > len(page):
            break
        trtype, adrfam, subtype, treq, portid, cntlid, asqsz = struct.unpack_from("<BBBBHHH", page, base)
        records.append({
            "trtype": trtype, "adrfam": adrfam, "subtype": subtype, "treq": treq, "portid": portid,
            "cntlid": cntlid, "asqsz": asqsz,
            "trsvcid": page[base + 32: base + 64].decode("ascii", "replace").strip(" \0"),
            "subnqn": page[base + 256: base + 512].split(b"\0", 1)[0].decode("ascii", "replace"),
            "traddr": page[base + 512: base + 768].decode("ascii", "replace").strip(" \0"),
        })
    return {"genctr": genctr, "numrec": numrec, "recfmt": recfmt, "records": records}


SMART_FIELDS = [
    ("critical_warning", 0, 1), ("temperature", 1, 2), ("avail_spare", 3, 1), ("spare_thresh", 4, 1),
    ("percent_used", 5, 1), ("data_units_read", 32, 16), ("data_units_written", 48, 16),
    ("host_read_commands", 64, 16), ("host_write_commands", 80, 16), ("controller_busy_time", 96, 16),
    ("power_cycles", 112, 16), ("power_on_hours", 128, 16), ("unsafe_shutdowns", 144, 16),
    ("media_errors", 160, 16), ("num_err_log_entries", 176, 16),
]


def parse_smart(page: bytes) -> dict[str, int]:
    """SMART fields under nvme-cli's JSON names."""
    return {name: int.from_bytes(page[off: off + n], "little") for name, off, n in SMART_FIELDS}


def parse_firmware_slots(page: bytes) -> dict[str, object]:
    out: dict[str, object] = {"afi": page[0], "active_slot": page[0] & 0x7, "next_slot": (page[0] >> 4) & 0x7}
    for slot in range(1, 8):
        rev = page[8 * slot: 8 * slot + 8]
        if any(rev):
            out[f"frs{slot}"] = rev.decode("ascii", "replace").strip(" \0")
    return out
