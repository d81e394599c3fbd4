"""npukit's asyncio NVMe/TCP I/O queue (aio.py): two queues on one event loop, each a sliding window of
Reads (and Writes through R2T) against the target. Oracle: the namespace file's bytes, written beside
the target with ``os.pwrite`` and read back with ``os.pread``."""

import asyncio
import os
import random
import struct

import pytest

from npukit.devices.nvme import pdu
from npukit.devices.nvme.aio import AsyncIoQueue
from npukit.devices.nvme.client import NvmeStatusError, NvmeTcpHost
from npukit.devices.nvme.command import Command
from npukit.devices.nvme.spec import ProtocolError

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
        q.writer.transport.abort()  # our side gone: the next readexactly ends short
        await q.run_window(iter([(Command.build(0x02, nsid=1, cdws={10: 0, 12: 7}), b"", 4096)]), 1,
                           lambda r: None)

    with (NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=0, spare_queues=1) as h,
          pytest.raises(ProtocolError)):
        asyncio.run(run(h))


def test_c2hdata_with_success_is_refused_while_sq_flow_control_is_on():
    """NVMe/TCP 1.0: C2HData's SUCCESS flag may stand in for the CapsuleResp only when the host disabled
    SQ flow control at Connect; AsyncIoQueue never asks for that, so a target setting it is wrong."""
    async def run() -> str:
        async def serve(reader, writer):
            await reader.readexactly(128)  # ICReq
            writer.write(b"".join(pdu.ic_resp(0, False, False, 131072)))
            await reader.readexactly(72)  # the Read's CapsuleCmd (CID 1)
            writer.writelines(pdu.encode(pdu.PduType.C2H_DATA, struct.pack("<HHII4x", 1, 0, 0, 512),
                                         bytes(512), flags=pdu.FLAG_DATA_LAST | pdu.FLAG_DATA_SUCCESS))
            await writer.drain()
            await asyncio.sleep(1)
            writer.close()
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        writer.write(bytes(128))
        await reader.readexactly(128)
        q = AsyncIoQueue(reader, writer, hdgst=False, ddgst=False, maxh2cdata=131072, in_capsule=0)
        try:
            await q.run_window(iter([(Command.build(0x02, nsid=1, cdws={12: 0}), b"", 512)]), 1,
                               lambda r: None)
        except ProtocolError as exc:
            return str(exc)
        finally:
            q.close()
            server.close()
        return "accepted"

    assert "SUCCESS" in asyncio.run(run())
