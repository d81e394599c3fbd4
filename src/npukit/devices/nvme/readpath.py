"""How a Read leaves an NVMe/TCP connection: C2HData header, the blocks, CapsuleResp, behind each other in
the connection's send arena; and the short way an ordinary Read gets there.

The arena: the Reads of one batch are assembled one after another (the file is read with ``preadv``
straight behind each PDU header) and leave in one ``writelines``: one system call per batch, not per
Read. A transport may keep views of what it has not sent yet (uvloop does), so the arena is reused only
once the transport's buffer is empty.

The short way (:meth:`ReadPath.try_fast`): a Read on a live I/O queue that passes every check runs
through the same steps as the general path (``Connection.capsule`` → ``Controller.prepare`` /
``execute`` → ``nvm.read``) with the checks and bookkeeping written out once, without the general
path's per-command objects (decoded SQE, request, closures, completion, PDU buffer lists). Anything
else, including every command that would fail, returns False and takes the general path, which
produces its error status and log entry; so only successful Reads are served here, with the same
bytes, counters and SMART effects.

Served as received (:meth:`ReadPath.serve_batch`): while the connection's task waits for the next
PDU's header, the receiver hands each receive's bytes here first. Plain Reads (short way, assembled
in the arena, one ``write`` per batch), data-less Write capsules (their R2T) and H2CData carrying a
whole transfer (the write runs, straight from the receive buffer) are served on the spot, without
waking the task or building PDU objects; the first PDU of any other kind ends the batch and the task
takes it from there, so commands run in the order they arrived.

C2HData SUCCESS: where the host disabled SQ flow control in Connect (fabrics.CATTR_DISABLE_SQFLOW),
a successful command's last C2HData carries LAST_PDU|SUCCESS and no CapsuleResp follows.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import struct
import time
from typing import TYPE_CHECKING

from npukit.devices.nvme import nvm, pdu
from npukit.devices.nvme.command import SGL_TRANSPORT_DATA_BLOCK, Completion
from npukit.devices.nvme.lifecycle import QueueState
from npukit.devices.nvme.namespace import FileRegion, Namespace, range_lock
from npukit.devices.nvme.pdu import PduType
from npukit.devices.nvme.receive import PduReceiver
from npukit.devices.nvme.registry import QueueKind
from npukit.devices.nvme.spec import LBA_SIZE

if TYPE_CHECKING:
    from npukit.devices.nvme.tcp import Connection

log = logging.getLogger("npukit.nvme.tcp")
C2H_CHUNK = 128 * 1024
# Responses to pipelined commands are coalesced into one send, but data goes out once 64 KiB are
# queued: the host starts receiving while the target reads the next blocks (1 MiB batches serialised
# the two and halved sequential-read throughput at queue depth 8).
BATCH_LIMIT = 64 << 10
ARENA_BYTES = BATCH_LIMIT + C2H_CHUNK + 4096  # a batch flushes past BATCH_LIMIT: one more Read always fits
READ_OPCODE, WRITE_OPCODE = 0x02, 0x01
# The SQE fields a Read needs, from the CapsuleCmd header (SQE at byte 8): opcode, flags, CID, NSID,
# SGL descriptor 1 (address, length, type), CDW10..12.
_READ_SQE = struct.Struct("<8xBBHI16xQI3xBIII")
# C2HData without header digest or padding (HPDA 0): common header, CCCID, TTAG, DATAO, DATAL; then
# the 16-byte CQE of the CapsuleResp behind its common header.
_C2H_HEAD = struct.Struct("<BBBBIHHII4x")
_RESP = struct.Struct("<BBBBIIIHHHH")
_C2H_HLEN, _RESP_LEN = 24, 24
_C2H_SUCCESS = pdu.FLAG_DATA_LAST | pdu.FLAG_DATA_SUCCESS
# A CapsuleCmd without digests, padding or in-capsule data, as one little-endian 64-bit word: type 04h,
# flags 0, HLEN 72, PDO 0, PLEN 72 (what validate_common and parse accept without a question).
_CH = struct.Struct("<Q")
# H2CData: CCCID and TTAG; with DATAO and DATAL
_H2C_TAGS, _H2C_FIELDS = struct.Struct("<HH"), struct.Struct("<HHII")
# an H2CData's common header without PLEN: type 06h, LAST_PDU, HLEN 24, PDO 24 (no digests, no padding)
_PLAIN_LAST_H2C = int.from_bytes(bytes((PduType.H2C_DATA, pdu.FLAG_DATA_LAST, 24, 24)), "little")
MAX_H2C_DATA = 128 * 1024  # MAXH2CDATA in ICResp: the most one H2CData may carry
_CAPSULE_LEN = 72
_PLAIN_READ_CAPSULE = _CH.unpack(struct.pack("<BBBBI", PduType.CAPSULE_CMD, 0, _CAPSULE_LEN, 0,
                                                _CAPSULE_LEN))[0]
_PSDT_SGL_NO_FUSE_MASK, _PSDT_SGL = 0xC3, 0x40


class ReadPath:
    """One connection's send arena and its short way for Reads."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._arena: bytearray | None = None
        self._arena_view = memoryview(b"")
        self._arena_used = 0
        self._batch_start = 0  # serve_batch: the first arena byte not handed to the transport yet
        self._transport: asyncio.Transport | None = None  # serve_batch writes to it directly
        self._fast: bool | None = None  # decided once the queue is live (see _fast_allowed)

    def arena_free(self) -> None:
        """The transport sent everything: the arena can be written over."""
        self._arena_used = self._batch_start = 0

    def _new_arena(self, size: int) -> None:
        """A fresh arena (the transport may still hold views of the old one)."""
        self._arena = bytearray(size)
        self._arena_view = memoryview(self._arena)
        self._arena_used = self._batch_start = 0

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

    def _decide(self) -> bool:
        """Whether the short way serves this queue (decided once it is live); with it, Reads received
        into a :class:`PduReceiver` without header digests or data alignment are served as they
        arrive (serve_batch)."""
        if self._fast is None and self.conn.lifecycle.state is QueueState.LIVE:
            self._fast = self._fast_allowed()
            source = self.conn.source
            plain = not self.conn.hdgst and not self.conn.hpda  # serve_batch packs PDO = HLEN
            if self._fast and plain and isinstance(source, PduReceiver):
                self._transport = source.transport
                source.on_batch = self.serve_batch
        return bool(self._fast)

    def _accept(self, buf: bytes | memoryview, offset: int) -> tuple[int, Namespace, int, int] | None:
        """(CID, namespace, first LBA, blocks) of the Read SQE at ``buf[offset + 8:]`` if it passes every
        check the general path makes (and is no larger than one C2HData); None: the general path."""
        (opcode, flags, cid, nsid, _addr, sgl_len, sgl_type, slba_lo, slba_hi,
         cdw12) = _READ_SQE.unpack_from(buf, offset)
        if opcode != READ_OPCODE:
            return None
        ctrl = self.conn.ctrl
        ns = ctrl.subsystem.namespaces.get(nsid)
        nlb = (cdw12 & 0xFFFF) + 1
        slba = slba_lo | (slba_hi << 32)
        length = nlb * LBA_SIZE
        if (ns is None or flags & _PSDT_SGL_NO_FUSE_MASK != _PSDT_SGL or sgl_type != SGL_TRANSPORT_DATA_BLOCK
                or sgl_len < length or length > C2H_CHUNK or length > ctrl.max_transfer
                or not ns.in_range(slba, nlb)):
            return None
        return cid, ns, slba, nlb

    def try_fast(self, p: pdu.Pdu) -> bool:
        """Serve ``p`` (a CapsuleCmd) if it is a Read that succeeds; False: take the general path."""
        if not self._decide() or len(p.data) or p.flags & 0x80:
            return False
        ctrl = self.conn.ctrl
        accepted = self._accept(p.header, 0)
        if accepted is None or not ctrl.ready:
            return False
        cid, ns, slba, nlb = accepted
        # what the general path does for a successful Read, in its order
        self.conn.consume_sq_entry()
        ctrl.last_activity = time.monotonic()
        started = time.perf_counter_ns()
        counters = ctrl.subsystem.state.counters
        counters.host_read_commands += 1
        counters.data_units_read += nlb
        region = FileRegion(ns.fd, slba * LBA_SIZE, nlb * LBA_SIZE)
        counters.controller_busy_ns += time.perf_counter_ns() - started
        self.send_read(cid, region)
        return True

    # PDUs served as they arrive --------------------------------------------------------------------
    def serve_batch(self, buf: memoryview, start: int, end: int) -> tuple[int, int]:
        """Serve the PDUs at the front of ``buf[start:end]`` (what arrived while the connection waits for
        its next PDU) that need nothing but the short way: plain Read capsules that ``_accept`` takes
        (their PDUs assembled in the arena, sent with one ``write`` per batch) and plain H2CData
        carrying a whole R2T transfer (the command runs as ``Connection.transfer_done`` runs it from
        the general path, written to the file straight from the receive buffer). Stops at the first
        PDU that is anything else and returns where it stopped: the connection's loop goes on from
        there, so commands keep their order. The second value: the size of an H2CData it will serve
        once all of it is here (the receiver waits for it instead of waking the loop), else 0. The
        Reads' bookkeeping (SQ head, SMART counters, busy time, keep-alive activity) is done once per
        batch."""
        try:
            return self._serve(buf, start, end)
        except Exception:  # the last line of defence, as Connection.run's: this connection only
            log.exception("%s: serving received PDUs failed", self.conn.peer)
            self.conn.close()
            return end, 0

    def _serve(self, buf: memoryview, start: int, end: int) -> tuple[int, int]:
        conn = self.conn
        ctrl = conn.ctrl
        if conn.lifecycle.state is not QueueState.LIVE or not conn.source.writable or not ctrl.ready:
            return start, 0
        started = time.perf_counter_ns()
        success = conn.fabrics.sqflow_disabled
        pos, reads, blocks, wait = start, 0, 0, 0
        while end - pos >= _CH.size:
            common = _CH.unpack_from(buf, pos)[0]
            if common == _PLAIN_READ_CAPSULE:
                if end - pos < _CAPSULE_LEN:
                    wait = _CAPSULE_LEN
                    break
                accepted = self._accept(buf, pos)
                if accepted is None:
                    if not self._write_capsule(buf, pos):
                        break
                    pos += _CAPSULE_LEN
                    continue
                cid, ns, slba, nlb = accepted
                self._flush_out()
                self.conn.consume_sq_entry()
                self._assemble(cid, ns.fd, slba * LBA_SIZE, nlb * LBA_SIZE, success)
                reads, blocks = reads + 1, blocks + nlb
                pos += _CAPSULE_LEN
                continue
            if common & 0xFFFFFFFF != _PLAIN_LAST_H2C:
                break
            if end - pos < _C2H_HLEN:
                wait = _C2H_HLEN
                break
            plen = self._whole_transfer(buf, pos, common >> 32)
            if not plen:
                break
            if end - pos < plen:
                wait = plen
                break
            self._emit()
            _cccid, ttag = _H2C_TAGS.unpack_from(buf, pos + 8)
            conn.batching = True  # what the command sends is queued on the connection, sent below
            try:
                conn.transfer_done(ttag, conn.pending[ttag], buf[pos + _C2H_HLEN:pos + plen])
            finally:
                conn.batching = False
            pos += plen
        self._flush_out()
        if reads:
            self._emit()
            if not self._transport.get_write_buffer_size():
                self._arena_used = self._batch_start = 0  # all sent: the arena can be written over
            ctrl.last_activity = time.monotonic()
            ctrl.subsystem.state.counters.add_reads(reads, blocks, time.perf_counter_ns() - started)
        return pos, wait

    def _write_capsule(self, buf: memoryview, pos: int) -> bool:
        """Run a data-less Write capsule (data through R2T) the way the connection's loop would, its
        R2T (or error completion) queued on the connection; False for any other command, and when
        the queue has as many commands waiting for data as it has entries (the loop then ends the
        connection, as flow control requires)."""
        conn = self.conn
        if buf[pos + 8] != WRITE_OPCODE or len(conn.pending) > conn.fabrics.sqsize:
            return False
        self._emit()  # the Reads before it leave first
        conn.batching = True  # what the command sends is queued on the connection, sent below
        try:
            conn.capsule(pdu.parse(buf[pos:pos + _CAPSULE_LEN], hdgst=False, ddgst=False))
        finally:
            conn.batching = False
        return True

    def _whole_transfer(self, buf: memoryview, pos: int, plen: int) -> int:
        """``plen`` if the H2CData at ``buf[pos:]`` (plain: no digests, PDO = HLEN, LAST_PDU) carries
        all of a waiting write's data, as the general path would take it; else 0."""
        cccid, ttag, offset, length = _H2C_FIELDS.unpack_from(buf, pos + 8)
        pending = self.conn.pending.get(ttag)
        if (pending is None or not pending.r2t_sent or pending.spec is None or cccid != pending.cmd.cid
                or offset or pending.received or length != pending.length or length > MAX_H2C_DATA
                or plen != _C2H_HLEN + length):
            return 0
        return plen

    def _flush_out(self) -> None:
        """What the general path queued on the connection (write completions, R2Ts) leaves now."""
        queued = self.conn.take_queued()
        if queued:
            self._transport.writelines(queued)

    def _assemble(self, cid: int, fd: int, offset: int, n: int, success: bool) -> None:
        """One Read's C2HData (+ CapsuleResp) behind the batch so far in the arena, the file read
        straight behind the header (``os.preadv``: no bytes object in between)."""
        total = _C2H_HLEN + n + (0 if success else _RESP_LEN)
        if self._arena is None or self._arena_used + total > len(self._arena):
            self._emit()  # what the batch assembled so far leaves before the arena changes
            if self._arena is None or self._transport.get_write_buffer_size():
                self._new_arena(max(ARENA_BYTES, total))
            self.arena_free()
        arena, at = self._arena, self._arena_used
        _C2H_HEAD.pack_into(arena, at, PduType.C2H_DATA, _C2H_SUCCESS if success else pdu.FLAG_DATA_LAST,
                            _C2H_HLEN, _C2H_HLEN, _C2H_HLEN + n, cid, 0, 0, n)
        data = at + _C2H_HLEN
        range_lock(fd, fcntl.F_RDLCK, offset, n)  # each block whole against a Write in flight elsewhere
        try:
            got = os.preadv(fd, [self._arena_view[data:data + n]], offset)
            if got != n:  # short read (a file shorter than the namespace): as FileRegion does it
                FileRegion(fd, offset, n).read_into_unlocked(self._arena_view[data:data + n])
        finally:
            range_lock(fd, fcntl.F_UNLCK, offset, n)
        if not success:
            _RESP.pack_into(arena, data + n, PduType.CAPSULE_RESP, 0, _RESP_LEN, 0, _RESP_LEN, 0, 0,
                            self.conn.sqhd, self.conn.fabrics.qid, cid, 0)
        self._arena_used = at + total
        if self._arena_used - self._batch_start > BATCH_LIMIT:
            self._emit()  # large Reads: the host starts receiving while the next blocks are read

    def _emit(self) -> None:
        """Send what the batch assembled since the last emit (one contiguous piece of the arena)."""
        if self._arena_used > self._batch_start:
            self._transport.write(self._arena_view[self._batch_start:self._arena_used])
        self._batch_start = self._arena_used

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
            self._new_arena(max(ARENA_BYTES, n))
        start = self._arena_used
        self._arena_used += n
        self._batch_start = self._arena_used  # queued through the connection, not by serve_batch
        return self._arena_view[start:start + n]
