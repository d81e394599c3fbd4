"""An NVMe/TCP I/O queue on asyncio streams: many queues, one event loop.

``AsyncIoQueue`` is the host side of one I/O queue driven the way a plain asyncio client drives a
request/response server: ``asyncio.open_connection``, ``StreamWriter.write`` for capsules and
``StreamReader.readexactly`` for every PDU the target sends. The protocol is ``client.py``'s (capsule
building, the Connect command) and ``pdu.py``'s (PDU parsing and digest checks); only the I/O differs.
The admin queue and the controller's enabling stay with the blocking :class:`NvmeTcpHost`.

Every PDU a target sends after ICResp has a 24-byte header (plus its digest). While a command still
owes its CapsuleResp, at least one more PDU will arrive, so a C2HData's data and the next PDU's header
are read in one ``readexactly``: a 4 KiB Read costs two reads from the stream, not four.
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
    take_data_pdu,
)
from npukit.devices.nvme.command import Command, Cqe
from npukit.devices.nvme.pdu import PduType
from npukit.devices.nvme.spec import ProtocolError

HEADER = 24  # HLEN of every PDU a target sends after ICResp (CapsuleResp, C2HData, R2T, C2HTermReq)
MAX_PDU = 64 << 20
_DATA_FIELDS = struct.Struct("<HHII")  # CCCID, TTAG, DATAO, DATAL of a C2HData
_IC_RESP_LEN = 128


class AsyncIoQueue:
    """One connected I/O queue; build it with :meth:`open`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, hdgst: bool,
                 ddgst: bool, maxh2cdata: int, in_capsule: int) -> None:
        self.reader, self.writer = reader, writer
        self.hdgst, self.ddgst, self.maxh2cdata = hdgst, ddgst, maxh2cdata
        self.in_capsule = in_capsule
        self.head = HEADER + (pdu.DIGEST_SIZE if hdgst else 0)  # bytes read before a PDU's data
        self._cid = 0

    @classmethod
    async def open(cls, host: NvmeTcpHost, qid: int) -> AsyncIoQueue:
        """Connect I/O queue ``qid`` of ``host``'s controller (ICReq/ICResp, then Fabrics Connect).
        ``qid`` must not already be connected by ``host`` itself."""
        try:
            reader, writer = await asyncio.open_connection(host.addr, host.port)
        except OSError as exc:
            raise ProtocolError(f"cannot connect to {host.addr}:{host.port}: {exc.strerror or exc}") from None
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            writer.write(b"".join(pdu.ic_req(hdgst=host.hdgst, ddgst=host.ddgst)))
            resp = pdu.parse(await _exactly(reader, _IC_RESP_LEN), hdgst=False, ddgst=False)
            if resp.type != PduType.IC_RESP:
                raise ProtocolError(f"expected ICResp, got PDU type {resp.type:#x}")
            _pfv, _cpda, dgst, maxh2cdata = struct.unpack_from("<HBBI", resp.header, 8)
            if bool(dgst & 1) != host.hdgst or bool(dgst & 2) != host.ddgst:
                raise ProtocolError("the target did not accept the requested digests")
            ioccsz = int(host.identify.get("ioccsz") or 0)
            q = cls(reader, writer, hdgst=host.hdgst, ddgst=host.ddgst, maxh2cdata=maxh2cdata,
                    in_capsule=max(ioccsz * 16 - 64, 0))
            cmd, data = host.connect_command(qid, q.next_cid())
            replies: list[Reply] = []
            await q.run_window(iter([(cmd, data, 0)]), 1, replies.append)
        except BaseException:
            writer.close()
            raise
        if replies[0].cqe.status:
            writer.close()
            raise NvmeStatusError(f"Connect (QID {qid})", replies[0].cqe)
        return q

    def next_cid(self) -> int:
        self._cid = (self._cid + 1) & 0xFFFF
        return self._cid

    def close(self) -> None:
        self.writer.close()

    async def run_window(self, commands: Iterator[tuple[Command, bytes, int]], depth: int,
                         on_reply: Callable[[Reply], None]) -> int:
        """Keep ``depth`` of ``commands`` (command, host data, bytes to read) outstanding, a new one
        sent as each completes; ``on_reply`` gets each reply in completion order (its data buffer is
        the command's own). Returns how many completed."""
        owed: dict[int, memoryview] = {}
        received: dict[int, bytearray] = {}

        def submit() -> int:
            item = next(commands, None)
            if item is None:
                return 0
            cmd, data, read_len = item
            cmd.cid = self.next_cid()
            buffers, owed[cmd.cid] = capsule_buffers(cmd, data, read_len, in_capsule=self.in_capsule,
                                                     hdgst=self.hdgst, ddgst=self.ddgst)
            received[cmd.cid] = bytearray(read_len)
            self.writer.writelines(buffers)
            return 1

        outstanding = sum(submit() for _ in range(depth))
        done = 0
        header = await _exactly(self.reader, self.head) if outstanding else b""
        while outstanding:
            ptype, _flags, _hlen, _pdo, plen = pdu.CH.unpack_from(header)
            if not self.head <= plen <= MAX_PDU:
                raise ProtocolError(f"PDU length {plen} from the target")
            if ptype == PduType.CAPSULE_RESP:
                # without digests a 24-byte response is its header (what pdu.parse would return)
                plain = plen == HEADER and not header[1] and not header[3] and not self.hdgst
                cqe = Cqe.decode(header[8:24] if plain else self._parse(header, plen).header[8:24])
                if cqe.cid not in received:
                    raise ProtocolError(f"CapsuleResp for CID {cqe.cid}, which is not outstanding")
                owed.pop(cqe.cid, None)
                outstanding += submit() - 1
                done += 1
                on_reply(Reply(cqe, received.pop(cqe.cid)))
                header = await _exactly(self.reader, self.head) if outstanding else b""
                continue
            if ptype == PduType.C2H_DATA:  # its command's CapsuleResp is still to come: so is a header
                if header[1] & pdu.FLAG_DATA_SUCCESS:  # ...unless SUCCESS stands in for it, not allowed here
                    raise ProtocolError(f"C2HData with SUCCESS set (CCCID {header[8] | header[9] << 8}) "
                                        "while SQ flow control is on (the host's Connect kept it)")
                rest = await _exactly(self.reader, plen)
                if not self._place_plain(header, rest, plen, received):
                    whole = header + rest
                    self._data_pdu(self._parse(whole, plen), received, owed)
                header = rest[plen - self.head:]
                continue
            # an R2T (or an error): the target waits for its H2CData before it sends more
            whole = header + await _exactly(self.reader, plen - self.head)
            self._data_pdu(self._parse(whole, plen), received, owed)
            await self.writer.drain()
            header = await _exactly(self.reader, self.head)
        return done

    def _place_plain(self, header: bytes, rest: bytes, plen: int, received: dict[int, bytearray]) -> bool:
        """A C2HData without digests or padding (what ``pdu.parse`` accepts as such) copied into its
        command's buffer without building a Pdu (``TcpQueue._place``'s shortcut); False: take the
        ordinary path, which reports whatever is wrong."""
        _ptype, flags, hlen, pdo, _plen = pdu.CH.unpack_from(header)
        if self.hdgst or self.ddgst or flags & (pdu.FLAG_HDGST | pdu.FLAG_DDGST) or pdo != HEADER:
            return False
        cccid, _ttag, offset, length = _DATA_FIELDS.unpack_from(header, 8)
        dest = received.get(cccid)
        if hlen != HEADER or dest is None or length != plen - HEADER or offset + length > len(dest):
            return False
        dest[offset:offset + length] = memoryview(rest)[:length]
        return True

    def _parse(self, raw: bytes, plen: int) -> pdu.Pdu:
        if raw[0] == PduType.C2H_TERM_REQ:
            fes, fei = struct.unpack_from("<HI", raw, 8)
            raise ProtocolError(f"target terminated the connection: FES {fes:#x}, FEI {fei}")
        p = pdu.parse(memoryview(raw)[:plen], hdgst=self.hdgst, ddgst=self.ddgst)
        if p.flags & 0x80:
            raise ProtocolError("data digest mismatch on a PDU from the target")
        return p

    def _data_pdu(self, p: pdu.Pdu, received: dict[int, bytearray], owed: dict[int, memoryview]) -> None:
        """A C2HData (bytes of a read, copied into its buffer) or an R2T (send the bytes asked for)."""
        r2t = take_data_pdu(p, received, owed)
        if r2t is not None:
            for buffers in h2c_data_pdus(*r2t, maxh2cdata=self.maxh2cdata, hdgst=self.hdgst,
                                         ddgst=self.ddgst):
                self.writer.writelines(buffers)


async def _exactly(reader: asyncio.StreamReader, n: int) -> bytes:
    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError:
        raise ProtocolError("the target closed the connection") from None
    except OSError as exc:
        raise ProtocolError(f"receive failed: {exc}") from None
