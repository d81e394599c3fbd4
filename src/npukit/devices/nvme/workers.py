"""I/O queues served by worker processes: the main process's side.

The main process accepts every connection and runs ICReq and Connect itself (the controller, its
admin queue, Keep Alive, AENs and the Alkali vendor commands live here). Once an I/O queue is live,
its socket is handed to the least busy of ``count`` worker processes (``socket.send_fds``) with the
queue's state; the worker opens the namespace file itself (the page cache is shared, so a write a
worker acknowledged is what every other process reads, and survives the worker's death) and serves
Read, Write, Flush and the other NVM commands there. Anything else on that queue (vendor opcodes)
comes back here as a synchronous call and runs on the real controller (ipc.py).

A worker that dies (kill -9) takes its sockets with it: the host sees those queues drop. The pool
notices (end of file on the worker's control socket), releases the queues' QIDs, records an Error
Information entry (SQID = the queue, CID FFFFh: not one command) and an Error asynchronous event
(Transient Internal Error, log page 01h) on each affected controller, and starts a new worker; other
queues and new connections are served on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from npukit.devices.nvme import ipc
from npukit.devices.nvme.command import Command
from npukit.devices.nvme.fabrics import FabricsQueue
from npukit.devices.nvme.lifecycle import QueueEvent
from npukit.devices.nvme.registry import DEFERRED, QueueKind, Request, Result
from npukit.devices.nvme.spec import NvmeError, Status
from npukit.devices.nvme.subsystem import default_registry

if TYPE_CHECKING:
    from npukit.devices.nvme.controller import Controller
    from npukit.devices.nvme.subsystem import Subsystem
    from npukit.devices.nvme.tcp import Connection

log = logging.getLogger("npukit.nvme.workers")
NO_COMMAND = 0xFFFF  # Error Information CID: the error is not one command's
AEN_ERROR, AEN_TRANSIENT_INTERNAL, LOG_ERROR_INFO = 0, 0x04, 0x01
STOP_GRACE_S = 5.0


def workers_supported() -> bool:
    """Descriptor passing (SCM_RIGHTS) and memfd: Linux."""
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds") and hasattr(os, "memfd_create")


@dataclass
class HandedQueue:
    """An I/O queue now served by a worker: what the main process keeps to release it later."""

    conn_id: int
    fabrics: FabricsQueue
    ctrl: Controller
    qid: int
    slot: int
    peer: str
    folded: dict[int, int] = field(default_factory=dict)  # counter word -> value already summed


class WorkerProcess:
    def __init__(self, pool: WorkerPool, index: int) -> None:
        self.pool, self.index = pool, index
        ctl_main, ctl_worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        rpc_main, rpc_worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = (ctl_worker.fileno(), rpc_worker.fileno(), pool.shared.fd)
        argv = [sys.executable, "-m", "npukit.devices.nvme.worker", *map(str, fds), pool.log_path or ""]
        self.proc = subprocess.Popen(argv, pass_fds=fds, stdin=subprocess.DEVNULL)
        ctl_worker.close()
        rpc_worker.close()
        self.ctl, self.rpc = ctl_main, rpc_main
        self.outbox = ipc.Outbox(ctl_main, pool.loop)
        self.ctl_frames, self.rpc_frames = ipc.FrameReader(ctl_main), ipc.FrameReader(rpc_main)
        self.queues: dict[int, HandedQueue] = {}
        self.gone = False
        self.ready = False  # until it says so, queues stay in the main process (a start takes seconds)
        loop = pool.loop
        loop.add_reader(ctl_main.fileno(), self._on_ctl)
        loop.add_reader(rpc_main.fileno(), self._on_rpc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _on_ctl(self) -> None:
        for message in self.ctl_frames.pump():
            self.ready |= message[0] == "ready"
        if self.ctl_frames.eof:
            self.pool.worker_died(self)

    def _on_rpc(self) -> None:
        for message in self.rpc_frames.pump():
            self.pool.serve_call(self, message)
        if self.rpc_frames.eof:
            self.pool.worker_died(self)

    def reply(self, message: tuple) -> None:
        """Replies are small and the worker waits for each: the socket takes it at once."""
        self.rpc.setblocking(True)  # the loop's watcher made it non-blocking
        with contextlib.suppress(OSError):
            ipc.send_frame(self.rpc, message)

    def detach(self) -> None:
        if self.gone:
            return
        self.gone = True
        self.outbox.close()
        for sock in (self.ctl, self.rpc):
            with contextlib.suppress(Exception):
                self.pool.loop.remove_reader(sock.fileno())
            sock.close()


class WorkerPool:
    """``count`` worker processes serving handed-over I/O queues, and what they report."""

    def __init__(self, count: int, loop: asyncio.AbstractEventLoop, log_path: str | None = None) -> None:
        self.loop = loop
        self.log_path = log_path
        self.shared = ipc.SharedWords()
        self.shared.words[ipc.WRITE_CACHE] = 1
        self._free_slots = list(range(ipc.MAX_SLOTS - 1, 0, -1))  # slot 0 holds subsystem-wide words
        self._next_conn = 0
        self.closing = False
        self.subsystems: dict[str, Subsystem] = {}
        self._local: dict[str, list[int]] = {}  # NQN -> the I/O opcodes its workers run themselves
        self.workers = [WorkerProcess(self, i) for i in range(count)]

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Until every worker has started (or ``timeout``: then the late ones join when ready)."""
        deadline = time.monotonic() + timeout
        while not all(w.ready or w.gone for w in self.workers) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    # hand-over -------------------------------------------------------------------------------------
    async def hand_over(self, conn: Connection) -> bool:
        """Give a live I/O queue's socket to a worker; False (served here) when none can take it."""
        sock = conn.writer.get_extra_info("socket")
        live = [w for w in self.workers if w.ready and not w.gone]
        if sock is None or self.closing or not live or not self._free_slots:
            return False
        transport = conn.writer.transport
        transport.pause_reading()
        deadline = time.monotonic() + STOP_GRACE_S
        while transport.get_write_buffer_size() and time.monotonic() < deadline:
            await asyncio.sleep(0.001)  # the Connect response must be on the wire before the worker writes
        worker = min(live, key=lambda w: len(w.queues))
        fabrics, ctrl = conn.fabrics, conn.ctrl
        sub = ctrl.subsystem
        self.subsystems[sub.nqn] = sub
        slot = self._free_slots.pop()
        self.shared.clear(slot)
        # published before the worker can run a command on it
        self.shared.words[self.shared.at(slot, ipc.READY)] = int(ctrl.ready)
        self._next_conn += 1
        record = HandedQueue(self._next_conn, fabrics, ctrl, fabrics.qid, slot, conn.peer)
        info = {"conn_id": record.conn_id, "slot": slot, "nqn": sub.nqn, "cntlid": ctrl.cntlid,
                "hostnqn": ctrl.hostnqn, "hostid": ctrl.hostid, "qid": fabrics.qid, "sqsize": fabrics.sqsize,
                "hdgst": conn.hdgst, "ddgst": conn.ddgst, "hpda": conn.hpda, "sqhd": conn.sqhd,
                "sqflow_disabled": fabrics.sqflow_disabled,
                "peer": conn.peer, "namespaces": {n: str(ns.path) for n, ns in sub.namespaces.items()},
                "mdts": sub.mdts, "in_capsule_bytes": sub.in_capsule_bytes,
                "max_queue_entries": sub.max_queue_entries, "local_opcodes": self._local_opcodes(sub),
                "buffered": conn.source.buffered(), "receive": conn.target.receive}
        try:
            worker.outbox.send(("queue", info), [os.dup(sock.fileno())])  # the outbox closes the copy
        except OSError:
            self._free_slots.append(slot)
            transport.resume_reading()
            return False
        worker.queues[record.conn_id] = record
        conn.lifecycle.advance(QueueEvent.HAND_OVER)
        transport.abort()  # closes this process's descriptor only: the worker holds the connection
        log.info("%s: I/O queue %d of controller %d handed to worker %d (pid %d)", conn.peer, record.qid,
                 ctrl.cntlid, worker.index, worker.pid)
        return True

    def _local_opcodes(self, sub: Subsystem) -> list[int]:
        if sub.nqn not in self._local:
            self._local[sub.nqn] = sorted(local_opcodes(sub))
        return self._local[sub.nqn]

    # shared words ----------------------------------------------------------------------------------
    def publish(self) -> None:
        """Tell the workers what admin commands changed: the write cache, each controller's CSTS.RDY."""
        words, shared = self.shared.words, self.shared
        if self.subsystems:
            words[ipc.WRITE_CACHE] = int(all(s.write_cache for s in self.subsystems.values()))
        for record in self._records():
            words[shared.at(record.slot, ipc.READY)] = int(record.ctrl.ready)

    def sync(self) -> None:
        """Sum what the workers counted into the controllers and the SMART counters."""
        for record in self._records():
            self._fold(record)

    def _fold(self, record: HandedQueue) -> None:
        words, shared = self.shared.words, self.shared
        counters = record.ctrl.subsystem.state.counters
        for word, name in ipc.COUNTER_WORDS.items():
            now = words[shared.at(record.slot, word)]
            delta = now - record.folded.get(word, 0)
            if delta:
                setattr(counters, name, getattr(counters, name) + delta)
                record.folded[word] = now
        active = words[shared.at(record.slot, ipc.LAST_ACTIVITY_NS)] / 1e9
        record.ctrl.last_activity = max(record.ctrl.last_activity, active)

    def _records(self) -> list[HandedQueue]:
        return [r for w in self.workers for r in w.queues.values()]

    # what the workers report -------------------------------------------------------------------------
    def queue_closed(self, worker: WorkerProcess, conn_id: int) -> None:
        record = worker.queues.pop(conn_id, None)
        if record is not None:
            self._release(record)

    def _release(self, record: HandedQueue) -> None:
        self._fold(record)
        record.fabrics.release()
        self.shared.clear(record.slot)
        self._free_slots.append(record.slot)

    def worker_died(self, worker: WorkerProcess) -> None:
        if worker.gone:
            return
        worker.detach()
        lost = list(worker.queues.values())
        worker.queues.clear()
        if self.closing:
            for record in lost:
                self._release(record)
            return
        dropped = ", ".join(f"{r.peer} qid {r.qid}" for r in lost) or "none"
        for record in lost:
            self._release(record)
            if record.ctrl.subsystem.controllers.get(record.ctrl.cntlid) is record.ctrl:
                record.ctrl.record_error(record.qid, NO_COMMAND, int(Status.INTERNAL_ERROR), 0xFFFF, 0, 0)
                record.ctrl.post_event(AEN_ERROR, AEN_TRANSIENT_INTERNAL, LOG_ERROR_INFO)
        self.loop.create_task(self._reap(worker, len(lost), dropped))
        self.workers[self.workers.index(worker)] = WorkerProcess(self, worker.index)

    async def _reap(self, worker: WorkerProcess, count: int, dropped: str) -> None:
        """Log the death with the exit status (waited for off the loop: the sockets close first)."""
        with contextlib.suppress(Exception):
            await asyncio.to_thread(worker.proc.wait, STOP_GRACE_S)
        log.error("worker %d (pid %d) died (%s); %d I/O queue(s) dropped: %s", worker.index, worker.pid,
                  _exit_text(worker.proc.poll()), count, dropped)

    def close_controller(self, ctrl: Controller) -> None:
        """The controller is gone (admin queue closed, KATO expired): its I/O queues close too."""
        for worker in self.workers:
            for record in list(worker.queues.values()):
                if record.ctrl is ctrl:
                    with contextlib.suppress(OSError):
                        worker.outbox.send(("close", record.conn_id))

    # synchronous calls (vendor commands, error log entries) ---------------------------------------
    def serve_call(self, worker: WorkerProcess, message: tuple) -> None:
        if message[0] == "closed":
            self.queue_closed(worker, message[1])
            worker.reply(("ok",))
            return
        kind, nqn, cntlid, qid = message[:4]
        sub = self.subsystems.get(nqn)
        ctrl = sub.controllers.get(cntlid) if sub is not None else None
        if ctrl is None:
            worker.reply(("err", int(Status.COMMAND_SEQUENCE_ERROR), True, 0, 0, 0xFFFF))
            return
        if kind == "error":
            ctrl.record_error(qid, *message[4:])
            worker.reply(("ok",))
        elif kind == "save":  # a worker's Flush: the state file as a Flush here would write it
            self.sync()
            ctrl.subsystem.state.save()
            worker.reply(("ok",))
        elif kind == "prepare":
            try:
                _spec, n_in, n_out = ctrl.prepare(qid, Command.decode(message[4]))
            except NvmeError as err:
                worker.reply(_error_reply(err))
                return
            worker.reply(("ok", n_in, n_out))
        elif kind == "execute":
            self._execute(worker, ctrl, qid, Command.decode(message[4]), message[5])

    def _execute(self, worker: WorkerProcess, ctrl: Controller, qid: int, cmd: Command, data: bytes) -> None:
        spec = ctrl.subsystem.registry.lookup(QueueKind.IO, cmd.opcode)

        def answer(outcome: Result | BaseException) -> None:
            if isinstance(outcome, NvmeError):
                worker.reply(_error_reply(outcome))
            elif isinstance(outcome, BaseException):
                worker.reply(_error_reply(NvmeError(Status.INTERNAL_ERROR, str(outcome), dnr=False)))
            else:
                worker.reply(("ok", bytes(outcome.data), outcome.dw0, outcome.dw1))

        if spec is None:
            answer(NvmeError(Status.INVALID_OPCODE, f"io opcode 0x{cmd.opcode:02X}"))
            return
        try:
            outcome = spec.handler(Request(ctrl, qid, cmd, memoryview(data), answer))
        except NvmeError as exc:
            outcome = exc
        except Exception as exc:  # a handler bug must not take the queue down
            log.exception("controller %d: handler %s failed", ctrl.cntlid, spec.name)
            outcome = NvmeError(Status.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}", dnr=False)
        if outcome is not DEFERRED:
            answer(outcome if outcome is not None else Result())

    # stop ---------------------------------------------------------------------------------------------
    async def close(self) -> None:
        """Workers stop when their control socket closes; the stragglers are killed."""
        self.closing = True
        for worker in self.workers:
            worker.detach()
        deadline = time.monotonic() + STOP_GRACE_S
        for worker in self.workers:
            while worker.proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if worker.proc.poll() is None:
                worker.proc.kill()
                worker.proc.wait()
            for record in list(worker.queues.values()):
                self._release(record)
            worker.queues.clear()


def local_opcodes(sub: Subsystem) -> set[int]:
    """I/O opcodes a worker runs itself: those still served by the standard NVM handlers."""
    standard = default_registry()
    out = set()
    for opcode in standard.opcodes(QueueKind.IO):
        mine, theirs = sub.registry.lookup(QueueKind.IO, opcode), standard.lookup(QueueKind.IO, opcode)
        if mine is not None and mine.handler is theirs.handler:
            out.add(opcode)
    return out


def _error_reply(err: NvmeError) -> tuple:
    return ("err", int(err.status), err.dnr, err.dw0, err.lba, err.param_loc)


def _exit_text(status: int | None) -> str:
    if status is None:
        return "still exiting"
    if status < 0:
        return f"killed by {signal.Signals(-status).name}"
    return f"exit status {status}"
