"""Host DDR as the fast executor sees it (`npukit.targets.pccx.fast.fastsim`): every host or device
write reported (cached INT4 codes over the bytes are dropped), zero-copy views handed out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from npukit.targets.pccx.memory import HostDDR


class TrackedDDR(HostDDR):
    """`HostDDR` that reports every host or device write (to invalidate cached weight codes) and
    hands out zero-copy views."""

    def __init__(self, size_bytes: int, on_write: Callable[[int, int], None]) -> None:
        super().__init__(size_bytes)
        self.touched = on_write  # every write, also one through a region view (`HostDDR.touched`)
        self._words: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # region buffer -> its uint16 view
        self._data_at: dict[int, tuple[np.ndarray, int]] = {}  # region buffer -> its data address (`view_at`)

    def map(self, addr: int, data: Any) -> np.ndarray:
        buf = super().map(addr, data)
        self.touched(addr, buf.size)
        return buf

    def write(self, addr: int, data: Any) -> None:
        super().write(addr, data)
        self.touched(addr, len(data) if isinstance(data, bytes | bytearray) else np.asarray(data).nbytes)

    def store(self, addr: int, raw: np.ndarray) -> None:
        super().store(addr, raw)
        self.touched(addr, raw.size)

    def region_words(self, addr: int, n: int) -> tuple[np.ndarray, int] | None:
        """Bytes [addr, addr+n) as (its whole writable region viewed as BF16 words, element offset), or
        None (unmapped, split, read-only, or not at an even offset)."""
        hit = self._in_one(addr, n)
        if hit is None or hit[1] % 2 or not (hit[0].flags.writeable and hit[0].flags.c_contiguous):
            return None
        buf, off = hit
        words = self._words.get(id(buf))
        if words is None or words[0] is not buf:
            words = self._words[id(buf)] = (buf, buf[: buf.size // 2 * 2].view("<u2"))
        return words[1], off // 2

    def view_at(self, addr: int, n: int) -> tuple[np.ndarray, int] | None:
        """`view` and its data address: the region's, kept per region, plus the offset (an array's
        ``ctypes.data`` is ~1.2 µs a call, and a compiled INT4 row takes one per host view it reads)."""
        hit = self._in_one(addr, n)
        if hit is None:
            return None
        buf, off = hit
        base = self._data_at.get(id(buf))
        if base is None or base[0] is not buf:
            base = self._data_at[id(buf)] = (buf, buf.ctypes.data)
        return buf[off: off + n], base[1] + off * buf.strides[0]

    def view(self, addr: int, n: int) -> np.ndarray | None:
        """Bytes [addr, addr+n) as a view of one region, or None (unmapped, split, or out of range)."""
        hit = self._in_one(addr, n)
        if hit is None:
            return None
        buf, off = hit
        return buf[off: off + n]

    def _in_one(self, addr: int, n: int) -> tuple[np.ndarray, int] | None:
        """(region buffer, offset) of bytes [addr, addr+n) inside one region, or None."""
        if addr < 0 or n < 0 or addr + n > self.size:
            return None
        return self._find(addr, n)
