#!/usr/bin/env python3
"""NVMe/TCP over loopback, in one run: 4 KiB random-read IOPS at QD 1 and 32 (and QD 32 over 2 queues,
from two threads on blocking sockets and, like the ceiling's client, from one asyncio event loop),
128 KiB sequential read and write MB/s through npukit's client against ``npukit nvme serve`` (a separate
process), and two ceilings measured in rounds interleaved with the NVMe figures because the machine is
shared: raw loopback TCP (a plain socket pair, sender in a separate process, 128 KiB messages) and a
plain asyncio request/response server (a separate process; 72-byte requests in, 4 KiB + 24-byte
replies out, the PDU sizes of a 4 KiB read) driven by asyncio clients over 2 connections 16 deep.
The asyncio queues ask the target to disable SQ flow control at Connect (``--sqflow`` keeps it), so
a target that grants it may end each Read with C2HData SUCCESS instead of a CapsuleResp. Beside the
rates it prints CPU time per operation of both sides of the asyncio figure and of the ceiling (client:
this process; target and ceiling server: their processes' /proc stat).
Prints JSON with issue 30's goals against those ceilings and the CPU model; every figure is
``measured`` (npukit.evidence) on this machine at this load.

    python benchmarks/nvme_tcp.py [--seconds 2] [--rounds 3] [--sqflow]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np

from npukit.devices.nvme import fuzz
from npukit.devices.nvme.aio import AsyncIoQueue
from npukit.devices.nvme.client import NvmeTcpHost
from npukit.devices.nvme.command import Command
from npukit.sim.cpu import describe as machine_line
from npukit.sim.cpu import host_cpu_model

CHUNK = 128 * 1024
NS_BYTES = 256 << 20
STAMPED_BLOCKS = NS_BYTES // 512 // 2  # random reads go to the lower half, filled with stamped()
_SENDER = """
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = bytearray(int(sys.argv[2])); end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    s.sendall(buf)
s.close()
"""


# The plain asyncio request/response server: what Python's own event loop allows for 4 KiB reads.
REQUEST, REPLY = 72, 4096 + 24
_ASYNCIO_SERVER = f"""
import asyncio, sys
REPLY = bytes({REPLY})
async def serve(r, w):
    try:
        while True:
            await r.readexactly({REQUEST})
            w.write(REPLY)
            await w.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    w.close()
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


async def _exchanges(port: int, depth: int, end: float) -> int:
    """One asyncio client connection keeping ``depth`` requests outstanding until ``end``."""
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request = bytes(REQUEST)
    writer.write(request * depth)
    done = 0
    while time.monotonic() < end:
        await reader.readexactly(REPLY)
        done += 1
        writer.write(request)
    writer.close()
    return done


def asyncio_ceiling(seconds: float, connections: int = 2, depth: int = 16) -> tuple[float, float, float]:
    """Exchanges/s of a plain asyncio request/response loop (issue 30's ceiling): the asyncio server in
    its own process, asyncio clients here, ``connections`` x ``depth`` outstanding, 72 B in, 4 KiB +
    24 B out. Both ends on asyncio's own loop, as the issue measured it. Also returns the CPU seconds
    per exchange of the client (this process) and of the server."""
    import asyncio

    proc = subprocess.Popen([sys.executable, "-c", _ASYNCIO_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())

        async def drive() -> int:
            end = time.monotonic() + seconds
            counts = await asyncio.gather(*(_exchanges(port, depth, end) for _ in range(connections)))
            return sum(counts)
        start, cpu, server_cpu = time.monotonic(), time.process_time(), cpu_seconds([proc.pid])
        total = asyncio.run(drive())
        n = max(total, 1)
        return (total / (time.monotonic() - start), (time.process_time() - cpu) / n,
                (cpu_seconds([proc.pid]) - server_cpu) / n)
    finally:
        proc.kill()
        proc.wait()


def raw_ceiling(seconds: float) -> float:
    """MB/s a plain TCP socket pair moves over loopback: a sender process, this process receiving."""
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", _SENDER, str(port), str(CHUNK), str(seconds)])
    conn, _ = lsock.accept()
    buf = memoryview(bytearray(CHUNK))
    total, start = 0, time.monotonic()
    while (n := conn.recv_into(buf)) > 0:
        total += n
    elapsed = time.monotonic() - start
    conn.close()
    lsock.close()
    proc.wait(10)
    return total / elapsed / 1e6


def _timed(seconds: float, step) -> tuple[int, float]:
    ops, start = 0, time.monotonic()
    while (now := time.monotonic()) - start < seconds:
        ops += step()
    return ops, now - start


def _window(q, make, depth: int, seconds: float) -> tuple[int, float]:
    """Commands from ``make(i)`` kept ``depth`` deep (sliding window) for ``seconds``."""
    start = time.monotonic()
    end = start + seconds

    def commands():
        i = 0
        while time.monotonic() < end:
            yield make(i)
            i += 1
    done = 0
    for reply in q.run_window(commands(), depth, recycle=True):  # reused buffers, as raw_ceiling's
        if reply.cqe.status:
            raise RuntimeError(f"status {reply.cqe.status:#x}")
        done += 1
    return done, time.monotonic() - start


def stamped(slba: int, nlb: int) -> bytes:
    """What the fill writes to blocks slba..slba+nlb-1: each 512-byte block is its LBA (le64) x 64."""
    return np.repeat(np.arange(slba, slba + nlb, dtype="<u8"), 64).tobytes()


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) the processes ``pids`` have used so far (/proc/PID/stat)."""
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (stat fields 14 and 15)
    return ticks / os.sysconf("SC_CLK_TCK")


def async_randread(loop, queues: list[AsyncIoQueue], seconds: float, rng: random.Random,
                   target_pids: list[int]) -> tuple[float, float, float]:
    """4 KiB random Reads/s driven like asyncio_ceiling: one event loop, 2 queues x 16 outstanding
    (aio.AsyncIoQueue.read_window). Every reply's first block must carry its LBA and every 64th reply
    must equal the fill's bytes: the figure counts real reads. Also returns the CPU seconds per Read of
    this process (the client's whole cost: loop, parsing, checks) and of the target's processes."""
    checked = [0]

    def reads(end: float):
        while time.monotonic() < end:
            yield rng.randrange(STAMPED_BLOCKS // 8) * 8, 8

    def check(slba: int, status: int, data: bytearray) -> None:
        if status or int.from_bytes(data[:8], "little") != slba:
            raise RuntimeError(f"Read of LBA {slba}: status {status:#x}, wrong data")
        checked[0] += 1
        if checked[0] % 64 == 0 and data != stamped(slba, 8):
            raise RuntimeError(f"Read of LBA {slba} returned other bytes than were written")

    async def drive() -> int:
        end = time.monotonic() + seconds
        counts = await asyncio.gather(*(q.read_window(reads(end), 16, check) for q in queues))
        return sum(counts)
    start, cpu, target_cpu = time.monotonic(), time.process_time(), cpu_seconds(target_pids)
    total = loop.run_until_complete(drive())
    n = max(total, 1)
    return (total / (time.monotonic() - start), (time.process_time() - cpu) / n,
            (cpu_seconds(target_pids) - target_cpu) / n)


def nvme_figures(h: NvmeTcpHost, seconds: float, rng: random.Random) -> dict[str, float]:
    blocks = NS_BYTES // 512
    q = h.io_qs[0]
    data = os.urandom(CHUNK)
    out = {}

    def rand4k(_i):
        slba = rng.randrange(STAMPED_BLOCKS // 8) * 8
        return Command.build(0x02, nsid=1, cdws={10: slba, 12: 7}), b"", 4096

    def seq_read(i):
        return Command.build(0x02, nsid=1, cdws={10: (i * 256) % blocks, 12: 255}), b"", CHUNK

    def seq_write(i):  # the upper half: the stamped lower half stays as filled
        slba = STAMPED_BLOCKS + (i * 256) % (blocks - STAMPED_BLOCKS)
        return Command.build(0x01, nsid=1, cdws={10: slba, 12: 255}), data, 0

    for depth in (1, 32):
        ops, t = _window(q, rand4k, depth, seconds)
        out[f"randread_4k_qd{depth}_iops"] = ops / t
    results: list[tuple[int, float]] = []
    def sixteen_deep(queue) -> None:
        results.append(_window(queue, rand4k, 16, seconds))
    threads = [threading.Thread(target=sixteen_deep, args=(queue,)) for queue in h.io_qs[:2]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["randread_4k_qd32_2q_iops"] = sum(ops for ops, _ in results) / max(t for _, t in results)
    for depth in (1, 8):
        ops, t = _window(q, seq_read, depth, seconds)
        out[f"seqread_128k_qd{depth}_mbps"] = ops * CHUNK / t / 1e6
        ops, t = _window(q, seq_write, depth, seconds)
        out[f"seqwrite_128k_qd{depth}_mbps"] = ops * CHUNK / t / 1e6
    return out


def _goals(median: dict[str, float], raw: float) -> dict[str, dict]:
    """Issue 30's throughput goals: each ratio, its target and whether this run meets it."""
    reads = median["seqread_128k_qd8_mbps"]
    ratios = {"seqread_128k_qd8 / raw loopback": (reads / raw, 0.5),
              # like for like: the same client structure as the ceiling's (one asyncio loop, 2 x 16,
              # readexactly per PDU), npukit's target instead of the plain server
              "randread_4k_qd32_2q (asyncio client) / asyncio ceiling": (
                  median["randread_4k_qd32_2q_asyncio_iops"] / median["asyncio_rr_2x16_per_s"], 0.6),
              "seqwrite_128k_qd8 / seqread_128k_qd8": (median["seqwrite_128k_qd8_mbps"] / reads, 0.6)}
    goals = {name: {"ratio": round(r, 3), "goal": goal, "met": r >= goal}
             for name, (r, goal) in ratios.items()}
    threaded = median["randread_4k_qd32_2q_iops"] / median["asyncio_rr_2x16_per_s"]
    goals["randread_4k_qd32_2q (2 threads, blocking sockets) / asyncio ceiling"] = {
        "ratio": round(threaded, 3), "note": "not the goal's client: GIL-bound threads, not one event loop"}
    return goals


def main(argv: list[str] | None = None) -> int:
    print(machine_line(), file=sys.stderr)  # the CPU and kernel paths measured
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=2.0, help="per figure per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--digests", action="store_true", help="header and data digests (CRC32C)")
    p.add_argument("--workers", type=int, default=None,
                   help="serve's --workers (default: serve's own default, one per CPU; 0: single process)")
    p.add_argument("--sqflow", action="store_true",
                   help="keep SQ flow control on the asyncio queues (default: ask the target to disable it, "
                        "so a Read may end with C2HData SUCCESS instead of a CapsuleResp)")
    p.add_argument("--receive", choices=("buffers", "stream"), default=None,
                   help="serve's --receive (default: serve's own default)")
    args = p.parse_args(argv)
    rng = random.Random(1)
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        extra = ("--workers", str(args.workers)) if args.workers is not None else ()
        extra += ("--receive", args.receive) if args.receive else ()
        srv = fuzz.ServerProcess(Path(tmp), size=str(NS_BYTES), extra=extra)
        workers = len(srv.workers)
        try:
            with NvmeTcpHost("127.0.0.1", srv.port, fuzz.GUEST_NQN, io_queues=2, hdgst=args.digests,
                             ddgst=args.digests, spare_queues=2) as h:
                for pos in range(0, NS_BYTES // 512, 256):  # fill: reads hit written blocks
                    h.write(pos, stamped(pos, 256) if pos < STAMPED_BLOCKS else bytes(CHUNK))
                loop = asyncio.new_event_loop()  # the asyncio queues live on it across rounds
                queues = [loop.run_until_complete(AsyncIoQueue.open(h, qid, sqflow_off=not args.sqflow))
                          for qid in (3, 4)]
                sqflow_disabled = all(q.sqflow_off for q in queues)
                for _ in range(args.rounds):
                    figures = {"raw_loopback_mbps": raw_ceiling(args.seconds)}
                    figures |= nvme_figures(h, args.seconds, rng)
                    iops, cpu, target_cpu = async_randread(loop, queues, args.seconds, rng,
                                                           [srv.pid, *srv.workers])
                    figures["randread_4k_qd32_2q_asyncio_iops"] = iops
                    figures["asyncio_client_cpu_us_per_read"] = cpu * 1e6
                    figures["asyncio_target_cpu_us_per_read"] = target_cpu * 1e6
                    figures["raw_loopback_after_mbps"] = raw_ceiling(args.seconds)
                    rate, cpu, server_cpu = asyncio_ceiling(args.seconds)
                    figures["asyncio_rr_2x16_per_s"] = rate
                    figures["asyncio_rr_client_cpu_us_per_exchange"] = cpu * 1e6
                    figures["asyncio_rr_server_cpu_us_per_exchange"] = server_cpu * 1e6
                    rounds.append(figures)
                for queue in queues:
                    queue.close()
                loop.close()
        finally:
            srv.stop()
    median = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    raw_keys = ("raw_loopback_mbps", "raw_loopback_after_mbps")
    ceiling = statistics.median([r[k] for r in rounds for k in raw_keys])
    report = {"tier": "measured", "source": "benchmarks/nvme_tcp.py", "digests": args.digests,
              "workers": workers, "receive": args.receive or "default",
              "asyncio_queues_sq_flow_control": "disabled (C2HData SUCCESS accepted)" if sqflow_disabled
              else ("on (the target kept it)" if not args.sqflow else "on (--sqflow)"),
              "cpus": os.cpu_count(), "loadavg": os.getloadavg(), "rounds": args.rounds,
              "seconds_per_figure": args.seconds, "median": {k: round(v, 1) for k, v in median.items()},
              "raw_loopback_ceiling_mbps": round(ceiling, 1),
              "ratio_seqread_128k_qd1": round(median["seqread_128k_qd1_mbps"] / ceiling, 3),
              "ratio_seqread_128k_qd8": round(median["seqread_128k_qd8_mbps"] / ceiling, 3),
              "ratio_seqwrite_128k_qd8": round(median["seqwrite_128k_qd8_mbps"] / ceiling, 3),
              "asyncio_rr_ceiling_per_s": round(median["asyncio_rr_2x16_per_s"], 1),
              "ceilings": {"raw_loopback_mbps": round(ceiling, 1),
                           "asyncio_request_response_2x16_per_s": round(median["asyncio_rr_2x16_per_s"], 1)},
              "goals": _goals(median, ceiling), "cpu": host_cpu_model(), "machine": machine_line(),
              "per_round": [{k: round(v, 1) for k, v in r.items()} for r in rounds]}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
