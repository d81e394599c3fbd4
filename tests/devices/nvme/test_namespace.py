"""The namespace file keeps every command atomic (AWUN = FFFFh) against other processes' commands:
a Read never sees a Write half done (read as bytes and through a lazy FileRegion; the target's read
path, which takes the same lock around its preadv, is loaded through a real server by test_load.py),
and a Write waits for a Read that holds its blocks."""

from __future__ import annotations

import errno
import fcntl
import multiprocessing as mp
import os
import threading
import time
from pathlib import Path

import pytest

from npukit.cli.main import main
from npukit.devices.nvme.namespace import Namespace, lazy_reads, range_lock
from npukit.errors import ConfigError

SPAN = 64 << 10  # a 64 KiB Write: 16 pages, copied into the page cache one after another
PATTERNS = (b"\xa5", b"\x5a")


def _write_alternately(path: str, stop, started) -> None:
    ns = Namespace(path)
    data = [p * SPAN for p in PATTERNS]
    started.set()
    k = 0
    while not stop.is_set():
        ns.write(0, data[k & 1])
        k += 1


def test_reads_in_one_process_never_see_a_write_of_another_half_done(tmp_path: Path) -> None:
    # without the range locks this tore ~2 % of the reads (282 of 12 669 in 1 s on an ext4 host)
    path = str(tmp_path / "ns.img")
    ns = Namespace(path, size=1 << 20)
    ns.write(0, PATTERNS[0] * SPAN)
    ctx = mp.get_context("spawn")
    stop, started = ctx.Event(), ctx.Event()
    writer = ctx.Process(target=_write_alternately, args=(path, stop, started))
    writer.start()
    try:
        assert started.wait(60)
        reads, torn, seen = 0, 0, set()
        view = memoryview(bytearray(SPAN))
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:
            got = ns.read(0, SPAN // 512)
            with lazy_reads():
                ns.read(0, SPAN // 512).read_into(view)
            for block in (got, bytes(view)):
                reads += 1
                seen.add(block[:1])
                torn += block.count(block[:1]) != SPAN
    finally:
        stop.set()
        writer.join(30)
        ns.close()
    assert writer.exitcode == 0
    assert reads > 100 and seen == set(PATTERNS)  # the writer really ran while we read
    assert torn == 0, f"{torn} of {reads} reads saw a Write half done"


def test_a_write_waits_for_a_read_lock_of_another_open_file(tmp_path: Path) -> None:
    reader, writer = Namespace(tmp_path / "ns.img", size=1 << 20), Namespace(tmp_path / "ns.img")
    range_lock(reader.fd, fcntl.F_RDLCK, 4096, 512)  # as a Read of block 8 holds it
    done = threading.Event()
    t = threading.Thread(target=lambda: (writer.write(8, b"\x01" * 512), done.set()))
    t.start()
    try:
        assert not done.wait(0.3), "the Write did not wait for the Read holding its block"
        assert os.pread(reader.fd, 512, 4096) == bytes(512)
        writer.write(9, b"\x02" * 512)  # a block nobody holds: no wait
    finally:
        range_lock(reader.fd, fcntl.F_UNLCK, 4096, 512)
        t.join(10)
    assert done.is_set() and os.pread(reader.fd, 1024, 4096) == b"\x01" * 512 + b"\x02" * 512
    reader.close()
    writer.close()


def _without_ofd_locks(monkeypatch) -> None:
    """A filesystem without OFD byte-range locks (some FUSE, network ones): fcntl refuses them."""
    real = fcntl.fcntl

    def refuse(fd, cmd, arg=0):
        if cmd in (getattr(fcntl, "F_OFD_GETLK", None), getattr(fcntl, "F_OFD_SETLKW", None)):
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(fd, cmd, arg)

    monkeypatch.setattr(fcntl, "fcntl", refuse)


def test_a_filesystem_without_range_locks_is_refused_at_open(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "ns.img"
    Namespace(path, size=1 << 20).close()  # a file made where locks work
    _without_ofd_locks(monkeypatch)
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(ConfigError, match=r"ns\.img: its filesystem has no open-file-description "
                                          r"byte-range locks \(Invalid argument\)"):
        Namespace(path)
    assert len(os.listdir("/proc/self/fd")) == fds  # its descriptor closed
    assert path.stat().st_size == 1 << 20  # an existing file is left as it was


@pytest.mark.timeout(30)  # without the check at open, serve would start and serve on
def test_serve_refuses_such_a_namespace_with_exit_2_and_makes_no_file(tmp_path: Path, monkeypatch,
                                                                       capsys) -> None:
    _without_ofd_locks(monkeypatch)
    disk = tmp_path / "disk.img"
    rc = main(["nvme", "serve", "--listen", "tcp://127.0.0.1:0", "--namespace", str(disk), "--size", "1M",
               "--no-discovery"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "no open-file-description byte-range locks" in err
    assert "Traceback" not in err and not disk.exists()
