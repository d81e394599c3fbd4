"""`ddr.TrackedDDR.view_at`: the view `view` hands out and its data address, from the region's address
kept per region (what a compiled INT4 row reads by address: `fastmat.packed_views`)."""

from __future__ import annotations

import numpy as np

from npukit.targets.pccx.fast.ddr import TrackedDDR


def test_view_at_gives_the_view_and_its_address_as_view_does():
    ddr = TrackedDDR(1 << 20, lambda addr, n: None)
    ddr.map(0x1000, np.arange(4096, dtype=np.uint8))
    ddr.map(0x3000, np.arange(256, dtype=np.uint16))  # (viewed as its 512 bytes)
    cases = [(0x1000, 16), (0x1005, 100), (0x1FF0, 16), (0x3002, 8), (0x3000, 512),
             (0x1FF8, 16), (0x2000, 4), (0x0, 4), ((1 << 20) - 2, 4), (-2, 4)]  # (the last four: no view)
    for addr, n in cases:
        want, got = ddr.view(addr, n), ddr.view_at(addr, n)
        if want is None:
            assert got is None
            continue
        view, at = got
        assert np.array_equal(view, want) and view.dtype == want.dtype
        assert at == want.ctypes.data == view.ctypes.data
        view[0] ^= 0xFF  # the same bytes, not a copy
        assert want[0] == view[0]
    remapped = np.zeros(64, np.uint8)  # a region mapped after the first views were handed out
    ddr.map(0x8000, remapped)
    assert ddr.view_at(0x8004, 8)[1] == remapped[4:].ctypes.data
