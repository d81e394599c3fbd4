"""The ternfpga multiply-free ternary GEMV engine, functionally and cycle-for-cycle.

Datapath (ternfpga ``rtl/ternary_unpack5.sv``, ``ternary_gemv_stream.sv``; refs/ternary.md §1.2–1.3):

* weights stream as base-3 bytes, five consecutive row weights per byte (lane 0 = least significant
  digit); a combinational decoder turns a byte into five 2-bit lane codes by repeated ``%3`` / ``//3``
  — digit 0 → ``00`` (0), 1 → ``01`` (+1), 2 → ``10`` (−1). Bytes 243..255 are not produced by the
  packer; the RTL aliases them (243 → five zeros) and so does this model;
* K lanes select ``+a``, ``−a`` or 0 per lane from the int8 activation tile (no multiplier), an
  adder tree sums the K lanes, and a signed 32-bit accumulator per output row sums the
  ``ceil(in/K)`` tiles of the row (two's-complement wrap, as the RTL's int32 y memory);
* one K-wide tile per cycle (measured 1.00 cycle/tile at K = 8).

The activation-sparse gather (``sim/tb_gemv_gather.py``) compacts the nonzero activations, fetches
only their weight columns and runs the same dense datapath on the shorter vector: the result is
bit-exact with the dense GEMV because every skipped column was multiplied by zero.

All kernels below use only select, add/subtract, bitwise and comparisons on integer arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npukit.errors import ConfigError, FormatError
from npukit.formats.ternary import pack_base3
from npukit.sim.work import Work

_BLOCK_ELEMS = 1 << 22  # bound on (tokens × rows × K-padded inputs) per vectorized block


def decode_base3(data: np.ndarray, n: int) -> np.ndarray:
    """Base-3 bytes (..., B) → 2-bit lane codes (..., n) uint8, as the RTL's unpack5 decoder."""
    b = np.asarray(data)
    if b.dtype != np.uint8:
        raise FormatError(f"decode_base3: expected uint8 bytes, got {b.dtype}")
    if n > 5 * b.shape[-1]:
        raise FormatError(f"decode_base3: {b.shape[-1]} bytes hold at most {5 * b.shape[-1]} trits, not {n}")
    digits = []
    v = b.astype(np.uint16)
    for _ in range(5):  # one %3 and one //3 per lane, lane 0 first (a 243-entry ROM in LUTs)
        digits.append((v % 3).astype(np.uint8))
        v = v // 3
    codes = np.stack(digits, axis=-1).reshape(*b.shape[:-1], 5 * b.shape[-1])
    return codes[..., :n]


def sign_select_tiles(codes: np.ndarray, x: np.ndarray) -> np.ndarray:
    """One tile per (row, tile) of K lanes: Σ_lane select(code, x) with no multiply.

    ``codes`` (..., NT, K) 2-bit lane codes (bit 0: +1, bit 1: −1); ``x`` broadcastable int32 tiles.
    Returns the adder-tree sums (..., NT) int32.
    """
    plus = (codes & 1) != 0
    minus = (codes & 2) != 0
    lanes = np.where(plus, x, 0) - np.where(minus, x, 0)
    return lanes.sum(axis=-1, dtype=np.int32)


def accumulate_tiles(tile_sums: np.ndarray) -> np.ndarray:
    """The per-row int32 accumulator over a row's tiles (wrapping like 32-bit hardware)."""
    return tile_sums.sum(axis=-1, dtype=np.int32)


@dataclass
class PackedMatrix:
    """A ternary matrix as the engine streams it: base-3 rows (and, for the gather, base-3 columns)."""

    rows: np.ndarray  # (out, ceil(in/5)) uint8
    cols: np.ndarray  # (in, ceil(out/5)) uint8
    out_features: int
    in_features: int

    @classmethod
    def from_trits(cls, t: np.ndarray) -> PackedMatrix:
        t = np.asarray(t)
        return cls(pack_base3(t), pack_base3(t.T), int(t.shape[0]), int(t.shape[1]))

    @property
    def row_bytes(self) -> int:
        return int(self.rows.shape[1])


@dataclass
class EngineStats:
    tiles: int = 0  # = cycles at one tile per cycle
    weight_bytes: int = 0
    gemvs: int = 0
    dense_tiles: int = 0  # what the dense datapath would have needed (gather accounting)
    work: list[Work] = field(default_factory=list)


class TernaryEngine:
    """K-lane sign-select GEMV engine with cycle and byte accounting."""

    def __init__(self, lanes: int = 8, record_work: bool = False) -> None:
        if lanes < 1:
            raise ConfigError(f"engine lanes must be >= 1, got {lanes}")
        self.K = int(lanes)
        self.stats = EngineStats()
        self.record_work = record_work

    def tiles_per_row(self, n_in: int) -> int:
        return -(-n_in // self.K)

    def _lane_tiles(self, codes: np.ndarray, nt: int) -> np.ndarray:
        pad = nt * self.K - codes.shape[-1]
        if pad:
            codes = np.concatenate([codes, np.zeros((*codes.shape[:-1], pad), np.uint8)], axis=-1)
        return codes.reshape(*codes.shape[:-1], nt, self.K)

    def _x_tiles(self, q: np.ndarray, nt: int) -> np.ndarray:
        x = np.zeros((q.shape[0], nt * self.K), np.int32)
        x[:, : q.shape[1]] = q
        return x.reshape(q.shape[0], nt, self.K)

    def _run(self, codes_of, n_out: int, xt: np.ndarray) -> np.ndarray:
        """Dense datapath over rows in blocks: codes_of(r0, r1) → (r1-r0, NT, K) lane codes."""
        T, nt, _ = xt.shape
        y = np.empty((T, n_out), np.int32)
        step = max(1, _BLOCK_ELEMS // max(1, T * nt * self.K))
        for r0 in range(0, n_out, step):
            r1 = min(n_out, r0 + step)
            tiles = sign_select_tiles(codes_of(r0, r1)[None], xt[:, None])  # (T, R, NT)
            y[:, r0:r1] = accumulate_tiles(tiles)
        return y

    def gemv(self, W: PackedMatrix, q: np.ndarray, label: str = "gemv") -> np.ndarray:
        """y[t, r] = Σ_k W[r, k]·q[t, k] for int8 activations q (T, in); weights streamed per token."""
        q = _int8_rows(q, W.in_features)
        nt = self.tiles_per_row(W.in_features)
        xt = self._x_tiles(q, nt)
        y = self._run(lambda r0, r1: self._lane_tiles(decode_base3(W.rows[r0:r1], W.in_features), nt),
                      W.out_features, xt)
        T = q.shape[0]
        self._account(label, T * W.out_features * nt, T * W.rows.size, T * W.out_features * nt)
        return y

    def gather_gemv(self, W: PackedMatrix, q: np.ndarray, label: str = "gather") -> np.ndarray:
        """The activation-sparse gather: per token, fetch only the columns of nonzero activations
        (as base-3 columns), compact them into K-lane tiles and run the dense datapath."""
        q = _int8_rows(q, W.in_features)
        T = q.shape[0]
        y = np.empty((T, W.out_features), np.int32)
        dense_nt = self.tiles_per_row(W.in_features)
        tiles = nbytes = 0
        for t in range(T):
            idx = np.flatnonzero(q[t])
            nt = self.tiles_per_row(idx.size)
            if nt == 0:
                y[t] = 0
                continue
            cols = decode_base3(W.cols[idx], W.out_features)  # (nnz, out): fetched columns only
            xt = self._x_tiles(q[t, idx][None], nt)
            y[t] = self._run(lambda r0, r1, c=cols, n=nt: self._lane_tiles(c[:, r0:r1].T, n),
                             W.out_features, xt)[0]
            tiles += W.out_features * nt
            nbytes += idx.size * W.cols.shape[1]
        self._account(label, tiles, nbytes, T * W.out_features * dense_nt)
        return y

    def _account(self, label: str, tiles: int, nbytes: int, dense_tiles: int) -> None:
        s = self.stats
        if self.record_work:  # macs = lane slots issued (tiles × K, padding lanes included)
            s.work.append(Work(index=len(s.work), engine="engine", label=label, macs=tiles * self.K,
                               weight_bytes=nbytes, lanes=self.K))
        s.tiles += tiles
        s.weight_bytes += nbytes
        s.dense_tiles += dense_tiles
        s.gemvs += 1


def _int8_rows(q: np.ndarray, n_in: int) -> np.ndarray:
    q = np.asarray(q)
    if q.ndim == 1:
        q = q[None]
    if q.dtype != np.int8 or q.ndim != 2 or q.shape[1] != n_in:
        raise FormatError(f"engine activations must be int8 (T, {n_in}), got {q.dtype} {q.shape}")
    return q
