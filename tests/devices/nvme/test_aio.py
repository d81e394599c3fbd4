"""npukit's asyncio NVMe/TCP I/O queue (aio.py): two queues on one event loop, each a sliding window of
Reads (and Writes through R2T) against the target. Oracle: the namespace file's bytes, written beside
the target with ``os.pwrite`` and read back with ``os.pread``."""

import asyncio
import os
import random
import struct

import crc32c
import pytest

from npukit.devices.nvme.aio import AsyncIoQueue
from npukit.devices.nvme.client import NvmeStatusError, NvmeTcpHost
from npukit.devices.nvme.command import Command
from npukit.devices.nvme.spec import ProtocolError
from npukit.errors import ConfigError

from .conftest import NQN, NS_BYTES


def _reads(rng: random.Random, n: int) -> list[tuple[int, int]]:
    return [(rng.randrange(NS_BYTES // 512 - 256), rng.choice((1, 8, 64, 256))) for _ in range(n)]


@pytest.mark.parametrize("digests", [False, True], ids=["plain", "digests"])
def test_two_async_queues_on_one_loop_read_exactly_what_the_file_holds(target, digests):
    image = os.urandom(NS_BYTES)
    with open(target.tmp / "ns.img", "r+b") as f:
        os.pwrite(f.fileno(), image, 0)
    rng = random.Random(3)
    plans = [_reads(rng, 200), _reads(rng, 200)]
    checked: list[int] = []

    async def one_queue(h: NvmeTcpHost, qid: int, reads: list[tuple[int, int]]) -> int:
        q = await AsyncIoQueue.open(h, qid)
        by_cid = {}

        def commands():
            for slba, n in reads:
                cmd = Command.build(0x02, nsid=1, cdws={10: slba, 12: n - 1})
                yield cmd, b"", n * 512
                by_cid[cmd.cid] = (slba, n)

        def check(reply):
            slba, n = by_cid.pop(reply.cqe.cid)
            assert reply.cqe.status == 0 and reply.data == image[slba * 512:(slba + n) * 512]
            checked.append(n)
        try:
            return await q.run_window(commands(), 16, check)
        finally:
            q.close()

    with NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=0, spare_queues=2, hdgst=digests,
                     ddgst=digests) as h:
        async def both():
            return await asyncio.gather(one_queue(h, 1, plans[0]), one_queue(h, 2, plans[1]))
        done = asyncio.run(both())
    assert done == [200, 200] and len(checked) == 400
    assert sum(checked) == sum(n for plan in plans for _, n in plan)


def test_async_writes_go_through_r2t_and_land_in_the_file(target):
    sizes = (1, 8, 256, 64) * 4
    writes = [(slot, os.urandom(sizes[i] * 512)) for i, slot in enumerate(range(0, 8000, 600))]

    async def run(h: NvmeTcpHost) -> list[int]:
        q = await AsyncIoQueue.open(h, 1)
        statuses: list[int] = []
        cmds = ((Command.build(0x01, nsid=1, cdws={10: slba, 12: len(d) // 512 - 1}), d, 0)
                for slba, d in writes)
        await q.run_window(cmds, 4, lambda r: statuses.append(r.cqe.status))
        q.close()
        return statuses

    with NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=0, spare_queues=1) as h:
        assert h.io_qs == []
        statuses = asyncio.run(run(h))
        assert h.get_features(0x07) & 0xFFFF == 0  # the admin queue still answers: one queue allocated
    assert statuses == [0] * len(writes)
    with open(target.tmp / "ns.img", "rb") as f:
        for slba, data in writes:
            assert os.pread(f.fileno(), len(data), slba * 512) == data


def test_connect_beyond_the_allocated_queues_is_refused(target):
    with (NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=0, spare_queues=1) as h,
          pytest.raises(NvmeStatusError, match=r"Connect \(QID 2\)")):
        asyncio.run(AsyncIoQueue.open(h, 2))


def test_a_target_that_closes_mid_read_is_a_protocol_error(target):
    async def run(h: NvmeTcpHost) -> None:
        q = await AsyncIoQueue.open(h, 1)
        q.transport.abort()  # our side gone: the next readexactly ends short
        await q.run_window(iter([(Command.build(0x02, nsid=1, cdws={10: 0, 12: 7}), b"", 4096)]), 1,
                           lambda r: None)

    with (NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=0, spare_queues=1) as h,
          pytest.raises(ProtocolError)):
        asyncio.run(run(h))


def test_read_window_reads_exactly_what_the_file_holds_and_reports_errors(target):
    """The template path (plain) and the general path (digests) of read_window, against the file."""
    image = os.urandom(NS_BYTES)
    with open(target.tmp / "ns.img", "r+b") as f:
        os.pwrite(f.fileno(), image, 0)
    rng = random.Random(5)
    reads = [*dict(_reads(rng, 300)).items(), (NS_BYTES // 512, 8)]  # the last: past the namespace's end
    for digests in (False, True):
        seen: list[tuple[int, int, bytes]] = []
        with NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=0, spare_queues=1, hdgst=digests,
                         ddgst=digests) as h:
            async def run(h=h, seen=seen):
                q = await AsyncIoQueue.open(h, 1, sqflow_off=True)
                try:
                    return await q.read_window(iter(reads), 16, lambda *r: seen.append((*r[:2], bytes(r[2]))))
                finally:
                    q.close()
            assert asyncio.run(run()) == len(reads)
        by_slba = {slba: n for slba, n in reads}
        assert sorted(s for s, _, _ in seen) == sorted(by_slba)
        for slba, status, data in seen:
            if slba == NS_BYTES // 512:
                assert status & 0x7FF == 0x80  # LBA Out of Range (SCT 0, SC 80h), DNR aside
            else:
                assert status == 0 and data == image[slba * 512:(slba + by_slba[slba]) * 512]


# ---- a scripted target, written from the NVMe/TCP 1.0 PDU layouts (not npukit's encoder) -------------
CRC = struct.Struct("<I")


def _crc(b: bytes) -> bytes:
    return CRC.pack(crc32c.crc32c(b))


class ScriptedTarget:
    """ICResp, a Connect completion with the given SQHD, then each Read answered as ``reply(cid, slba,
    nlb)`` says: a list of raw PDUs. Records the Connect's CATTR byte."""

    def __init__(self, *, sqhd: int, digests: bool = False, reply=None) -> None:
        self.sqhd, self.digests = sqhd, digests
        self.reply = reply or self.success
        self.cattr: int | None = None

    @staticmethod
    def stamp(slba: int, nlb: int) -> bytes:
        return b"".join(struct.pack("<Q", lba) * 64 for lba in range(slba, slba + nlb))

    def pdu(self, ptype: int, flags: int, specific: bytes, data: bytes = b"") -> bytes:
        hlen = 8 + len(specific)
        hd = 4 if self.digests else 0
        dd = 4 if self.digests and data else 0
        flags |= (1 if hd else 0) | (2 if dd else 0)
        pdo = hlen + hd if data else 0
        header = struct.pack("<BBBBI", ptype, flags, hlen, pdo, hlen + hd + len(data) + dd) + specific
        return (header + (_crc(header) if hd else b"") + data + (_crc(data) if dd else b""))

    def c2h(self, cid: int, offset: int, data: bytes, flags: int) -> bytes:
        return self.pdu(0x07, flags, struct.pack("<HHII4x", cid, 0, offset, len(data)), data)

    def resp(self, cid: int, status: int = 0, sqhd: int | None = None) -> bytes:
        sqhd = self.sqhd if sqhd is None else sqhd
        return self.pdu(0x05, 0, struct.pack("<IIHHHH", 0, 0, sqhd, 1, cid, status << 1))

    def success(self, cid: int, slba: int, nlb: int) -> list[bytes]:
        return [self.c2h(cid, 0, self.stamp(slba, nlb), 0x04 | 0x08)]  # LAST_PDU | SUCCESS

    async def capsule(self, reader) -> bytes:
        ch = await reader.readexactly(8)
        rest = await reader.readexactly(struct.unpack_from("<I", ch, 4)[0] - 8)
        return (ch + rest)[8:72]  # the SQE

    async def serve(self, reader, writer) -> None:
        icreq = await reader.readexactly(128)
        dgst = icreq[11]
        writer.write(struct.pack("<BBBBIHBBI", 0x01, 0, 128, 0, 128, 0, 0, dgst, 131072).ljust(128, b"\0"))
        sqe = await self.capsule(reader)
        assert sqe[0] == 0x7F and sqe[4] == 0x01  # Fabrics Connect
        self.cattr = sqe[46]  # CDW11 bits 23:16
        writer.write(self.resp(struct.unpack_from("<H", sqe, 2)[0], sqhd=self.sqhd))
        try:
            while True:
                sqe = await self.capsule(reader)
                assert sqe[0] == 0x02  # Read
                cid, slba, nlb = struct.unpack_from("<H", sqe, 2)[0], *struct.unpack_from("<QI", sqe, 40)
                # PSDT 01b (SGL), NSID 1, SGL1: Transport SGL Data Block (5Ah) of the Read's length
                sgl_len = struct.unpack_from("<I", sqe, 32)[0]
                assert sqe[1] >> 6 == 1 and struct.unpack_from("<I", sqe, 4)[0] == 1 and sqe[39] == 0x5A
                assert sgl_len == ((nlb & 0xFFFF) + 1) * 512 and nlb >> 16 == 0
                writer.write(b"".join(self.reply(cid, slba, (nlb & 0xFFFF) + 1)))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()


def _scripted(peer: ScriptedTarget, reads: list[tuple[int, int]], *, sqflow_off: bool, generic: bool = False):
    """Connect to ``peer`` and read ``reads`` 4 deep; returns (queue's sqflow_off, completions)."""
    out: list = []

    async def run():
        server = await asyncio.start_server(peer.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connect = (Command.build(0x7F, nsid=0x01, cdws={10: 1 << 16, 11: 31}), bytes(1024))
        q = await AsyncIoQueue.connect("127.0.0.1", port, connect, qid=1, hdgst=peer.digests,
                                       ddgst=peer.digests, in_capsule=8192, sqflow_off=sqflow_off)
        try:
            if generic:
                cmds = ((Command.build(0x02, nsid=1, cdws={10: s, 12: n - 1}), b"", n * 512)
                        for s, n in reads)
                await q.run_window(cmds, 4, out.append)
            else:
                await q.read_window(iter(reads), 4, lambda slba, st, d: out.append((slba, st, bytes(d))))
            return q.sqflow_off
        finally:
            q.close()
            server.close()
    return asyncio.run(run()), out


@pytest.mark.parametrize("digests", [False, True], ids=["plain", "digests"])
def test_with_sq_flow_control_disabled_c2hdata_success_completes_the_read(digests):
    peer = ScriptedTarget(sqhd=0xFFFF, digests=digests)
    reads = [(8 * i, 8) for i in range(40)] + [(1000, 1), (2000, 256), (4096, 2048)]  # 1 MiB: > the arena
    accepted, done = _scripted(peer, reads, sqflow_off=True)
    assert peer.cattr & 0x04 and accepted  # CATTR bit 2 sent; SQHD FFFFh taken as the controller's yes
    assert sorted(done) == sorted((s, 0, ScriptedTarget.stamp(s, n)) for s, n in reads)
    accepted, replies = _scripted(peer, reads[:6], sqflow_off=True, generic=True)
    assert accepted and len(replies) == 6
    for reply in replies:  # the completion SUCCESS stands for: status 0, SQHD FFFFh
        assert reply.cqe.status == 0 and reply.cqe.sqhd == 0xFFFF and reply.cqe.dw0 == 0
        slba = int.from_bytes(reply.data[:8], "little")
        assert reply.data == ScriptedTarget.stamp(slba, len(reply.data) // 512)


def test_with_sq_flow_control_disabled_split_data_and_failed_reads_still_work():
    """Data in two C2HData PDUs (SUCCESS only on the last), a failing Read answered with a CapsuleResp."""
    peer = ScriptedTarget(sqhd=0xFFFF)

    def reply(cid, slba, nlb):
        if slba >= 4096:
            return [peer.resp(cid, 0x80)]  # LBA Out of Range, no data
        data = ScriptedTarget.stamp(slba, nlb)
        half = len(data) // 2
        return [peer.c2h(cid, 0, data[:half], 0), peer.c2h(cid, half, data[half:], 0x0C)]
    peer.reply = reply
    reads = [(8 * i, 8) for i in range(20)] + [(5000, 8)]
    accepted, done = _scripted(peer, reads, sqflow_off=True)
    assert accepted
    assert sorted((s, st) for s, st, _ in done) == sorted((s, 0x80 if s >= 4096 else 0) for s, _ in reads)
    for slba, status, data in done:  # a failed Read's buffer holds nothing to check
        assert status or data == ScriptedTarget.stamp(slba, 8)


@pytest.mark.parametrize("case", ["not asked", "controller kept it", "not last", "data short"])
def test_c2hdata_success_is_refused_unless_flow_control_is_off_and_it_ends_the_data(case):
    """NVMe/TCP 1.0: SUCCESS may stand in for the CapsuleResp only if the host disabled SQ flow control
    at Connect (and the controller agreed: SQHD FFFFh), and only on the last PDU of the Read's data."""
    peer = ScriptedTarget(sqhd=0xFFFF if case in ("not asked", "not last", "data short") else 0x0001)
    if case == "not last":
        peer.reply = lambda cid, slba, nlb: [peer.c2h(cid, 0, ScriptedTarget.stamp(slba, nlb), 0x08)]
    if case == "data short":
        peer.reply = lambda cid, slba, nlb: [peer.c2h(cid, 0, ScriptedTarget.stamp(slba, nlb)[:512], 0x0C)]
    with pytest.raises(ProtocolError, match="SUCCESS"):
        _scripted(peer, [(0, 8)], sqflow_off=case != "not asked")
    assert peer.cattr == (0 if case == "not asked" else 0x04)


def test_a_completion_for_a_finished_command_is_a_protocol_error():
    """Each slot's CID changes with every reuse: a second CapsuleResp for a completed Read is caught."""
    peer = ScriptedTarget(sqhd=1)
    peer.reply = lambda cid, slba, nlb: [peer.c2h(cid, 0, ScriptedTarget.stamp(slba, nlb), 0x04),
                                         peer.resp(cid), peer.resp(cid)]
    with pytest.raises(ProtocolError, match="not outstanding"):
        _scripted(peer, [(0, 8), (8, 8)], sqflow_off=False)


def test_a_termination_request_or_a_bad_header_digest_ends_the_queue_with_a_protocol_error():
    peer = ScriptedTarget(sqhd=0xFFFF)  # C2HTermReq: FES 02h (PDU Sequence Error), FEI 0, no digests
    peer.reply = lambda cid, slba, nlb: [struct.pack("<BBBBIHI10x", 0x03, 0, 24, 0, 24, 0x02, 0)]
    with pytest.raises(ProtocolError, match=r"terminated.*FES 0x2"):
        _scripted(peer, [(0, 8)], sqflow_off=True)
    peer = ScriptedTarget(sqhd=0xFFFF, digests=True)

    def corrupt(cid, slba, nlb):
        raw = bytearray(peer.success(cid, slba, nlb)[0])
        raw[24] ^= 0xFF  # the header digest (bytes 24..27) no longer matches the header
        return [bytes(raw)]
    peer.reply = corrupt
    with pytest.raises(ProtocolError, match="header digest"):
        _scripted(peer, [(0, 8)], sqflow_off=True)


@pytest.mark.parametrize(("reads", "depth"),
                         [([(0, 0)], 4), ([(0, 65537)], 4), ([(-8, 8)], 4), ([(0, 8)], 0)])
def test_a_read_the_nvm_command_set_cannot_express_is_a_config_error(reads, depth):
    async def run():
        server = await asyncio.start_server(ScriptedTarget(sqhd=1).serve, "127.0.0.1", 0)
        connect = (Command.build(0x7F, nsid=0x01, cdws={10: 1 << 16, 11: 31}), bytes(1024))
        q = await AsyncIoQueue.connect("127.0.0.1", server.sockets[0].getsockname()[1], connect, qid=1,
                                       in_capsule=8192)
        try:
            await q.read_window(iter(reads), depth, lambda *r: None)
        finally:
            q.close()
            server.close()
    with pytest.raises(ConfigError):
        asyncio.run(run())
