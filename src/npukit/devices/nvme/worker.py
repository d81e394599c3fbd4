"""An I/O queue worker process (``python -m npukit.devices.nvme.worker CTL RPC SHARED [LOG]``).

It receives live I/O queues from the target's main process (workers.py) and serves each with the same
:class:`~npukit.devices.nvme.tcp.Connection` the main process uses, bound to a stand-in controller:
the NVM commands run here against the namespace file opened in this process; the SMART counters and
the keep-alive time go to the queue's slot in shared memory; error log entries and every other opcode
(vendor commands) are synchronous calls to the main process. It exits when the main process closes
the control socket (or dies).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import sys

from npukit.devices.nvme import ipc
from npukit.devices.nvme.command import Command
from npukit.devices.nvme.controller import Controller
from npukit.devices.nvme.lifecycle import QueueState
from npukit.devices.nvme.namespace import Namespace
from npukit.devices.nvme.receive import PduReceiver, ReceiverWriter, StreamInput
from npukit.devices.nvme.registry import CommandRegistry, CommandSpec, Request, Result
from npukit.devices.nvme.spec import NvmeError, Status
from npukit.devices.nvme.state import DeviceState
from npukit.devices.nvme.subsystem import Subsystem, default_registry
from npukit.devices.nvme.tcp import Connection, TcpTarget, new_event_loop

log = logging.getLogger("npukit.nvme.worker")
GC_YOUNG_THRESHOLD = 7000  # allocations between young-generation collections (CPython's default: 700)


class SlotCounters:
    """The SMART counters of one queue, kept in its shared-memory slot (the main process sums them)."""

    def __init__(self, shared: ipc.SharedWords, slot: int) -> None:
        self._words, self._base = shared.words, slot * ipc.SLOT_WORDS
        self.power_on_seconds = 0.0
        self.error_log_entries = 0  # counted by the main process (errors are calls to it)

    def add_reads(self, commands: int, blocks: int, busy_ns: int) -> None:
        """state.Counters.add_reads on the shared words (one call instead of six property calls)."""
        words, base = self._words, self._base
        words[base + ipc.READ_COMMANDS] += commands
        words[base + ipc.UNITS_READ] += blocks
        words[base + ipc.BUSY_NS] += busy_ns


def _counter(word: int) -> property:
    def get(self: SlotCounters) -> int:
        return self._words[self._base + word]

    def put(self: SlotCounters, value: int) -> None:
        self._words[self._base + word] = value
    return property(get, put)


for _word, _name in ipc.COUNTER_WORDS.items():
    setattr(SlotCounters, _name, _counter(_word))


class MainProcessState(DeviceState):
    """A handed-over queue's view of the device state: the counters are its shared-memory slot, and a
    save (what Flush does after making the data durable) is the main process's: it sums every
    worker's counters into the real state and writes the state file, as a single-process Flush does."""

    def __init__(self, worker: Worker, info: dict) -> None:
        super().__init__(None)
        self.counters = SlotCounters(worker.shared, info["slot"])  # type: ignore[assignment]
        self._worker, self._key = worker, (info["nqn"], info["cntlid"], info["qid"])

    def save(self, *, running: bool = True) -> None:
        nqn, cntlid, qid = self._key
        _raise_error(self._worker.call(("save", nqn, cntlid, qid)))


class WorkerNamespace(Namespace):
    """The namespace file opened in this process; the write cache setting is the main process's."""

    shared: ipc.SharedWords

    @property
    def write_cache(self) -> bool:
        return bool(self.shared.words[ipc.WRITE_CACHE])

    @write_cache.setter
    def write_cache(self, _value: bool) -> None:
        pass  # Set Features runs in the main process, which publishes the setting


class WorkerController(Controller):
    """Stands in for the main process's controller on one handed-over queue."""

    def __init__(self, sub: Subsystem, info: dict, worker: Worker) -> None:
        self._words, self._base = worker.shared.words, info["slot"] * ipc.SLOT_WORDS  # before last_activity
        super().__init__(sub, info["cntlid"], hostnqn=info["hostnqn"])
        self.hostid = info["hostid"]
        self.worker, self.nqn = worker, info["nqn"]
        self.local = set(info["local_opcodes"])

    @property
    def ready(self) -> bool:
        return bool(self._words[self._base + ipc.READY])

    @property
    def last_activity(self) -> float:
        return self._words[self._base + ipc.LAST_ACTIVITY_NS] / 1e9

    @last_activity.setter
    def last_activity(self, value: float) -> None:
        self._words[self._base + ipc.LAST_ACTIVITY_NS] = int(value * 1e9)

    def call(self, kind: str, qid: int, *args) -> tuple:
        return self.worker.call((kind, self.nqn, self.cntlid, qid, *args))

    def record_error(self, qid: int, cid: int, status_field: int, param_loc: int, lba: int,
                     nsid: int) -> None:
        self.call("error", qid, cid, status_field, param_loc, lba, nsid)

    def prepare(self, qid: int, cmd: Command) -> tuple[CommandSpec, int, int]:
        if qid == 0 or cmd.opcode in self.local or cmd.opcode == 0x7F:
            return super().prepare(qid, cmd)
        reply = self.call("prepare", qid, cmd.raw)
        _raise_error(reply)
        return CommandSpec("vendor (main process)", self._remote), reply[1], reply[2]

    def _remote(self, req: Request) -> Result:
        reply = self.call("execute", req.qid, req.cmd.raw, bytes(req.data))
        _raise_error(reply)
        return Result(dw0=reply[2], dw1=reply[3], data=reply[1])


def _raise_error(reply: tuple) -> None:
    if reply[0] == "err":
        _, status, dnr, dw0, lba, param_loc = reply
        raise NvmeError(Status(status), "in the main process", dnr=dnr, dw0=dw0, lba=lba, param_loc=param_loc)


class WorkerConnection(Connection):
    def __init__(self, worker: Worker, info: dict, source, writer) -> None:
        super().__init__(worker.target, source, writer)
        self.worker, self.conn_id, self.peer = worker, info["conn_id"], info["peer"]

    def release(self) -> None:
        # the main process frees the QID before the host can see the socket close (and reconnect it)
        self.worker.closed(self.conn_id)
        super().release()


class Worker:
    def __init__(self, ctl: socket.socket, rpc: socket.socket, shared: ipc.SharedWords) -> None:
        self.ctl, self.rpc, self.shared = ctl, rpc, shared
        self.frames = ipc.FrameReader(ctl)
        self.target = TcpTarget([])
        self.namespaces: dict[tuple[int, str], WorkerNamespace] = {}
        self.registry: CommandRegistry = default_registry()
        self.connections: dict[int, WorkerConnection] = {}
        self.stopped = asyncio.Event()

    def call(self, message: tuple) -> tuple:
        return ipc.call(self.rpc, message)

    def closed(self, conn_id: int) -> None:
        if self.connections.pop(conn_id, None) is None:
            return
        try:
            self.call(("closed", conn_id))
        except OSError:
            self.stopped.set()

    def on_ctl(self) -> None:
        for message in self.frames.pump():
            if message[0] == "queue":
                fd = self.frames.fds.pop(0)
                asyncio.get_running_loop().create_task(self.serve(message[1], fd))
            elif message[0] == "close" and message[1] in self.connections:
                conn = self.connections[message[1]]
                conn.fabrics.release()
                conn.close()
        if self.frames.eof:
            self.stopped.set()

    def subsystem(self, info: dict) -> Subsystem:
        """A stand-in subsystem per queue (its own counters slot) over this process's namespace files."""
        namespaces = []
        for nsid, path in info["namespaces"].items():
            ns = self.namespaces.get((nsid, path))
            if ns is None:
                ns = self.namespaces[(nsid, path)] = WorkerNamespace(path, nsid=nsid)
            namespaces.append(ns)
        state = MainProcessState(self, info)
        sub = Subsystem(info["nqn"], namespaces, state, max_queue_entries=info["max_queue_entries"],
                        mdts=info["mdts"], in_capsule_bytes=info["in_capsule_bytes"], registry=self.registry)
        self.target.subsystems[sub.nqn] = sub
        return sub

    async def serve(self, info: dict, fd: int) -> None:
        source, writer = await _adopt_socket(socket.socket(fileno=fd), info)
        sub = self.subsystem(info)
        ctrl = WorkerController(sub, info, self)
        sub.controllers[ctrl.cntlid] = ctrl
        conn = WorkerConnection(self, info, source, writer)
        conn.lifecycle.state = QueueState.LIVE
        conn.fabrics.ctrl, conn.fabrics.qid, conn.fabrics.sqsize = ctrl, info["qid"], info["sqsize"]
        conn.fabrics.hostid, conn.fabrics.sqflow_disabled = info["hostid"], info["sqflow_disabled"]
        ctrl.io_queues.add(info["qid"])
        conn.hdgst, conn.ddgst = info["hdgst"], info["ddgst"]
        conn.hpda, conn.sqhd = info["hpda"], info["sqhd"]
        self.connections[info["conn_id"]] = conn
        self.target.connections.add(conn)
        await conn.run()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        ipc.send_frame(self.ctl, ("ready",))  # imports done: queues handed over now are served at once
        loop.add_reader(self.ctl.fileno(), self.on_ctl)  # (libuv makes the socket non-blocking)
        await self.stopped.wait()
        for conn in list(self.connections.values()):
            conn.close()
        await asyncio.sleep(0)
        for ns in self.namespaces.values():
            ns.close()


async def _adopt_socket(sock: socket.socket, info: dict) -> tuple[PduReceiver | StreamInput,
                                                                   ReceiverWriter | asyncio.StreamWriter]:
    """The handed-over socket on this loop, receiving the way the main process did; what the main
    process had read already comes first."""
    loop = asyncio.get_running_loop()
    if info.get("receive", "stream") == "buffers":
        receiver = PduReceiver(initial=info["buffered"])
        await loop.connect_accepted_socket(lambda: receiver, sock)
        return receiver, ReceiverWriter(receiver)
    reader = asyncio.StreamReader(limit=1 << 20, loop=loop)
    reader.feed_data(info["buffered"])
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
    return StreamInput(reader), asyncio.StreamWriter(transport, protocol, reader, loop)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the main process, which stops us
    ctl_fd, rpc_fd, shared_fd = (int(a) for a in argv[:3])
    if len(argv) > 3 and argv[3]:
        handler = logging.FileHandler(argv[3])
        line = f"%(asctime)s %(levelname)s %(name)s[{os.getpid()}]: %(message)s"  # which worker said it
        handler.setFormatter(logging.Formatter(line))
        logging.getLogger("npukit.nvme").addHandler(handler)
        logging.getLogger("npukit.nvme").setLevel(logging.INFO)
    WorkerNamespace.shared = ipc.SharedWords(shared_fd)
    worker = Worker(socket.socket(fileno=ctl_fd), socket.socket(fileno=rpc_fd), WorkerNamespace.shared)
    loop = new_event_loop()
    # Every command allocates a few short-lived objects and no cycles worth chasing: the imports are
    # frozen out of the collector's sight and young collections run 10x less often (the cyclic
    # collector was 1-2 % of a worker's CPU time serving reads, under perf).
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    try:
        loop.run_until_complete(worker.run())
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
