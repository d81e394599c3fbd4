"""The KV ring in host DDR: geometry (which rows a token writes, which rows a query reads) and the
host-side write path.

Per producer layer and KV head there is a K block and a V block, each ``rows`` rows of one token
(``head_dim`` codes: FP16, INT8 or packed INT4) plus, for INT8/INT4, a run of ``rows`` FP32 scales.

* **Sliding layers** (window w) keep a *mirrored* ring of 2w rows: position p is written to rows
  ``p % w`` and ``p % w + w``, so the last w positions are always the contiguous rows
  ``[(n - w) % w, (n - w) % w + w)`` in position order — one GEMV, exactly the reference's window.
* **Full-attention layers** keep ``max_tokens`` rows with a hard cap set at `kv_init`. Position
  p < max_tokens goes to row p; later positions overwrite ``sink + (p - sink) % (max_tokens - sink)``
  (attention sink + local window; `QuantKVCache.set_ring` is the same policy on the reference side).
  A query reads rows ``[0, min(n, max_tokens))`` in row order.

K blocks are GEMV weight images (row = token, with the per-token scale as the row scale, at the
address of the next weight slot). V blocks are read K-major (row = token = reduction index), the
per-token V scale multiplying the probabilities on the way in (`npukit.targets.pccx.sim`).

The write path: the program copies the token's BF16 K and V heads to a staging area (MEMCPY L2 →
host) and stops; the driver quantizes them with the reference's own `kv_quantize` and writes the
rows (and mirror rows) here. pccx's quantizing MEMCPY is not in the v002 encoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from npukit.errors import ConfigError
from npukit.models.gemma3n.config import Gemma3nConfig
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.gemma3n_quant.padding import layout
from npukit.targets.pccx.memory import KV_FORMATS, WORD_BYTES, HostDDR, HostWords, kv_quantize, row_bytes


def ring_size(max_tokens: int | None, sink: int | None, window: int | None) -> tuple[int | None, int]:
    """(max_tokens, sink) from the three CLI options; None = no cap beyond max_position_embeddings."""
    s = int(sink or 0)
    if window is not None:
        if max_tokens is not None and max_tokens != s + window:
            raise ConfigError(f"--kv-max-tokens {max_tokens} != --kv-sink {s} + --kv-window {window}")
        max_tokens = s + int(window)
    if max_tokens is None and s:
        raise ConfigError("--kv-sink needs --kv-max-tokens or --kv-window")
    return max_tokens, s


def _align(n: int) -> int:
    return -(-n // 64) * 64


@dataclass(frozen=True)
class Block:
    codes: int  # host address of row 0
    scales: int | None  # host address of the FP32 scale of row 0 (INT8/INT4)


@dataclass(frozen=True)
class LayerRing:
    layer: int
    rows: int
    window: int | None  # sliding window (mirrored ring) or None (capped ring)
    k: tuple[Block, ...]  # per KV head
    v: tuple[Block, ...]


class KVRing:
    def __init__(self, cfg: Gemma3nConfig, fmt: str, host: HostDDR, base: int, max_tokens: int,
                 sink: int = 0) -> None:
        if fmt not in KV_FORMATS:
            raise ConfigError(f"unknown KV format {fmt!r} (known: {', '.join(KV_FORMATS)})")
        if not 0 <= sink < max_tokens:
            raise ConfigError(f"KV ring: need 0 <= sink < max_tokens (sink={sink}, max_tokens={max_tokens})")
        if max_tokens > 65535:
            raise ConfigError(f"KV ring: max_tokens {max_tokens} exceeds the 16-bit GEMV shape field")
        self.cfg, self.fmt, self.max_tokens, self.sink = cfg, fmt, int(max_tokens), int(sink)
        self.dim = layout(cfg).D  # head_dim, word-padded when needed (gemma3n_quant.padding)
        self.rb = row_bytes(fmt, self.dim)
        self.layers: dict[int, LayerRing] = {}
        addr = _align(base)
        for i in cfg.kv_producers:
            w = cfg.window(i)
            rows = 2 * w if w is not None else self.max_tokens
            blocks = {}
            for kind in ("k", "v"):
                bl = []
                for _ in range(cfg.num_key_value_heads):
                    codes = addr
                    addr = _align(addr + rows * self.rb)
                    scales = None
                    if fmt != "fp16":
                        scales = addr
                        addr = _align(addr + 4 * rows)
                    bl.append(Block(codes, scales))
                blocks[kind] = tuple(bl)
            self.layers[i] = LayerRing(i, rows, w, blocks["k"], blocks["v"])
        self.base, self.end = _align(base), addr
        # zero-filled, lazily committed; `write` stores rows through views of it
        self._region = host.map(self.base, max(self.end - self.base, WORD_BYTES))
        self._views: dict[int, np.ndarray] = {}
        self._stacks: dict[int, np.ndarray | None] = {}  # layer -> its FP16 K and V blocks as one view
        self._staging = HostWords(host)  # the staged K/V blocks (`store_staged`)
        self.host = host

    @property
    def capped_layers(self) -> tuple[int, ...]:
        return tuple(i for i, r in self.layers.items() if r.window is None)

    @property
    def nbytes(self) -> int:
        return self.end - self.base

    def rows_of(self, layer: int, pos: int) -> tuple[int, ...]:
        """Rows position ``pos`` is written to."""
        r = self.layers[layer]
        if r.window is not None:
            s = pos % r.window
            return (s, s + r.window)
        if pos < self.max_tokens:
            return (pos,)
        return (self.sink + (pos - self.sink) % (self.max_tokens - self.sink),)

    def span(self, layer: int, n: int) -> tuple[int, int]:
        """(first row, count) a query at length ``n`` (its own token stored) attends to."""
        r = self.layers[layer]
        if r.window is not None:
            if n <= r.window:
                return 0, n
            return (n - r.window) % r.window, r.window
        return 0, min(n, self.max_tokens)

    def write(self, layer: int, pos: int, k: np.ndarray, v: np.ndarray) -> int:
        """Quantize one token's K and V ([kv_heads, head_dim] BF16 values) and store them; bytes written.
        The rows are written through views of the ring's own region (mapped here, so every row is in
        it) and each one announced to the host (`HostDDR.touched`), as `HostDDR.store` would: one
        NumPy assignment per row instead of a checked, looked-up store (a decode step writes ~50)."""
        stack = self._stacks[layer] if layer in self._stacks else self._stack(layer)
        if stack is not None:  # FP16 blocks at one stride: one conversion, one assignment per ring row
            return self._write_stacked(layer, pos, stack, np.concatenate([k, v]))
        r = self.layers[layer]
        rows, rb, touched = self.rows_of(layer, pos), self.rb, self.host.touched
        nbytes = 0
        for blocks, x in ((r.k, k), (r.v, v)):
            codes, scales = kv_quantize(np.asarray(x, np.float32), self.fmt)
            if self.fmt == "fp16":
                raw = codes.astype("<f2", copy=False).view(np.uint8).reshape(len(blocks), -1)  # (LE: no copy)
            elif self.fmt == "int8":
                raw = codes.astype(np.int8).view(np.uint8).reshape(len(blocks), -1)
            else:
                raw = nx.pack_int4(codes).reshape(len(blocks), -1)
            for h, b in enumerate(blocks):
                body, col = self._rows(b.codes, r.rows, rb, np.uint8), raw[h]
                scale = None if b.scales is None else self._rows(b.scales, r.rows, 4, np.dtype("<f4"))
                for row in rows:
                    body[row] = col
                    touched(b.codes + row * rb, rb)
                    nbytes += rb
                    if scale is not None:
                        scale[row] = scales[h]
                        touched(b.scales + 4 * row, 4)
                        nbytes += 4
        return nbytes

    def store_staged(self, st: Any, pos: int) -> None:
        """Quantize K/V blocks the program staged in host DDR (BF16 [kv_heads, head_dim] each, a
        `compile.lower.HostStep`) into the ring: one token (decode) or a prompt chunk's T tokens, at
        positions ``pos + t`` in order. K and V staged back to back (a decode step's) are read through
        a view of the staging region (no copy), widened once and stored as one [2 · kv_heads, head_dim]
        block (`_write_stacked`: no split into K and V to join again)."""
        n, shape, heads = st.n, (self.cfg.num_key_value_heads, self.dim), self.cfg.num_key_value_heads
        stack = self._stacks[st.layer] if st.layer in self._stacks else self._stack(st.layer)
        staged = self._staging.read
        for t, ka, va in st.items or ((0, st.k_addr, st.v_addr),):
            if va == ka + 2 * n:  # one read and widening of both
                kv = nx.from_bits(staged(ka, 2 * n)).reshape(2 * heads, self.dim)
                if stack is not None:
                    self._write_stacked(st.layer, pos + t, stack, kv)
                else:
                    self.write(st.layer, pos + t, kv[:heads], kv[heads:])
            else:
                k, v = (nx.from_bits(staged(a, n)).reshape(shape) for a in (ka, va))
                self.write(st.layer, pos + t, k, v)

    def _write_stacked(self, layer: int, pos: int, stack: np.ndarray, kv: np.ndarray) -> int:
        """`write` of a FP16 layer whose K and V blocks lie at one stride (``stack``, `_stack`): ``kv``
        holds K's heads then V's ([blocks, head_dim]); one conversion, one assignment per ring row."""
        r, rows, rb, touched = self.layers[layer], self.rows_of(layer, pos), self.rb, self.host.touched
        codes, _ = kv_quantize(kv.astype(np.float32, copy=False), self.fmt)
        bits = codes.reshape(len(stack), -1).view("<u2")
        for row in rows:
            stack[:, row] = bits
        for b in r.k + r.v:  # (announced in the order `write`'s loop over blocks announces them)
            for row in rows:
                touched(b.codes + row * rb, rb)
        return len(stack) * len(rows) * rb

    def _stack(self, layer: int) -> np.ndarray | None:
        """A FP16 layer's K then V blocks as one [blocks, rows, head_dim] uint16 view of the region when
        they lie at one stride (made once per layer), else None: `write` then stores a token's K and V
        with one conversion and one assignment per ring row (a decode step writes every layer's)."""
        r = self.layers[layer]
        starts = [b.codes for b in r.k + r.v]
        stride = starts[1] - starts[0]  # (K and V: at least two blocks)
        view = None
        if self.fmt == "fp16" and all(b - a == stride for a, b in pairwise(starts)):
            at = starts[0] - self.base
            blocks = self._region[at: at + stride * len(starts)].reshape(len(starts), stride)
            view = blocks[:, : r.rows * self.rb].view("<u2").reshape(len(starts), r.rows, self.dim)
        self._stacks[layer] = view
        return view

    def _rows(self, addr: int, rows: int, width: int, dtype: np.dtype | type) -> np.ndarray:
        """The ring's ``rows`` rows of ``width`` bytes from host address ``addr`` as a [rows, ...] view of
        its region (made once per block)."""
        got = self._views.get(addr)
        if got is None:
            at = addr - self.base
            got = self._views[addr] = self._region[at: at + rows * width].view(dtype).reshape(rows, -1)
        return got
