"""A file-backed namespace with 512-byte logical blocks.

Durability contract (stated in Identify Controller VWC bit 0 = 1, a volatile write cache is present):
* a completed Write is in the host operating system's page cache: it survives a crash of the server
  process (kill -9) but not of the machine;
* a completed Flush, a Write with FUA, and every Write while the cache is disabled (Set Features
  Volatile Write Cache WCE = 0, i.e. write-through) has been ``fdatasync``'d: it survives power loss.
Deallocated blocks read as zeroes (DLFEAT = 1).

Atomicity (Identify Controller AWUN = FFFFh: in normal operation every command is atomic): a Read that
overlaps a Write in flight on another queue sees all of it or none of it, and overlapping Writes land
one after the other. The page cache does not give that (on ext4 a buffered read copies a page while a
write is still copying into it: reads saw torn blocks under the 8-host load test), so every read and
write of the file holds an open-file-description byte-range lock over its whole range
(``F_OFD_SETLKW``: shared to read, exclusive to write); each queue's worker process opens the file
itself, so the locks order them against each other. Across a power failure only one block is atomic
(AWUPF = 0).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import ctypes.util
import fcntl
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from npukit.devices.nvme.spec import LBA_SIZE
from npukit.errors import ConfigError

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_ZERO_CHUNK = bytes(1 << 20)
_OFD_SETLKW = getattr(fcntl, "F_OFD_SETLKW", None)  # Linux; elsewhere reads and writes are not ordered
_OFD_GETLK = getattr(fcntl, "F_OFD_GETLK", None)
_FLOCK = struct.Struct("hhqqi4x")  # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks)


def range_lock(fd: int, kind: int, offset: int, length: int) -> None:
    """Take (``fcntl.F_RDLCK`` / ``F_WRLCK``) or drop (``F_UNLCK``) the byte-range lock, waiting for
    conflicting ones of other open files of the same file."""
    if _OFD_SETLKW is not None and length > 0:
        fcntl.fcntl(fd, _OFD_SETLKW, _FLOCK.pack(kind, os.SEEK_SET, offset, length, 0))


def check_range_locks(fd: int, path: Path) -> None:
    """Raise `ConfigError` where the file's filesystem has no OFD byte-range locks (some FUSE and
    network filesystems): without them every command would fail with the OSError, so say it once, at
    open, naming the file. F_OFD_GETLK only asks whether a lock could be placed: no lock, no wait."""
    if _OFD_GETLK is None:
        return
    try:
        fcntl.fcntl(fd, _OFD_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0))
    except OSError as exc:
        raise ConfigError(f"namespace file {path}: its filesystem has no open-file-description byte-range "
                          f"locks ({exc.strerror}), which keep each command atomic against the other "
                          "queues' (AWUN); put it on a local filesystem such as ext4, xfs or tmpfs") from None


def parse_size(text: str) -> int:
    """``1G``, ``512M``, ``4096`` (binary multiples) → bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ConfigError(f"size {text!r} is not a number with an optional K/M/G/T suffix")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return int(m.group(1)) * scale


def _punch_hole_fn():
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return None
    try:
        fn = ctypes.CDLL(libc_name, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    return fn


_FALLOCATE = _punch_hole_fn()
_LAZY_READS = contextvars.ContextVar("npukit_nvme_lazy_reads", default=False)


@contextlib.contextmanager
def lazy_reads() -> Iterator[None]:
    """Inside, :meth:`Namespace.read` returns a :class:`FileRegion` instead of bytes; the caller
    must read it (:meth:`FileRegion.read_into`) before anything else touches the namespace. The TCP
    target reads a Read's data this way straight into its send buffer, behind the PDU header."""
    token = _LAZY_READS.set(True)
    try:
        yield
    finally:
        _LAZY_READS.reset(token)


@dataclass(frozen=True)
class FileRegion:
    """``length`` bytes of an open file at ``offset``, not read yet."""

    fd: int
    offset: int
    length: int

    def __len__(self) -> int:
        return self.length

    def tobytes(self) -> bytes:
        return _pread_locked(self.fd, self.length, self.offset)

    def read_into(self, view: memoryview) -> None:
        """Fill ``view`` (``length`` bytes) from the file; zeroes beyond its end."""
        range_lock(self.fd, fcntl.F_RDLCK, self.offset, self.length)
        try:
            self.read_into_unlocked(view)
        finally:
            range_lock(self.fd, fcntl.F_UNLCK, self.offset, self.length)

    def read_into_unlocked(self, view: memoryview) -> None:
        """:meth:`read_into` for a caller that holds the range's read lock."""
        done = 0
        while done < self.length:
            n = os.preadv(self.fd, [view[done:self.length]], self.offset + done)
            if n <= 0:
                view[done:self.length] = bytes(self.length - done)
                return
            done += n


def _pread_locked(fd: int, want: int, offset: int) -> bytes:
    range_lock(fd, fcntl.F_RDLCK, offset, want)
    try:
        return _pread_all(fd, want, offset)
    finally:
        range_lock(fd, fcntl.F_UNLCK, offset, want)


def _pread_all(fd: int, want: int, offset: int) -> bytes:
    # os.pread fills a fresh bytes object in one pass (a zeroed bytearray + preadv is two)
    out = os.pread(fd, want, offset)
    if len(out) == want:
        return out
    parts, done = [out], len(out)
    while done < want:
        chunk = os.pread(fd, want - done, offset + done)
        if not chunk:
            parts.append(bytes(want - done))  # beyond EOF of a sparse tail: zeroes
            break
        parts.append(chunk)
        done += len(chunk)
    return b"".join(parts)


class Namespace:
    """Namespace ``nsid`` stored in ``path``; the size is fixed when the file is created."""

    def __init__(self, path: str | os.PathLike, *, nsid: int = 1, size: int | None = None) -> None:
        self.path = Path(path)
        self.nsid = nsid
        self.lba_size = LBA_SIZE
        self.write_cache = True
        exists = self.path.exists()
        if not exists and size is None:
            raise ConfigError(f"namespace file {self.path} does not exist; give a size to create it")
        if size is not None and (size <= 0 or size % LBA_SIZE):
            raise ConfigError(f"namespace size {size} is not a positive multiple of {LBA_SIZE} bytes")
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot open namespace file {self.path}: {exc.strerror}") from None
        current = os.fstat(self.fd).st_size
        if not exists or (current == 0 and size):
            os.ftruncate(self.fd, size)
            os.fsync(self.fd)
            current = size
        elif size is not None and size != current:
            os.close(self.fd)
            raise ConfigError(f"namespace file {self.path} holds {current} bytes, not the {size} asked for")
        if current % LBA_SIZE:
            os.close(self.fd)
            raise ConfigError(f"namespace file {self.path} is {current} bytes, not a multiple of {LBA_SIZE}")
        try:
            check_range_locks(self.fd, self.path)
        except ConfigError:
            os.close(self.fd)
            if not exists:  # made just now: a refused file leaves nothing behind
                self.path.unlink(missing_ok=True)
            raise
        self.blocks = current // LBA_SIZE

    @property
    def size(self) -> int:
        return self.blocks * self.lba_size

    def in_range(self, slba: int, nlb: int) -> bool:
        return slba >= 0 and nlb >= 0 and slba + nlb <= self.blocks

    def read(self, slba: int, nlb: int) -> bytes | FileRegion:
        """The blocks' bytes (a :class:`FileRegion` inside :func:`lazy_reads`)."""
        want, offset = nlb * self.lba_size, slba * self.lba_size
        if _LAZY_READS.get():
            return FileRegion(self.fd, offset, want)
        return _pread_locked(self.fd, want, offset)

    def write(self, slba: int, data: memoryview | bytes, *, fua: bool = False) -> None:
        view = memoryview(data)
        done, offset = 0, slba * self.lba_size
        range_lock(self.fd, fcntl.F_WRLCK, offset, len(view))
        try:
            while done < len(view):
                done += os.pwrite(self.fd, view[done:], offset + done)
        finally:
            range_lock(self.fd, fcntl.F_UNLCK, offset, len(view))
        if fua or not self.write_cache:
            os.fdatasync(self.fd)

    def write_zeroes(self, slba: int, nlb: int, *, fua: bool = False) -> None:
        offset, length = slba * self.lba_size, nlb * self.lba_size
        range_lock(self.fd, fcntl.F_WRLCK, offset, length)
        try:
            if not self._punch(offset, length):
                at, end = offset, offset + length
                while at < end:
                    n = min(len(_ZERO_CHUNK), end - at)
                    at += os.pwrite(self.fd, memoryview(_ZERO_CHUNK)[:n], at)
        finally:
            range_lock(self.fd, fcntl.F_UNLCK, offset, length)
        if fua or not self.write_cache:
            os.fdatasync(self.fd)

    def _punch(self, offset: int, length: int) -> bool:
        if _FALLOCATE is None or length == 0:
            return False
        rc = _FALLOCATE(self.fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length)
        return rc == 0

    def flush(self) -> None:
        os.fdatasync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.fdatasync(self.fd)
            os.close(self.fd)
            self.fd = -1
