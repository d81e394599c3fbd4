"""A/B of the NVMe/TCP target's receive paths: ``serve --receive stream`` (asyncio StreamReader) and
``--receive buffers`` (recv_into a preallocated buffer per connection), both servers running at once
and measured in alternating 1 s windows, so both see the same load on a shared machine.

    python benchmarks/nvme_receive_ab.py --rounds 6 --workers 2

Prints JSON: per mode the median and every window of 128 KiB writes (QD 8 and 1), 4 KiB random reads
(QD 32) and 128 KiB reads (QD 8), with the CPU model; tier measured.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

from npukit.devices.nvme import fuzz
from npukit.devices.nvme.client import NvmeTcpHost
from npukit.devices.nvme.command import Command
from npukit.sim.cpu import describe as machine_line
from npukit.sim.cpu import host_cpu_model
from nvme_tcp import CHUNK, NS_BYTES, _window

MODES = ("stream", "buffers")
BLOCKS = NS_BYTES // 512


def _workloads(rng: random.Random, data: bytes) -> dict[str, tuple]:
    """name -> (command maker, depth, bytes per command or 0 for IOPS)."""
    def write(i):
        return Command.build(0x01, nsid=1, cdws={10: (i * 256) % BLOCKS, 12: 255}), data, 0

    def read(i):
        return Command.build(0x02, nsid=1, cdws={10: (i * 256) % BLOCKS, 12: 255}), b"", CHUNK

    def read4k(_i):
        return Command.build(0x02, nsid=1, cdws={10: rng.randrange(BLOCKS // 8) * 8, 12: 7}), b"", 4096
    return {"seqwrite_128k_qd8_mbps": (write, 8, CHUNK), "seqwrite_128k_qd1_mbps": (write, 1, CHUNK),
            "randread_4k_qd32_iops": (read4k, 32, 0), "seqread_128k_qd8_mbps": (read, 8, CHUNK)}


def main(argv: list[str] | None = None) -> int:
    print(machine_line(), file=sys.stderr)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=1.0, help="per window")
    p.add_argument("--workers", type=int, default=2, help="serve's --workers")
    args = p.parse_args(argv)
    data = os.urandom(CHUNK)
    loads = _workloads(random.Random(1), data)
    windows = {m: {name: [] for name in loads} for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        servers, hosts = {}, {}
        try:
            for mode in MODES:
                (Path(tmp) / mode).mkdir()
                servers[mode] = fuzz.ServerProcess(Path(tmp) / mode, size=str(NS_BYTES),
                                                   extra=("--workers", str(args.workers), "--receive", mode))
                hosts[mode] = NvmeTcpHost("127.0.0.1", servers[mode].port, fuzz.GUEST_NQN, io_queues=1)
                for pos in range(0, BLOCKS, 256):  # reads hit written blocks
                    hosts[mode].write(pos, data)
            for r in range(args.rounds):
                for mode in MODES if r % 2 == 0 else MODES[::-1]:  # who goes first alternates
                    for name, (make, depth, size) in loads.items():
                        ops, t = _window(hosts[mode].io_qs[0], make, depth, args.seconds)
                        windows[mode][name].append(ops * size / t / 1e6 if size else ops / t)
        finally:
            for host in hosts.values():
                host.close()
            for server in servers.values():
                server.stop()
    print(json.dumps({"tier": "measured", "source": "benchmarks/nvme_receive_ab.py", "cpu": host_cpu_model(),
                      "machine": machine_line(), "workers": args.workers, "loadavg": os.getloadavg(),
                      "median": {m: {k: round(statistics.median(v)) for k, v in w.items()}
                                 for m, w in windows.items()},
                      "windows": {m: {k: [round(x) for x in v] for k, v in w.items()}
                                  for m, w in windows.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
