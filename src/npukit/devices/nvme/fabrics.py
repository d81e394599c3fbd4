"""NVMe over Fabrics commands (opcode 7Fh): Connect, Property Get/Set, Disconnect.

One :class:`FabricsQueue` per transport connection: Connect binds it to a controller (a new one with
a dynamic controller ID for the admin queue, an existing one for an I/O queue).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from npukit.devices.nvme.command import Command, Completion
from npukit.devices.nvme.controller import Controller
from npukit.devices.nvme.layout import connect_data_offset, field_offset
from npukit.devices.nvme.lifecycle import QueueEvent, QueueLifecycle, QueueState
from npukit.devices.nvme.regs import CAP_RESET
from npukit.devices.nvme.spec import FabricsType, NvmeError, Register, Status
from npukit.devices.nvme.subsystem import Subsystem

CONNECT_DATA_SIZE = 1024
MQES = CAP_RESET & 0xFFFF
DYNAMIC_CNTLID = 0xFFFF
KATO_MAX_MS = 3_600_000
# Connect CATTR (CDW11 bits 23:16) bit 2: the host asks for SQ flow control to be disabled on the queue
# (TP 8005; Linux sends it with ``nvme connect --disable-sqflow``). The target always agrees: the Connect
# response then carries SQHD FFFFh, every later CQE of the queue too (there is no head pointer to
# report), and a successful Read on an I/O queue may end with C2HData's SUCCESS flag instead of a
# CapsuleResp (NVMe/TCP 1.0, C2HData; readpath.py). Advertised as TREQ bit 2 in the discovery log.
CATTR_DISABLE_SQFLOW = 0x04
SQHD_DISABLED = 0xFFFF
# Connect Invalid Parameters: DW0 = IATTR (bit 16: 1 = in the data, 0 = in the SQE) | byte offset
_IN_DATA = 1 << 16
_OFF_CNTLID, _OFF_SUBNQN, _OFF_HOSTNQN = (connect_data_offset(name)
                                          for name in ("cntlid", "subnqn", "hostnqn"))
_OFF_QID, _OFF_SQSIZE = field_offset("connect.qid"), field_offset("connect.sqsize")

_PROPERTIES = {Register.CAP: 8, Register.VS: 4, Register.CC: 4, Register.CSTS: 4, Register.NSSR: 4}


@dataclass
class ConnectData:
    hostid: bytes
    cntlid: int
    subnqn: str
    hostnqn: str

    @classmethod
    def decode(cls, data: bytes | memoryview) -> ConnectData:
        data = bytes(data)
        cntlid = struct.unpack_from("<H", data, 16)[0]
        return cls(data[:16], cntlid, _cstr(data[256:512]), _cstr(data[512:768]))

    def encode(self) -> bytes:
        page = bytearray(CONNECT_DATA_SIZE)
        page[:16] = self.hostid[:16].ljust(16, b"\0")
        struct.pack_into("<H", page, 16, self.cntlid)
        page[256:256 + len(self.subnqn)] = self.subnqn.encode()[:255]
        page[512:512 + len(self.hostnqn)] = self.hostnqn.encode()[:255]
        return bytes(page)


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("ascii", "replace")


def fabrics_type(cmd: Command) -> int:
    return cmd.nsid & 0xFF  # FCTYPE is SQE byte 4, where other commands keep the NSID


def fabrics_data_in(cmd: Command) -> int:
    return CONNECT_DATA_SIZE if fabrics_type(cmd) == FabricsType.CONNECT else 0


class FabricsQueue:
    """The fabrics side of one queue (connection)."""

    def __init__(self, subsystems: dict[str, Subsystem], lifecycle: QueueLifecycle) -> None:
        self.subsystems = subsystems
        self.lifecycle = lifecycle  # owned by the transport connection; Connect/Disconnect advance it
        self.ctrl: Controller | None = None
        self.qid: int | None = None
        self.sqsize = 0
        self.hostid = b""
        self.sqflow_disabled = False  # Connect's CATTR asked for it (no SQ head pointer, C2HData SUCCESS)

    def handle(self, cmd: Command, data: memoryview) -> Completion:
        try:
            kind = fabrics_type(cmd)
            if kind == FabricsType.CONNECT:
                return self._connect(cmd, data)
            if self.ctrl is None:
                raise NvmeError(Status.COMMAND_SEQUENCE_ERROR, "the queue is not connected")
            self.ctrl.last_activity = time.monotonic()
            if kind == FabricsType.PROPERTY_GET and self.qid == 0:
                return self._property_get(cmd)
            if kind == FabricsType.PROPERTY_SET and self.qid == 0:
                return self._property_set(cmd)
            if kind == FabricsType.DISCONNECT:
                self.lifecycle.advance(QueueEvent.DISCONNECT)
                return Completion(cmd.cid)
            raise NvmeError(Status.INVALID_FIELD, f"fabrics command type {kind:#x}",
                            param_loc=field_offset("fctype"))
        except NvmeError as err:
            if self.ctrl is not None:
                return self.ctrl.error_completion(cmd, err, self.qid or 0)
            return Completion(cmd.cid, err.field, err.dw0)

    def _connect(self, cmd: Command, data: memoryview) -> Completion:
        if self.lifecycle.state is not QueueState.AWAIT_CONNECT:
            raise NvmeError(Status.COMMAND_SEQUENCE_ERROR, "the queue is already connected")
        recfmt, qid = cmd.cdw10 & 0xFFFF, cmd.cdw10 >> 16
        sqsize, kato = cmd.cdw11 & 0xFFFF, cmd.cdw12
        if recfmt != 0:
            raise NvmeError(Status.CONNECT_INCOMPATIBLE_FORMAT, f"record format {recfmt}")
        if len(data) < CONNECT_DATA_SIZE:
            raise NvmeError(Status.DATA_SGL_LENGTH_INVALID, "Connect data is 1024 bytes")
        info = ConnectData.decode(data)
        sub = self.subsystems.get(info.subnqn)
        if sub is None:
            raise NvmeError(Status.CONNECT_INVALID_PARAMETERS, f"unknown subsystem {info.subnqn!r}",
                            dw0=_IN_DATA | _OFF_SUBNQN)
        if not sub.host_allowed(info.hostnqn):
            raise NvmeError(Status.CONNECT_INVALID_HOST, f"host {info.hostnqn!r} is not allowed",
                            dw0=_IN_DATA | _OFF_HOSTNQN)
        if sqsize < 1 or sqsize > MQES or (qid and sqsize >= sub.max_queue_entries):
            raise NvmeError(Status.CONNECT_INVALID_PARAMETERS, f"SQSIZE {sqsize}", dw0=_OFF_SQSIZE)
        if qid == 0:
            ctrl = self._admin_connect(sub, info, kato)
        else:
            ctrl = self._io_connect(sub, info, qid)
        self.ctrl, self.qid, self.sqsize, self.hostid = ctrl, qid, sqsize, info.hostid
        self.sqflow_disabled = bool((cmd.cdw11 >> 16) & CATTR_DISABLE_SQFLOW)
        self.lifecycle.advance(QueueEvent.CONNECT)
        return Completion(cmd.cid, 0, ctrl.cntlid)

    def _admin_connect(self, sub: Subsystem, info: ConnectData, kato: int) -> Controller:
        if info.cntlid != DYNAMIC_CNTLID:
            raise NvmeError(Status.CONNECT_INVALID_PARAMETERS,
                            "only the dynamic controller model (CNTLID FFFFh)",
                            dw0=_IN_DATA | _OFF_CNTLID)
        if kato > KATO_MAX_MS:
            raise NvmeError(Status.KEEP_ALIVE_INVALID, f"KATO {kato} ms")
        ctrl = sub.new_controller(hostnqn=info.hostnqn)
        ctrl.hostid = info.hostid
        granularity = 100 * ctrl.identity().kato_granularity_100ms
        ctrl.features.kato_ms = -(-kato // granularity) * granularity
        return ctrl

    def _io_connect(self, sub: Subsystem, info: ConnectData, qid: int) -> Controller:
        ctrl = sub.controllers.get(info.cntlid)
        if ctrl is None or ctrl.hostnqn != info.hostnqn or ctrl.hostid != info.hostid:
            raise NvmeError(Status.CONNECT_INVALID_PARAMETERS, f"no controller {info.cntlid} for this host",
                            dw0=_IN_DATA | _OFF_CNTLID)
        if not ctrl.ready:
            raise NvmeError(Status.COMMAND_SEQUENCE_ERROR, "the controller is not enabled")
        allowed = ctrl.features.queues_allocated or ctrl.max_io_queues
        if qid > allowed or qid in ctrl.io_queues:
            raise NvmeError(Status.CONNECT_INVALID_PARAMETERS, f"QID {qid} (allocated {allowed})",
                            dw0=_OFF_QID)
        ctrl.io_queues.add(qid)
        return ctrl

    def _property_get(self, cmd: Command) -> Completion:
        offset, size = self._property(cmd)
        value = self.ctrl.regs.load64(offset) if size == 8 else self.ctrl.regs.load(offset)
        return Completion(cmd.cid, 0, value & 0xFFFFFFFF, value >> 32)

    def _property_set(self, cmd: Command) -> Completion:
        offset, _ = self._property(cmd)
        value = struct.unpack_from("<Q", cmd.raw, field_offset("property.value"))[0]
        if offset == Register.CC:
            self.ctrl.write_cc(value & 0xFFFFFFFF)
        elif offset != Register.NSSR:  # NSSR: subsystem reset is not supported (CAP.NSSRS=0), ignored
            raise NvmeError(Status.INVALID_FIELD, f"property {offset:#x} is read-only",
                            param_loc=field_offset("property.ofst"))
        return Completion(cmd.cid)

    def _property(self, cmd: Command) -> tuple[int, int]:
        attrib = cmd.raw[field_offset("property.attrib")] & 0x7
        size = 8 if attrib == 1 else 4
        if attrib > 1:
            raise NvmeError(Status.INVALID_FIELD, "property size", param_loc=field_offset("property.attrib"))
        offset = struct.unpack_from("<I", cmd.raw, field_offset("property.ofst"))[0]
        if _PROPERTIES.get(offset) != size:
            raise NvmeError(Status.INVALID_FIELD, f"property {offset:#x} of {size} bytes",
                            param_loc=field_offset("property.ofst"))
        return offset, size

    def release(self) -> None:
        """The connection is gone: an admin queue takes its controller with it."""
        if self.ctrl is None:
            return
        if self.qid == 0:
            self.ctrl.reset()
            self.ctrl.subsystem.remove_controller(self.ctrl.cntlid)
        else:
            self.ctrl.io_queues.discard(self.qid)
        self.ctrl = None
