"""A PDU fuzzer for the NVMe/TCP target: mutations of a captured Linux session plus random and
targeted hostile PDUs, against a real ``npukit nvme serve`` process.

Per case the fuzzer opens a connection, sends a prefix of a captured stream, one mutated PDU and some
of the rest, and reads whatever comes back. The invariants checked are the spec's and the target's
robustness rules: a C2HTermReq is followed by the target closing the connection; targeted cases get
exactly the FES / NVMe status the spec names; the server process stays alive, answers a verified
write/read after every round, logs no escaped exception, and its RSS stays bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from npukit.devices.nvme import pdu
from npukit.devices.nvme.capture import NVM, CapturedConnection
from npukit.devices.nvme.fabrics import ConnectData

GUEST_NQN = "nqn.2026-11.io.npukit:guest"
IDLE_S = 0.4
CASE_DEADLINE_S = 15.0
PROBE_LBA = (64 << 20) // 512 - 256  # last 128 KiB of the 64 MiB namespace


# ---- the server under test ---------------------------------------------------------------------
class ServerProcess:
    """``npukit nvme serve`` in a subprocess on free loopback ports."""

    def __init__(self, directory: Path, nqn: str = GUEST_NQN, size: str = "64M",
                 extra: tuple[str, ...] = ()) -> None:
        self.directory = Path(directory)
        self.nqn = nqn
        cmd = [sys.executable, "-m", "npukit", "nvme", "serve", "--listen", "127.0.0.1:0",
               "--discovery-port", "0", "--nqn", nqn, "--namespace", str(self.directory / "ns.img"),
               "--state-dir", str(self.directory / "state"), *extra]
        if size and not (self.directory / "ns.img").exists():
            cmd += ["--size", size]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"npukit nvme serve did not start: {self.proc.stderr.read()[-2000:]}")
        ready = json.loads(line)
        self.port, self.discovery_port = ready["port"], ready["discovery_port"]
        self.workers: list[int] = ready.get("workers", [])  # pids of the I/O queue worker processes

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def log_text(self) -> str:
        path = self.directory / "state" / "target.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.proc.returncode


# ---- PDU surgery -------------------------------------------------------------------------------
def fix_digests(raw: bytearray) -> bytearray:
    """Recompute the header and data digests a PDU's flags announce (where the layout allows)."""
    if len(raw) < 8:
        return raw
    _t, flags, hlen, pdo, _plen = pdu.CH.unpack_from(raw, 0)
    if flags & pdu.FLAG_HDGST and hlen + 4 <= len(raw):
        raw[hlen:hlen + 4] = pdu.crc(bytes(raw[:hlen]))
    if flags & pdu.FLAG_DDGST and pdo and pdo + 4 <= len(raw):
        raw[-4:] = pdu.crc(bytes(raw[pdo:-4]))
    return raw


def patch_connect(raw: bytes, *, cntlid: int | None = None, qid: int | None = None,
                  subnqn: str | None = None) -> bytes:
    """A Connect CapsuleCmd with its controller ID / QID / subsystem NQN replaced, digests fixed."""
    out = bytearray(raw)
    if qid is not None:
        cdw10 = struct.unpack_from("<I", out, 48)[0]
        struct.pack_into("<I", out, 48, (cdw10 & 0xFFFF) | (qid << 16))
    pdo = out[3]
    if cntlid is not None and pdo:
        struct.pack_into("<H", out, pdo + 16, cntlid)
    if subnqn is not None and pdo:
        field_ = subnqn.encode()[:255].ljust(256, b"\0")
        out[pdo + 256:pdo + 512] = field_
    return bytes(fix_digests(out))


def _is_connect(raw: bytes) -> bool:
    return len(raw) > 13 and raw[0] == pdu.PduType.CAPSULE_CMD and raw[8] == 0x7F and raw[12] == 0x01


MUTATIONS = ("flip_header", "flip_any", "plen_bigger", "plen_smaller", "hlen", "pdo", "header_digest",
             "data_digest", "unknown_type", "target_type", "truncate", "sqe_fields", "ttag", "datao",
             "oversize", "duplicate", "drop", "swap")


def mutate(stream: list[bytes], index: int, kind: str, rng: random.Random) -> list[bytes]:
    """``stream`` with the PDU at ``index`` (and maybe its neighbours) mutated by ``kind``."""
    raw = bytearray(stream[index])
    fix = rng.random() < 0.7
    ptype = raw[0]
    if kind == "flip_header":
        for _ in range(rng.randint(1, 3)):
            raw[rng.randrange(min(len(raw), raw[2] or 8))] ^= 1 << rng.randrange(8)
    elif kind == "flip_any":
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
    elif kind == "plen_bigger":
        grow = rng.choice([1, 4, 100, 4096, 1 << 20, 1 << 31])
        struct.pack_into("<I", raw, 4, min(len(raw) + grow, 0xFFFFFFFF))
    elif kind == "plen_smaller":
        struct.pack_into("<I", raw, 4, rng.randrange(0, max(len(raw), 1)))
    elif kind == "hlen":
        raw[2] = rng.choice([0, 8, 23, 25, 71, 73, 127, 129, 255])
    elif kind == "pdo":
        raw[3] = rng.choice([0, 1, 8, raw[2] - 1 if raw[2] else 0, raw[2] + 1, 255])
    elif kind == "header_digest":
        fix = False
        if raw[1] & pdu.FLAG_HDGST and raw[2] + 4 <= len(raw):
            raw[raw[2] + rng.randrange(4)] ^= 0xFF
        else:
            raw[1] ^= pdu.FLAG_HDGST
    elif kind == "data_digest":
        fix = False
        if raw[1] & pdu.FLAG_DDGST:
            raw[-1 - rng.randrange(4)] ^= 0xFF
        else:
            raw[1] ^= pdu.FLAG_DDGST
    elif kind == "unknown_type":
        raw[0] = rng.choice([0x08, 0x0A, 0x0B, 0x10, 0x7F, 0x80, 0xFF])
    elif kind == "target_type":
        raw[0] = rng.choice([0x01, 0x03, 0x05, 0x07, 0x09])
    elif kind == "truncate":
        return [*stream[:index], bytes(raw[:rng.randrange(1, max(len(raw), 2))])]
    elif kind == "sqe_fields" and ptype == pdu.PduType.CAPSULE_CMD and len(raw) >= 72:
        for _ in range(rng.randint(1, 3)):
            pos = rng.choice([8, 9, 12, 13, 14, 15, 32, 35, 39, 40, 44, 47, 48, 52, 56, 60, 64, 68])
            raw[pos] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
    elif kind == "ttag" and ptype == pdu.PduType.H2C_DATA:
        struct.pack_into("<H", raw, rng.choice([8, 10]), rng.randrange(0x10000))
    elif kind == "datao" and ptype == pdu.PduType.H2C_DATA:
        struct.pack_into("<I", raw, rng.choice([12, 16]), rng.choice([1, 512, 4096, 1 << 20, 0xFFFFFFFF]))
    elif kind == "oversize" and ptype == pdu.PduType.H2C_DATA:
        extra = bytes(rng.choice([4096, 128 * 1024, 1 << 20]))
        raw = raw[:raw[3]] + raw[raw[3]:] + extra
        struct.pack_into("<I", raw, 4, len(raw))
        struct.pack_into("<I", raw, 16, struct.unpack_from("<I", raw, 16)[0] + len(extra))
    elif kind == "duplicate":
        return [*stream[:index + 1], bytes(raw), *stream[index + 1:]]
    elif kind == "drop":
        return [*stream[:index], *stream[index + 1:]]
    elif kind == "swap" and index + 1 < len(stream):
        return [*stream[:index], stream[index + 1], stream[index], *stream[index + 2:]]
    else:  # the kind does not apply to this PDU type: a random byte instead
        raw[rng.randrange(len(raw))] ^= 0xFF
    if fix:
        fix_digests(raw)
    return [*stream[:index], bytes(raw), *stream[index + 1:]]


def random_pdu(rng: random.Random) -> bytes:
    """A PDU of random type and fields with a body of random length."""
    body = rng.randbytes(rng.choice([0, 4, 16, 64, 120, 200, 1100]))
    ptype = rng.choice([*range(0, 10), rng.randrange(256)])
    hlen = rng.choice([pdu.HLEN.get(ptype, 24), rng.randrange(256)]) if ptype < 10 else rng.randrange(256)
    plen = 8 + len(body) + rng.choice([0, 0, 0, 1, -1, 64])
    flags = rng.randrange(256) & rng.choice([0, 0x0F, 0xFF])
    return pdu.CH.pack(ptype, flags, hlen, rng.randrange(128), max(plen, 0)) + body


# ---- talking to the target ---------------------------------------------------------------------
@dataclass
class Outcome:
    term: tuple[int, int] | None = None  # (FES, FEI) of a C2HTermReq
    closed: bool = False  # the target closed the connection
    statuses: list[int] = field(default_factory=list)  # CQE status fields (SCT << 8 | SC, DNR bit 14)
    other: list[int] = field(default_factory=list)  # types of other PDUs received
    timed_out: bool = False


def exchange(port: int, stream: list[bytes], *, expect: int | None = None, idle: float = IDLE_S,
             deadline: float = CASE_DEADLINE_S) -> Outcome:
    """Send ``stream`` while reading replies; stop at EOF, after ``expect`` CapsuleResps, or when the
    target has been silent for ``idle`` seconds after everything was sent. With ``expect``, silence
    never ends the wait (only ``deadline`` does): a loaded machine may pause a reply past ``idle``."""
    out = Outcome()
    data = memoryview(b"".join(stream))
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
    buf = bytearray()
    sent, start, last = 0, time.monotonic(), time.monotonic()
    try:
        while True:
            now = time.monotonic()
            if now - start > deadline:
                out.timed_out = True
                break
            if expect is None and sent >= len(data) and now - last > (5.0 if out.term else idle):
                break  # after a C2HTermReq the target must close: give it time to
            if expect is not None and len(out.statuses) >= expect:
                break
            for _key, events in sel.select(0.05):
                if events & selectors.EVENT_WRITE and sent < len(data):
                    try:
                        sent += sock.send(data[sent:sent + (1 << 18)])
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        sent = len(data)
                    if sent >= len(data):
                        sel.modify(sock, selectors.EVENT_READ)
                        last = time.monotonic()
                if events & selectors.EVENT_READ:
                    try:
                        chunk = sock.recv(1 << 18)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        chunk = b""
                    if not chunk:
                        out.closed = True
                        return out
                    last = time.monotonic()
                    buf += chunk
                    _consume(buf, out)
    finally:
        sel.close()
        if not out.closed:
            _close_and_wait(sock)
        sock.close()
    return out


def _close_and_wait(sock: socket.socket, timeout: float = 2.0) -> None:
    """Send our FIN and wait for the target's: it frees the connection's QID before it closes the
    socket, so the next case may connect the same QID (without this wait a worker process that had
    not seen the FIN yet refused that Connect, now and then: a fuzzer race, not a target fault)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        sock.setblocking(True)
        sock.settimeout(timeout)
        while sock.recv(1 << 16):
            pass


def _consume(buf: bytearray, out: Outcome) -> None:
    while len(buf) >= 8:
        plen = struct.unpack_from("<I", buf, 4)[0]
        if plen < 8:
            raise AssertionError(f"target sent a PDU with PLEN {plen}")
        if len(buf) < plen:
            return
        ptype = buf[0]
        if ptype == pdu.PduType.C2H_TERM_REQ:
            out.term = struct.unpack_from("<HI", buf, 8)
        elif ptype == pdu.PduType.CAPSULE_RESP:
            out.statuses.append(struct.unpack_from("<H", buf, 8 + 14)[0] >> 1)
        else:
            out.other.append(ptype)
        del buf[:plen]


def n_commands(stream: list[bytes]) -> int:
    return sum(1 for raw in stream if raw and raw[0] == pdu.PduType.CAPSULE_CMD)


# ---- targeted cases: the spec names the outcome ------------------------------------------------
FES_INVALID_HEADER, FES_SEQUENCE, FES_HEADER_DIGEST, FES_OUT_OF_RANGE, FES_LIMIT = 1, 2, 3, 4, 5
DNR = 0x4000
STATUS_CONNECT_INVALID_PARAMETERS = DNR | 0x100 | 0x82
STATUS_TRANSIENT_TRANSPORT = 0x22


def _sqe(opcode: int, cid: int, nsid: int = 0, cdws: dict[int, int] | None = None, *, sgl_len: int = 0,
         sgl_type: int = 0x5A) -> bytes:
    raw = bytearray(64)
    raw[0], raw[1] = opcode, 0x40
    struct.pack_into("<HI", raw, 2, cid, nsid)
    struct.pack_into("<QI3xB", raw, 24, 0, sgl_len, sgl_type)
    for k, v in (cdws or {}).items():
        struct.pack_into("<I", raw, 40 + 4 * (k - 10), v)
    return bytes(raw)


def connect_pdu(qid: int, cntlid: int, subnqn: str, hostnqn: str, hostid: bytes, *, hd: bool = False,
                dd: bool = False, cattr: int = 0) -> bytes:
    """A Connect CapsuleCmd for SQSIZE 31; ``cattr`` is CDW11 bits 23:16 (bit 2: disable SQ flow control)."""
    sqe = bytearray(_sqe(0x7F, 1, 0x01, {10: qid << 16, 11: 31 | (cattr << 16)}, sgl_len=1024, sgl_type=0x01))
    data = ConnectData(hostid, cntlid, subnqn, hostnqn).encode()
    return b"".join(bytes(b) for b in pdu.capsule_cmd(bytes(sqe), data, hdgst=hd, ddgst=dd))


def icreq(hd: bool = False, dd: bool = False) -> bytes:
    return b"".join(pdu.ic_req(hdgst=hd, ddgst=dd))


@dataclass
class Identity:
    """The host identity of the captured session (I/O queues must Connect with it)."""

    hostnqn: str
    hostid: bytes


def identity_of(conns: list[CapturedConnection]) -> Identity:
    for conn in conns:
        for raw in conn.pdus:
            if _is_connect(raw) and conn.kind == NVM:
                info = ConnectData.decode(raw[raw[3]:raw[3] + 1024])
                return Identity(info.hostnqn, info.hostid)
    raise ValueError("the capture holds no Connect to the NVM subsystem")


def targeted_cases(ident: Identity, cntlid: int, qid: int) -> list[tuple[str, list[bytes], dict]]:
    """(name, stream, expectation); expectation keys: fes, status (first CQE status), open."""
    ic = icreq()
    conn = connect_pdu(qid, cntlid, GUEST_NQN, ident.hostnqn, ident.hostid)
    write16k = b"".join(pdu.capsule_cmd(_sqe(0x01, 9, 1, {10: 100, 12: 31}, sgl_len=16384)))
    h2c = lambda off, n, ttag=1, cid=9: b"".join(bytes(b) for b in pdu.data_pdu(  # noqa: E731
        pdu.PduType.H2C_DATA, cid, ttag, off, bytes(n), last=off + n >= 16384))
    flush = b"".join(pdu.capsule_cmd(_sqe(0x00, 7, 1)))
    bad_ddgst = bytearray(b"".join(bytes(b) for b in pdu.capsule_cmd(
        _sqe(0x01, 5, 1, {10: 200, 12: 7}, sgl_len=4096, sgl_type=0x01), bytes(4096), ddgst=True)))
    bad_ddgst[-1] ^= 0xFF
    hd_capsule = bytearray(b"".join(bytes(b) for b in pdu.capsule_cmd(_sqe(0x00, 7, 1), hdgst=True)))
    hd_capsule[72] ^= 0xFF
    ch = pdu.CH.pack
    return [
        ("pdu_before_icreq", [flush], {"fes": FES_SEQUENCE}),
        ("second_icreq", [ic, ic], {"fes": FES_SEQUENCE}),
        ("unknown_type", [ic, ch(0x08, 0, 24, 0, 24) + bytes(16)], {"fes": FES_INVALID_HEADER}),
        ("target_only_type", [ic, ch(0x05, 0, 24, 0, 24) + bytes(16)], {"fes": FES_INVALID_HEADER}),
        ("hlen_mismatch", [ic, ch(0x04, 0, 70, 0, 72) + bytes(64)], {"fes": FES_INVALID_HEADER}),
        ("plen_below_hlen", [ic, ch(0x04, 0, 72, 0, 40) + bytes(32)], {"fes": FES_INVALID_HEADER}),
        ("plen_above_limit", [ic, ch(0x04, 0, 72, 72, 1 << 30)], {"fes": FES_LIMIT}),
        ("pdo_inside_header", [ic, ch(0x04, 0, 72, 40, 80) + bytes(72)], {"fes": FES_INVALID_HEADER}),
        ("pdo_beyond_plen", [ic, ch(0x04, 0, 72, 200, 80) + bytes(72)], {"fes": FES_INVALID_HEADER}),
        ("header_digest_mismatch", [icreq(hd=True), bytes(hd_capsule)], {"fes": FES_HEADER_DIGEST}),
        ("wrong_subsystem_nqn", [ic, connect_pdu(0, 0xFFFF, "nqn.2026-11.io.npukit:nope", ident.hostnqn,
                                                 ident.hostid)],
         {"status": STATUS_CONNECT_INVALID_PARAMETERS}),
        ("unknown_cntlid", [ic, connect_pdu(1, 0xFFF0, GUEST_NQN, ident.hostnqn, ident.hostid)],
         {"status": STATUS_CONNECT_INVALID_PARAMETERS}),
        ("h2c_unknown_ttag", [ic, conn, h2c(0, 512, ttag=0x7777)], {"fes": FES_INVALID_HEADER}),
        ("h2c_no_command", [ic, conn, h2c(0, 16384, ttag=1, cid=3)], {"fes": FES_INVALID_HEADER}),
        ("h2c_out_of_order", [ic, conn, write16k, h2c(8192, 8192)], {"fes": FES_OUT_OF_RANGE}),
        ("h2c_beyond_r2t", [ic, conn, write16k, h2c(0, 8192), h2c(8192, 16384)], {"fes": FES_OUT_OF_RANGE}),
        ("h2c_above_maxh2cdata", [ic, conn, write16k, h2c(0, 256 * 1024)], {"fes": FES_LIMIT}),
        ("data_digest_mismatch", [icreq(dd=True), connect_pdu(qid, cntlid, GUEST_NQN, ident.hostnqn,
                                                              ident.hostid, dd=True), bytes(bad_ddgst)],
         {"status_last": STATUS_TRANSIENT_TRANSPORT, "open": True}),
    ]


def check_expectation(name: str, out: Outcome, expect: dict) -> str | None:
    """None if the outcome is what the spec names, else a one-line complaint."""
    if "fes" in expect:
        if out.term is None or out.term[0] != expect["fes"]:
            return f"{name}: expected C2HTermReq FES {expect['fes']}, got {out.term} statuses {out.statuses}"
        if not out.closed:
            return f"{name}: C2HTermReq but the connection stayed open"
    if "status" in expect and (not out.statuses or out.statuses[-1] != expect["status"]):
        return f"{name}: expected status {expect['status']:#x}, got {[hex(s) for s in out.statuses]}"
    if "status_last" in expect and (not out.statuses or out.statuses[-1] & 0x7FF != expect["status_last"]):
        return f"{name}: expected status {expect['status_last']:#x}, got {[hex(s) for s in out.statuses]}"
    if expect.get("open") and (out.closed or out.term):
        return f"{name}: the connection was closed ({out.term})"
    return None


# ---- the campaign ------------------------------------------------------------------------------
@dataclass
class Tally:
    pdus: int = 0
    connections: int = 0
    terminated: int = 0
    nvme_errors: int = 0
    violations: list[str] = field(default_factory=list)
    slow_cases: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, stream: list[bytes], out: Outcome, complaint: str | None) -> None:
        with self.lock:
            self.pdus += len(stream)
            self.connections += 1
            self.terminated += out.term is not None
            self.nvme_errors += any(s & 0x7FF for s in out.statuses)
            self.slow_cases += out.timed_out
            if complaint and len(self.violations) < 50:
                self.violations.append(complaint)


def generic_complaint(out: Outcome) -> str | None:
    if out.term is not None:
        if not 1 <= out.term[0] <= 6:
            return f"C2HTermReq with FES {out.term[0]}"
        if not out.closed:
            return "C2HTermReq but the connection stayed open"
    return None


class Campaign:
    def __init__(self, server: ServerProcess, conns: list[CapturedConnection], seed: int) -> None:
        from npukit.devices.nvme.client import NvmeTcpHost

        self.server, self.conns, self.seed = server, conns, seed
        self.ident = identity_of(conns)
        self.helper = NvmeTcpHost("127.0.0.1", server.port, GUEST_NQN, hostnqn=self.ident.hostnqn,
                                  hostid=self.ident.hostid, io_queues=0)
        self.tally = Tally()

    def stream_for(self, rng: random.Random, qid: int) -> tuple[list[bytes], int | None]:
        """A mutated captured stream for a worker using I/O queue ``qid``."""
        conn = rng.choices(self.conns, weights=[2 if c.qid == 0 and c.kind == NVM else 1 + 2 * bool(c.qid)
                                                 for c in self.conns])[0]
        stream = list(conn.pdus)
        if conn.kind == NVM and conn.qid:
            stream = [patch_connect(r, cntlid=self.helper.cntlid, qid=qid) if _is_connect(r) else r
                      for r in stream]
        index = rng.randrange(len(stream))
        tail = rng.choice([0, 1, 4, 12])
        stream = mutate(stream[:index + 1 + tail], index, rng.choice(MUTATIONS), rng)
        port = self.server.discovery_port if conn.kind != NVM else self.server.port
        return stream, port

    def worker(self, wid: int, cases: int, round_no: int) -> None:
        try:
            self._cases(wid, cases, round_no)
        except Exception as exc:  # a fuzzer bug must fail the campaign, not vanish in a thread
            with self.tally.lock:
                self.tally.violations.append(f"fuzzer worker {wid} failed: {exc!r}")

    def _cases(self, wid: int, cases: int, round_no: int) -> None:
        rng = random.Random(self.seed * 1_000_003 + round_no * 1009 + wid)
        qid = 1 + wid
        for _ in range(cases):
            roll = rng.random()
            if roll < 0.1:
                name, stream, expect = rng.choice(targeted_cases(self.ident, self.helper.cntlid, qid))
                out = exchange(self.server.port, stream)
                self.tally.add(stream, out, check_expectation(name, out, expect) or generic_complaint(out))
                continue
            if roll < 0.25:
                stream = [icreq()] + [random_pdu(rng) for _ in range(rng.randint(1, 6))]
                port = self.server.port
            else:
                stream, port = self.stream_for(rng, qid)
            out = exchange(port, stream)
            self.tally.add(stream, out, generic_complaint(out))

    def probe(self) -> str | None:
        """A verified write/read through a fresh association; None when it works."""
        from npukit.devices.nvme.client import NvmeTcpHost

        try:
            with NvmeTcpHost("127.0.0.1", self.server.port, GUEST_NQN, io_queues=1, timeout=20) as h:
                data = os.urandom(128 * 1024)
                h.write(PROBE_LBA, data)
                if h.read(PROBE_LBA, 256) != data:
                    return "probe read back different data"
        except Exception as exc:  # any failure of the probe is the finding
            return f"probe failed: {exc}"
        return None


def run_campaign(conns: list[CapturedConnection], *, min_pdus: int, min_connections: int, seed: int = 1,
                 workers: int = 4, directory: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(Path(directory or tmp))
        try:
            return _campaign(server, conns, min_pdus, min_connections, seed, workers)
        finally:
            server.stop()


def _campaign(server: ServerProcess, conns, min_pdus, min_connections, seed, workers) -> dict:
    camp = Campaign(server, conns, seed)
    started = time.monotonic()
    rss, probes_failed, round_no = [server.rss_bytes()], [], 0
    per_round = max(8, min_connections // 20 // workers)
    while camp.tally.pdus < min_pdus or camp.tally.connections < min_connections:
        threads = [threading.Thread(target=camp.worker, args=(w, per_round, round_no))
                   for w in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        round_no += 1
        if not server.alive():
            break
        rss.append(server.rss_bytes())
        if (failure := camp.probe()) is not None:
            probes_failed.append(failure)
    alive = server.alive()
    final_probe = camp.probe() if alive else "server died"
    with contextlib.suppress(Exception):
        camp.helper.close()
    log = server.log_text()
    escaped = log.count("connection handler failed") + log.count("Traceback")
    t = camp.tally
    report = {"pdus": t.pdus, "connections": t.connections, "rounds": round_no, "seconds": round(
        time.monotonic() - started, 1), "terminated_connections": t.terminated,
        "connections_with_nvme_errors": t.nvme_errors, "cases_over_deadline": t.slow_cases,
        "violations": t.violations, "server_alive": alive, "probe_failures": probes_failed,
        "final_probe": final_probe, "escaped_exceptions": escaped,
        "rss_mib": {"start": round(rss[0] / 2**20, 1), "max": round(max(rss) / 2**20, 1),
                    "end": round(rss[-1] / 2**20, 1)}}
    report["ok"] = (alive and not t.violations and not probes_failed and final_probe is None and not escaped
                    and t.slow_cases == 0)
    return report
