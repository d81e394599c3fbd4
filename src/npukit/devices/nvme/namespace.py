"""A file-backed namespace with 512-byte logical blocks.

Durability contract (stated in Identify Controller VWC bit 0 = 1, a volatile write cache is present):
* a completed Write is in the host operating system's page cache: it survives a crash of the server
  process (kill -9) but not of the machine;
* a completed Flush, a Write with FUA, and every Write while the cache is disabled (Set Features
  Volatile Write Cache WCE = 0, i.e. write-through) has been ``fdatasync``'d: it survives power loss.
Deallocated blocks read as zeroes (DLFEAT = 1).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import ctypes.util
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from npukit.devices.nvme.spec import LBA_SIZE
from npukit.errors import ConfigError

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_ZERO_CHUNK = bytes(1 << 20)


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
        return _pread_all(self.fd, self.length, self.offset)

    def read_into(self, view: memoryview) -> None:
        """Fill ``view`` (``length`` bytes) from the file; zeroes beyond its end."""
        done = 0
        while done < self.length:
            n = os.preadv(self.fd, [view[done:self.length]], self.offset + done)
            if n <= 0:
                view[done:self.length] = bytes(self.length - done)
                return
            done += n


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
        return _pread_all(self.fd, want, offset)

    def write(self, slba: int, data: memoryview | bytes, *, fua: bool = False) -> None:
        view = memoryview(data)
        done, offset = 0, slba * self.lba_size
        while done < len(view):
            done += os.pwrite(self.fd, view[done:], offset + done)
        if fua or not self.write_cache:
            os.fdatasync(self.fd)

    def write_zeroes(self, slba: int, nlb: int, *, fua: bool = False) -> None:
        offset, length = slba * self.lba_size, nlb * self.lba_size
        if not self._punch(offset, length):
            end = offset + length
            while offset < end:
                n = min(len(_ZERO_CHUNK), end - offset)
                offset += os.pwrite(self.fd, memoryview(_ZERO_CHUNK)[:n], offset)
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
