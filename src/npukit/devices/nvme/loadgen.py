"""Verified mixed load against an NVMe/TCP target: many hosts, several I/O queues each, a fixed queue
depth, reads and writes on per-queue (disjoint) and shared (overlapping) ranges for a fixed time.

Every written 512-byte block describes itself: ``lba u64, writer u32, seq u32, crc32c u32`` and
random bytes; the CRC covers the rest of the block. A read is checked block by block:
* on a queue's own range it must equal the model of what that queue last wrote there;
* on the shared range it must be intact (CRC), name its own LBA, and come from a write that some queue
  issued to that LBA (or be zeroes while no write to it had completed).
The report counts mismatches and each queue's completed commands (fairness: Jain's index).
"""

from __future__ import annotations

import os
import random
import struct
import threading
import time
from dataclasses import dataclass, field

import crc32c

from npukit.devices.nvme.client import NvmeTcpHost
from npukit.devices.nvme.command import Command

BLOCK = 512
SLOT_BLOCKS = 8  # 4 KiB slots
_HEAD = struct.Struct("<QIII")
SIZES = (1, 1, 2, 4, 16)  # slots per command: 4 KiB in-capsule ... 64 KiB through R2T


def make_blocks(lba: int, nlb: int, writer: int, seq: int) -> bytes:
    noise = os.urandom(nlb * (BLOCK - _HEAD.size))
    step = BLOCK - _HEAD.size
    out = bytearray()
    for k in range(nlb):
        body = noise[k * step:(k + 1) * step]
        head = struct.pack("<QII", lba + k, writer, seq)
        out += head + struct.pack("<I", crc32c.crc32c(head + body)) + body
    return bytes(out)


def parse_block(block: bytes) -> tuple[int, int, int] | None:
    """(lba, writer, seq) of an intact self-describing block, None if it is not one."""
    lba, writer, seq, crc = _HEAD.unpack_from(block)
    if crc32c.crc32c(block[:16] + block[20:]) != crc:
        return None
    return lba, writer, seq


@dataclass
class Shared:
    """What was issued to / completed on the shared range (guarded by ``lock``)."""

    issued: dict[int, set[tuple[int, int]]] = field(default_factory=dict)
    completed: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class QueueStats:
    host: int
    qid: int
    commands: int = 0
    bytes: int = 0
    mismatches: list[str] = field(default_factory=list)
    error: str | None = None


class QueueWorker:
    def __init__(self, host: NvmeTcpHost, hidx: int, qid: int, private: range, shared_range: range,
                 shared: Shared, depth: int, seed: int) -> None:
        self.host, self.qid, self.depth = host, qid, depth
        self.writer = hidx * 64 + qid
        self.private, self.shared_range, self.shared = private, shared_range, shared
        self.model: dict[int, bytes] = {}  # private LBA -> block content
        self.rng = random.Random(seed)
        self.stats = QueueStats(hidx, qid)
        self.seq = 0

    def _extent(self, region: range, busy: set[int]) -> tuple[int, int] | None:
        for _ in range(8):
            slots = self.rng.choice(SIZES)
            first = self.rng.randrange(len(region) // SLOT_BLOCKS - slots) * SLOT_BLOCKS + region.start
            lbas = set(range(first, first + slots * SLOT_BLOCKS))
            if not lbas & busy:
                busy |= lbas
                return first, slots * SLOT_BLOCKS
        return None

    def one_batch(self) -> None:
        busy: set[int] = set()
        batch, plan = [], []
        for _ in range(self.depth):
            region = self.shared_range if self.rng.random() < 0.5 else self.private
            extent = self._extent(region, busy)
            if extent is None:
                continue
            lba, nlb = extent
            if self.rng.random() < 0.5:
                self.seq += 1
                data = make_blocks(lba, nlb, self.writer, self.seq)
                if region is self.shared_range:
                    with self.shared.lock:
                        for k in range(nlb):
                            self.shared.issued.setdefault(lba + k, set()).add((self.writer, self.seq))
                cmd = Command.build(0x01, nsid=1, cdws={10: lba, 12: nlb - 1})
                batch.append((cmd, data, 0))
                plan.append(("w", region is self.shared_range, lba, nlb, data, None))
            else:
                with self.shared.lock:
                    done = {x for x in range(lba, lba + nlb) if x in self.shared.completed}
                batch.append((Command.build(0x02, nsid=1, cdws={10: lba, 12: nlb - 1}), b"", nlb * BLOCK))
                plan.append(("r", region is self.shared_range, lba, nlb, None, done))
        replies = self.host.io_qs[self.qid - 1].run_batch(batch)
        for (kind, shared, lba, nlb, data, done), reply in zip(plan, replies, strict=True):
            if reply.cqe.status:
                self.stats.mismatches.append(f"status {reply.cqe.status:#x} for {kind} {lba}+{nlb}")
                continue
            self.stats.commands += 1
            self.stats.bytes += nlb * BLOCK
            if kind == "w":
                if shared:
                    with self.shared.lock:
                        self.shared.completed.update(range(lba, lba + nlb))
                else:
                    for k in range(nlb):
                        self.model[lba + k] = data[k * BLOCK:(k + 1) * BLOCK]
            else:
                self.check(reply.data, lba, nlb, shared, done)

    def check(self, data: bytes, lba: int, nlb: int, shared: bool, done: set[int]) -> None:
        for k in range(nlb):
            block = data[k * BLOCK:(k + 1) * BLOCK]
            where = lba + k
            if not shared:
                if block != self.model.get(where, bytes(BLOCK)):
                    self.stats.mismatches.append(f"private LBA {where} differs from the last write")
                continue
            if block == bytes(BLOCK):
                if where in done:
                    self.stats.mismatches.append(f"shared LBA {where} reads zeroes after a completed write")
                continue
            info = parse_block(block)
            with self.shared.lock:
                known = self.shared.issued.get(where, set())
                ok = info is not None and info[0] == where and (info[1], info[2]) in known
            if not ok:
                self.stats.mismatches.append(f"shared LBA {where}: torn, misplaced or never written {info}")

    def run(self, deadline: float) -> None:
        try:
            while time.monotonic() < deadline:
                self.one_batch()
        except Exception as exc:  # reported, and fails the run
            self.stats.error = repr(exc)

    def final_check(self) -> None:
        for lba in sorted(self.model)[:: SLOT_BLOCKS]:
            got = self.host.read(lba, 1, qid=self.qid)
            if got != self.model[lba]:
                self.stats.mismatches.append(f"final: private LBA {lba}")


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values)) if any(values) else 0.0


def run_load(port: int, nqn: str, *, hosts: int = 8, queues: int = 4, depth: int = 32, seconds: float = 10.0,
             namespace_blocks: int, seed: int = 1) -> dict:
    """Run the load for ``seconds``; returns a report (mismatches, fairness, throughput)."""
    per_queue = 2048  # 1 MiB private range per queue
    shared_start = hosts * queues * per_queue
    shared_range = range(shared_start, min(shared_start + 8192, namespace_blocks))
    if len(shared_range) < 1024:
        raise ValueError(f"namespace of {namespace_blocks} blocks is too small for {hosts}x{queues} queues")
    shared = Shared()
    conns, workers = [], []
    try:
        for h in range(hosts):
            host = NvmeTcpHost("127.0.0.1", port, nqn, io_queues=queues, queue_size=depth, timeout=60,
                               hostnqn=f"nqn.2026-11.io.npukit:load-host-{h}")
            conns.append(host)
            if len(host.io_qs) != queues:
                raise RuntimeError(f"host {h} got {len(host.io_qs)} I/O queues, asked for {queues}")
            for q in range(1, queues + 1):
                index = h * queues + q - 1
                private = range(index * per_queue, (index + 1) * per_queue)
                workers.append(QueueWorker(host, h, q, private, shared_range, shared, depth,
                                           seed * 7919 + index))
        start = time.monotonic()
        threads = [threading.Thread(target=w.run, args=(start + seconds,)) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 120)
        elapsed = time.monotonic() - start
        for w in workers:
            w.final_check()
    finally:
        for host in conns:
            host.close()
    counts = [w.stats.commands for w in workers]
    mismatches = [m for w in workers for m in w.stats.mismatches]
    return {"hosts": hosts, "queues_per_host": queues, "depth": depth, "seconds": round(elapsed, 1),
            "commands": sum(counts), "mib": round(sum(w.stats.bytes for w in workers) / 2**20, 1),
            "iops": round(sum(counts) / elapsed), "mismatches": len(mismatches), "examples": mismatches[:5],
            "errors": [w.stats.error for w in workers if w.stats.error],
            "per_queue_commands": {"min": min(counts), "max": max(counts),
                                   "mean": round(sum(counts) / len(counts))},
            "jain_fairness": round(jain(counts), 3),
            "per_host_commands": [sum(counts[h * queues:(h + 1) * queues]) for h in range(hosts)]}
