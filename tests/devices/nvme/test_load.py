"""8 hosts x 4 I/O queues x queue depth 32 against a real ``npukit nvme serve`` for 10 s: mixed
self-verifying reads and writes on disjoint and overlapping ranges (npukit.devices.nvme.loadgen);
every block read back is checked against what was written (an independent per-block CRC32C and
identity, not the target's view)."""

import pytest

from npukit.devices.nvme import fuzz, loadgen


@pytest.mark.slow
def test_eight_hosts_four_queues_depth_32_without_mismatches(tmp_path):
    srv = fuzz.ServerProcess(tmp_path)
    try:
        report = loadgen.run_load(srv.port, fuzz.GUEST_NQN, hosts=8, queues=4, depth=32, seconds=10,
                                  namespace_blocks=(64 << 20) // 512)
    finally:
        srv.stop()
    print(report)
    assert report["errors"] == [] and report["mismatches"] == 0, report["examples"]
    assert report["per_queue_commands"]["min"] >= 32  # every queue completed at least one full batch
    assert report["commands"] > 1000 and report["jain_fairness"] > 0.5
    assert "connection handler failed" not in srv.log_text()


def test_block_checker_catches_torn_and_misplaced_blocks():
    blocks = loadgen.make_blocks(100, 2, writer=3, seq=9)
    assert loadgen.parse_block(blocks[:512]) == (100, 3, 9)
    assert loadgen.parse_block(blocks[512:]) == (101, 3, 9)
    torn = blocks[:300] + bytes(212)
    assert loadgen.parse_block(torn) is None


def test_sliding_window_reads_and_writes_match_the_backing_file(target):
    """run_window keeps 16 commands outstanding (writes through R2T and in-capsule, reads); the backing
    file, read with os.pread, is the oracle."""
    import os

    from npukit.devices.nvme.client import NvmeTcpHost
    from npukit.devices.nvme.command import Command

    blobs = {k: os.urandom(512 * (8 if k % 2 else 256)) for k in range(48)}
    with NvmeTcpHost("127.0.0.1", target.port, target.sub.nqn, io_queues=1) as h:
        writes = ((Command.build(0x01, nsid=1, cdws={10: 256 * k, 12: len(b) // 512 - 1}), b, 0)
                  for k, b in blobs.items())
        assert all(r.cqe.status == 0 for r in h.io_qs[0].run_window(writes, 16))
        reads = [(Command.build(0x02, nsid=1, cdws={10: 256 * k, 12: len(b) // 512 - 1}), b"", len(b))
                 for k, b in blobs.items()]
        by_cid = {r.cqe.cid: r.data for r in h.io_qs[0].run_window(iter(reads), 16)}
    fd = os.open(target.tmp / "ns.img", os.O_RDONLY)
    try:
        for (cmd, _, n), (k, blob) in zip(reads, blobs.items(), strict=True):
            assert os.pread(fd, n, 256 * k * 512) == blob and by_cid[cmd.cid] == blob
    finally:
        os.close(fd)
