"""npukit's NVMe/TCP initiator (client.py): the sliding window with recycled reply buffers and the
receive that takes only PDU headers after a large payload. Oracle: the namespace file's bytes, written
beside the target with ``os.pwrite``."""

import os
import random

from npukit.devices.nvme.client import NvmeTcpHost
from npukit.devices.nvme.command import Command

from .conftest import NQN, NS_BYTES


def test_run_window_reads_mixed_sizes_exactly_with_recycled_buffers(target):
    image = os.urandom(NS_BYTES)
    with open(target.tmp / "ns.img", "r+b") as f:
        os.pwrite(f.fileno(), image, 0)
    rng = random.Random(7)
    reads = [(rng.randrange(NS_BYTES // 512 - 256), rng.choice((1, 8, 64, 255, 256))) for _ in range(300)]
    by_cid = {}

    def commands():
        for slba, n in reads:
            cmd = Command.build(0x02, nsid=1, cdws={10: slba, 12: n - 1})
            yield cmd, b"", n * 512
            by_cid[cmd.cid] = (slba, n)  # the CID is set when the window sends it: read after the yield

    seen, done = [], 0  # the reply buffers, kept alive so that their ids stay distinct
    with NvmeTcpHost("127.0.0.1", target.port, NQN, io_queues=1) as h:
        for reply in h.io_qs[0].run_window(commands(), 8, recycle=True):
            slba, n = by_cid[reply.cqe.cid]
            assert reply.cqe.status == 0 and reply.data == image[slba * 512:(slba + n) * 512]
            seen.append(reply.data)
            done += 1
    assert done == len(reads)
    assert len({id(b) for b in seen}) <= 5 * 9  # reused: a window's worth (+1) per read size, not one each
