"""NVMe/TCP target: an asyncio server, one :class:`Connection` per TCP connection (= one NVMe queue).

Robustness rules: a malformed PDU ends its connection with a C2HTermReq; a bad command gets an NVMe
error status; no exception leaves a connection handler; every connection buffers at most its receive
buffer (receive.py: PDUs are checked against the in-capsule / MAXH2CDATA limits before their bodies
are read) plus the data of commands waiting on R2T (bounded by the queue depth times MDTS). The data
path hands memoryviews of the receive buffer to the namespace (``os.pwrite`` straight from it).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from npukit.devices.nvme import pdu
from npukit.devices.nvme.command import SGL_DATA_BLOCK_OFFSET, SGL_TRANSPORT_DATA_BLOCK, Command, Completion
from npukit.devices.nvme.controller import Controller
from npukit.devices.nvme.fabrics import SQHD_DISABLED, FabricsQueue, fabrics_data_in
from npukit.devices.nvme.layout import field_offset
from npukit.devices.nvme.lifecycle import QueueEvent, QueueLifecycle, QueueState
from npukit.devices.nvme.namespace import FileRegion, lazy_reads
from npukit.devices.nvme.pdu import FatalPduError, Fes, PduType
from npukit.devices.nvme.readpath import BATCH_LIMIT, MAX_H2C_DATA, ReadPath
from npukit.devices.nvme.receive import RECEIVE_MODES, PduReceiver, ReceiverWriter, StreamInput
from npukit.devices.nvme.registry import CommandSpec
from npukit.devices.nvme.spec import NvmeError, Status
from npukit.devices.nvme.subsystem import Subsystem

if TYPE_CHECKING:
    from npukit.devices.nvme.workers import WorkerPool

log = logging.getLogger("npukit.nvme.tcp")
_BEFORE_CONNECT = (QueueState.AWAIT_IC_REQ, QueueState.AWAIT_CONNECT)

ADMIN_IN_CAPSULE = 8192  # NVME_TCP_ADMIN_CCSZ: what Linux puts in-capsule on the admin queue
# What a peer can make the target buffer for R2T transfers: R2Ts are paced so that one connection has
# at most CONN_R2T_BYTES requested (always at least one transfer) and all connections together at most
# TARGET_R2T_BYTES (plus one transfer per connection); later commands wait, holding only their SQE.
CONN_R2T_BYTES = 2 << 20
TARGET_R2T_BYTES = 128 << 20
MAX_CONNECTIONS = 1024
RECEIVE_DEFAULT = "buffers"  # how connections receive (receive.py); "stream" is asyncio's StreamReader
SEND_BUFFER = 2 << 20
_HOST_TO_TARGET = {PduType.IC_REQ, PduType.H2C_TERM_REQ, PduType.CAPSULE_CMD, PduType.H2C_DATA}


@dataclass
class PendingWrite:
    """A command waiting for its data through R2T / H2CData."""

    cmd: Command
    spec: CommandSpec | None  # None for fabrics commands
    n_out: int
    length: int
    buffer: bytearray | None = None  # allocated when data arrives in more than one PDU
    received: int = 0
    digest_error: bool = False
    r2t_sent: bool = False


class Connection:
    def __init__(self, target: TcpTarget, source: PduReceiver | StreamInput,
                 writer: asyncio.StreamWriter | ReceiverWriter) -> None:
        self.target = target
        self.source = source  # where PDUs come from: the receive buffer, or asyncio's StreamReader
        self.writer = writer
        self.lifecycle = QueueLifecycle()
        self.fabrics = FabricsQueue(target.subsystems, self.lifecycle)
        self.hdgst = self.ddgst = False
        self.hpda = 0
        self.sqhd = 0
        self.pending: dict[int, PendingWrite] = {}
        self._r2t_waiting: collections.deque[int] = collections.deque()  # TTAGs whose R2T is not sent yet
        self.r2t_outstanding = 0  # bytes requested by R2T and not yet received
        self._next_ttag = 0
        self.batching = False  # PDUs are queued in _out (sent together) instead of written at once
        self._out: list[bytes | memoryview] = []
        self._out_bytes = 0
        self.reads = ReadPath(self)  # the send arena of Reads, and the short way for ordinary ones
        self._offer = target.pool is not None  # a live I/O queue goes to a worker process
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"

    @property
    def ctrl(self) -> Controller | None:
        return self.fabrics.ctrl

    @property
    def closed(self) -> bool:
        return self.lifecycle.closed

    # I/O helpers ----------------------------------------------------------------------------------
    def send(self, buffers: list[bytes | memoryview]) -> None:
        """Queue PDUs. Inside the read loop they go out together once no further PDU is already
        buffered (one send for a burst of pipelined commands); from elsewhere (an AER completed by
        another connection's command) at once."""
        if self.closed:
            return
        if self.batching:
            self._out.extend(buffers)
            self._out_bytes += sum(len(b) for b in buffers)
        else:
            self.writer.writelines(buffers)

    def take_queued(self) -> list[bytes | memoryview]:
        """The PDUs queued while batching, for the caller to send (ReadPath.serve_batch)."""
        out, self._out, self._out_bytes = self._out, [], 0
        return out

    async def _flush(self) -> None:
        if self._out and not self.closed:
            self.writer.writelines(self._out)
        self._out, self._out_bytes = [], 0
        await self.writer.drain()
        if not self.writer.transport.get_write_buffer_size():
            self.reads.arena_free()  # all sent: the arena can be written over

    def close(self) -> None:
        if not self.closed:
            self.lifecycle.advance(QueueEvent.CLOSE)
            self.writer.close()

    def _check_common(self, ch: bytes) -> int:
        """PLEN of a PDU whose common header this connection accepts (checked before the body is read)."""
        limit = max(self.target.in_capsule_limit(self.fabrics.qid), MAX_H2C_DATA)
        kind, plen = pdu.validate_common(ch, max_data=limit)
        if kind not in _HOST_TO_TARGET:
            raise FatalPduError(Fes.INVALID_HEADER_FIELD, 0, ch, f"{kind.name} is not sent by a host")
        return plen

    async def _read_pdu(self) -> pdu.Pdu:
        raw = await self.source.read_pdu(self._check_common)
        kind = raw[0]
        initialized = self.lifecycle.initialized
        if not initialized and kind != PduType.IC_REQ:
            raise FatalPduError(Fes.PDU_SEQUENCE_ERROR, 0, bytes(raw[:24]), "a PDU before ICReq")
        if initialized and kind == PduType.IC_REQ:
            raise FatalPduError(Fes.PDU_SEQUENCE_ERROR, 0, bytes(raw[:24]), "a second ICReq")
        return pdu.parse(raw, hdgst=self.hdgst and initialized, ddgst=self.ddgst and initialized)

    # main loop ------------------------------------------------------------------------------------
    async def run(self) -> None:
        try:
            while not self.closed:
                if self.lifecycle.state in _BEFORE_CONNECT:  # Connect within connect_timeout seconds
                    p = await asyncio.wait_for(self._read_pdu(), self.target.connect_timeout)
                else:
                    p = await self._read_pdu()
                self.batching = True
                try:
                    self._dispatch(p)
                finally:
                    self.batching = False
                if self._out_bytes > BATCH_LIMIT or not self.source.more_buffered():
                    await self._flush()
                if self.lifecycle.state is QueueState.DISCONNECTING:
                    await self._flush()
                    break
                if self._offer and self.fabrics.qid and self.lifecycle.state is QueueState.LIVE:
                    self._offer = False  # once, right after Connect
                    await self._flush()
                    if await self.target.pool.hand_over(self):
                        break
        except FatalPduError as exc:
            log.info("%s: fatal PDU error: %s", self.peer, exc)
            self._out.extend(pdu.term_req(PduType.C2H_TERM_REQ, exc.fes, exc.fei, exc.header))
            with contextlib.suppress(Exception):
                await self._flush()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except TimeoutError:
            log.info("%s: no Connect within %.0f s, closing", self.peer, self.target.connect_timeout)
        except Exception:  # the last line of defence: log it, drop this connection only
            log.exception("%s: connection handler failed", self.peer)
        finally:
            if self.lifecycle.state is QueueState.HANDED_OVER:
                self.target.connections.discard(self)  # the worker has the queue now
            else:
                with contextlib.suppress(Exception):
                    await self._flush()
                self.release()

    def release(self) -> None:
        ctrl, qid = self.ctrl, self.fabrics.qid
        self._r2t_done(self.r2t_outstanding)
        self.pending.clear()
        self._r2t_waiting.clear()
        self.fabrics.release()
        self.close()
        self.target.connections.discard(self)
        if ctrl is not None and qid == 0:
            self.target.drop_controller(ctrl)

    def _dispatch(self, p: pdu.Pdu) -> None:
        if p.type == PduType.IC_REQ:
            self._ic_req(p)
        elif p.type == PduType.CAPSULE_CMD:
            self.capsule(p)
        elif p.type == PduType.H2C_DATA:
            self._h2c_data(p)
        elif p.type == PduType.H2C_TERM_REQ:
            log.info("%s: host terminated the connection (FES %#x)", self.peer, p.u16(8))
            self.close()

    def _ic_req(self, p: pdu.Pdu) -> None:
        pfv, hpda, dgst, _maxr2t = struct.unpack_from("<HBBI", p.header, 8)
        if p.plen != 128:
            raise FatalPduError(Fes.INVALID_HEADER_FIELD, 4, p.header, "ICReq PLEN must be 128")
        if pfv != 0:
            raise FatalPduError(Fes.UNSUPPORTED_PARAMETER, 8, p.header, f"PDU format version {pfv}")
        if hpda > 31:
            raise FatalPduError(Fes.INVALID_HEADER_FIELD, 10, p.header, f"HPDA {hpda}")
        self.hpda, self.hdgst, self.ddgst = hpda, bool(dgst & 1), bool(dgst & 2)
        self.send(pdu.ic_resp(0, self.hdgst, self.ddgst, MAX_H2C_DATA))
        self.lifecycle.advance(QueueEvent.IC_REQ)

    # commands -------------------------------------------------------------------------------------
    def consume_sq_entry(self) -> None:
        """One submission queue entry consumed (the SQ head wraps at the Connect's queue size), unless
        the host disabled SQ flow control."""
        if self.sqhd != SQHD_DISABLED:
            self.sqhd = (self.sqhd + 1) % (self.fabrics.sqsize + 1 if self.fabrics.sqsize else 65536)

    def capsule(self, p: pdu.Pdu) -> None:
        """A CapsuleCmd: the short way for an ordinary Read, else decoded, checked and run."""
        if self.reads.try_fast(p):
            return
        cmd = Command.decode(p.header[8:72])
        in_capsule = p.data
        if len(in_capsule) > self.target.in_capsule_limit(self.fabrics.qid):
            raise FatalPduError(Fes.DATA_LIMIT_EXCEEDED, 4, p.header, f"{len(in_capsule)} bytes in-capsule")
        self.consume_sq_entry()
        try:
            spec, n_in, n_out = self._prepare(cmd)
            data = self._gather(cmd, p, n_in, spec, n_out)
        except NvmeError as err:
            self._respond(self._error(cmd, err))
            return
        if data is not None:
            self._run(cmd, spec, data, n_out, digest_error=bool(p.flags & 0x80))

    def _prepare(self, cmd: Command) -> tuple[CommandSpec | None, int, int]:
        if cmd.opcode == 0x7F:
            return None, fabrics_data_in(cmd), 0
        if self.lifecycle.state is not QueueState.LIVE:
            raise NvmeError(Status.COMMAND_SEQUENCE_ERROR, "Connect first")
        return (*self.ctrl.prepare(self.fabrics.qid, cmd),)

    def _gather(self, cmd: Command, p: pdu.Pdu, n_in: int, spec: CommandSpec | None,
                n_out: int) -> memoryview | None:
        """The command's input data if it is here (in-capsule); None when an R2T was sent."""
        if n_in and n_out:
            raise NvmeError(Status.INVALID_FIELD, "bidirectional transfers are not supported on NVMe/TCP")
        if not n_in and not n_out:
            return memoryview(b"")
        if cmd.psdt != 1:
            raise NvmeError(Status.INVALID_FIELD, "NVMe/TCP needs SGLs (PSDT=01b)",
                            param_loc=field_offset("psdt"))
        addr, length, sgl_type = cmd.sgl
        if n_out:
            if sgl_type != SGL_TRANSPORT_DATA_BLOCK:
                raise NvmeError(Status.SGL_DESCRIPTOR_TYPE_INVALID, f"SGL type {sgl_type:#x} for a read")
            if length < n_out:
                raise NvmeError(Status.DATA_SGL_LENGTH_INVALID, f"SGL {length} bytes, command needs {n_out}")
            return memoryview(b"")
        if sgl_type == SGL_DATA_BLOCK_OFFSET:
            if addr != 0:
                raise NvmeError(Status.SGL_OFFSET_INVALID, f"in-capsule offset {addr}")
            if length != len(p.data) or length < n_in:
                raise NvmeError(Status.DATA_SGL_LENGTH_INVALID,
                                f"SGL {length} bytes, {len(p.data)} in-capsule, command needs {n_in}")
            return p.data
        if sgl_type != SGL_TRANSPORT_DATA_BLOCK:
            raise NvmeError(Status.SGL_DESCRIPTOR_TYPE_INVALID, f"SGL type {sgl_type:#x}")
        if length < n_in or length > max(n_in, self.target.max_transfer):
            raise NvmeError(Status.DATA_SGL_LENGTH_INVALID, f"SGL {length} bytes, command needs {n_in}")
        if len(self.pending) > self.fabrics.sqsize:  # more transfers than queue entries: flow control broken
            raise FatalPduError(Fes.PDU_SEQUENCE_ERROR, 0, p.header,
                                f"{len(self.pending) + 1} commands wait for data, "
                                f"queue has {self.fabrics.sqsize + 1} entries")
        ttag = self._ttag()
        self.pending[ttag] = PendingWrite(cmd, spec, n_out, length)
        self._r2t_waiting.append(ttag)
        self._issue_r2ts()
        return None

    def _issue_r2ts(self) -> None:
        """Send R2Ts for waiting transfers while the connection's and the target's budgets allow."""
        target = self.target
        while self._r2t_waiting:
            pending = self.pending[self._r2t_waiting[0]]
            n = pending.length
            if self.r2t_outstanding and (self.r2t_outstanding + n > CONN_R2T_BYTES
                                         or target.r2t_outstanding + n > TARGET_R2T_BYTES):
                return
            ttag = self._r2t_waiting.popleft()
            pending.r2t_sent = True
            self.r2t_outstanding += n
            target.r2t_outstanding += n
            self.send(pdu.r2t(pending.cmd.cid, ttag, 0, n, hdgst=self.hdgst))

    def _r2t_done(self, n: int) -> None:
        self.r2t_outstanding -= n
        self.target.r2t_outstanding -= n

    def _ttag(self) -> int:
        for _ in range(0xFFFF):
            self._next_ttag = (self._next_ttag + 1) % 0xFFFF
            if self._next_ttag not in self.pending:
                return self._next_ttag
        raise NvmeError(Status.INTERNAL_ERROR, "no free transfer tag")

    def _h2c_data(self, p: pdu.Pdu) -> None:
        cccid, ttag, offset, length = pdu.data_fields(p)
        pending = self.pending.get(ttag)
        if pending is None or not pending.r2t_sent:
            raise FatalPduError(Fes.INVALID_HEADER_FIELD, 10, p.header, f"unknown TTAG {ttag}")
        if cccid != pending.cmd.cid:
            raise FatalPduError(Fes.INVALID_HEADER_FIELD, 8, p.header, f"CCCID {cccid} for TTAG {ttag}")
        if length != len(p.data):
            raise FatalPduError(Fes.INVALID_HEADER_FIELD, 16, p.header,
                                f"DATAL {length} with {len(p.data)} bytes")
        if offset != pending.received or offset + length > pending.length:
            raise FatalPduError(Fes.DATA_OUT_OF_RANGE, 12, p.header, f"DATAO {offset} DATAL {length}")
        if offset == 0 and length == pending.length:
            data = p.data  # the whole transfer in one PDU: no copy
        else:
            if pending.buffer is None:
                pending.buffer = bytearray(pending.length)
            pending.buffer[offset:offset + length] = p.data
            data = memoryview(pending.buffer)
        pending.received += length
        pending.digest_error |= bool(p.flags & 0x80)
        if pending.received == pending.length:
            self.transfer_done(ttag, pending, data)

    def transfer_done(self, ttag: int, pending: PendingWrite, data: memoryview) -> None:
        """All of a command's R2T data is here: run it, and send the R2Ts its budget held back."""
        del self.pending[ttag]
        self._r2t_done(pending.length)
        self._run(pending.cmd, pending.spec, data, pending.n_out, digest_error=pending.digest_error)
        self._issue_r2ts()

    def _run(self, cmd: Command, spec: CommandSpec | None, data: memoryview, n_out: int, *,
             digest_error: bool = False) -> None:
        if digest_error:
            err = NvmeError(Status.TRANSIENT_TRANSPORT_ERROR, "data digest", dnr=False)
            self._respond(self._error(cmd, err))
            return
        pool = self.target.pool
        if spec is None:
            completion = self.fabrics.handle(cmd, data)
            if self.fabrics.sqflow_disabled and self.sqhd != SQHD_DISABLED:
                self.sqhd = SQHD_DISABLED  # from the Connect response on: no SQ head pointer
                log.info("%s: queue %d connected with SQ flow control disabled", self.peer, self.fabrics.qid)
            self._respond(completion)
            if pool is not None and not self.fabrics.qid:
                pool.publish()  # Property Set may have enabled or reset the controller
            return
        if pool is not None and not self.fabrics.qid:  # admin: see what the workers counted, then publish
            pool.sync()
            self._execute(cmd, spec, data, n_out)
            pool.publish()
        else:
            self._execute(cmd, spec, data, n_out)

    def _execute(self, cmd: Command, spec: CommandSpec, data: memoryview, n_out: int) -> None:
        if cmd.opcode == 0x02 and self.fabrics.qid and not self.ddgst:
            with lazy_reads():  # the data is read in _complete, straight into the send buffer
                result = self.ctrl.execute(self.fabrics.qid, cmd, spec, data, n_out, complete=self._complete)
        else:
            result = self.ctrl.execute(self.fabrics.qid, cmd, spec, data, n_out, complete=self._complete)
        if result is not None:
            self._complete(*result)

    def _complete(self, completion: Completion, data: bytes | memoryview | FileRegion) -> None:
        if not self.reads.send_data(completion, data):  # C2HData's SUCCESS may stand in for the response
            self._respond(completion)

    def queue_view(self, view: memoryview, n: int) -> None:
        """Queue ``n`` assembled bytes (a Read's PDUs in the arena) as ``send`` queues PDUs."""
        if self.closed:
            return
        if self.batching:
            self._out.append(view)
            self._out_bytes += n
        else:
            self.writer.write(view)

    def _error(self, cmd: Command, err: NvmeError) -> Completion:
        if self.ctrl is not None:
            return self.ctrl.error_completion(cmd, err, self.fabrics.qid or 0)
        return Completion(cmd.cid, err.field, err.dw0)

    def _respond(self, completion: Completion) -> None:
        qid = self.fabrics.qid or 0
        self.send(pdu.capsule_resp(completion.encode(self.sqhd, qid, 0), hdgst=self.hdgst))


class TcpTarget:
    """Serves one or more subsystems (the NVM subsystem, the discovery subsystem) on its listeners."""

    def __init__(self, subsystems: list[Subsystem], workers: int = 0, receive: str = RECEIVE_DEFAULT) -> None:
        if receive not in RECEIVE_MODES:
            raise ValueError(f"receive mode {receive!r}: one of {', '.join(RECEIVE_MODES)}")
        self.receive = receive  # "buffers": recv_into the connection's buffer; "stream": StreamReader
        self._tasks: set[asyncio.Task] = set()
        self.subsystems = {s.nqn: s for s in subsystems}
        self.connections: set[Connection] = set()
        self.servers: list[asyncio.base_events.Server] = []
        self._watchdog: asyncio.Task | None = None
        self.connect_timeout = 30.0
        self.max_connections = MAX_CONNECTIONS
        self.r2t_outstanding = 0  # bytes requested by R2T on all connections, not yet received
        self.workers = workers  # worker processes for I/O queues (0: every queue in this process)
        self.pool: WorkerPool | None = None

    @property
    def max_transfer(self) -> int:
        return max((1 << s.mdts) * 4096 for s in self.subsystems.values())

    def in_capsule_limit(self, qid: int | None) -> int:
        if not qid:
            return ADMIN_IN_CAPSULE
        return max(s.in_capsule_bytes for s in self.subsystems.values())

    async def listen(self, host: str, port: int) -> int:
        if self.workers and self.pool is None:
            from npukit.devices.nvme.workers import WorkerPool

            self.pool = WorkerPool(self.workers, asyncio.get_running_loop(), _log_path())
            await self.pool.wait_ready()
        if self.receive == "buffers":
            loop = asyncio.get_running_loop()
            server = await loop.create_server(lambda: PduReceiver(self._accept_receiver), host, port,
                                              reuse_address=True)
        else:
            server = await asyncio.start_server(self._accept, host, port, reuse_address=True)
        self.servers.append(server)
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._keep_alive_watchdog())
        return server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.serve_connection(StreamInput(reader), writer)

    def _accept_receiver(self, receiver: PduReceiver) -> None:
        serving = self.serve_connection(receiver, ReceiverWriter(receiver))
        task = asyncio.get_running_loop().create_task(serving)
        self._tasks.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._tasks.discard)

    async def serve_connection(self, source: PduReceiver | StreamInput,
                               writer: asyncio.StreamWriter | ReceiverWriter) -> None:
        if len(self.connections) >= self.max_connections:
            log.warning("refusing a connection: %d open", len(self.connections))
            writer.close()
            return
        _tune_socket(writer)
        conn = Connection(self, source, writer)
        self.connections.add(conn)
        await conn.run()

    def drop_controller(self, ctrl: Controller) -> None:
        """Close every connection of a controller (its admin queue went away or KATO expired)."""
        ctrl.subsystem.remove_controller(ctrl.cntlid)
        if self.pool is not None:
            self.pool.close_controller(ctrl)
        for conn in list(self.connections):
            if conn.ctrl is ctrl:
                conn.fabrics.release()
                conn.close()

    async def _keep_alive_watchdog(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            if self.pool is not None:
                self.pool.sync()  # I/O on the workers' queues counts as activity (TBKAS)
            now = time.monotonic()
            for sub in self.subsystems.values():
                for ctrl in list(sub.controllers.values()):
                    if ctrl.keep_alive_expired(now):
                        log.info("controller %d: keep alive timeout (KATO %d ms)", ctrl.cntlid,
                                 ctrl.features.kato_ms)
                        self.drop_controller(ctrl)

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self.pool is not None:
            await self.pool.close()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()


def _tune_socket(writer: asyncio.StreamWriter | ReceiverWriter) -> None:
    """Kernel keepalive probes find peers that vanished without a FIN (half-open connections) within
    about 90 s, also on queues without an NVMe keep alive. A send buffer that holds a whole batch of
    responses lets one send() take it (the default starts at 16 KiB: partial sends, then a wait for
    EPOLLOUT per piece)."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


def _log_path() -> str | None:
    """The file the target logs to, for its worker processes to log there too."""
    for handler in logging.getLogger("npukit.nvme").handlers:
        if isinstance(handler, logging.FileHandler):
            return handler.baseFilename
    return None


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when the ``fast`` extra installed it (measured faster for this target: 4 KiB reads
    and 128 KiB writes, docs/devices/nvme.md), else asyncio's own; the target behaves the same on both."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class TargetThread:
    """A target running its own event loop in a daemon thread (tests, in-process tools)."""

    def __init__(self, subsystems: list[Subsystem], host: str = "127.0.0.1", port: int = 0,
                 receive: str = RECEIVE_DEFAULT) -> None:
        self.target = TcpTarget(subsystems, receive=receive)
        self.loop = new_event_loop()
        self.port = 0
        ready = threading.Event()

        async def start() -> None:
            self.port = await self.target.listen(host, port)
            ready.set()

        def main() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.create_task(start())
            self.loop.run_forever()

        self.thread = threading.Thread(target=main, daemon=True, name="nvme-tcp-target")
        self.thread.start()
        if not ready.wait(10):
            raise RuntimeError("the NVMe/TCP target did not start")

    def call(self, fn, *args):
        """Run ``fn(*args)`` on the target's loop and return its result (thread-safe)."""
        async def wrapper():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.target.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
