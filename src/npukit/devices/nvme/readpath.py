"""How a Read leaves an NVMe/TCP connection: C2HData header, the blocks, CapsuleResp, behind each other in
the connection's send arena; and the short way an ordinary Read gets there.

The arena: the Reads of one batch are assembled one after another (the file is read with ``preadv``
straight behind each PDU header) and leave in one ``writelines``: one system call per batch, not per
Read. A transport may keep views of what it has not sent yet (uvloop does), so the arena is reused only
once the transport's buffer is empty.

The short way (:meth:`ReadPath.try_fast`): a Read on a live I/O queue that passes every check runs
through the same steps as the general path (``Connection._capsule`` → ``Controller.prepare`` /
``execute`` → ``nvm.read``) with the checks and bookkeeping written out once, without the general
path's per-command objects (decoded SQE, request, closures, completion, PDU buffer lists). Anything
else, including every command that would fail, returns False and takes the general path, which
produces its error status and log entry; so only successful Reads are served here, with the same
bytes, counters and SMART effects.
"""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING

from npukit.devices.nvme import nvm, pdu
from npukit.devices.nvme.command import SGL_TRANSPORT_DATA_BLOCK, Completion
from npukit.devices.nvme.fabrics import SQHD_DISABLED
from npukit.devices.nvme.lifecycle import QueueState
from npukit.devices.nvme.namespace import FileRegion
from npukit.devices.nvme.pdu import PduType
from npukit.devices.nvme.registry import QueueKind
from npukit.devices.nvme.spec import LBA_SIZE

if TYPE_CHECKING:
    from npukit.devices.nvme.tcp import Connection

C2H_CHUNK = 128 * 1024
# Responses to pipelined commands are coalesced into one send, but data goes out once 64 KiB are
# queued: the host starts receiving while the target reads the next blocks (1 MiB batches serialised
# the two and halved sequential-read throughput at queue depth 8).
BATCH_LIMIT = 64 << 10
ARENA_BYTES = BATCH_LIMIT + C2H_CHUNK + 4096  # a batch flushes past BATCH_LIMIT: one more Read always fits
READ_OPCODE = 0x02
# The SQE fields a Read needs, from the CapsuleCmd header (SQE at byte 8): opcode, flags, CID, NSID,
# SGL descriptor 1 (address, length, type), CDW10..12.
_READ_SQE = struct.Struct("<8xBBHI16xQI3xBIII")
# C2HData without header digest or padding (HPDA 0): common header, CCCID, TTAG, DATAO, DATAL; then
# the 16-byte CQE of the CapsuleResp behind its common header.
_C2H_HEAD = struct.Struct("<BBBBIHHII4x")
_RESP = struct.Struct("<BBBBIIIHHHH")
_C2H_HLEN, _RESP_LEN = 24, 24
_C2H_SUCCESS = pdu.FLAG_DATA_LAST | pdu.FLAG_DATA_SUCCESS
_PSDT_SGL_NO_FUSE_MASK, _PSDT_SGL = 0xC3, 0x40


class ReadPath:
    """One connection's send arena and its short way for Reads."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._arena: bytearray | None = None
        self._arena_used = 0
        self._fast: bool | None = None  # decided once the queue is live (see _fast_allowed)

    def arena_free(self) -> None:
        """The transport sent everything: the arena can be written over."""
        self._arena_used = 0

    # the short way -----------------------------------------------------------------------------------
    def _fast_allowed(self) -> bool:
        """A live I/O queue without data digests whose controller runs the standard Read handler here
        (a worker forwards Reads to the main process when an extension replaced the handler)."""
        conn = self.conn
        ctrl = conn.ctrl
        if not conn.fabrics.qid or ctrl is None or conn.ddgst or conn.lifecycle.state is not QueueState.LIVE:
            return False
        spec = ctrl.subsystem.registry.lookup(QueueKind.IO, READ_OPCODE)
        local = getattr(ctrl, "local", None)  # a worker's stand-in controller: the opcodes it runs itself
        return spec is not None and spec.handler is nvm.read and (local is None or READ_OPCODE in local)

    def try_fast(self, p: pdu.Pdu) -> bool:
        """Serve ``p`` (a CapsuleCmd) if it is a Read that succeeds; False: take the general path."""
        if self._fast is None:
            if self.conn.lifecycle.state is not QueueState.LIVE:
                return False
            self._fast = self._fast_allowed()
        if not self._fast or len(p.data) or p.flags & 0x80 or p.header[8] != READ_OPCODE:
            return False
        conn = self.conn
        ctrl = conn.ctrl
        (_op, flags, cid, nsid, _addr, sgl_len, sgl_type, slba_lo, slba_hi,
         cdw12) = _READ_SQE.unpack_from(p.header)
        ns = ctrl.subsystem.namespaces.get(nsid)
        nlb = (cdw12 & 0xFFFF) + 1
        slba = slba_lo | (slba_hi << 32)
        length = nlb * LBA_SIZE
        if (ns is None or flags & _PSDT_SGL_NO_FUSE_MASK != _PSDT_SGL or sgl_type != SGL_TRANSPORT_DATA_BLOCK
                or sgl_len < length or length > C2H_CHUNK or length > ctrl.max_transfer
                or not ns.in_range(slba, nlb) or not ctrl.ready):
            return False
        # what the general path does for a successful Read, in its order
        if conn.sqhd != SQHD_DISABLED:
            sqsize = conn.fabrics.sqsize
            conn.sqhd = (conn.sqhd + 1) % (sqsize + 1 if sqsize else 65536)
        ctrl.last_activity = time.monotonic()
        started = time.perf_counter_ns()
        counters = ctrl.subsystem.state.counters
        counters.host_read_commands += 1
        counters.data_units_read += nlb
        region = FileRegion(ns.fd, slba * LBA_SIZE, length)
        counters.controller_busy_ns += time.perf_counter_ns() - started
        self.send_read(cid, region)
        return True

    # the send arena ----------------------------------------------------------------------------------
    def success_allowed(self, completion: Completion | None) -> bool:
        """May C2HData's SUCCESS flag stand in for this successful command's CapsuleResp? Only on an I/O
        queue whose host disabled SQ flow control in Connect, and only for a CQE with nothing to say
        but success (DW0 and DW1 zero: SUCCESS implies an all-zero command-specific result)."""
        fabrics = self.conn.fabrics
        return (fabrics.sqflow_disabled and bool(fabrics.qid)
                and (completion is None or not (completion.dw0 or completion.dw1)))

    def send_data(self, completion: Completion, data: bytes | memoryview | FileRegion) -> bool:
        """The C2HData PDUs of a completed command (none when it failed or moves no data). True when
        the last one carried SUCCESS, so no CapsuleResp is owed."""
        if completion.status:
            return False
        if isinstance(data, FileRegion):
            if len(data) <= C2H_CHUNK:
                return self.send_read(completion.cid, data, completion)
            data = data.tobytes()
        # Read data is copied out of the file (os.pread), never sent with os.sendfile: sendfile hands
        # page-cache pages to the socket by reference, and a write completing after the read would
        # change bytes already "sent" (the 8-host load test saw torn blocks).
        if not len(data):
            return False
        conn = self.conn
        success = self.success_allowed(completion)
        view = memoryview(data)
        align = (conn.hpda + 1) * 4
        for start in range(0, len(view), C2H_CHUNK):
            chunk = view[start:start + C2H_CHUNK]
            last = start + C2H_CHUNK >= len(view)
            conn.send(pdu.data_pdu(PduType.C2H_DATA, completion.cid, 0, start, chunk, last=last,
                                   hdgst=conn.hdgst, ddgst=conn.ddgst, alignment=align,
                                   success=last and success))
        return success

    def send_read(self, cid: int, region: FileRegion, completion: Completion | None = None) -> bool:
        """C2HData + CapsuleResp of a successful Read (``completion``'s DW0/DW1, else zero) assembled
        behind each other in the arena, the file read straight behind the PDU header; or C2HData with
        SUCCESS alone where that may stand in for the response (returns True then)."""
        conn = self.conn
        qid = conn.fabrics.qid or 0
        n = region.length
        success = self.success_allowed(completion)
        if conn.hdgst or conn.hpda:
            head = b"".join(pdu.data_pdu(PduType.C2H_DATA, cid, 0, 0, region, last=True, hdgst=conn.hdgst,
                                         alignment=(conn.hpda + 1) * 4, success=success)[:-1])
            resp = b"" if success else b"".join(pdu.capsule_resp((completion or Completion(cid)).encode(
                conn.sqhd, qid, 0), hdgst=conn.hdgst))
            total = len(head) + n + len(resp)
            view = self._take(total)
            view[:len(head)] = head
            view[total - len(resp):total] = resp
            region.read_into(view[len(head):len(head) + n])
        else:
            total = _C2H_HLEN + n + (0 if success else _RESP_LEN)
            view = self._take(total)
            _C2H_HEAD.pack_into(view, 0, PduType.C2H_DATA, _C2H_SUCCESS if success else pdu.FLAG_DATA_LAST,
                                _C2H_HLEN, _C2H_HLEN, _C2H_HLEN + n, cid, 0, 0, n)
            if not success:
                dw0, dw1 = (completion.dw0, completion.dw1) if completion else (0, 0)
                _RESP.pack_into(view, _C2H_HLEN + n, PduType.CAPSULE_RESP, 0, _RESP_LEN, 0, _RESP_LEN,
                                dw0 & 0xFFFFFFFF, dw1 & 0xFFFFFFFF, conn.sqhd, qid, cid, 0)
            region.read_into(view[_C2H_HLEN:_C2H_HLEN + n])
        conn.queue_view(view, total)
        return success

    def _take(self, n: int) -> memoryview:
        """``n`` bytes of the arena (a new arena when it is full)."""
        if self._arena is None or self._arena_used + n > len(self._arena):
            self._arena, self._arena_used = bytearray(max(ARENA_BYTES, n)), 0
        start = self._arena_used
        self._arena_used += n
        return memoryview(self._arena)[start:start + n]
