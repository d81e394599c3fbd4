"""The NVMe controller core, independent of the transport.

A transport decodes an SQE, asks :meth:`Controller.prepare` how many bytes move in each direction,
gathers the host's data, then calls :meth:`Controller.execute`, which runs the registered handler
and returns the completion plus exactly the number of bytes the host buffer expects. Handlers raise
``NvmeError``; any other exception becomes Internal Error and never leaves ``execute``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from npukit.devices.nvme.command import Command, Completion
from npukit.devices.nvme.identify import ControllerIdentity
from npukit.devices.nvme.layout import field_offset
from npukit.devices.nvme.logs import ErrorEntry, ErrorLog
from npukit.devices.nvme.registry import DEFERRED, CommandSpec, QueueKind, Request, Result, transfer_lengths
from npukit.devices.nvme.regs import (
    CC_EN,
    CSTS_CFS,
    CSTS_RDY,
    SHST_COMPLETE,
    RegisterFile,
    cc_fields,
)
from npukit.devices.nvme.spec import NvmeError, Register, Status

if TYPE_CHECKING:
    from npukit.devices.nvme.subsystem import Subsystem

log = logging.getLogger("npukit.nvme")

DEFAULT_TEMP_OVER = 0x157  # WCTEMP, 343 K
IO_OPCODES_READ = {0x02, 0x05}
IO_OPCODE_WRITE = 0x01


class QueueManager(Protocol):
    """Queue creation/deletion for transports with host-created queues (the PCIe model)."""

    def create_cq(self, qid: int, size: int, base: int, contiguous: bool, ien: bool, vector: int) -> None: ...
    def create_sq(self, qid: int, size: int, base: int, contiguous: bool, cqid: int) -> None: ...
    def delete_sq(self, qid: int) -> None: ...
    def delete_cq(self, qid: int) -> None: ...


@dataclass
class Features:
    temp_over: int = DEFAULT_TEMP_OVER
    temp_under: int = 0
    queues_allocated: int | None = None  # 1-based count of I/O SQs (= CQs) granted, None until set
    aen_config: int = 0
    kato_ms: int = 0


@dataclass
class AsyncEvents:
    pending: deque[Request] = field(default_factory=deque)
    queued: deque[int] = field(default_factory=deque)
    masked_types: set[int] = field(default_factory=set)


class Controller:
    def __init__(self, subsystem: Subsystem, cntlid: int, *, fabrics: bool = True, discovery: bool = False,
                 hostnqn: str = "", queue_manager: QueueManager | None = None,
                 on_host_interrupt: Callable[[int], None] | None = None) -> None:
        self.subsystem = subsystem
        self.cntlid = cntlid
        self.fabrics = fabrics
        self.discovery = discovery
        self.hostnqn = hostnqn
        self.hostid = b""
        self.queue_manager = queue_manager
        self.regs = RegisterFile(on_host_interrupt)
        self.features = Features()
        self.events = AsyncEvents()
        self.error_log = ErrorLog(64)
        self.error_count = 0
        self.io_queues: set[int] = set()
        self.last_activity = time.monotonic()
        self.on_reset: list[Callable[[], None]] = []
        self.on_enable: list[Callable[[], None]] = []
        self.max_io_queues = subsystem.max_io_queues
        self._cc = 0  # the CC value last acted on (the register itself may already hold a newer one)

    # identity -------------------------------------------------------------------------------------
    def identity(self) -> ControllerIdentity:
        sub = self.subsystem
        return ControllerIdentity(cntlid=self.cntlid, subnqn=sub.nqn,
                                  firmware_revision=sub.state.active_revision(), discovery=self.discovery,
                                  fabrics=self.fabrics, io_queues=self.max_io_queues,
                                  max_queue_entries=sub.max_queue_entries, mdts=sub.mdts,
                                  in_capsule_bytes=sub.in_capsule_bytes,
                                  admin_opcodes=frozenset(sub.registry.opcodes(QueueKind.ADMIN)),
                                  log_pages=frozenset(sub.registry.log_pages))

    def sq_exists(self, sqid: int) -> bool:
        if self.queue_manager is not None:
            return sqid in getattr(self.queue_manager, "sqs", {})
        return sqid == 0 or sqid in self.io_queues

    @property
    def ready(self) -> bool:
        return bool(self.regs.load(Register.CSTS) & CSTS_RDY)

    @property
    def max_transfer(self) -> int:
        return (1 << self.subsystem.mdts) * 4096

    # registers: CC state machine --------------------------------------------------------------------
    def write_cc(self, value: int) -> None:
        old, self._cc = self._cc, value
        self.regs.store(Register.CC, value)
        new = cc_fields(value)
        csts = self.regs.load(Register.CSTS)
        if new["shn"] and not cc_fields(old)["shn"]:
            self.subsystem.shutdown_flush()
            csts = (csts & ~0xC) | (SHST_COMPLETE << 2)
        if value & CC_EN and not old & CC_EN:
            if new["iosqes"] != 6 or new["iocqes"] != 4 or new["mps"] != 0 or new["css"] not in (0, 6, 7):
                log.warning("controller %d: CC 0x%08X has unsupported IOSQES/IOCQES/MPS/CSS",
                            self.cntlid, value)
                csts |= CSTS_CFS
            else:
                csts |= CSTS_RDY
                for hook in self.on_enable:
                    hook()
        elif old & CC_EN and not value & CC_EN:
            self.reset()
            csts = 0
        self.regs.store(Register.CSTS, csts)

    def reset(self) -> None:
        """Controller-level reset: outstanding AERs dropped, I/O queues gone, features to defaults."""
        self.events = AsyncEvents()
        self.features = Features(kato_ms=self.features.kato_ms)
        self.io_queues.clear()
        for hook in self.on_reset:
            hook()

    # command execution ----------------------------------------------------------------------------
    def prepare(self, qid: int, cmd: Command) -> tuple[CommandSpec, int, int]:
        """The handler and (bytes in, bytes out) for a command, or ``NvmeError`` before any data moves."""
        kind = QueueKind.ADMIN if qid == 0 else QueueKind.IO
        spec = self.subsystem.registry.lookup(kind, cmd.opcode)
        if spec is None or (self.discovery and cmd.opcode not in DISCOVERY_ADMIN_OPCODES):
            raise NvmeError(Status.INVALID_OPCODE, f"{kind.value} opcode 0x{cmd.opcode:02X}")
        if cmd.opcode != 0x7F and not self.ready:
            raise NvmeError(Status.COMMAND_SEQUENCE_ERROR, "controller not enabled (CC.EN=0)")
        if cmd.fuse:
            raise NvmeError(Status.INVALID_FIELD, "fused operations are not supported",
                            param_loc=field_offset("fuse"))
        try:
            n_in, n_out = transfer_lengths(spec, cmd)
        except Exception as exc:  # an extension's length function failed or broke the direction rule
            log.error("controller %d: %s", self.cntlid, exc)
            raise NvmeError(Status.INTERNAL_ERROR, str(exc), dnr=False) from None
        if max(n_in, n_out) > self.max_transfer and cmd.opcode != 0x7F:
            raise NvmeError(Status.INVALID_FIELD, f"transfer of {max(n_in, n_out)} bytes exceeds MDTS")
        return spec, n_in, n_out

    def execute(self, qid: int, cmd: Command, spec: CommandSpec, data: memoryview,
                n_out: int, complete: Callable[[Completion, bytes | memoryview], None] | None = None,
                ) -> tuple[Completion, bytes | memoryview] | None:
        """Run a prepared command. Returns (completion, data out) or None when the handler deferred;
        ``complete`` is then called later with the same pair."""
        self.last_activity = time.monotonic()
        started = time.perf_counter_ns()

        def finish(outcome: Result | BaseException) -> tuple[Completion, bytes | memoryview]:
            return self._completion(qid, cmd, outcome, n_out)

        def later(outcome: Result | BaseException) -> None:
            if complete is not None:
                complete(*finish(outcome))

        request = Request(self, qid, cmd, data, later)
        try:
            outcome = spec.handler(request)
        except NvmeError as exc:
            outcome = exc
        except Exception as exc:  # a handler bug must not take the connection down
            log.exception("controller %d: handler %s failed", self.cntlid, spec.name)
            outcome = NvmeError(Status.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}", dnr=False)
        if outcome is DEFERRED:
            return None
        if qid:
            self.subsystem.state.counters.controller_busy_ns += time.perf_counter_ns() - started
        return finish(outcome if outcome is not None else Result())

    def _completion(self, qid: int, cmd: Command, outcome: Result | BaseException,
                    n_out: int) -> tuple[Completion, bytes | memoryview]:
        if isinstance(outcome, NvmeError):
            self._log_error(qid, cmd, outcome)
            return Completion(cmd.cid, outcome.field, outcome.dw0), b""
        if isinstance(outcome, BaseException):
            err = NvmeError(Status.INTERNAL_ERROR, str(outcome), dnr=False)
            self._log_error(qid, cmd, err)
            return Completion(cmd.cid, err.field), b""
        data = outcome.data
        if len(data) != n_out:
            data = bytes(data[:n_out]).ljust(n_out, b"\0")
        return Completion(cmd.cid, 0, outcome.dw0, outcome.dw1), data

    def _log_error(self, qid: int, cmd: Command, err: NvmeError) -> None:
        if err.status in (Status.ABORT_REQUESTED, Status.ABORTED_SQ_DELETION):
            return
        self.record_error(qid, cmd.cid, err.field, err.param_loc, err.lba, cmd.nsid)

    def record_error(self, qid: int, cid: int, status_field: int, param_loc: int, lba: int,
                     nsid: int) -> None:
        """One Error Information log entry (also for errors a worker process saw on its I/O queue)."""
        self.error_count += 1
        self.subsystem.state.counters.error_log_entries += 1
        self.error_log.entries.append(ErrorEntry(self.error_count, qid, cid, status_field, param_loc, lba,
                                                 nsid))

    def error_completion(self, cmd: Command, err: NvmeError, qid: int = 0) -> Completion:
        """Completion for a command refused before execution (prepare or transport checks)."""
        self._log_error(qid, cmd, err)
        return Completion(cmd.cid, err.field, err.dw0)

    # asynchronous events ----------------------------------------------------------------------------
    def post_event(self, event_type: int, info: int, lid: int) -> None:
        if event_type in self.events.masked_types:
            return
        self.events.queued.append(event_type | (info << 8) | (lid << 16))
        self.events.masked_types.add(event_type)
        self._deliver_events()

    def _deliver_events(self) -> None:
        while self.events.pending and self.events.queued:
            request = self.events.pending.popleft()
            dw0 = self.events.queued.popleft()
            if request.complete is not None:
                request.complete(Result(dw0=dw0))

    def log_page_read(self, lid: int, retain: bool) -> None:
        """Reading a log page with RAE=0 unmasks the event type that pointed at it."""
        if retain:
            return
        for event_type, page in ((1, 0x02), (2, 0x03), (0, 0x01)):
            if page == lid:
                self.events.masked_types.discard(event_type)

    def abort_event_request(self, cid: int) -> bool:
        for request in list(self.events.pending):
            if request.cmd.cid == cid:
                self.events.pending.remove(request)
                if request.complete is not None:
                    request.complete(NvmeError(Status.ABORT_REQUESTED, dnr=False))
                return True
        return False

    def keep_alive_expired(self, now: float | None = None) -> bool:
        if not self.features.kato_ms:
            return False
        idle = (now if now is not None else time.monotonic()) - self.last_activity
        # a host sends Keep Alive at KATO/2 (traffic based, CTRATT.TBKAS); half a KATO of grace more
        return idle * 1000 > 1.5 * self.features.kato_ms


DISCOVERY_ADMIN_OPCODES = {0x02, 0x06, 0x09, 0x0A, 0x0C, 0x18, 0x7F}

