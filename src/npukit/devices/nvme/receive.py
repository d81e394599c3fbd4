"""How a target connection receives PDUs: into one preallocated buffer, or through asyncio streams.

:class:`PduReceiver` is an ``asyncio.BufferedProtocol`` (asyncio's loop and uvloop both call
``get_buffer`` / ``buffer_updated``): the kernel copies received bytes straight into the connection's
buffer (``recv_into``) and a PDU is handed out as a memoryview of it, so in-capsule write data and
H2CData reach ``os.pwrite`` without a copy in Python. :class:`StreamInput` is the same interface over
asyncio's ``StreamReader`` (one copy into its buffer, one into each PDU), kept for comparison
(``npukit nvme serve --receive stream``).

The buffer rules: a PDU handed out stays untouched until the next ``read_pdu`` call (the connection
dispatches it before asking for the next one); data is only ever appended behind what is buffered, and
moved to the front (compaction) only inside ``read_pdu``, when no PDU is held; a buffer that grows is
a new one (views of the old one stay valid). A full buffer pauses reading, so a peer can make the
connection hold at most the buffer (``BUFFER_BYTES`` once grown) plus one PDU.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

RECEIVE_MODES = ("buffers", "stream")
# A connection starts with a small buffer (admin, discovery and read-only queues never need more) and
# grows it once to BUFFER_BYTES when a PDU would fill more than half of it (128 KiB H2CData): four of
# the largest PDUs, so that moving a partial PDU to the front is rare (256 KiB moved 4x as often).
INITIAL_BUFFER_BYTES = 64 << 10
BUFFER_BYTES = 512 << 10
COMPACT_BELOW = 16 << 10  # fewer free bytes than this behind the data after a PDU: move it to the front

# a PDU's common header (8 bytes) -> its PLEN, raising for a header the connection refuses
HeaderCheck = Callable[[bytes], int]
# (buffer, start, end) -> (where the connection's own loop is to go on, bytes to wait for there before
# calling again instead of waking the loop: 0 to wake it as usual) (readpath.ReadPath.serve_batch)
BatchServer = Callable[[memoryview, int, int], tuple[int, int]]


class PduReceiver(asyncio.BufferedProtocol):
    """Receives one connection into a preallocated buffer and hands out whole PDUs."""

    def __init__(self, on_connected: Callable[[PduReceiver], None] | None = None,
                 initial: bytes = b"") -> None:
        self._buf = bytearray(max(INITIAL_BUFFER_BYTES, 2 * len(initial)))
        self._view = memoryview(self._buf)
        self._start = 0  # first byte not consumed (a held PDU counts as not consumed)
        self._end = len(initial)  # first free byte
        self._view[:self._end] = initial
        self._held = 0  # bytes of the PDU handed out last, released by the next read_pdu
        self._eof = False
        self._error: Exception | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._lost = False
        self._waiter: asyncio.Future | None = None
        self._need = 0  # bytes the waiting read_pdu needs buffered before it is worth waking
        self._writable: asyncio.Future | None = None
        self._on_connected = on_connected
        self.transport: asyncio.Transport | None = None
        # Serves whole PDUs at the front of what arrived, right where it arrives (no wake-up of the
        # connection's task, no PDU object), while that task waits for the next PDU's header.
        self.on_batch: BatchServer | None = None

    # asyncio.BufferedProtocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self._on_connected is not None:
            self._on_connected(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._end == len(self._buf):  # reading is paused when full; a loop asking anyway gets room
            self._move(len(self._buf) * 2)
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        if self.on_batch is not None and self._need == 8 and not self._held and self._waiter is not None \
                and not self._waiter.done():
            # the connection's task is parked in read_pdu for a header: nothing is held, nothing of its
            # own is queued to send, so what on_batch takes is served in order
            self._start, wait = self.on_batch(self._view, self._start, self._end)
            if self._start == self._end:
                self._start = self._end = 0
                return
            if wait:  # the rest of a PDU on_batch will serve is on its way: room for it, no wake-up
                self._make_room(wait)
                if self._end - self._start < wait:
                    return
            elif len(self._buf) - self._end < COMPACT_BELOW:
                self._move(len(self._buf))  # as _release would: the task's _fill checked room before
        if self._end == len(self._buf) and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif self._end - self._start < self._need:
            return  # a 128 KiB PDU arrives in several pieces: wake the connection once, for the last
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return True  # half-closed: responses to what the host sent before its FIN still go out

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof, self._lost = True, True
        self._error = exc
        self._wake()
        if self._writable is not None and not self._writable.done():
            self._writable.set_exception(ConnectionResetError("connection lost"))

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # the connection's side -------------------------------------------------------------------------
    async def read_pdu(self, check: HeaderCheck) -> memoryview:
        """The next whole PDU as a view of the buffer, valid until the next call."""
        self._release()
        await self._fill(8)
        plen = check(bytes(self._view[self._start:self._start + 8]))
        await self._fill(plen)
        self._held = plen
        return self._view[self._start:self._start + plen]

    def more_buffered(self) -> bool:
        """Another whole PDU is here already (batch its response with this one's). Only a whole one:
        while the rest of a 128 KiB H2CData is on its way, the responses queued so far leave (waiting
        for it held each write's completion until the host had sent the data of every write
        outstanding, and the queue went through capsules, R2Ts, data and completions in lock step)."""
        start = self._start + self._held
        if self._end - start < 8:
            return False
        return self._end - start >= int.from_bytes(self._view[start + 4:start + 8], "little")

    def buffered(self) -> bytes:
        """What was received behind the PDU handed out last (handed to a worker with the socket)."""
        return bytes(self._view[self._start + self._held:self._end])

    @property
    def writable(self) -> bool:
        """The transport takes more (it has not asked to pause writing) and the peer is there."""
        return not self._writing_paused and not self._lost

    async def wait_writable(self) -> None:
        if self._lost:
            raise ConnectionResetError("connection lost")
        if not self._writing_paused:
            return
        self._writable = asyncio.get_running_loop().create_future()
        await self._writable

    def _release(self) -> None:
        self._start += self._held
        self._held = 0
        if self._start == self._end:
            self._start = self._end = 0  # the common case: everything consumed, start over for free
        elif len(self._buf) - self._end < COMPACT_BELOW:
            self._move(len(self._buf))
        if self._reading_paused and self._end < len(self._buf) and not self._lost:
            self._reading_paused = False
            self.transport.resume_reading()

    def _make_room(self, n: int) -> None:
        """Room for ``n`` bytes from the first unconsumed one (a buffer grown once for large PDUs)."""
        if 2 * n > len(self._buf):
            self._move(max(BUFFER_BYTES, 2 * n))
        elif self._start + n > len(self._buf):
            self._move(len(self._buf))

    async def _fill(self, n: int) -> None:
        self._make_room(n)
        while self._end - self._start < n:
            if self._error is not None:
                raise self._error
            if self._eof:
                raise asyncio.IncompleteReadError(bytes(self._view[self._start:self._end]), n)
            if self._reading_paused:  # room behind the data: _move made it
                self._reading_paused = False
                self.transport.resume_reading()
            self._waiter = asyncio.get_running_loop().create_future()
            self._need = n
            try:
                await self._waiter
            finally:
                self._waiter = None
                self._need = 0

    def _move(self, size: int) -> None:
        """Move the unconsumed bytes to the front of a buffer of ``size`` bytes (a new one if it grows:
        views of the old one stay valid)."""
        old, count = self._view, self._end - self._start
        if size != len(self._buf):
            self._buf = bytearray(size)
            self._view = memoryview(self._buf)
        self._view[:count] = old[self._start:self._end]  # memoryview assignment handles the overlap
        self._start, self._end = 0, count

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class ReceiverWriter:
    """The part of ``asyncio.StreamWriter`` a connection uses, over a :class:`PduReceiver`'s transport."""

    def __init__(self, receiver: PduReceiver) -> None:
        self.receiver = receiver
        self.transport = receiver.transport

    def write(self, data: bytes | memoryview) -> None:
        self.transport.write(data)

    def writelines(self, buffers: list[bytes | memoryview]) -> None:
        self.transport.writelines(buffers)

    async def drain(self) -> None:
        if self.transport.is_closing():
            await asyncio.sleep(0)  # let connection_lost run, as StreamWriter.drain does
        await self.receiver.wait_writable()

    def close(self) -> None:
        self.transport.close()

    def get_extra_info(self, name: str, default=None):
        return self.transport.get_extra_info(name, default)


class StreamInput:
    """:class:`PduReceiver`'s reading interface over an ``asyncio.StreamReader``."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    async def read_pdu(self, check: HeaderCheck) -> bytes:
        ch = await self.reader.readexactly(8)
        plen = check(ch)
        return ch + await self.reader.readexactly(plen - 8)

    def more_buffered(self) -> bool:
        # StreamReader has no public "bytes available" query; without it, flush every PDU
        return len(getattr(self.reader, "_buffer", b"")) >= 8

    def buffered(self) -> bytes:
        return bytes(getattr(self.reader, "_buffer", b""))
