"""An NVMe/TCP initiator (host) on blocking sockets: the library behind ``npukit nvme`` verbs.

``NvmeTcpHost`` connects an admin queue (and optionally I/O queues, each on its own connection),
enables the controller through properties, and offers admin/I/O passthrough plus helpers shaped like
nvme-cli's verbs. A command that completes with an error raises :class:`NvmeStatusError`.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from npukit.devices.nvme import pdu
from npukit.devices.nvme.command import (
    SGL_DATA_BLOCK_OFFSET,
    SGL_TRANSPORT_DATA_BLOCK,
    Command,
    Cqe,
    sgl_descriptor,
)
from npukit.devices.nvme.fabrics import DYNAMIC_CNTLID, ConnectData
from npukit.devices.nvme.identify import CONTROLLER_FIELDS, NAMESPACE_FIELDS, unpack_fields
from npukit.devices.nvme.logs import parse_discovery, parse_firmware_slots, parse_smart
from npukit.devices.nvme.pdu import PduType
from npukit.devices.nvme.spec import (
    DISCOVERY_NQN,
    LBA_SIZE,
    NSID_ALL,
    AdminOpcode,
    FabricsType,
    IoOpcode,
    ProtocolError,
    Register,
    status_name,
)
from npukit.errors import NpukitError

PSDT_SGL = 0x40
PLACED = 0x100  # Pdu.flags: the PDU's data was received into the caller's buffer
RECV_BUFFER = 1 << 20
LARGE_PAYLOAD = 32 << 10  # a C2HData payload this large is received straight into its buffer...
PEEK_AFTER_LARGE = 4 << 10  # ...so after one, a receive for PDU headers takes at most this much
_NO_DATA = memoryview(b"")
_DATA_FIELDS = struct.Struct("<HHII")  # CCCID, TTAG, DATAO, DATAL of C2HData/H2CData/R2T
_CAPSULE_HEAD = pdu.CH.pack(PduType.CAPSULE_CMD, 0, 72, 0, 72)  # a CapsuleCmd without data or digests


class NvmeStatusError(NpukitError):
    """A command completed with a non-zero status; ``cqe`` holds the whole completion."""

    def __init__(self, what: str, cqe: Cqe) -> None:
        self.cqe = cqe
        dnr = " DNR" if cqe.dnr else ""
        super().__init__(f"{what}: {status_name(cqe.status)} (SCT {cqe.sct}, SC {cqe.sc:#04x}{dnr})")


def default_hostnqn() -> str:
    return f"nqn.2014-08.org.nvmexpress:uuid:{uuid.uuid5(uuid.NAMESPACE_DNS, socket.gethostname())}"


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection whose receive buffer (set before connecting, so that the window scale allows
    it) holds a whole batch of 128 KiB reads: the target need not wait for window updates."""
    last: OSError | None = None
    for family, kind, proto, _name, addr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER * 4)
            sock.settimeout(timeout)
            sock.connect(addr)
            # blocking mode with kernel timeouts instead of Python's poll-then-recv: MSG_WAITALL then
            # takes a whole C2HData payload in one system call
            sock.settimeout(None)
            tv = struct.pack("ll", int(timeout), int((timeout % 1) * 1e6))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise last or OSError(f"no address for {host}")


def capsule_buffers(cmd: Command, data: bytes | memoryview, read_len: int, *, in_capsule: int,
                    hdgst: bool, ddgst: bool) -> tuple[list[bytes | memoryview], memoryview]:
    """A CapsuleCmd's buffers (SGL chosen from the data size: in the capsule up to ``in_capsule``
    bytes, else a transport data block) and the data owed via R2T. Sets ``cmd``'s PSDT and DPTR."""
    cmd.flags = (cmd.flags & 0x3F) | PSDT_SGL
    data = memoryview(data) if data else memoryview(b"")
    inline = b""
    if len(data) and len(data) <= in_capsule:
        cmd.dptr = sgl_descriptor(0, len(data), SGL_DATA_BLOCK_OFFSET)
        inline = data
    elif len(data):
        cmd.dptr = sgl_descriptor(0, len(data), SGL_TRANSPORT_DATA_BLOCK)
    else:
        cmd.dptr = sgl_descriptor(0, read_len, SGL_TRANSPORT_DATA_BLOCK)
    if not len(data) and not hdgst:  # what pdu.capsule_cmd builds for it, without its checks
        return [_CAPSULE_HEAD + cmd.encode()], data
    buffers = pdu.capsule_cmd(cmd.encode(), inline, hdgst=hdgst, ddgst=ddgst)
    return buffers, (data if not inline else memoryview(b""))


def take_data_pdu(p: pdu.Pdu, received: dict[int, bytearray],
                  owed: dict[int, memoryview]) -> tuple[int, int, memoryview, int] | None:
    """A C2HData or R2T from the target, checked against the commands outstanding: a C2HData's bytes go
    into its command's buffer in ``received`` (None returned); an R2T returns (CCCID, TTAG, the bytes it
    asks for out of ``owed``, their offset) for the H2CData to send. Anything else is a ProtocolError."""
    cccid, ttag, offset, length = pdu.data_fields(p)
    if p.type == PduType.C2H_DATA:
        dest = received.get(cccid)
        placed = p.flags & PLACED
        if dest is None or offset + length > len(dest) or (not placed and length != len(p.data)):
            raise ProtocolError(f"C2HData for CID {cccid} at {offset}+{length} out of range")
        if not placed:
            dest[offset:offset + length] = p.data
        return None
    if p.type == PduType.R2T:
        data = owed.get(cccid)
        if data is None or offset + length > len(data):
            raise ProtocolError(f"R2T for CID {cccid} at {offset}+{length} out of range")
        return cccid, ttag, data[offset:offset + length], offset
    raise ProtocolError(f"unexpected PDU type {p.type:#x} from the target")


def h2c_data_pdus(cid: int, ttag: int, data: memoryview, base: int, *, maxh2cdata: int, hdgst: bool,
                  ddgst: bool) -> Iterator[list[bytes | memoryview]]:
    """The H2CData PDUs (each a list of buffers) that carry ``data``, at offset ``base`` of the command's
    data, in pieces of at most ``maxh2cdata`` bytes (0: one piece)."""
    step = maxh2cdata or len(data)
    for start in range(0, len(data), step):
        yield pdu.data_pdu(PduType.H2C_DATA, cid, ttag, base + start, data[start:start + step],
                           last=start + step >= len(data), hdgst=hdgst, ddgst=ddgst)


@dataclass
class Reply:
    cqe: Cqe
    data: bytes | bytearray  # the command's data, received in place (no copy)


class TcpQueue:
    """One NVMe/TCP connection: ICReq/ICResp, then commands one at a time (plus stray AER replies)."""

    def __init__(self, host: str, port: int, *, hdgst: bool = False, ddgst: bool = False,
                 timeout: float = 10.0, hpda: int = 0) -> None:
        try:
            self.sock = _connect(host, port, timeout)
        except OSError as exc:
            raise ProtocolError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._rbuf = bytearray(RECV_BUFFER)  # bytes received and not yet parsed: _rbuf[_rpos:_rend]
        self._rpos = self._rend = 0
        self._large = False  # the last C2HData placed was large (see _buffered)
        self.hdgst, self.ddgst, self.hpda = hdgst, ddgst, hpda
        self.in_capsule = 8192
        self._cid = 0
        self.stray: list[Cqe] = []
        self.maxh2cdata = 0
        self._send(pdu.ic_req(hpda=hpda, hdgst=hdgst, ddgst=ddgst))
        resp = self.read_pdu(ic=True)
        if resp.type != PduType.IC_RESP:
            raise ProtocolError(f"expected ICResp, got PDU type {resp.type:#x}")
        _pfv, cpda, dgst, self.maxh2cdata = struct.unpack_from("<HBBI", resp.header, 8)
        if bool(dgst & 1) != hdgst or bool(dgst & 2) != ddgst:
            raise ProtocolError("the target did not accept the requested digests")
        self.cpda = cpda

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def _send(self, buffers: list[bytes | memoryview]) -> None:
        try:
            self.sock.sendall(b"".join(buffers))
        except OSError as exc:
            raise ProtocolError(f"send failed: {exc}") from None

    def send_raw(self, data: bytes) -> None:
        self._send([data])

    def _buffered(self, n: int) -> None:
        """Receive until ``n`` unparsed bytes are buffered; each recv takes whatever has arrived (one
        system call for a burst of PDUs, instead of two per PDU)."""
        if self._rend - self._rpos >= n:
            return
        if self._rpos + n > len(self._rbuf):  # move the unparsed tail to the front (or grow)
            tail = bytes(self._rbuf[self._rpos:self._rend])
            if n > len(self._rbuf):
                self._rbuf = bytearray(n)
            self._rbuf[:len(tail)] = tail
            self._rpos, self._rend = 0, len(tail)
        view = memoryview(self._rbuf)
        # after a large placed payload the next one is likely large too: take only the PDU headers
        # and a little more, so that its data goes straight to its buffer (one copy, not two)
        limit = self._rpos + max(n, PEEK_AFTER_LARGE) if self._large else len(self._rbuf)
        while self._rend - self._rpos < n:
            try:
                k = self.sock.recv_into(view[self._rend:limit])
            except OSError as exc:
                raise ProtocolError(f"receive failed: {exc}") from None
            if k == 0:
                raise ProtocolError("the target closed the connection")
            self._rend += k

    def _recv_exact(self, n: int) -> bytes:
        self._buffered(n)
        out = bytes(self._rbuf[self._rpos:self._rpos + n])
        self._rpos += n
        return out

    def read_pdu(self, *, ic: bool = False, sink: dict[int, bytearray] | None = None) -> pdu.Pdu:
        """The next PDU. Its ``data`` is a view of the receive buffer, valid until the next call.

        With ``sink`` (CID → buffer of the command's data), C2HData for a CID in it is received
        straight into that buffer at DATAO (one copy fewer per byte) and comes back flagged PLACED
        with empty ``data``."""
        self._buffered(pdu.CH.size)
        ptype, flags, hlen, pdo, plen = pdu.CH.unpack_from(self._rbuf, self._rpos)
        if ic and ptype not in (PduType.IC_RESP, PduType.C2H_TERM_REQ):  # its very first reply
            head = bytes(self._rbuf[self._rpos:self._rpos + 8])
            raise ProtocolError(f"not an NVMe/TCP target: its first reply is not an ICResp PDU "
                                f"(first bytes {head!r})")
        if plen < 8 or plen > 64 << 20:
            raise ProtocolError(f"PDU length {plen} from the target")
        if sink is not None and ptype == PduType.C2H_DATA and not self.ddgst and hlen == 24 and pdo:
            placed = self._place(flags, hlen, pdo, plen, sink)
            if placed is not None:
                return placed
        if (ptype == PduType.CAPSULE_RESP and plen == hlen == 24 and not pdo and not flags & 3
                and not self.hdgst):
            # what pdu.parse returns for a response without digests, without its checks' work
            self._buffered(24)
            header = bytes(self._rbuf[self._rpos:self._rpos + 24])
            self._rpos += 24
            return pdu.Pdu(PduType.CAPSULE_RESP, flags, 24, 0, 24, header, _NO_DATA)
        self._buffered(plen)
        raw = memoryview(self._rbuf)[self._rpos:self._rpos + plen]
        self._rpos += plen
        if raw[0] == PduType.C2H_TERM_REQ:
            fes, fei = struct.unpack_from("<HI", raw, 8)
            raise ProtocolError(f"target terminated the connection: FES {fes:#x}, FEI {fei}")
        return pdu.parse(raw, hdgst=self.hdgst and not ic, ddgst=self.ddgst and not ic)

    def _place(self, flags: int, hlen: int, pdo: int, plen: int,
               sink: dict[int, bytearray]) -> pdu.Pdu | None:
        """Receive a C2HData's data into its command's buffer; None to take the ordinary path."""
        head = hlen + (pdu.DIGEST_SIZE if self.hdgst else 0)
        if pdo < head or plen < pdo or bool(flags & pdu.FLAG_HDGST) != self.hdgst:
            return None
        self._buffered(pdo)
        start = self._rpos
        if self.hdgst and self._rbuf[start + hlen:start + head] != pdu.crc(self._rbuf[start:start + hlen]):
            return None  # the ordinary path reports it
        cccid, _ttag, offset, length = _DATA_FIELDS.unpack_from(self._rbuf, start + 8)
        dest = sink.get(cccid)
        if dest is None or length != plen - pdo or offset + length > len(dest):
            return None
        header = bytes(self._rbuf[start:start + hlen])
        self._rpos += pdo
        self._large = length >= LARGE_PAYLOAD
        view = memoryview(dest)[offset:offset + length]
        got = min(self._rend - self._rpos, length)
        view[:got] = memoryview(self._rbuf)[self._rpos:self._rpos + got]
        self._rpos += got
        while got < length:
            try:
                k = self.sock.recv_into(view[got:], 0, socket.MSG_WAITALL)
            except OSError as exc:
                raise ProtocolError(f"receive failed: {exc}") from None
            if k == 0:
                raise ProtocolError("the target closed the connection")
            got += k
        return pdu.Pdu(PduType.C2H_DATA, flags | PLACED, hlen, pdo, plen, header, memoryview(b""))

    def next_cid(self) -> int:
        self._cid = (self._cid + 1) & 0xFFFF
        return self._cid

    def send_command(self, cmd: Command, data: bytes | memoryview = b"", read_len: int = 0) -> memoryview:
        """Send a CapsuleCmd (SGL chosen from the data size); returns the data still owed via R2T."""
        buffers, owed = self._capsule(cmd, data, read_len)
        self._send(buffers)
        return owed

    def _capsule(self, cmd: Command, data: bytes | memoryview,
                 read_len: int) -> tuple[list[bytes | memoryview], memoryview]:
        return capsule_buffers(cmd, data, read_len, in_capsule=self.in_capsule, hdgst=self.hdgst,
                               ddgst=self.ddgst)

    def submit(self, cmd: Command, data: bytes | memoryview = b"", read_len: int = 0) -> Reply:
        """Send one command (host data ``data`` or ``read_len`` bytes to read) and wait for its reply."""
        pending = self.send_command(cmd, data, read_len)
        return self.wait(cmd.cid, pending, read_len)

    def wait(self, cid: int, pending: memoryview | None = None, read_len: int = 0) -> Reply:
        pending = pending if pending is not None else memoryview(b"")
        received = bytearray(read_len)
        for cqe in self.stray:
            if cqe.cid == cid:
                self.stray.remove(cqe)
                return Reply(cqe, received)
        sink, owed = {cid: received}, {cid: pending}
        while True:
            p = self.read_pdu(sink=sink)
            if p.flags & 0x80:
                raise ProtocolError("data digest mismatch on a PDU from the target")
            if p.type == PduType.CAPSULE_RESP:
                cqe = Cqe.decode(p.header[8:24])
                if cqe.cid == cid:
                    return Reply(cqe, received)
                self.stray.append(cqe)
            else:
                self._data_pdu(p, sink, owed)

    def run_batch(self, batch: list[tuple[Command, bytes, int]]) -> list[Reply]:
        """Send every (command, data, read_len) before reading any reply: queue depth len(batch).
        R2Ts and C2HData are matched to their commands by CCCID; replies come back in batch order."""
        owed, received, replies, out = {}, {}, {}, []
        for cmd, data, read_len in batch:
            cmd.cid = self.next_cid()
            buffers, owed[cmd.cid] = self._capsule(cmd, data, read_len)
            out += buffers
            received[cmd.cid] = bytearray(read_len)
        self._send(out)  # the whole batch in one system call
        while len(replies) < len(batch):
            p = self.read_pdu(sink=received)
            if p.flags & 0x80:
                raise ProtocolError("data digest mismatch on a PDU from the target")
            if p.type == PduType.CAPSULE_RESP:
                cqe = Cqe.decode(p.header[8:24])
                replies[cqe.cid] = Reply(cqe, received.get(cqe.cid, bytearray()))
            else:
                self._data_pdu(p, received, owed)
        return [replies[cmd.cid] for cmd, _, _ in batch]

    def run_window(self, commands: Iterator[tuple[Command, bytes, int]], depth: int, *,
                   recycle: bool = False) -> Iterator[Reply]:
        """Keep ``depth`` commands outstanding: a new one is sent as each completes (a sliding window,
        so the target never waits for the host to finish a whole batch). Yields replies in
        completion order, each with ``cid`` set on its CQE. New capsules wait while completions are
        still buffered here and leave together before the next receive (one send per burst: each
        send costs the target a wake-up).

        ``recycle``: a reply's data buffer is reused for a later command once the next reply is asked
        for (as a driver reuses its DMA buffers), so read it before that; a fresh zeroed buffer per
        128 KiB read costs more than receiving it (mmap, page faults, munmap)."""
        owed, received, source = {}, {}, iter(commands)
        unsent: list[bytes | memoryview] = []
        spare: dict[int, list[bytearray]] = {}  # read length -> buffers free for reuse (recycle)

        def submit() -> bool:
            item = next(source, None)
            if item is None:
                return False
            cmd, data, read_len = item
            cmd.cid = self.next_cid()
            buffers, owed[cmd.cid] = self._capsule(cmd, data, read_len)
            free = spare.get(read_len)
            received[cmd.cid] = free.pop() if free else bytearray(read_len)
            unsent.extend(buffers)
            return True

        outstanding = sum(submit() for _ in range(depth))
        while outstanding:
            if unsent and self._rend - self._rpos < pdu.CH.size:  # about to wait for the target
                self._send(unsent)
                unsent.clear()
            p = self.read_pdu(sink=received)
            if p.flags & 0x80:
                raise ProtocolError("data digest mismatch on a PDU from the target")
            if p.flags & PLACED:  # C2HData already in its command's buffer (_place checked CID, range)
                continue
            if p.type == PduType.CAPSULE_RESP:
                cqe = Cqe.decode(p.header[8:24])
                if cqe.cid not in received:
                    self.stray.append(cqe)
                    continue
                owed.pop(cqe.cid, None)
                outstanding += submit() - 1
                data = received.pop(cqe.cid)
                yield Reply(cqe, data)
                if recycle:
                    spare.setdefault(len(data), []).append(data)
            else:
                self._data_pdu(p, received, owed)

    def _data_pdu(self, p: pdu.Pdu, received: dict[int, bytearray], owed: dict[int, memoryview]) -> None:
        """A C2HData (bytes of a read) or an R2T (send the requested bytes of a write)."""
        r2t = take_data_pdu(p, received, owed)
        if r2t is not None:
            self._send_h2c(*r2t)

    def _send_h2c(self, cid: int, ttag: int, data: memoryview, base: int) -> None:
        for buffers in h2c_data_pdus(cid, ttag, data, base, maxh2cdata=self.maxh2cdata, hdgst=self.hdgst,
                                     ddgst=self.ddgst):
            self._send(buffers)


def _fabrics(fctype: int, cid: int, **cdws: int) -> Command:
    cmd = Command.build(AdminOpcode.FABRICS, cid, nsid=fctype, cdws={int(k[3:]): v for k, v in cdws.items()})
    return cmd


def _property_cmd(fctype: int, cid: int, offset: int, size: int, value: int = 0) -> Command:
    raw = bytearray(_fabrics(fctype, cid).encode())
    raw[40] = 1 if size == 8 else 0
    struct.pack_into("<I", raw, 44, offset)
    struct.pack_into("<Q", raw, 48, value)
    return Command.decode(bytes(raw))


class NvmeTcpHost:
    """A host's association with one controller: admin queue plus ``io_queues`` I/O queues."""

    def __init__(self, addr: str, port: int, subnqn: str, *, hostnqn: str | None = None,
                 hostid: bytes | None = None, hdgst: bool = False, ddgst: bool = False, kato_ms: int = 0,
                 io_queues: int = 1, queue_size: int = 32, timeout: float = 10.0,
                 spare_queues: int = 0) -> None:
        self.addr, self.port, self.subnqn = addr, port, subnqn
        self.hostnqn = hostnqn or default_hostnqn()
        self.hostid = hostid or uuid.uuid5(uuid.NAMESPACE_URL, self.hostnqn).bytes
        self.hdgst, self.ddgst, self.timeout = hdgst, ddgst, timeout
        self.queue_size = queue_size
        self.cntlid = DYNAMIC_CNTLID  # the controller ID the admin Connect returns
        self.admin_q = self._open_queue(0, DYNAMIC_CNTLID, kato_ms)
        self.identify: dict[str, object] = {}
        self.io_qs: list[TcpQueue] = []
        try:
            self._enable()
            self.identify = unpack_fields(CONTROLLER_FIELDS, self.admin(
                Command.build(AdminOpcode.IDENTIFY, cdws={10: 1}), read_len=4096).data)
            ioccsz = int(self.identify.get("ioccsz") or 0)
            if io_queues + spare_queues and subnqn != DISCOVERY_NQN:
                # spare_queues: allocated after these, connected by someone else (an AsyncIoQueue)
                last = io_queues + spare_queues - 1
                granted = self.set_features(0x07, last | (last << 16))
                n = min(io_queues, (granted & 0xFFFF) + 1)
                for qid in range(1, n + 1):
                    q = self._open_queue(qid, self.cntlid, 0)
                    q.in_capsule = max(ioccsz * 16 - 64, 0)
                    self.io_qs.append(q)
        except BaseException:
            self.close()
            raise

    def _open_queue(self, qid: int, cntlid: int, kato_ms: int) -> TcpQueue:
        q = TcpQueue(self.addr, self.port, hdgst=self.hdgst, ddgst=self.ddgst, timeout=self.timeout)
        cmd, data = self.connect_command(qid, q.next_cid(), cntlid, kato_ms)
        reply = q.submit(cmd, data)
        if reply.cqe.status:
            q.close()
            raise NvmeStatusError(f"Connect (QID {qid})", reply.cqe)
        if qid == 0:
            self.cntlid = reply.cqe.dw0 & 0xFFFF
        return q

    def connect_command(self, qid: int, cid: int, cntlid: int | None = None,
                        kato_ms: int = 0) -> tuple[Command, bytes]:
        """The Fabrics Connect command and its data for queue ``qid`` of this association (an I/O
        queue joins the controller the admin Connect returned)."""
        data = ConnectData(self.hostid, self.cntlid if cntlid is None else cntlid, self.subnqn,
                           self.hostnqn).encode()
        size = 32 if qid == 0 else self.queue_size
        return _fabrics(FabricsType.CONNECT, cid, cdw10=qid << 16, cdw11=size - 1, cdw12=kato_ms), data

    def _enable(self) -> None:
        self.cap = self.property_get(Register.CAP, 8)
        cc = 1 | (6 << 16) | (4 << 20)
        self.property_set(Register.CC, cc)
        deadline = time.monotonic() + ((self.cap >> 24) & 0xFF) * 0.5 + 1
        while not self.property_get(Register.CSTS) & 1:
            if time.monotonic() > deadline:
                raise ProtocolError("the controller did not become ready (CSTS.RDY)")
            time.sleep(0.01)

    # passthrough ----------------------------------------------------------------------------------
    def admin(self, cmd: Command, data: bytes = b"", read_len: int = 0, *, check: bool = True) -> Reply:
        return self._submit(self.admin_q, cmd, data, read_len, check)

    def io(self, cmd: Command, data: bytes = b"", read_len: int = 0, *, qid: int = 1,
           check: bool = True) -> Reply:
        if not 1 <= qid <= len(self.io_qs):
            raise NpukitError(f"I/O queue {qid} is not connected ({len(self.io_qs)} connected)")
        return self._submit(self.io_qs[qid - 1], cmd, data, read_len, check)

    @staticmethod
    def _submit(q: TcpQueue, cmd: Command, data: bytes, read_len: int, check: bool) -> Reply:
        cmd.cid = q.next_cid()
        reply = q.submit(cmd, data, read_len)
        if check and reply.cqe.status:
            raise NvmeStatusError(f"opcode {cmd.opcode:#04x}", reply.cqe)
        return reply

    def property_get(self, offset: int, size: int = 4) -> int:
        cmd = _property_cmd(FabricsType.PROPERTY_GET, 0, offset, size)
        reply = self.admin(cmd)
        return reply.cqe.dw0 | (reply.cqe.dw1 << 32 if size == 8 else 0)

    def property_set(self, offset: int, value: int, size: int = 4) -> None:
        self.admin(_property_cmd(FabricsType.PROPERTY_SET, 0, offset, size, value))

    # helpers shaped like nvme-cli verbs -------------------------------------------------------------
    def identify_raw(self, cns: int, nsid: int = 0, cntid: int = 0) -> bytes:
        return self.admin(Command.build(AdminOpcode.IDENTIFY, nsid=nsid, cdws={10: cns | (cntid << 16)}),
                          read_len=4096).data

    def identify_namespace(self, nsid: int = 1) -> dict[str, object]:
        return unpack_fields(NAMESPACE_FIELDS, self.identify_raw(0, nsid))

    def list_namespaces(self, after: int = 0) -> list[int]:
        raw = self.identify_raw(2, after)
        ids = struct.unpack("<1024I", raw)
        return [n for n in ids if n]

    def get_log(self, lid: int, length: int, *, nsid: int = NSID_ALL, offset: int = 0, lsp: int = 0,
                rae: bool = False, lsi: int = 0) -> bytes:
        numd = length // 4 - 1
        cdws = {10: lid | (lsp << 8) | (int(rae) << 15) | ((numd & 0xFFFF) << 16),
                11: (numd >> 16) | (lsi << 16), 12: offset & 0xFFFFFFFF, 13: offset >> 32}
        return self.admin(Command.build(AdminOpcode.GET_LOG_PAGE, nsid=nsid, cdws=cdws), read_len=length).data

    def smart_log(self) -> dict[str, int]:
        return parse_smart(self.get_log(0x02, 512))

    def firmware_log(self) -> dict[str, object]:
        return parse_firmware_slots(self.get_log(0x03, 512))

    def discovery_log(self) -> dict:
        header = self.get_log(0x70, 1024, nsid=0, rae=True)
        numrec = struct.unpack_from("<Q", header, 8)[0]
        page = self.get_log(0x70, 1024 * (numrec + 1), nsid=0) if numrec else header
        return parse_discovery(page)

    def set_features(self, fid: int, value: int, *, save: bool = False) -> int:
        cmd = Command.build(AdminOpcode.SET_FEATURES, cdws={10: fid | (int(save) << 31), 11: value})
        return self.admin(cmd).cqe.dw0

    def get_features(self, fid: int, *, sel: int = 0, cdw11: int = 0) -> int:
        cmd = Command.build(AdminOpcode.GET_FEATURES, cdws={10: fid | (sel << 8), 11: cdw11})
        return self.admin(cmd).cqe.dw0

    def read(self, slba: int, nlb: int, *, nsid: int = 1, qid: int = 1) -> bytes:
        cdws = {10: slba & 0xFFFFFFFF, 11: slba >> 32, 12: nlb - 1}
        cmd = Command.build(IoOpcode.READ, nsid=nsid, cdws=cdws)
        return self.io(cmd, read_len=nlb * LBA_SIZE, qid=qid).data

    def write(self, slba: int, data: bytes, *, nsid: int = 1, qid: int = 1, fua: bool = False) -> None:
        nlb = len(data) // LBA_SIZE
        cmd = Command.build(IoOpcode.WRITE, nsid=nsid,
                            cdws={10: slba & 0xFFFFFFFF, 11: slba >> 32, 12: (nlb - 1) | (int(fua) << 30)})
        self.io(cmd, data, qid=qid)

    def flush(self, *, nsid: int = 1, qid: int = 1) -> None:
        self.io(Command.build(IoOpcode.FLUSH, nsid=nsid), qid=qid)

    def fw_download(self, image: bytes, *, xfer: int = 4096, offset: int = 0) -> None:
        image = image + bytes(-len(image) % 4)
        for start in range(0, len(image), xfer):
            chunk = image[start:start + xfer]
            cdws = {10: len(chunk) // 4 - 1, 11: (offset + start) // 4}
            self.admin(Command.build(AdminOpcode.FIRMWARE_DOWNLOAD, cdws=cdws), chunk)

    def fw_commit(self, slot: int, action: int) -> Cqe:
        return self.admin(Command.build(AdminOpcode.FIRMWARE_COMMIT, cdws={10: slot | (action << 3)})).cqe

    # teardown -------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Normal shutdown (CC.SHN = 01b), waiting for CSTS.SHST = complete."""
        cc = self.property_get(Register.CC)
        self.property_set(Register.CC, (cc & ~0xC000) | 0x4000)
        deadline = time.monotonic() + 5
        while (self.property_get(Register.CSTS) >> 2) & 3 != 2 and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        for q in self.io_qs:
            q.close()
        self.io_qs = []
        self.admin_q.close()

    def disconnect(self) -> None:
        try:
            self.shutdown()
        finally:
            self.close()

    def __enter__(self) -> NvmeTcpHost:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

