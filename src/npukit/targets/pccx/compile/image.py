"""Host DDR memory map and the device weight image of a W4A8 Gemma 3n (`Int4Store`).

Map (byte addresses; every region 16-byte aligned)::

    0x0010_0000  staging   per-token host<->L2 vectors (embedding row, PLE row, RoPE rows, logits,
                           constants, K/V of the token on their way to the ring), 2 MiB
    0x0040_0000  vectors   BF16 norm weights / AltUp scale, one run each (MEMCPY'd into L2 per use)
    0x0100_0000  weights   INT4 GEMV tiles: rows back to back, FP32 row scales at the next 16 bytes
    after        KV ring   laid out by `npukit.targets.pccx.kv_ring` at kv_init

A weight tile is the row range one GEMV instruction covers: the reference's row chunks
(``gemv_chunk_rows``) split again so that M fits the 16-bit shape field. Row-major
tiles are zero-copy views of the store's packed rows and scales (two adjacent regions), so a
3.4 GB model is not copied. The down projection of a Gaussian top-k layer is stored K-major
(row k = the M weights that multiply activation k) so the streamer can skip the rows of zero
activations (`npukit.targets.pccx.memory.W_KMAJOR`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from npukit.models.gemma3n.weights import EMBED, EMBED_PLE, LM_HEAD
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.compile.ir import CompileError
from npukit.targets.pccx.gemma3n_quant.model import gemv_chunk_rows
from npukit.targets.pccx.gemma3n_quant.padding import PAD
from npukit.targets.pccx.gemma3n_quant.store import Int4Store
from npukit.targets.pccx.memory import WORD_BYTES, HostDDR, row_bytes

STAGING_BASE = 0x0010_0000
STAGING_BYTES = 2 << 20
VECTOR_BASE = 0x0040_0000
WEIGHT_BASE = 0x0100_0000
MAX_ROWS = 65528  # M per GEMV: the 16-bit shape field, kept a whole number of L2 words
MAX_LEN = 65535  # K per GEMV, CVO length


def align(n: int, a: int = WORD_BYTES) -> int:
    return -(-int(n) // a) * a


@dataclass(frozen=True)
class Tile:
    name: str
    lo: int  # first output row
    hi: int
    k: int
    addr: int
    kmajor: bool
    nbytes: int


@dataclass(frozen=True)
class Region:
    name: str
    addr: int
    nbytes: int


# rows of the k-major body made per pass: the pass's nibbles stay in cache and its transposed block
# is written as K runs of this many bytes (measured: a 1024 x 8192 byte transpose in 5.6 ms this way,
# 89 ms as one strided copy)
_KMAJOR_BLOCK = 32


def kmajor_packed(packed: np.ndarray, k: int) -> np.ndarray:
    """INT4 rows packed along K (uint8 [rows, ceil(K/2)], `formats.int4`) -> the same codes packed
    along the rows of their transpose (uint8 [K, ceil(rows/2)]): byte j of row c holds the nibbles of
    rows 2j (low) and 2j + 1 (high, 0 past the last row) in column c. The nibbles of adjacent rows are
    paired while still row-major and only the packed half is transposed, a block of rows at a time:
    a byte transpose of the unpacked int8 codes took most of a hidden-2048 process's device-image
    build (0.21 s a matrix, measured)."""
    rows, half = packed.shape
    out = np.empty((k, (rows + 1) // 2), np.uint8)
    nib = np.empty((2 * _KMAJOR_BLOCK, 2 * half), np.uint8)
    for j0 in range(0, out.shape[1], _KMAJOR_BLOCK):
        j1 = min(out.shape[1], j0 + _KMAJOR_BLOCK)
        src = packed[2 * j0: 2 * j1]
        n = nib[: 2 * (j1 - j0)]
        n[len(src):] = 0  # (an odd last row pairs with zeros)
        n[: len(src), 0::2] = src & np.uint8(0xF)
        n[: len(src), 1::2] = src >> np.uint8(4)
        out[:, j0:j1] = (n[0::2, :k] | (n[1::2, :k] << np.uint8(4))).T
    return out


class DeviceImage:
    """Writes the weight tiles and vectors of ``store`` into ``host`` and remembers where they are."""

    def __init__(self, store: Int4Store, host: HostDDR, sparse_down: bool = True) -> None:
        cfg = store.config
        self.store = store
        self.tiles: dict[str, list[Tile]] = {}
        self.regions: list[Region] = []
        self.vectors: dict[str, tuple[int, int]] = {}  # name -> (addr, elements)
        kmajor_names = {f"layers.{i}.mlp.down_proj.weight" for i in range(cfg.num_hidden_layers)
                        if sparse_down and cfg.sparsity_multiplier(i) is not None}
        addr = VECTOR_BASE
        chunks = []
        for name, v in store.vecs.items():
            self.vectors[name] = (addr, v.size)
            bits = nx.to_bits(v).astype("<u2")
            chunks.append((addr, bits))
            addr += align(bits.nbytes)
        vec_bytes = addr - VECTOR_BASE
        if VECTOR_BASE + vec_bytes > WEIGHT_BASE:
            raise CompileError(f"vector image ({vec_bytes} B) overruns the weight region")
        blob = np.zeros(max(vec_bytes, WORD_BYTES), np.uint8)
        for a, bits in chunks:
            blob[a - VECTOR_BASE: a - VECTOR_BASE + bits.nbytes] = bits.view(np.uint8)
        host.map(VECTOR_BASE, blob)
        self.regions.append(Region("vectors", VECTOR_BASE, vec_bytes))
        addr = WEIGHT_BASE
        for name in self._gemv_matrices():
            m = store.mats[name]
            rows, k = m.shape
            if k > MAX_LEN:
                raise CompileError(f"{name}: K={k} exceeds the 16-bit shape field")
            step = gemv_chunk_rows(k)
            tl = []
            for c0 in range(0, rows, step):
                c1 = min(rows, c0 + step)
                for lo in range(c0, c1, MAX_ROWS):
                    hi = min(c1, lo + MAX_ROWS)
                    if name in kmajor_names:
                        n = self._put_kmajor(host, addr, m, lo, hi)
                    else:
                        n = self._put_rows(host, addr, m, lo, hi)
                    tl.append(Tile(name, lo, hi, k, addr, name in kmajor_names, n))
                    addr = align(addr + n, 64)
            self.tiles[name] = tl
        self.regions.append(Region("weights", WEIGHT_BASE, addr - WEIGHT_BASE))
        self.end = addr
        self._scale_index = sorted((m.scale.__array_interface__["data"][0], n)
                                   for n, m in store.mats.items() if n in self.tiles)

    def _gemv_matrices(self) -> list[str]:
        mats = self.store.mats  # a matrix with a word-padded twin is only used through the twin
        names = [n for n in mats if n not in (EMBED, EMBED_PLE) and n + PAD not in mats]
        if LM_HEAD not in self.store.mats:
            names.append(EMBED)  # tied: the embedding table is also the LM head
        return names

    @staticmethod
    def _put_rows(host: HostDDR, addr: int, m, lo: int, hi: int) -> int:
        rb = row_bytes("int4", m.shape[1])
        body = (hi - lo) * rb
        host.map(addr, np.ascontiguousarray(m.packed[lo:hi]))
        host.map(addr + align(body), np.ascontiguousarray(m.scale[lo:hi], "<f4"))
        return align(body) + 4 * (hi - lo)

    @staticmethod
    def _put_kmajor(host: HostDDR, addr: int, m, lo: int, hi: int) -> int:
        body_t = kmajor_packed(m.packed[lo:hi], m.shape[1])  # [K, ceil(rows/2)], the int8 fast path
        body = body_t.nbytes
        host.map(addr, body_t)
        host.map(addr + align(body), np.ascontiguousarray(m.scale[lo:hi], "<f4"))
        return align(body) + 4 * (hi - lo)

    # -- lookups used by the lowering --
    def matrix_of_scales(self, arr: np.ndarray) -> tuple[str, int]:
        """(matrix name, first row) of a view into a matrix's row-scale array."""
        p = arr.__array_interface__["data"][0]
        i = bisect.bisect_right(self._scale_index, (p, "\uffff")) - 1
        if i >= 0:
            base, name = self._scale_index[i]
            m = self.store.mats[name]
            if p < base + m.scale.nbytes:
                return name, (p - base) // 4
        raise CompileError("GEMV weight operand is not a matrix of the device image")

    def tiles_for(self, name: str, lo: int, hi: int) -> list[Tile]:
        out = [t for t in self.tiles[name] if t.lo < hi and lo < t.hi]
        if not out or out[0].lo != lo or out[-1].hi != hi:
            raise CompileError(f"{name}: rows [{lo}, {hi}) do not fall on weight-tile boundaries")
        return out

    @property
    def weight_bytes(self) -> int:
        return sum(t.nbytes for tl in self.tiles.values() for t in tl)
