"""An NVMe/TCP I/O queue on one asyncio event loop: many queues, one loop.

``AsyncIoQueue`` is the host side of one I/O queue, built the way a careful user-space NVMe/TCP host is
(one event loop, like the benchmark's plain asyncio request/response client):

* receiving is an :class:`asyncio.BufferedProtocol`: the socket reads into one preallocated arena and
  every whole PDU in it is handled in the same callback (a burst of 16 completions costs one wake-up);
* the common PDUs (C2HData, CapsuleResp, without digests) are read in place with ``struct`` and matched
  to their command by CID through lists indexed by the CID's low 12 bits (a slot); the high 4 bits count
  the slot's reuses, so a PDU for a command that already completed is caught as not outstanding;
* Reads come from one 72-byte CapsuleCmd template patched with ``struct.pack_into`` (CID, SGL length,
  SLBA, NLB), and every capsule a callback produces leaves in one ``transport.write``;
* anything else (digests, R2T, errors, other commands) takes the general path, ``pdu.parse`` and the
  client's capsule builder, so the protocol is not a second copy (``client.py``, ``pdu.py``).

SQ flow control disable: ``open(..., sqflow_off=True)`` sets bit 2 of the Fabrics Connect's CATTR (the
attribute Linux's ``nvme connect --disable-sqflow`` sends). A controller that accepts it reports SQHD
FFFFh in the Connect's completion (Linux nvmet does) and may then end a successful Read with a C2HData
carrying LAST_PDU|SUCCESS instead of a CapsuleResp; only then does the queue take SUCCESS as the Read's
completion. Without it a C2HData with SUCCESS is a protocol error.

The admin queue and the controller's enabling stay with the blocking :class:`NvmeTcpHost`.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable, Iterator

from npukit.devices.nvme import pdu
from npukit.devices.nvme.client import (
    NvmeStatusError,
    NvmeTcpHost,
    Reply,
    capsule_buffers,
    h2c_data_pdus,
)
from npukit.devices.nvme.command import SGL_TRANSPORT_DATA_BLOCK, Command, Cqe
from npukit.devices.nvme.pdu import PduType
from npukit.devices.nvme.spec import LBA_SIZE, IoOpcode, ProtocolError
from npukit.errors import ConfigError

HEADER = 24  # HLEN of every PDU a target sends after ICResp (CapsuleResp, C2HData, R2T, C2HTermReq)
MAX_PDU = 64 << 20
CATTR_DISABLE_SQFLOW = 1 << 2  # Connect CDW11 bits 23:16 are CATTR; bit 2 disables SQ flow control
SQHD_FLOW_OFF = 0xFFFF  # the SQHD a controller reports on a queue without SQ flow control
SLOT_BITS = 12  # a CID is (reuse count << 12) | slot
_SLOT_MASK = (1 << SLOT_BITS) - 1
_CID_STEP = 1 << SLOT_BITS  # a slot's next CID: its reuse count + 1
_ARENA = 256 << 10  # receive buffer; grows for a PDU larger than it
_MIN_FREE = 32 << 10  # compact the arena before a receive with less room than this
_IC_RESP_LEN = 128
_CH = pdu.CH.unpack_from
_DATA = struct.Struct("<HHII").unpack_from  # CCCID, TTAG, DATAO, DATAL of a C2HData / R2T
_U16 = struct.Struct("<H")
_READ_FIELDS = struct.Struct("<I3xBQI")  # SGL length + type, CDW10..11 (SLBA), CDW12 (NLB - 1) at 40
_SUCCESS_LAST = pdu.FLAG_DATA_SUCCESS | pdu.FLAG_DATA_LAST
_DIGEST_FLAGS = pdu.FLAG_HDGST | pdu.FLAG_DDGST
_C2H_DATA, _CAPSULE_RESP = int(PduType.C2H_DATA), int(PduType.CAPSULE_RESP)  # plain ints: cheaper to compare


def read_capsule_template(nsid: int) -> bytearray:
    """A CapsuleCmd (no digests, no in-capsule data) for an NVM Read of namespace ``nsid`` with a
    Transport SGL Data Block descriptor; CID, length, SLBA and NLB are patched per command."""
    sqe = Command.build(IoOpcode.READ, nsid=nsid, flags=0x40,
                        dptr=bytes(15) + bytes([SGL_TRANSPORT_DATA_BLOCK])).encode()
    return bytearray(pdu.CH.pack(PduType.CAPSULE_CMD, 0, 72, 0, 72) + sqe)


class AsyncIoQueue(asyncio.BufferedProtocol):
    """One connected I/O queue; build it with :meth:`open`. One window runs at a time; an exception
    from a window's callback or its command iterator ends the queue (that window raises it)."""

    def __init__(self, *, hdgst: bool, ddgst: bool, qid: int = 0, maxh2cdata: int = 0,
                 in_capsule: int = 0) -> None:
        self.hdgst, self.ddgst, self.qid = hdgst, ddgst, qid
        self.maxh2cdata, self.in_capsule = maxh2cdata, in_capsule
        self.head = HEADER + (pdu.DIGEST_SIZE if hdgst else 0)  # bytes of a PDU before its data
        self.sqflow_off = False  # the controller accepted SQ flow control disable at Connect
        self.transport: asyncio.Transport | None = None
        self._plain = not (hdgst or ddgst)  # the in-place paths apply
        self._arena = bytearray(_ARENA)
        self._view = memoryview(self._arena)
        self._pos = self._end = 0  # unparsed bytes: _arena[_pos:_end]
        self._need = 0  # bytes from _pos the next whole PDU takes (0: unknown)
        self._out = bytearray()  # capsules and H2CData produced in this callback, sent together
        self._error: BaseException | None = None  # the queue is dead: every window raises it
        self._waiter: asyncio.Future | None = None
        self._ic: asyncio.Future | None = None  # waiting for ICResp
        # per slot (the CID's low bits): CID in flight (-1: free), last CID used, receive buffer,
        # bytes received, data owed to R2Ts
        self._cid_of: list[int] = []
        self._last: list[int] = []
        self._dest: list[bytearray] = []
        self._got: list[int] = []
        self._owed: list[memoryview] = []
        self._done: Callable[[int, bytes | None], None] = self._stray

    # ---- connection -------------------------------------------------------------------------------
    @classmethod
    async def open(cls, host: NvmeTcpHost, qid: int, *, sqflow_off: bool = False) -> AsyncIoQueue:
        """Connect I/O queue ``qid`` of ``host``'s controller (ICReq/ICResp, then Fabrics Connect).
        ``qid`` must not already be connected by ``host`` itself. ``sqflow_off``: ask the controller
        to disable SQ flow control (see the module docstring); ``sqflow_off`` on the queue says
        whether it did."""
        ioccsz = int(host.identify.get("ioccsz") or 0)
        return await cls.connect(host.addr, host.port, host.connect_command(qid, 0), qid=qid,
                                 hdgst=host.hdgst, ddgst=host.ddgst, in_capsule=max(ioccsz * 16 - 64, 0),
                                 sqflow_off=sqflow_off)

    @classmethod
    async def connect(cls, addr: str, port: int, connect: tuple[Command, bytes], *, qid: int,
                      hdgst: bool = False, ddgst: bool = False, in_capsule: int = 0,
                      sqflow_off: bool = False) -> AsyncIoQueue:
        """A new connection to ``addr:port``: ICReq/ICResp, then ``connect`` (the Fabrics Connect
        command and its data), with CATTR's SQ flow control disable bit set if ``sqflow_off``."""
        loop = asyncio.get_running_loop()
        try:
            _transport, q = await loop.create_connection(
                lambda: cls(hdgst=hdgst, ddgst=ddgst, qid=qid, in_capsule=in_capsule), addr, port)
        except OSError as exc:
            raise ProtocolError(f"cannot connect to {addr}:{port}: {exc.strerror or exc}") from None
        cmd, data = connect
        if sqflow_off:
            cmd.cdw11 |= CATTR_DISABLE_SQFLOW << 16
        replies: list[Reply] = []
        try:
            await q._initialize(pdu.ic_req(hdgst=hdgst, ddgst=ddgst))
            await q.run_window(iter([(cmd, data, 0)]), 1, replies.append)
        except BaseException:
            q.close()
            raise
        cqe = replies[0].cqe
        if cqe.status:
            q.close()
            raise NvmeStatusError(f"Connect (QID {qid})", cqe)
        q.sqflow_off = sqflow_off and cqe.sqhd == SQHD_FLOW_OFF
        return q

    async def _initialize(self, ic_req: list[bytes]) -> None:
        self._ic = asyncio.get_running_loop().create_future()
        self.transport.write(b"".join(ic_req))
        header = await self._ic
        _pfv, _cpda, dgst, self.maxh2cdata = struct.unpack_from("<HBBI", header, 8)
        if bool(dgst & 1) != self.hdgst or bool(dgst & 2) != self.ddgst:
            raise ProtocolError("the target did not accept the requested digests")

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"receive failed: {exc}" if exc else "the target closed the connection"
        self._fail(ProtocolError(reason))

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost reports it

    # ---- windows ------------------------------------------------------------------------------------
    async def run_window(self, commands: Iterator[tuple[Command, bytes, int]], depth: int,
                         on_reply: Callable[[Reply], None]) -> int:
        """Keep ``depth`` of ``commands`` (command, host data, bytes to read) outstanding, a new one
        sent as each completes; ``on_reply`` gets each reply in completion order (its data buffer is
        the command's own; its CID is set on the command before the next one is taken). Returns how
        many completed."""
        def start(slot: int) -> bool:
            item = next(commands, None)
            if item is None:
                return False
            cmd, data, read_len = item
            cmd.cid = self._claim(slot, bytearray(read_len))
            buffers, self._owed[slot] = capsule_buffers(cmd, data, read_len, in_capsule=self.in_capsule,
                                                        hdgst=self.hdgst, ddgst=self.ddgst)
            for buffer in buffers:
                self._out += buffer
            return True

        def complete(slot: int, cqe: bytes | None) -> None:
            cid, data = self._release(slot)
            on_reply(Reply(Cqe.decode(cqe) if cqe is not None else self._success_cqe(cid), data))

        return await self._window(depth, start, complete)

    async def read_window(self, reads: Iterator[tuple[int, int]], depth: int,
                          on_read: Callable[[int, int, bytearray], None], *, nsid: int = 1) -> int:
        """NVM Reads of (SLBA, NLB) from ``reads``, ``depth`` outstanding; ``on_read(slba, status,
        data)`` per completion, ``data`` the slot's buffer (reused by a later Read: read it in the
        callback). Without digests each capsule is the patched template. Returns how many completed."""
        template = read_capsule_template(nsid)
        slbas = [0] * depth
        cid_of, last, dest, got, out = self._cid_of, self._last, self._dest, self._got, self._out
        pack_cid, pack_read = _U16.pack_into, _READ_FIELDS.pack_into  # locals: this runs per Read
        general = not self._plain

        def start(slot: int) -> bool:
            item = next(reads, None)
            if item is None:
                return False
            slba, nlb = item
            if not (0 < nlb <= 0x10000 and 0 <= slba < 1 << 64):
                raise ConfigError(f"Read of {nlb} blocks at LBA {slba}: NLB is 1..65536, SLBA 64 bits")
            length = nlb * LBA_SIZE
            if len(dest[slot]) != length:
                dest[slot] = bytearray(length)
            cid = last[slot] = cid_of[slot] = (last[slot] + _CID_STEP) & 0xFFFF  # _claim, inlined
            got[slot] = 0
            slbas[slot] = slba
            if general:
                cmd = Command.build(IoOpcode.READ, cid, nsid, cdws={10: slba, 11: slba >> 32, 12: nlb - 1})
                for buffer in capsule_buffers(cmd, b"", length, in_capsule=0, hdgst=self.hdgst,
                                              ddgst=self.ddgst)[0]:
                    out.extend(buffer)
                return True
            pack_cid(template, 10, cid)
            pack_read(template, 40, length, SGL_TRANSPORT_DATA_BLOCK, slba, nlb - 1)
            out.extend(template)
            return True

        def complete(slot: int, cqe: bytes | None) -> None:
            cid_of[slot] = -1  # _release, inlined
            on_read(slbas[slot], 0 if cqe is None else (cqe[14] | cqe[15] << 8) >> 1, dest[slot])

        return await self._window(depth, start, complete)

    async def _window(self, depth: int, start: Callable[[int], bool],
                      complete: Callable[[int, bytes | None], None]) -> int:
        if self._error is not None:
            raise self._error
        if self.transport is None or self.transport.is_closing():
            raise ProtocolError("the connection is closed")
        if self._waiter is not None:
            raise ProtocolError("a window is already running on this queue")
        if not 1 <= depth <= _SLOT_MASK + 1:
            raise ConfigError(f"queue depth {depth} outside 1..{_SLOT_MASK + 1}")
        self._grow_slots(depth)
        counts = [0, 0]  # outstanding, completed

        def done(slot: int, cqe: bytes | None) -> None:
            complete(slot, cqe)
            counts[1] += 1
            if not start(slot):
                counts[0] -= 1
                if not counts[0]:
                    self._waiter.set_result(counts[1])

        try:
            counts[0] = sum(start(slot) for slot in range(depth))
        except BaseException as exc:  # some commands claimed, none sent: the queue cannot go on
            self._fail(exc)
            raise
        if not counts[0]:
            return 0
        self._waiter = asyncio.get_running_loop().create_future()
        self._done = done
        self._flush()
        try:
            return await self._waiter
        finally:
            self._waiter, self._done = None, self._stray

    def _grow_slots(self, n: int) -> None:
        for slot in range(len(self._cid_of), n):
            self._cid_of.append(-1)
            self._last.append(slot)
            self._dest.append(bytearray())
            self._got.append(0)
            self._owed.append(memoryview(b""))

    def _claim(self, slot: int, dest: bytearray) -> int:
        cid = self._last[slot] = (self._last[slot] + _CID_STEP) & 0xFFFF
        self._cid_of[slot] = cid
        self._dest[slot] = dest
        self._got[slot] = 0
        return cid

    def _release(self, slot: int) -> tuple[int, bytearray]:
        cid, self._cid_of[slot] = self._cid_of[slot], -1
        return cid, self._dest[slot]

    def _success_cqe(self, cid: int) -> Cqe:
        """The completion a C2HData with SUCCESS stands for: status 0, DW0/DW1 0, SQHD FFFFh."""
        return Cqe(0, 0, SQHD_FLOW_OFF, self.qid, cid, 0, 0)

    def _stray(self, slot: int, cqe: bytes | None) -> None:
        raise ProtocolError(f"a completion for CID {self._cid_of[slot]} outside any window")

    def _flush(self) -> None:
        if self._out:
            self.transport.write(bytes(self._out))
            self._out.clear()

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        for future in (self._waiter, self._ic):
            if future is not None and not future.done():
                future.set_exception(self._error)
        if self.transport is not None:
            self.transport.abort()

    # ---- receiving ----------------------------------------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        pos, end = self._pos, self._end
        if pos == end:
            self._pos = self._end = pos = end = 0
        size = len(self._arena)
        if len(self._arena) - end < _MIN_FREE or pos + self._need > size:
            if self._need > size:  # a PDU larger than the arena: a bigger one
                self._arena = bytearray(self._arena[pos:end]) + bytearray(self._need * 2 - (end - pos))
                self._view = memoryview(self._arena)
            else:  # through a copy: the regions may overlap, and bytearray slice assignment is a memcpy
                self._arena[:end - pos] = bytes(self._view[pos:end])
            self._pos, self._end = 0, end - pos
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        try:
            if self._ic is not None and not self._ic_response():
                return
            self._receive()
            self._flush()
        except Exception as exc:  # the window's caller gets it (on_read's own errors too)
            self._fail(exc)

    def _ic_response(self) -> bool:
        """The ICResp (the first PDU, 128 bytes) handed to :meth:`_initialize`; False: not all here."""
        avail = self._end - self._pos
        if avail >= 8 and self._arena[self._pos] != PduType.IC_RESP:
            raise ProtocolError(f"expected ICResp, got PDU type {self._arena[self._pos]:#x}")
        if avail < _IC_RESP_LEN:
            return False
        header = bytes(self._view[self._pos:self._pos + _IC_RESP_LEN])
        self._pos += _IC_RESP_LEN
        waiter, self._ic = self._ic, None
        waiter.set_result(header)
        return True

    def _receive(self) -> None:
        """Handle every whole PDU between _pos and _end (the in-place paths first)."""
        arena, view, end = self._arena, self._view, self._end
        pos = self._pos
        cid_of, dest, got = self._cid_of, self._dest, self._got
        nslots = len(cid_of)
        plain, sqflow_off, done = self._plain, self.sqflow_off, self._done
        try:
            while end - pos >= 8:
                ptype, flags, hlen, pdo, plen = _CH(arena, pos)
                if plen > end - pos:
                    if not self.head <= plen <= MAX_PDU:
                        raise ProtocolError(f"PDU length {plen} from the target")
                    self._need = plen
                    return
                if plain and ptype == _C2H_DATA and hlen == HEADER == pdo and not flags & _DIGEST_FLAGS:
                    cccid, _ttag, offset, length = _DATA(arena, pos + 8)
                    slot = cccid & _SLOT_MASK
                    if (slot >= nslots or cid_of[slot] != cccid or length != plen - HEADER
                            or offset + length > len(dest[slot])):
                        raise ProtocolError(f"C2HData for CID {cccid} at {offset}+{length}: not a range "
                                            "of a command outstanding")
                    dest[slot][offset:offset + length] = view[pos + HEADER:pos + plen]
                    got[slot] += length
                    pos += plen
                    if flags & pdu.FLAG_DATA_SUCCESS:
                        self._pos = pos
                        if (flags & _SUCCESS_LAST == _SUCCESS_LAST and sqflow_off
                                and got[slot] == len(dest[slot])):
                            done(slot, None)  # the Read's completion (checked as _data_success does)
                        else:
                            self._data_success(slot, flags)
                    continue
                if plain and ptype == _CAPSULE_RESP and plen == hlen == HEADER and not pdo and not flags:
                    cid = _U16.unpack_from(arena, pos + 20)[0]
                    slot = cid & _SLOT_MASK
                    if slot >= nslots or cid_of[slot] != cid:
                        raise ProtocolError(f"CapsuleResp for CID {cid}, which is not outstanding")
                    pos += plen
                    self._pos = pos
                    done(slot, bytes(view[pos - 16:pos]))
                    continue
                if plen < HEADER:
                    raise ProtocolError(f"PDU length {plen} from the target")
                pos += plen
                self._pos = pos
                self._general(view[pos - plen:pos])
            self._need = 0
        finally:
            self._pos = pos

    def _data_success(self, slot: int, flags: int) -> None:
        """A C2HData with SUCCESS: the Read's completion, if SQ flow control was disabled at Connect
        (NVMe/TCP 1.0: only then, and only on the last PDU of the command's data)."""
        cid = self._cid_of[slot]
        if not self.sqflow_off:
            raise ProtocolError(f"C2HData with SUCCESS set (CCCID {cid}) while SQ flow control is on "
                                "(the controller did not disable it at Connect)")
        if flags & _SUCCESS_LAST != _SUCCESS_LAST:
            raise ProtocolError(f"C2HData with SUCCESS but not LAST_PDU (CCCID {cid})")
        if self._got[slot] != len(self._dest[slot]):
            raise ProtocolError(f"C2HData with SUCCESS after {self._got[slot]} of "
                                f"{len(self._dest[slot])} bytes (CCCID {cid})")
        self._done(slot, None)

    def _general(self, raw: memoryview) -> None:
        """Any PDU the in-place paths do not take: parsed and checked by ``pdu.parse``."""
        pdu.validate_common(bytes(raw[:8]), max_data=MAX_PDU)  # a known type, its HLEN, PLEN >= HLEN
        if raw[0] == PduType.C2H_TERM_REQ:
            fes, fei = struct.unpack_from("<HI", raw, 8)
            raise ProtocolError(f"target terminated the connection: FES {fes:#x}, FEI {fei}")
        p = pdu.parse(raw, hdgst=self.hdgst, ddgst=self.ddgst)
        if p.flags & 0x80:
            raise ProtocolError("data digest mismatch on a PDU from the target")
        if p.type == PduType.CAPSULE_RESP:
            cid = _U16.unpack_from(p.header, 20)[0]
            self._done(self._outstanding(cid, "CapsuleResp"), p.header[8:24])
            return
        if p.type not in (PduType.C2H_DATA, PduType.R2T):
            raise ProtocolError(f"unexpected PDU type {p.type:#x} from the target")
        cccid, ttag, offset, length = pdu.data_fields(p)
        slot = self._outstanding(cccid, PduType(p.type).name)
        if p.type == PduType.R2T:
            owed = self._owed[slot]
            if offset + length > len(owed):
                raise ProtocolError(f"R2T for CID {cccid} at {offset}+{length} out of range")
            for buffers in h2c_data_pdus(cccid, ttag, owed[offset:offset + length], offset,
                                         maxh2cdata=self.maxh2cdata, hdgst=self.hdgst, ddgst=self.ddgst):
                for buffer in buffers:
                    self._out += buffer
            return
        dest = self._dest[slot]
        if length != len(p.data) or offset + length > len(dest):
            raise ProtocolError(f"C2HData for CID {cccid} at {offset}+{length} out of range")
        dest[offset:offset + length] = p.data
        self._got[slot] += length
        if p.flags & pdu.FLAG_DATA_SUCCESS:
            self._data_success(slot, p.flags)

    def _outstanding(self, cid: int, what: str) -> int:
        slot = cid & _SLOT_MASK
        if slot >= len(self._cid_of) or self._cid_of[slot] != cid:
            raise ProtocolError(f"{what} for CID {cid}, which is not outstanding")
        return slot
