"""Captured NVMe/TCP sessions: a recording proxy and the capture file format.

The proxy sits between a host (the Linux kernel in QEMU) and ``npukit nvme serve`` and records every
host → target PDU, per connection. A capture file is ``MAGIC`` followed by records
``<conn u16, kind u8, length u32>`` + one whole PDU; ``kind`` is 0 for the discovery port, 1 for the
NVM subsystem's port. The fuzzer replays and mutates these streams.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

from npukit.devices.nvme import pdu
from npukit.devices.nvme.spec import ProtocolError

MAGIC = b"NPKNVMECAP1\n"
_RECORD = struct.Struct("<HBI")
DISCOVERY, NVM = 0, 1


@dataclass
class CapturedConnection:
    kind: int
    pdus: list[bytes] = field(default_factory=list)

    @property
    def digests(self) -> tuple[bool, bool]:
        """(header, data) digests this connection negotiated in its ICReq."""
        if not self.pdus or self.pdus[0][0] != pdu.PduType.IC_REQ:
            return False, False
        dgst = self.pdus[0][11]
        return bool(dgst & 1), bool(dgst & 2)

    @property
    def qid(self) -> int | None:
        """The QID of this connection's Connect command (None if there is none)."""
        for raw in self.pdus:
            if raw[0] == pdu.PduType.CAPSULE_CMD and raw[8] == 0x7F and raw[12] == 0x01:
                return struct.unpack_from("<I", raw, 8 + 40)[0] >> 16
        return None


def save(path: str | Path, connections: list[CapturedConnection]) -> None:
    out = bytearray(MAGIC)
    for index, conn in enumerate(connections):
        for raw in conn.pdus:
            out += _RECORD.pack(index, conn.kind, len(raw)) + raw
    Path(path).write_bytes(bytes(out))


def load(path: str | Path) -> list[CapturedConnection]:
    data = Path(path).read_bytes()
    if not data.startswith(MAGIC):
        raise ProtocolError(f"{path} is not an NVMe/TCP capture")
    conns: dict[int, CapturedConnection] = {}
    pos = len(MAGIC)
    while pos < len(data):
        index, kind, length = _RECORD.unpack_from(data, pos)
        pos += _RECORD.size
        conns.setdefault(index, CapturedConnection(kind)).pdus.append(data[pos:pos + length])
        pos += length
    return [conns[k] for k in sorted(conns)]


def _read_pdu(sock: socket.socket) -> bytes | None:
    head = _recv_exact(sock, pdu.CH.size)
    if head is None:
        return None
    plen = pdu.CH.unpack(head)[4]
    rest = _recv_exact(sock, max(plen - pdu.CH.size, 0))
    return None if rest is None else head + rest


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class RecordingProxy:
    """Listens on 127.0.0.1 (ephemeral ports), forwards to ``upstream`` ports, records host PDUs."""

    def __init__(self, upstream: dict[int, int]) -> None:
        """``upstream``: kind → target port on 127.0.0.1."""
        self.connections: list[CapturedConnection] = []
        self.ports: dict[int, int] = {}
        self._lock = threading.Lock()
        self._listeners = []
        for kind, port in upstream.items():
            lsock = socket.create_server(("127.0.0.1", 0))
            self.ports[kind] = lsock.getsockname()[1]
            self._listeners.append(lsock)
            threading.Thread(target=self._accept, args=(lsock, kind, port), daemon=True).start()

    def _accept(self, lsock: socket.socket, kind: int, port: int) -> None:
        while True:
            try:
                client, _ = lsock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", port))
            with self._lock:
                conn = CapturedConnection(kind)
                self.connections.append(conn)
            threading.Thread(target=self._host_to_target, args=(client, upstream, conn), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _host_to_target(src: socket.socket, dst: socket.socket, conn: CapturedConnection) -> None:
        while (raw := _read_pdu(src)) is not None:
            conn.pdus.append(raw)
            try:
                dst.sendall(raw)
            except OSError:
                break
        for s in (src, dst):
            s.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                chunk = src.recv(1 << 16)
                if not chunk:
                    break
                dst.sendall(chunk)
            except OSError:
                break
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for lsock in self._listeners:
            lsock.close()
