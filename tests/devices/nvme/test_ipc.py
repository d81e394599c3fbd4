"""The main process <-> worker channel: frames larger than a socket buffer with a passed descriptor,
through a non-blocking socket (as libuv leaves it), arrive whole and in order; the descriptor still
names the same pipe (what is written through it comes out of the original read end)."""

import asyncio
import os
import socket

from npukit.devices.nvme import ipc


def test_large_frames_and_a_descriptor_cross_a_non_blocking_socket():
    sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sender.setblocking(False)
    read_end, write_end = os.pipe()
    payloads = [os.urandom(3 << 20), os.urandom(100), os.urandom(1 << 20)]

    async def main() -> list[tuple]:
        loop = asyncio.get_running_loop()
        outbox = ipc.Outbox(sender, loop)
        outbox.send(("queue", payloads[0]), [os.dup(write_end)])  # the outbox closes its copy once sent
        outbox.send(("close", payloads[1]))
        outbox.send(("queue", payloads[2]))
        assert outbox.pending  # 4 MiB do not fit a socket buffer: the rest waits for the reader
        frames = ipc.FrameReader(receiver)
        got: list[tuple] = []
        while len(got) < 3:
            await asyncio.sleep(0)
            got += frames.pump()
        assert not outbox.pending and not outbox.watching
        assert len(frames.fds) == 1
        os.write(frames.fds[0], b"through the passed descriptor")
        return got

    receiver.setblocking(False)
    got = asyncio.run(main())
    assert [kind for kind, _ in got] == ["queue", "close", "queue"]
    assert [data for _, data in got] == payloads
    assert os.read(read_end, 100) == b"through the passed descriptor"
