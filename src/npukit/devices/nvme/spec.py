"""NVMe constants from the base specification 1.4 and NVMe over Fabrics / TCP transport 1.0.

Status values are ``SCT << 8 | SC`` (the 11 low bits of the CQE status field without the phase tag);
``DNR`` and ``MORE`` are added when a completion is encoded.
"""

from __future__ import annotations

import enum

from npukit.errors import NpukitError

LBA_SIZE = 512
PAGE_SIZE = 4096
SQE_SIZE = 64
CQE_SIZE = 16
NSID_ALL = 0xFFFFFFFF
DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"
DEFAULT_IO_PORT = 4420
DEFAULT_DISCOVERY_PORT = 8009

# Status field bits in the 15-bit form (without phase): SC 7:0, SCT 10:8, CRD 12:11, M 13, DNR 14
STATUS_MORE = 0x2000
STATUS_DNR = 0x4000


class Sct(enum.IntEnum):
    GENERIC = 0
    COMMAND_SPECIFIC = 1
    MEDIA = 2
    PATH = 3
    VENDOR = 7


class Status(enum.IntEnum):
    """Status code type and code, ``SCT << 8 | SC``."""

    SUCCESS = 0x000
    INVALID_OPCODE = 0x001
    INVALID_FIELD = 0x002
    CID_CONFLICT = 0x003
    DATA_TRANSFER_ERROR = 0x004
    INTERNAL_ERROR = 0x006
    ABORT_REQUESTED = 0x007
    ABORTED_SQ_DELETION = 0x008
    INVALID_NAMESPACE = 0x00B
    COMMAND_SEQUENCE_ERROR = 0x00C
    DATA_SGL_LENGTH_INVALID = 0x00F
    SGL_DESCRIPTOR_TYPE_INVALID = 0x011
    PRP_OFFSET_INVALID = 0x013
    SGL_OFFSET_INVALID = 0x016
    KEEP_ALIVE_EXPIRED = 0x019
    KEEP_ALIVE_INVALID = 0x01A
    TRANSIENT_TRANSPORT_ERROR = 0x022
    LBA_OUT_OF_RANGE = 0x080
    CAPACITY_EXCEEDED = 0x081
    # command specific (SCT 1)
    COMPLETION_QUEUE_INVALID = 0x100
    INVALID_QUEUE_IDENTIFIER = 0x101
    INVALID_QUEUE_SIZE = 0x102
    ABORT_LIMIT_EXCEEDED = 0x103
    AER_LIMIT_EXCEEDED = 0x105
    INVALID_FIRMWARE_SLOT = 0x106
    INVALID_FIRMWARE_IMAGE = 0x107
    INVALID_INTERRUPT_VECTOR = 0x108
    INVALID_LOG_PAGE = 0x109
    FW_NEEDS_CONVENTIONAL_RESET = 0x10B
    INVALID_QUEUE_DELETION = 0x10C
    FEATURE_NOT_SAVEABLE = 0x10D
    OVERLAPPING_RANGE = 0x114
    CONNECT_INCOMPATIBLE_FORMAT = 0x180
    CONNECT_CONTROLLER_BUSY = 0x181
    CONNECT_INVALID_PARAMETERS = 0x182
    CONNECT_INVALID_HOST = 0x184
    # media and data integrity (SCT 2)
    COMPARE_FAILURE = 0x285

    @property
    def sct(self) -> int:
        return self.value >> 8

    @property
    def sc(self) -> int:
        return self.value & 0xFF


def status_name(value: int) -> str:
    """Name of a 15-bit status field (DNR/MORE ignored), or its hex value."""
    try:
        return Status(value & 0x7FF).name
    except ValueError:
        return f"SCT{(value >> 8) & 7}/SC0x{value & 0xFF:02X}"


class NvmeError(NpukitError):
    """A command that completes with a non-success status (raised by handlers, turned into a CQE)."""

    def __init__(self, status: Status, reason: str = "", *, dnr: bool = True, dw0: int = 0,
                 lba: int = 0, param_loc: int = 0xFFFF) -> None:
        self.status = status
        self.dnr = dnr
        self.dw0 = dw0
        self.lba = lba
        self.param_loc = param_loc
        super().__init__(f"{status.name}{': ' + reason if reason else ''}")

    @property
    def field(self) -> int:
        """The 15-bit status field (SC, SCT, DNR)."""
        return int(self.status) | (STATUS_DNR if self.dnr else 0)


class ProtocolError(NpukitError):
    """A transport-level failure (malformed PDU, lost connection, bad response)."""


class AdminOpcode(enum.IntEnum):
    DELETE_IO_SQ = 0x00
    CREATE_IO_SQ = 0x01
    GET_LOG_PAGE = 0x02
    DELETE_IO_CQ = 0x04
    CREATE_IO_CQ = 0x05
    IDENTIFY = 0x06
    ABORT = 0x08
    SET_FEATURES = 0x09
    GET_FEATURES = 0x0A
    ASYNC_EVENT_REQUEST = 0x0C
    FIRMWARE_COMMIT = 0x10
    FIRMWARE_DOWNLOAD = 0x11
    KEEP_ALIVE = 0x18
    FABRICS = 0x7F


class IoOpcode(enum.IntEnum):
    FLUSH = 0x00
    WRITE = 0x01
    READ = 0x02
    COMPARE = 0x05
    WRITE_ZEROES = 0x08
    DATASET_MANAGEMENT = 0x09


class FabricsType(enum.IntEnum):
    PROPERTY_SET = 0x00
    CONNECT = 0x01
    PROPERTY_GET = 0x04
    DISCONNECT = 0x08


class LogPage(enum.IntEnum):
    ERROR = 0x01
    SMART = 0x02
    FIRMWARE_SLOT = 0x03
    COMMANDS_EFFECTS = 0x05
    DISCOVERY = 0x70


class Feature(enum.IntEnum):
    TEMPERATURE_THRESHOLD = 0x04
    VOLATILE_WRITE_CACHE = 0x06
    NUMBER_OF_QUEUES = 0x07
    ASYNC_EVENT_CONFIG = 0x0B
    KEEP_ALIVE_TIMER = 0x0F


class Cns(enum.IntEnum):
    NAMESPACE = 0x00
    CONTROLLER = 0x01
    ACTIVE_NS_LIST = 0x02
    NS_DESCRIPTORS = 0x03
    CS_NAMESPACE = 0x05
    CS_CONTROLLER = 0x06
    CS_INDEPENDENT_NS = 0x08


class Register(enum.IntEnum):
    """Controller register offsets (BAR0 / fabrics property offsets)."""

    CAP = 0x00
    VS = 0x08
    INTMS = 0x0C
    INTMC = 0x10
    CC = 0x14
    CSTS = 0x1C
    NSSR = 0x20
    AQA = 0x24
    ASQ = 0x28
    ACQ = 0x30
    DOORBELL_BASE = 0x1000
    IRQ_STATUS = 0x1028
    IRQ_DATA = 0x102C
    IRQ_HOST = 0x1030


# Asynchronous event types / information (CQE DW0 of an AER completion)
AEN_TYPE_SMART = 0x1
AEN_TYPE_NOTICE = 0x2
AEN_INFO_TEMPERATURE = 0x01
AEN_INFO_FW_ACTIVATION = 0x01
