"""Where each field of a submission queue entry lives, for error locations by name.

The Error Information log's Parameter Error Location names the byte of the SQE (or, for Connect,
of the command or its data) that was wrong. Handlers say which *field* was wrong, ``field_offset``
turns the name into the byte offset: the SQE's common fields are laid out from their sizes (NVMe
base specification 1.4, Figure 105), command-specific fields are a dword and a byte within it
(the figures of each command), so no offset is written as a bare number anywhere else.
"""

from __future__ import annotations

from npukit.devices.nvme.spec import SQE_SIZE

# The common SQE fields in order with their sizes in bytes; offsets follow from the sizes.
_SQE_FIELD_SIZES: tuple[tuple[str, int], ...] = (
    ("opcode", 1), ("flags", 1), ("cid", 2), ("nsid", 4), ("cdw2", 4), ("cdw3", 4),
    ("mptr", 8), ("dptr", 16),
    ("cdw10", 4), ("cdw11", 4), ("cdw12", 4), ("cdw13", 4), ("cdw14", 4), ("cdw15", 4),
)


def _offsets(sizes: tuple[tuple[str, int], ...]) -> dict[str, int]:
    table, at = {}, 0
    for name, size in sizes:
        table[name] = at
        at += size
    if at != SQE_SIZE:  # a wrong size above would shift every later field
        raise AssertionError(f"the SQE layout adds up to {at} bytes, not {SQE_SIZE}")
    return table


SQE_FIELDS: dict[str, int] = _offsets(_SQE_FIELD_SIZES)

# Command-specific fields: (the SQE field that holds it, byte within that field).
COMMAND_FIELDS: dict[str, tuple[str, int]] = {
    # flags byte: FUSE bits 1:0, PSDT bits 7:6
    "fuse": ("flags", 0),
    "psdt": ("flags", 0),
    # Fabrics commands keep FCTYPE where other commands keep the NSID
    "fctype": ("nsid", 0),
    # Identify: CNS in CDW10 7:0, CSI in CDW11 31:24
    "identify.cns": ("cdw10", 0),
    "identify.csi": ("cdw11", 3),
    # Get Log Page: LID in CDW10 7:0, LPOL in CDW12
    "get_log.lid": ("cdw10", 0),
    "get_log.lpo": ("cdw12", 0),
    # Set/Get Features: FID CDW10 7:0, SEL CDW10 10:8, SV CDW10 31, value in CDW11
    "features.fid": ("cdw10", 0),
    "features.sel": ("cdw10", 1),
    "features.sv": ("cdw10", 3),
    "features.nsqr": ("cdw11", 0),
    "features.tmpsel": ("cdw11", 2),
    # Abort: SQID CDW10 15:0
    "abort.sqid": ("cdw10", 0),
    # Firmware Commit: FS/CA/BPID in CDW10
    "fw_commit.ca": ("cdw10", 0),
    # Create/Delete I/O queues: QID CDW10 15:0, QSIZE CDW10 31:16, PC CDW11 bit 0,
    # CQID (Create SQ) / IV (Create CQ) CDW11 31:16
    "queue.qid": ("cdw10", 0),
    "queue.qsize": ("cdw10", 2),
    "queue.pc": ("cdw11", 0),
    "queue.cqid": ("cdw11", 2),
    "queue.iv": ("cdw11", 2),
    # Read/Write/Compare...: SLBA CDW10-11
    "io.slba": ("cdw10", 0),
    # Property Get/Set: ATTRIB byte 40, OFST byte 44, VALUE bytes 48-55
    "property.attrib": ("cdw10", 0),
    "property.ofst": ("cdw11", 0),
    "property.value": ("cdw12", 0),
    # Connect: RECFMT CDW10 15:0, QID CDW10 31:16, SQSIZE CDW11 15:0
    "connect.recfmt": ("cdw10", 0),
    "connect.qid": ("cdw10", 2),
    "connect.sqsize": ("cdw11", 0),
    # Alkali vendor commands (docs/devices/alkali.md): dword count CDW10, dword offset CDW11,
    # accelerator ID / global operation / storage SLBA CDW12, firmware ID / control op CDW13, storage
    # NLB CDW14, the upload's verification mode CDW15. (Control's firmware ID is in CDW14, but its
    # slot errors have always been reported at CDW13: kept, the error log is pinned bit for bit.)
    "alkali.numd": ("cdw10", 0),
    "alkali.offset": ("cdw11", 0),
    "alkali.slba": ("cdw12", 0),
    "alkali.control_op": ("cdw13", 0),
    "alkali.nlb": ("cdw14", 0),
    "alkali.accel_id": ("cdw12", 0),
    "alkali.operation": ("cdw12", 0),
    "alkali.fw_id": ("cdw13", 0),
    "alkali.fw_check": ("cdw15", 0),
}

# Connect command data (1024 bytes, NVMe over Fabrics 1.1 Figure 20): HOSTID, CNTLID, SUBNQN, HOSTNQN
CONNECT_DATA_FIELDS: dict[str, int] = {"hostid": 0, "cntlid": 16, "subnqn": 256, "hostnqn": 512}


def field_offset(name: str) -> int:
    """Byte offset in the SQE of a common field (``"cdw10"``) or a command field (``"queue.qsize"``)."""
    if name in SQE_FIELDS:
        return SQE_FIELDS[name]
    holder, byte = COMMAND_FIELDS[name]
    return SQE_FIELDS[holder] + byte


def connect_data_offset(name: str) -> int:
    """Byte offset of a field in the Connect command's data."""
    return CONNECT_DATA_FIELDS[name]
