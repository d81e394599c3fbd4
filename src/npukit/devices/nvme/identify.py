"""Identify data structures (NVMe 1.4 Identify Controller / Namespace) as field tables: one table builds the
4096-byte page on the device side and parses it on the host side. Field names are nvme-cli's JSON
keys, so ``npukit nvme id-ctrl --json`` and ``nvme id-ctrl -o json`` can be compared key by key.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from npukit.devices.nvme.spec import LBA_SIZE

IDENTIFY_SIZE = 4096

# (name, byte offset, kind): kind is a struct code for integers or "sN" for an N-byte ASCII string
CONTROLLER_FIELDS: list[tuple[str, int, str]] = [
    ("vid", 0, "H"), ("ssvid", 2, "H"), ("sn", 4, "s20"), ("mn", 24, "s40"), ("fr", 64, "s8"),
    ("rab", 72, "B"), ("ieee", 73, "u24"), ("cmic", 76, "B"), ("mdts", 77, "B"), ("cntlid", 78, "H"),
    ("ver", 80, "I"), ("rtd3r", 84, "I"), ("rtd3e", 88, "I"), ("oaes", 92, "I"), ("ctratt", 96, "I"),
    ("rrls", 100, "H"), ("cntrltype", 111, "B"),
    ("oacs", 256, "H"), ("acl", 258, "B"), ("aerl", 259, "B"), ("frmw", 260, "B"), ("lpa", 261, "B"),
    ("elpe", 262, "B"), ("npss", 263, "B"), ("avscc", 264, "B"), ("apsta", 265, "B"),
    ("wctemp", 266, "H"), ("cctemp", 268, "H"), ("mtfa", 270, "H"), ("fwug", 319, "B"), ("kas", 320, "H"),
    ("sqes", 512, "B"), ("cqes", 513, "B"), ("maxcmd", 514, "H"), ("nn", 516, "I"), ("oncs", 520, "H"),
    ("fuses", 522, "H"), ("fna", 524, "B"), ("vwc", 525, "B"), ("awun", 526, "H"), ("awupf", 528, "H"),
    ("nvscc", 530, "B"), ("nwpc", 531, "B"), ("acwu", 532, "H"), ("sgls", 536, "I"), ("mnan", 540, "I"),
    ("subnqn", 768, "s256"),
    ("ioccsz", 1792, "I"), ("iorcsz", 1796, "I"), ("icdoff", 1800, "H"), ("fcatt", 1802, "B"),
    ("msdbd", 1803, "B"), ("ofcs", 1804, "H"),
    ("ps0_max_power", 2048, "H"),
]

NAMESPACE_FIELDS: list[tuple[str, int, str]] = [
    ("nsze", 0, "Q"), ("ncap", 8, "Q"), ("nuse", 16, "Q"), ("nsfeat", 24, "B"), ("nlbaf", 25, "B"),
    ("flbas", 26, "B"), ("mc", 27, "B"), ("dpc", 28, "B"), ("dps", 29, "B"), ("nmic", 30, "B"),
    ("rescap", 31, "B"), ("fpi", 32, "B"), ("dlfeat", 33, "B"), ("nawun", 34, "H"), ("nawupf", 36, "H"),
    ("nacwu", 38, "H"), ("nabsn", 40, "H"), ("nabo", 42, "H"), ("nabspf", 44, "H"), ("noiob", 46, "H"),
    ("anagrpid", 92, "I"), ("nsattr", 99, "B"), ("nvmsetid", 100, "H"), ("endgid", 102, "H"),
    ("nguid", 104, "hex16"), ("eui64", 120, "hex8"), ("lbaf0", 128, "I"),
]


def pack_fields(fields: list[tuple[str, int, str]], values: dict[str, object],
                size: int = IDENTIFY_SIZE) -> bytes:
    page = bytearray(size)
    for name, offset, kind in fields:
        if name not in values:
            continue
        value = values[name]
        if kind.startswith("s"):
            n = int(kind[1:])
            text = str(value).encode("ascii")[:n]
            # SN/MN/FR are space padded (NVMe ASCII string fields); NQNs are NUL terminated
            page[offset:offset + n] = text.ljust(n, b"\0" if name == "subnqn" else b" ")
        elif kind.startswith("hex"):
            n = int(kind[3:])
            page[offset:offset + n] = bytes.fromhex(str(value))[:n].ljust(n, b"\0")
        elif kind == "u24":
            page[offset:offset + 3] = int(value).to_bytes(3, "little")
        else:
            struct.pack_into("<" + kind, page, offset, int(value))
    return bytes(page)


def unpack_fields(fields: list[tuple[str, int, str]], page: bytes | memoryview) -> dict[str, object]:
    page = bytes(page)
    out: dict[str, object] = {}
    for name, offset, kind in fields:
        if kind.startswith("s"):
            n = int(kind[1:])
            out[name] = page[offset:offset + n].split(b"\0", 1)[0].decode("ascii", "replace").rstrip()
        elif kind.startswith("hex"):
            out[name] = page[offset:offset + int(kind[3:])].hex()
        elif kind == "u24":
            out[name] = int.from_bytes(page[offset:offset + 3], "little")
        else:
            out[name] = struct.unpack_from("<" + kind, page, offset)[0]
    return out


@dataclass
class ControllerIdentity:
    """What varies between controllers of one subsystem; the rest is fixed in ``controller_values``."""

    cntlid: int
    subnqn: str
    firmware_revision: str
    discovery: bool = False
    fabrics: bool = True
    io_queues: int = 4
    max_queue_entries: int = 128
    mdts: int = 5
    in_capsule_bytes: int = 8192
    kato_granularity_100ms: int = 10
    admin_opcodes: frozenset[int] = frozenset()  # what the registry serves: OACS follows from it
    log_pages: frozenset[int] = frozenset()
    serial: str = "0123456789"
    model: str = "DEADBEEF"


ALKALI_VID = 0x1B96
ALKALI_OUI = 0x0090A9  # 00-90-A9, stored least significant byte first
NVME_1_4 = 0x00010400
OACS_FIRMWARE = 1 << 2
# Optional Admin Command Support bits and the opcodes each stands for (NVMe 1.4, Figure 247)
OACS_OPCODES: dict[int, tuple[int, ...]] = {
    1 << 0: (0x81, 0x82),  # Security Send / Receive
    1 << 1: (0x80,),  # Format NVM
    OACS_FIRMWARE: (0x10, 0x11),  # Firmware Commit / Image Download
    1 << 3: (0x0D,),  # Namespace Management
    1 << 4: (0x14,),  # Device Self-test
    1 << 5: (0x19, 0x1A),  # Directive Send / Receive
    1 << 6: (0x1D, 0x1E),  # NVMe-MI Send / Receive
    1 << 7: (0x1C,),  # Virtualization Management
    1 << 8: (0x7C,),  # Doorbell Buffer Config
}
LPA_EFFECTS_LOG = 1 << 1
ONCS_COMPARE, ONCS_DSM, ONCS_WRITE_ZEROES = 1 << 0, 1 << 2, 1 << 3
LPA_EXTENDED_DATA = 1 << 2
OAES_FW_ACTIVATION = 1 << 9
CTRATT_TBKAS = 1 << 6
FRMW = (1 << 4) | (3 << 1) | 1  # activation without reset, 3 slots, slot 1 read-only
SGLS_TCP = (1 << 0) | (1 << 20)  # SGLs supported, address may be an offset (in-capsule data)


def controller_values(ident: ControllerIdentity) -> dict[str, object]:
    values: dict[str, object] = {
        "vid": ALKALI_VID, "ssvid": ALKALI_VID, "sn": ident.serial, "mn": ident.model,
        "fr": ident.firmware_revision, "rab": 0, "ieee": ALKALI_OUI, "cmic": 0x2, "mdts": ident.mdts,
        "cntlid": ident.cntlid, "ver": NVME_1_4, "oaes": OAES_FW_ACTIVATION, "ctratt": CTRATT_TBKAS,
        "cntrltype": 2 if ident.discovery else 1,
        "oacs": 0 if ident.discovery else optional_admin_support(ident.admin_opcodes), "acl": 3, "aerl": 3,
        "frmw": 0 if ident.discovery else FRMW, "lpa": log_page_attributes(ident), "elpe": 63, "npss": 0,
        "avscc": 1, "wctemp": 0x157, "cctemp": 0x300, "fwug": 0xFF, "kas": ident.kato_granularity_100ms,
        "sqes": 0x66, "cqes": 0x44, "maxcmd": ident.max_queue_entries,
        "nn": 0 if ident.discovery else 1,
        "oncs": 0 if ident.discovery else ONCS_COMPARE | ONCS_DSM | ONCS_WRITE_ZEROES,
        "fna": 0, "vwc": 0 if ident.discovery else 0x7, "awun": 0xFFFF, "awupf": 0, "nvscc": 1,
        "sgls": SGLS_TCP if ident.fabrics else 0, "subnqn": ident.subnqn, "ps0_max_power": 2500,
    }
    if ident.fabrics:
        values |= {"ioccsz": (64 + ident.in_capsule_bytes) // 16, "iorcsz": 1, "icdoff": 0, "fcatt": 0,
                   "msdbd": 1}
    return values


def optional_admin_support(admin_opcodes: frozenset[int]) -> int:
    """OACS: a bit is set when every opcode it stands for has a handler."""
    return sum(bit for bit, ops in OACS_OPCODES.items() if all(op in admin_opcodes for op in ops))


def log_page_attributes(ident: ControllerIdentity) -> int:
    effects = 0x05 in ident.log_pages and not ident.discovery
    return LPA_EXTENDED_DATA | (LPA_EFFECTS_LOG if effects else 0)


def controller_page(ident: ControllerIdentity) -> bytes:
    return pack_fields(CONTROLLER_FIELDS, controller_values(ident))


def namespace_uuid(subnqn: str, nsid: int) -> uuid.UUID:
    """A stable UUID for a namespace (same NQN and NSID → same UUID across restarts)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"{subnqn}/ns/{nsid}")


def namespace_page(blocks: int, subnqn: str, nsid: int) -> bytes:
    lbads = LBA_SIZE.bit_length() - 1
    values = {"nsze": blocks, "ncap": blocks, "nuse": blocks, "nsfeat": 0, "nlbaf": 0, "flbas": 0,
              "nmic": 1, "dlfeat": 0x09, "anagrpid": 0, "nguid": namespace_uuid(subnqn, nsid).hex,
              "lbaf0": lbads << 16}
    return pack_fields(NAMESPACE_FIELDS, values)


def namespace_descriptors(subnqn: str, nsid: int) -> bytes:
    ident = namespace_uuid(subnqn, nsid).bytes
    page = bytearray(IDENTIFY_SIZE)
    page[0:4] = bytes([0x02, 16, 0, 0])  # NIDT 2: NGUID
    page[4:20] = ident
    page[20:24] = bytes([0x03, 16, 0, 0])  # NIDT 3: UUID
    page[24:40] = ident
    return bytes(page)


def active_namespace_list(nsids: list[int], after: int) -> bytes:
    page = bytearray(IDENTIFY_SIZE)
    listed = [n for n in sorted(nsids) if n > after][:IDENTIFY_SIZE // 4]
    for i, nsid in enumerate(listed):
        struct.pack_into("<I", page, 4 * i, nsid)
    return bytes(page)


def cs_independent_namespace(nsid_active: bool) -> bytes:
    """CNS 08h (NVMe 2.0): NMIC 1 shared, NSTAT bit 0 ready."""
    page = bytearray(IDENTIFY_SIZE)
    if nsid_active:
        page[1] = 1
        page[14] = 1
    return bytes(page)
