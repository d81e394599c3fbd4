"""The target's receive paths: PDUs received into a preallocated buffer (PduReceiver) come out whole
and unchanged however TCP splits them, a held PDU is not overwritten by what arrives after it, a peer
that sends without the target reading fills one buffer and no more, and the StreamReader path serves
the same data."""

import asyncio
import os
import random
import socket

import pytest

from npukit.devices.nvme import fuzz, pdu
from npukit.devices.nvme.client import NvmeTcpHost
from npukit.devices.nvme.command import Command
from npukit.devices.nvme.namespace import Namespace
from npukit.devices.nvme.pdu import PduType
from npukit.devices.nvme.receive import BUFFER_BYTES, INITIAL_BUFFER_BYTES, PduReceiver
from npukit.devices.nvme.spec import ProtocolError
from npukit.devices.nvme.state import DeviceState
from npukit.devices.nvme.subsystem import Subsystem
from npukit.devices.nvme.tcp import TargetThread, new_event_loop

from .conftest import NQN, NS_BYTES


def _plen(ch: bytes) -> int:
    return int.from_bytes(ch[4:8], "little")  # PLEN, NVMe/TCP 1.0 common header bytes 4..7


def _pdus(rng: random.Random, count: int) -> list[bytes]:
    """Host PDUs of every size class: bare commands, in-capsule data, 128 KiB H2CData."""
    out = []
    for i in range(count):
        kind = rng.randrange(3)
        if kind == 0:
            parts = pdu.capsule_cmd(Command.build(0x02, cid=i, nsid=1).encode())
        elif kind == 1:
            data = rng.randbytes(rng.choice((512, 8192)))
            parts = pdu.capsule_cmd(Command.build(0x01, cid=i, nsid=1).encode(), data, hdgst=True, ddgst=True)
        else:
            parts = pdu.data_pdu(PduType.H2C_DATA, i, 1, 0, rng.randbytes(128 << 10), last=True)
        out.append(b"".join(parts))
    return out


async def _receive_all(expected: list[bytes], chunks: list[bytes], *, initial: bytes = b"") -> None:
    """Send ``chunks`` over a loopback socket pair into a PduReceiver; check each PDU it hands out."""
    loop = asyncio.get_running_loop()
    left, right = socket.socketpair()
    receiver = PduReceiver(initial=initial)
    await loop.connect_accepted_socket(lambda: receiver, left)
    right.setblocking(False)

    async def send() -> None:
        for chunk in chunks:
            await loop.sock_sendall(right, chunk)
            await asyncio.sleep(0)  # the receiver runs between pieces: it sees them apart
        right.shutdown(socket.SHUT_WR)
    sender = loop.create_task(send())
    for want in expected:
        got = await receiver.read_pdu(_plen)
        await asyncio.sleep(0)  # let more data land behind the held PDU
        assert bytes(got) == want
    with pytest.raises(asyncio.IncompleteReadError):
        await receiver.read_pdu(_plen)
    await sender
    receiver.transport.close()
    right.close()


@pytest.mark.parametrize(("seed", "loop_factory"), [(1, asyncio.new_event_loop), (2, new_event_loop)],
                         ids=["asyncio-loop", "target-loop"])
def test_pdus_come_out_whole_however_tcp_splits_them(seed, loop_factory):
    """On asyncio's own loop and on the target's (uvloop where installed)."""
    rng = random.Random(seed)
    expected = _pdus(rng, 40)
    stream = b"".join(expected)
    chunks, pos = [], 0
    while pos < len(stream):  # 1 byte .. 200 KiB pieces: headers and bodies split anywhere
        n = rng.choice((1, 7, 8, 9, 100, 4096, 70_000, 200_000))
        chunks.append(stream[pos:pos + n])
        pos += n
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(_receive_all(expected, chunks))


def test_bytes_read_before_the_hand_over_come_first():
    expected = _pdus(random.Random(3), 12)
    stream = b"".join(expected)
    cut = len(expected[0]) + 5  # a worker starts with one PDU and a piece of the next already read
    asyncio.run(_receive_all(expected, [stream[cut:]], initial=stream[:cut]))


def test_a_peer_that_sends_while_the_target_does_not_read_fills_one_buffer():
    expected = _pdus(random.Random(4), 48)  # ~2 MiB, far more than the buffer
    stream = b"".join(expected)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair()
        receiver = PduReceiver()
        await loop.connect_accepted_socket(lambda: receiver, left)
        right.setblocking(False)
        sender = loop.create_task(loop.sock_sendall(right, stream))
        await asyncio.sleep(0.3)
        assert not sender.done()  # the socket buffers filled up behind a paused receiver
        assert len(receiver.buffered()) == INITIAL_BUFFER_BYTES  # a full buffer stopped the reading
        for want in expected:
            assert bytes(await receiver.read_pdu(_plen)) == want
        assert len(receiver.buffered()) == 0 and len(receiver._buf) == BUFFER_BYTES  # grown once for 128 KiB
        await sender
        receiver.transport.close()
        right.close()
    asyncio.run(run())


def test_a_refused_header_is_raised_before_the_body_is_read():
    async def run() -> None:
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair()
        receiver = PduReceiver()
        await loop.connect_accepted_socket(lambda: receiver, left)
        right.sendall(b"\x04\x00\x48\x00" + (1 << 30).to_bytes(4, "little"))  # PLEN 1 GiB

        def refuse(ch: bytes) -> int:
            if _plen(ch) > 1 << 20:
                raise ProtocolError("PLEN above the limit")
            return _plen(ch)
        with pytest.raises(ProtocolError):
            await receiver.read_pdu(refuse)
        receiver.transport.close()
        right.close()
    asyncio.run(run())


@pytest.mark.parametrize("receive", ["buffers", "stream"])
def test_both_receive_paths_serve_the_same_data(tmp_path, receive):
    ns = Namespace(tmp_path / "ns.img", size=NS_BYTES)
    sub = Subsystem(NQN, [ns], DeviceState(tmp_path / "state"), allowed_hosts=None)
    thread = TargetThread([sub], receive=receive)
    try:
        with NvmeTcpHost("127.0.0.1", thread.port, NQN, io_queues=1, hdgst=True, ddgst=True) as h:
            big, small = os.urandom(128 << 10), os.urandom(4096)  # R2T + H2CData, in-capsule
            h.write(0, big)
            h.write(1024, small)
            h.flush()
            raw = (tmp_path / "ns.img").read_bytes()  # the backing file is the independent view
            assert raw[:len(big)] == big and raw[1024 * 512:1024 * 512 + 4096] == small
            assert h.read(0, 256) == big
    finally:
        thread.stop()
        sub.close()


@pytest.mark.parametrize("receive", ["buffers", "stream"])
def test_a_host_that_half_closes_still_gets_its_answer(tmp_path, receive):
    """A FIN after the last PDU ends the host's sending only (TCP half-close, RFC 9293 3.6)."""
    sub = Subsystem(NQN, [Namespace(tmp_path / "ns.img", size=NS_BYTES)], DeviceState(tmp_path / "state"))
    thread = TargetThread([sub], receive=receive)
    try:
        with socket.create_connection(("127.0.0.1", thread.port), timeout=5) as s:
            s.sendall(b"".join(pdu.ic_req()))
            s.shutdown(socket.SHUT_WR)
            answer = b""
            while len(answer) < 128 and (piece := s.recv(128)):
                answer += piece
        assert answer[0] == PduType.IC_RESP and _plen(answer[:8]) == 128
    finally:
        thread.stop()
        sub.close()


@pytest.mark.parametrize("receive", ["buffers", "stream"])
def test_a_worker_process_receives_the_way_serve_was_told(tmp_path, receive):
    """``serve --receive``: the main process hands the I/O queue over with what it had read ahead, and
    the worker goes on receiving the same way; data written in-capsule, through R2T, and pipelined."""
    srv = fuzz.ServerProcess(tmp_path, size="8M", extra=("--workers", "1", "--receive", receive))
    try:
        with NvmeTcpHost("127.0.0.1", srv.port, srv.nqn, io_queues=1, hdgst=True, ddgst=True) as h:
            blocks = [os.urandom(n) for n in (4096, 128 << 10, 512, 64 << 10)]
            commands = [(Command.build(0x01, nsid=1, cdws={10: 512 * i, 12: len(b) // 512 - 1}), b, 0)
                        for i, b in enumerate(blocks)]
            assert all(not r.cqe.status for r in h.io_qs[0].run_window(iter(commands), 4))
            for i, b in enumerate(blocks):
                assert h.read(512 * i, len(b) // 512) == b
    finally:
        srv.stop()
    raw = (tmp_path / "ns.img").read_bytes()  # the file the worker wrote is the independent view
    assert all(raw[512 * 512 * i:512 * 512 * i + len(b)] == b for i, b in enumerate(blocks))


def _exact_pdu(s: socket.socket) -> bytes:
    head = b""
    while len(head) < 8:
        head += s.recv(8 - len(head))
    body = b""
    while len(body) < _plen(head) - 8:
        chunk = s.recv(_plen(head) - 8 - len(body))
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return head + body


def test_a_completion_is_not_held_back_by_the_next_pdus_missing_bytes(target):
    """Two 128 KiB writes through R2T; the host sends the first one's H2CData whole and only half of
    the second's: the first write's CapsuleResp must come now, not once the second's data is complete
    (responses are batched only with PDUs already here whole)."""
    with NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=0) as owner:
        owner.set_features(0x07, 1 | (1 << 16))
        s = socket.create_connection(("127.0.0.1", target.port), timeout=5)
        s.sendall(fuzz.icreq())
        _exact_pdu(s)
        s.sendall(fuzz.connect_pdu(1, owner.cntlid, NQN, owner.hostnqn, owner.hostid))
        _exact_pdu(s)
        data = [os.urandom(128 * 1024) for _ in range(2)]
        for cid in (1, 2):
            s.sendall(b"".join(pdu.capsule_cmd(fuzz._sqe(0x01, cid, 1, {10: 256 * cid, 12: 255},
                                                         sgl_len=128 * 1024))))
        ttags = {}
        for _ in range(2):
            r2t = _exact_pdu(s)
            assert r2t[0] == PduType.R2T
            ttags[int.from_bytes(r2t[8:10], "little")] = int.from_bytes(r2t[10:12], "little")
        h2c = [b"".join(bytes(b) for b in pdu.data_pdu(PduType.H2C_DATA, cid, ttags[cid], 0, data[cid - 1],
                                                       last=True)) for cid in (1, 2)]
        s.sendall(h2c[0] + h2c[1][:len(h2c[1]) // 2])
        resp = _exact_pdu(s)  # times out (5 s) if the completion waits for the rest
        assert resp[0] == PduType.CAPSULE_RESP and int.from_bytes(resp[20:22], "little") == 1
        assert int.from_bytes(resp[22:24], "little") >> 1 == 0
        s.sendall(h2c[1][len(h2c[1]) // 2:])
        resp = _exact_pdu(s)
        assert int.from_bytes(resp[20:22], "little") == 2 and int.from_bytes(resp[22:24], "little") >> 1 == 0
        s.close()
    with open(target.tmp / "ns.img", "rb") as f:  # both writes landed where they were sent
        assert os.pread(f.fileno(), 256 * 1024, 256 * 512) == data[0] + data[1]
