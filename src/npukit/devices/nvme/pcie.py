"""The controller as a PCIe device, in process: host memory, BAR0 register accesses, doorbells, PRPs
and MSI callbacks.

:class:`PcieController` is the device side, modelled on the Alkali RPU firmware loop: every host
register write lands in the register block's 128-deep FIFO; :meth:`PcieController.service` pops it
(IRQ status / IRQ data), reacts to CC, fetches SQEs from host memory on SQ tail doorbells, moves data
through PRP entries and lists, posts CQEs with phase tags, SQ head and SQ ID, and raises the CQ's MSI
vector through the host-interrupt register. :class:`PcieHost` is a small host driver for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from npukit.devices.nvme.command import Command, Completion, Cqe
from npukit.devices.nvme.layout import field_offset
from npukit.devices.nvme.regs import DOORBELL_PAIRS, DOORBELL_STRIDE, cq_doorbell, sq_doorbell
from npukit.devices.nvme.spec import CQE_SIZE, PAGE_SIZE, SQE_SIZE, NvmeError, Register, Status
from npukit.devices.nvme.subsystem import Subsystem
from npukit.errors import ConfigError

log = logging.getLogger("npukit.nvme.pcie")
MQES = 4095


class HostMemory:
    """Flat host memory with a bump allocator; addresses are offsets into one bytearray."""

    def __init__(self, size: int = 16 << 20) -> None:
        self.buf = bytearray(size)
        self._next = PAGE_SIZE  # keep address 0 unused

    def alloc(self, size: int, align: int = PAGE_SIZE) -> int:
        addr = -(-self._next // align) * align
        if addr + size > len(self.buf):
            raise ConfigError(f"host memory exhausted ({size} bytes asked)")
        self._next = addr + size
        return addr

    def read(self, addr: int, n: int) -> memoryview:
        if addr < 0 or addr + n > len(self.buf):
            raise NvmeError(Status.DATA_TRANSFER_ERROR, f"DMA read {addr:#x}+{n} outside host memory")
        return memoryview(self.buf)[addr:addr + n]

    def write(self, addr: int, data: bytes | memoryview) -> None:
        if addr < 0 or addr + len(data) > len(self.buf):
            raise NvmeError(Status.DATA_TRANSFER_ERROR,
                            f"DMA write {addr:#x}+{len(data)} outside host memory")
        self.buf[addr:addr + len(data)] = data


@dataclass
class SubmissionQueue:
    base: int
    size: int
    cqid: int
    head: int = 0
    tail: int = 0


@dataclass
class CompletionQueue:
    base: int
    size: int
    ien: bool
    vector: int
    tail: int = 0
    head: int = 0
    phase: int = 1  # the first pass through the queue writes P=1


def prp_segments(mem: HostMemory, prp1: int, prp2: int, length: int) -> list[tuple[int, int]]:
    """(address, length) pieces of a PRP-described buffer (NVMe 1.4, PRP entries and lists)."""
    if length == 0:
        return []
    if prp1 % 4:
        raise NvmeError(Status.PRP_OFFSET_INVALID, "PRP1 is not dword aligned")
    first = min(length, PAGE_SIZE - prp1 % PAGE_SIZE)
    segments, left = [(prp1, first)], length - first
    if left == 0:
        return segments
    if left <= PAGE_SIZE:
        if prp2 % PAGE_SIZE:
            raise NvmeError(Status.PRP_OFFSET_INVALID, "PRP2 is not page aligned")
        return [*segments, (prp2, left)]
    entry = prp2
    if entry % 8:
        raise NvmeError(Status.PRP_OFFSET_INVALID, "the PRP list pointer is not qword aligned")
    while left:
        addr = int.from_bytes(mem.read(entry, 8), "little")
        last_in_page = (entry + 8) % PAGE_SIZE == 0
        if last_in_page and left > PAGE_SIZE:  # the last entry of a full list page chains to the next
            entry = addr
            continue
        if addr % PAGE_SIZE:
            raise NvmeError(Status.PRP_OFFSET_INVALID, f"PRP entry {addr:#x} is not page aligned")
        n = min(left, PAGE_SIZE)
        segments.append((addr, n))
        left -= n
        entry += 8
    return segments


class PcieController:
    """Device side; the host uses ``mmio_read32``/``mmio_write32`` and gets MSIs through ``msi``."""

    def __init__(self, subsystem: Subsystem, memory: HostMemory, msi: Callable[[int], None] | None = None, *,
                 auto_service: bool = True) -> None:
        self.memory = memory
        self.msi = msi
        self.auto_service = auto_service
        self.ctrl = subsystem.new_controller(fabrics=False, queue_manager=self,
                                             on_host_interrupt=self._interrupt)
        self.ctrl.max_io_queues = DOORBELL_PAIRS - 1
        self.ctrl.on_enable.append(self._create_admin_queues)
        self.ctrl.on_reset.append(self._drop_queues)
        self.sqs: dict[int, SubmissionQueue] = {}
        self.cqs: dict[int, CompletionQueue] = {}
        self.dropped_completions = 0

    @property
    def regs(self):
        return self.ctrl.regs

    def _interrupt(self, vector: int) -> None:
        if self.msi is not None:
            self.msi(vector)

    # host port ------------------------------------------------------------------------------------
    def mmio_read32(self, offset: int) -> int:
        return self.regs.host_read(offset)

    def mmio_read64(self, offset: int) -> int:
        return self.mmio_read32(offset) | (self.mmio_read32(offset + 4) << 32)

    def mmio_write32(self, offset: int, value: int) -> None:
        self.regs.host_write(offset, value)
        if self.auto_service:
            self.service()

    def mmio_write64(self, offset: int, value: int) -> None:
        self.regs.host_write(offset, value & 0xFFFFFFFF)
        self.mmio_write32(offset + 4, value >> 32)

    # firmware loop --------------------------------------------------------------------------------
    def service(self) -> int:
        """Handle every logged host write (the RPU's IRQ loop); returns how many were handled."""
        handled = 0
        while self.regs.irq_pending():  # IRQ status bit 0, read on the firmware's port
            offset = self.regs.pop_host_write()  # IRQ data x 4
            handled += 1
            self._register_written(offset)
        return handled

    def _register_written(self, offset: int) -> None:
        if offset == Register.CC:
            self.ctrl.write_cc(self.regs.load(Register.CC))
            return
        doorbell_end = Register.DOORBELL_BASE + 2 * DOORBELL_PAIRS * DOORBELL_STRIDE
        if not Register.DOORBELL_BASE <= offset < doorbell_end:
            return  # AQA/ASQ/ACQ are read at enable; other registers are plain storage
        index = (offset - Register.DOORBELL_BASE) // DOORBELL_STRIDE
        qid, is_cq = index // 2, index % 2
        value = self.regs.load(offset) & 0xFFFF
        if is_cq:
            cq = self.cqs.get(qid)
            if cq is not None and value < cq.size:
                cq.head = value
            return
        sq = self.sqs.get(qid)
        if sq is None or value >= sq.size:
            log.warning("invalid SQ %d tail doorbell write %d", qid, value)
            return
        sq.tail = value
        self._process(qid, sq)

    def _process(self, qid: int, sq: SubmissionQueue) -> None:
        while sq.head != sq.tail and qid in self.sqs:
            raw = bytes(self.memory.read(sq.base + sq.head * SQE_SIZE, SQE_SIZE))
            sq.head = (sq.head + 1) % sq.size
            self._execute(qid, Command.decode(raw))

    def _execute(self, qid: int, cmd: Command) -> None:
        try:
            spec, n_in, n_out = self.ctrl.prepare(qid, cmd)
            if cmd.psdt != 0:
                raise NvmeError(Status.INVALID_FIELD, "only PRPs (PSDT=00b) on PCIe, as the Alkali firmware",
                                param_loc=field_offset("psdt"))
            data = self._gather(cmd, n_in)
        except NvmeError as err:
            self._post(qid, self.ctrl.error_completion(cmd, err, qid))
            return

        def done(completion: Completion, out: bytes | memoryview) -> None:
            if len(out) and not completion.status:
                try:
                    self._scatter(cmd, out)
                except NvmeError as err:
                    completion = self.ctrl.error_completion(cmd, err, qid)
            self._post(qid, completion)

        result = self.ctrl.execute(qid, cmd, spec, data, n_out, complete=done)
        if result is not None:
            done(*result)

    def _gather(self, cmd: Command, n: int) -> memoryview:
        if not n:
            return memoryview(b"")
        out = bytearray(n)
        pos = 0
        for addr, length in prp_segments(self.memory, cmd.prp1, cmd.prp2, n):
            out[pos:pos + length] = self.memory.read(addr, length)
            pos += length
        return memoryview(out)

    def _scatter(self, cmd: Command, data: bytes | memoryview) -> None:
        view, pos = memoryview(data), 0
        for addr, length in prp_segments(self.memory, cmd.prp1, cmd.prp2, len(view)):
            self.memory.write(addr, view[pos:pos + length])
            pos += length

    def _post(self, sqid: int, completion: Completion) -> None:
        sq = self.sqs.get(sqid)
        cq = self.cqs.get(sq.cqid) if sq is not None else None
        if cq is None:
            return
        if (cq.tail + 1) % cq.size == cq.head:
            self.dropped_completions += 1  # full CQ: the Alkali firmware drops (and logs) the entry
            log.warning("CQ %d full: completion of CID %d dropped", sq.cqid, completion.cid)
            return
        self.memory.write(cq.base + cq.tail * CQE_SIZE, completion.encode(sq.head, sqid, cq.phase))
        cq.tail = (cq.tail + 1) % cq.size
        if cq.tail == 0:
            cq.phase ^= 1
        if cq.ien:
            self.regs.store(Register.IRQ_HOST, 0)
            self.regs.raise_interrupts(1 << cq.vector)

    # queue management (QueueManager) ----------------------------------------------------------------
    def _create_admin_queues(self) -> None:
        aqa = self.regs.load(Register.AQA)
        asqs, acqs = (aqa & 0xFFF) + 1, ((aqa >> 16) & 0xFFF) + 1
        self.cqs = {0: CompletionQueue(self.regs.load64(Register.ACQ), acqs, True, 0)}
        self.sqs = {0: SubmissionQueue(self.regs.load64(Register.ASQ), asqs, 0)}

    def _drop_queues(self) -> None:
        self.sqs, self.cqs = {}, {}

    def _check_new_queue(self, qid: int, size: int, existing: dict, contiguous: bool, base: int) -> None:
        limit = self.ctrl.features.queues_allocated or self.ctrl.max_io_queues
        if qid == 0 or qid > limit or qid in existing:
            raise NvmeError(Status.INVALID_QUEUE_IDENTIFIER, f"QID {qid} (limit {limit})",
                            param_loc=field_offset("queue.qid"))
        if size < 2 or size > MQES + 1:
            raise NvmeError(Status.INVALID_QUEUE_SIZE, f"{size} entries",
                            param_loc=field_offset("queue.qsize"))
        if not contiguous:
            raise NvmeError(Status.INVALID_FIELD, "CAP.CQR=1: queues must be physically contiguous",
                            param_loc=field_offset("queue.pc"))
        if base % PAGE_SIZE:
            raise NvmeError(Status.PRP_OFFSET_INVALID, "queue base is not page aligned")

    def create_cq(self, qid: int, size: int, base: int, contiguous: bool, ien: bool, vector: int) -> None:
        self._check_new_queue(qid, size, self.cqs, contiguous, base)
        if vector >= 32:
            raise NvmeError(Status.INVALID_INTERRUPT_VECTOR, f"vector {vector} (32 MSI vectors)",
                            param_loc=field_offset("queue.iv"))
        self.cqs[qid] = CompletionQueue(base, size, ien, vector)

    def create_sq(self, qid: int, size: int, base: int, contiguous: bool, cqid: int) -> None:
        if cqid == 0 or cqid not in self.cqs:
            raise NvmeError(Status.COMPLETION_QUEUE_INVALID, f"CQ {cqid}",
                            param_loc=field_offset("queue.cqid"))
        self._check_new_queue(qid, size, self.sqs, contiguous, base)
        self.sqs[qid] = SubmissionQueue(base, size, cqid)
        self.ctrl.io_queues.add(qid)

    def delete_sq(self, qid: int) -> None:
        if qid == 0 or qid not in self.sqs:
            raise NvmeError(Status.INVALID_QUEUE_IDENTIFIER, f"SQ {qid}", param_loc=field_offset("queue.qid"))
        del self.sqs[qid]
        self.ctrl.io_queues.discard(qid)

    def delete_cq(self, qid: int) -> None:
        if qid == 0 or qid not in self.cqs:
            raise NvmeError(Status.INVALID_QUEUE_IDENTIFIER, f"CQ {qid}", param_loc=field_offset("queue.qid"))
        if any(sq.cqid == qid for q, sq in self.sqs.items() if q):
            raise NvmeError(Status.INVALID_QUEUE_DELETION, f"CQ {qid} still has submission queues")
        del self.cqs[qid]


class PcieHost:
    """A minimal host driver: admin queue setup, PRP building, doorbells, phase-tag polling."""

    def __init__(self, device: PcieController, memory: HostMemory, queue_entries: int = 16) -> None:
        self.dev, self.mem, self.entries = device, memory, queue_entries
        self.interrupts: list[int] = []
        device.msi = self.interrupts.append
        self.queues: dict[int, dict] = {}
        self._cid = 0

    def enable(self) -> None:
        n = self.entries
        asq, acq = self.mem.alloc(n * SQE_SIZE), self.mem.alloc(n * CQE_SIZE)
        self.dev.mmio_write32(Register.AQA, (n - 1) | ((n - 1) << 16))
        self.dev.mmio_write64(Register.ASQ, asq)
        self.dev.mmio_write64(Register.ACQ, acq)
        self.dev.mmio_write32(Register.CC, 1 | (6 << 16) | (4 << 20))
        self.queues[0] = {"sq": asq, "cq": acq, "size": n, "tail": 0, "head": 0, "phase": 1}

    def create_io_queue(self, qid: int, entries: int = 16, vector: int = 1) -> tuple[Cqe, Cqe]:
        sq, cq = self.mem.alloc(entries * SQE_SIZE), self.mem.alloc(entries * CQE_SIZE)
        c1 = self.admin(Command.build(0x05, dptr=cq.to_bytes(8, "little") + bytes(8),
                                      cdws={10: qid | ((entries - 1) << 16), 11: 0x3 | (vector << 16)}))[0]
        c2 = self.admin(Command.build(0x01, dptr=sq.to_bytes(8, "little") + bytes(8),
                                      cdws={10: qid | ((entries - 1) << 16), 11: 0x1 | (qid << 16)}))[0]
        if not c1.status and not c2.status:
            self.queues[qid] = {"sq": sq, "cq": cq, "size": entries, "tail": 0, "head": 0, "phase": 1}
        return c1, c2

    def _prps(self, buf: int, length: int) -> bytes:
        pages = [buf + off for off in range(0, length, PAGE_SIZE)] or [buf]
        if len(pages) <= 2:
            prp2 = pages[1] if len(pages) == 2 else 0
            return pages[0].to_bytes(8, "little") + prp2.to_bytes(8, "little")
        lst = self.mem.alloc(8 * (len(pages) - 1))
        for i, page in enumerate(pages[1:]):
            self.mem.write(lst + 8 * i, page.to_bytes(8, "little"))
        return pages[0].to_bytes(8, "little") + lst.to_bytes(8, "little")

    def submit(self, qid: int, cmd: Command, data: bytes = b"", read_len: int = 0, *,
               wait: bool = True) -> tuple[Cqe | None, bytes]:
        q = self.queues[qid]
        length = max(len(data), read_len)
        buf = 0
        if length and not any(cmd.dptr):
            buf = self.mem.alloc(length)
            self.mem.write(buf, data)
            cmd.dptr = self._prps(buf, length)
        self._cid = (self._cid + 1) & 0xFFFF
        cmd.cid = self._cid
        self.mem.write(q["sq"] + q["tail"] * SQE_SIZE, cmd.encode())
        q["tail"] = (q["tail"] + 1) % q["size"]
        self.dev.mmio_write32(sq_doorbell(qid), q["tail"])
        if not wait:
            return None, b""
        cqe = self.reap(qid)
        if cqe is None:
            raise ConfigError(f"no completion for CID {cmd.cid} on queue {qid}")
        out = bytes(self.mem.read(buf, read_len)) if read_len and buf else b""
        return cqe, out

    def reap(self, qid: int) -> Cqe | None:
        """The next CQE whose phase tag says it is new, advancing the CQ head doorbell."""
        q = self.queues[qid]
        cqe = Cqe.decode(self.mem.read(q["cq"] + q["head"] * CQE_SIZE, CQE_SIZE))
        if cqe.phase != q["phase"]:
            return None
        q["head"] = (q["head"] + 1) % q["size"]
        if q["head"] == 0:
            q["phase"] ^= 1
        self.dev.mmio_write32(cq_doorbell(qid), q["head"])
        return cqe

    def admin(self, cmd: Command, data: bytes = b"", read_len: int = 0) -> tuple[Cqe, bytes]:
        return self.submit(0, cmd, data, read_len)
