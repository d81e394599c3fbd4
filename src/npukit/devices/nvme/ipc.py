"""What the target's main process and its I/O queue worker processes share.

Two socket pairs per worker: ``ctl`` carries hand-overs (a connection's socket as SCM_RIGHTS with its
queue state) and close requests to the worker, never waited on, and its end of file tells the main
process that the worker died; ``rpc`` carries the worker's synchronous calls (a vendor command's lengths
and execution, an error log entry, a Flush's save of the state file, "this queue closed"), each answered
before the worker goes on: a host that reads the Error Information log right after an error completion
finds the entry, and a host that sees its queue's socket close finds the QID free when it connects
again. Frames are a 4-byte length and a pickled tuple of plain values (both ends are the same npukit).

Counters the SMART log and Keep Alive need are in a shared memory file (memfd) of int64 words: one
slot per handed-over connection, written by its worker as it runs commands and summed by the main
process (before each admin command and each keep-alive check), so nothing is lost when a worker dies.
"""

from __future__ import annotations

import mmap
import os
import pickle
import socket
import struct

FRAME = struct.Struct("<I")
MAX_FRAME = 64 << 20
MAX_SLOTS = 1024
SLOT_WORDS = 8
# words of a slot (slot 0 holds the subsystem-wide words instead)
LAST_ACTIVITY_NS, UNITS_READ, UNITS_WRITTEN, READ_COMMANDS, WRITE_COMMANDS, BUSY_NS, READY = range(7)
COUNTER_WORDS = {UNITS_READ: "data_units_read", UNITS_WRITTEN: "data_units_written",
                 READ_COMMANDS: "host_read_commands", WRITE_COMMANDS: "host_write_commands",
                 BUSY_NS: "controller_busy_ns"}
WRITE_CACHE = 0  # slot 0, word 0: 1 while the volatile write cache is enabled


class SharedWords:
    """The int64 words of the shared memory file ``fd`` (created when ``fd`` is None)."""

    def __init__(self, fd: int | None = None) -> None:
        size = MAX_SLOTS * SLOT_WORDS * 8
        if fd is None:
            fd = os.memfd_create("npukit-nvme-slots")
            os.ftruncate(fd, size)
        self.fd = fd
        self._map = mmap.mmap(fd, size)
        self.words = memoryview(self._map).cast("q")

    def at(self, slot: int, word: int) -> int:
        return slot * SLOT_WORDS + word

    def clear(self, slot: int) -> None:
        base = slot * SLOT_WORDS
        for i in range(SLOT_WORDS):
            self.words[base + i] = 0


def send_frame(sock: socket.socket, message: tuple) -> None:
    """A frame on a blocking socket (the worker's calls, the main process's small replies)."""
    blob = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(FRAME.pack(len(blob)) + blob)


class Outbox:
    """Frames to a socket that an event loop watches (libuv makes such a descriptor non-blocking): what
    the socket does not take at once waits for it to be writable. A passed descriptor is closed here
    once it has left (it goes with the first byte of its frame)."""

    def __init__(self, sock: socket.socket, loop) -> None:
        self.sock, self.loop = sock, loop
        self.pending: list[tuple[memoryview, list[int]]] = []
        self.watching = False

    def send(self, message: tuple, fds: list[int] | None = None) -> None:
        blob = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self.pending.append((memoryview(FRAME.pack(len(blob)) + blob), list(fds or [])))
        self._drain()

    def _drain(self) -> None:
        while self.pending:
            data, fds = self.pending[0]
            try:
                sent = socket.send_fds(self.sock, [data], fds) if fds else self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # the peer is gone (its death is noticed on the reading side)
                self.close()
                return
            for fd in fds:
                os.close(fd)
            self.pending[0] = (data[sent:], [])
            if sent == len(data):
                self.pending.pop(0)
        want = bool(self.pending)
        if want != self.watching:
            self.watching = want
            if want:
                self.loop.add_writer(self.sock.fileno(), self._drain)
            else:
                self.loop.remove_writer(self.sock.fileno())

    def close(self) -> None:
        if self.watching:
            self.loop.remove_writer(self.sock.fileno())
            self.watching = False
        for _data, fds in self.pending:
            for fd in fds:
                os.close(fd)
        self.pending.clear()


class FrameReader:
    """Frames (and passed descriptors) from a non-blocking socket, as they arrive."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.fds: list[int] = []
        self.eof = False

    def pump(self) -> list[tuple]:
        """Read what is there; return the complete frames. Sets ``eof`` when the peer is gone."""
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.sock, 1 << 20, 16, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            data, fds = b"", []
        if not data:
            self.eof = True
        self.buffer += data
        self.fds.extend(fds)
        return self._frames()

    def _frames(self) -> list[tuple]:
        out = []
        while len(self.buffer) >= FRAME.size:
            (n,) = FRAME.unpack_from(self.buffer)
            if n > MAX_FRAME:
                raise ValueError(f"a {n}-byte frame")
            if len(self.buffer) < FRAME.size + n:
                break
            out.append(pickle.loads(bytes(self.buffer[FRAME.size:FRAME.size + n])))
            del self.buffer[:FRAME.size + n]
        return out


def call(sock: socket.socket, message: tuple) -> tuple:
    """A synchronous request on a blocking socket: send, then wait for the one reply."""
    send_frame(sock, message)
    head = _recv_exactly(sock, FRAME.size)
    (n,) = FRAME.unpack(head)
    return pickle.loads(_recv_exactly(sock, n))


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError("the target's main process is gone")
        got += k
    return bytes(buf)
