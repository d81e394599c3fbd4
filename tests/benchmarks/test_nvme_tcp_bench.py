"""benchmarks/nvme_tcp.py's asyncio figure: Reads through AsyncIoQueue.read_window against
``npukit nvme serve``, every reply checked against the fill (its LBA stamp), CPU per Read from both
sides. The check must catch a block that does not hold what the fill wrote."""

import asyncio
import random

import pytest

from npukit.devices.nvme import fuzz
from npukit.devices.nvme.aio import AsyncIoQueue
from npukit.devices.nvme.client import NvmeTcpHost

STAMPED = 256  # blocks filled with their LBA: 32 places for a 4 KiB read


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("nvme_tcp")


def test_asyncio_reads_are_checked_and_costed(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "STAMPED_BLOCKS", STAMPED)
    srv = fuzz.ServerProcess(tmp_path, size="8M")
    try:
        with NvmeTcpHost("127.0.0.1", srv.port, fuzz.GUEST_NQN, io_queues=1, spare_queues=2) as h:
            h.write(0, bench.stamped(0, STAMPED))
            loop = asyncio.new_event_loop()
            queues = [loop.run_until_complete(AsyncIoQueue.open(h, qid, sqflow_off=True)) for qid in (2, 3)]
            rate, client_cpu, target_cpu = bench.async_randread(loop, queues, 0.3, random.Random(1),
                                                                [srv.pid, *srv.workers])
            assert rate > 100 and 0 < client_cpu < 0.01 and 0 <= target_cpu < 0.01  # s per Read
            h.write(16, bench.stamped(17, 1))  # block 16 now says it is block 17
            with pytest.raises(RuntimeError, match="LBA 16"):
                bench.async_randread(loop, queues, 2.0, random.Random(2), [srv.pid])
            for q in queues:
                q.close()
            loop.close()
    finally:
        srv.stop()
