"""INT4 weight store and quantized KV cache of the W4A8 Gemma 3n reference.

Weights (``docs/numerics.md``, pccx W4A8): every matrix is INT4, two per byte, one float32 scale per
output row (`npukit.formats.int4` absmax rule, |q| <= 7). The per-layer-embedding table is read only
by token rows, so it gets one scale per (token, layer) group of ``hidden_size_per_layer_input``
values; the token embedding is tied to the LM head and keeps its per-row (= per output channel)
scale, so one INT4 copy serves both the host row lookup and the LM-head GEMV. 1-D tensors (norm
weights, the AltUp output scale) are BF16 vectors, as the device holds them.

The store is built one tensor at a time from a `Gemma3nWeights` provider, large tables in row
chunks, so no float32 copy bigger than one chunk ever exists (E4B: ~3.7 GB of INT4 in all).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npukit.errors import ConfigError, ModelError
from npukit.formats.int4 import pack_int4, quantize_int4, unpack_int4
from npukit.models.gemma3n.weights import EMBED, EMBED_PLE, LM_HEAD, Gemma3nWeights
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.gemma3n_quant.padding import PAD, pad_vector, plan
from npukit.targets.pccx.memory import KV_FORMATS

F32 = np.float32
_CHUNK_VALUES = 1 << 24  # float32 values quantized per chunk of a large table (64 MiB)
_UNPACKED_CACHE_BYTES = 64 << 20  # keep unpacked int8 codes when a model's matrices fit in this


# byte -> its two INT4 codes (low nibble first, sign-extended) as float32: `unpack_int4`'s layout
_NIBBLES = np.array([[((b & 0xF) ^ 8) - 8, ((b >> 4) ^ 8) - 8] for b in range(256)], F32)


@dataclass
class Int4Matrix:
    """INT4 codes packed along rows, with float32 scales per row or per (row, group)."""

    packed: np.ndarray  # uint8 [M, ceil(K/2)]
    scale: np.ndarray  # float32 [M] or [M, K // group]
    shape: tuple[int, int]
    group: int | None = None
    _codes: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def quantize(cls, w: np.ndarray, group: int | None = None) -> Int4Matrix:
        q, s = quantize_int4(np.asarray(w, dtype=F32), axis=-1, group_size=group)
        return cls(pack_int4(q), s, (int(w.shape[0]), int(w.shape[1])), group)

    @classmethod
    def from_rows(cls, read, shape: tuple[int, int], group: int | None = None) -> Int4Matrix:
        """Quantize a large table chunk by chunk: ``read(slice)`` returns float32 rows."""
        m, k = shape
        packed = np.empty((m, (k + 1) // 2), np.uint8)
        scale = np.empty((m,) if group is None else (m, k // group), F32)
        step = max(1, _CHUNK_VALUES // max(k, 1))
        for lo in range(0, m, step):
            part = cls.quantize(read(slice(lo, min(m, lo + step))), group)
            packed[lo:lo + step], scale[lo:lo + step] = part.packed, part.scale
        return cls(packed, scale, shape, group)

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.scale.nbytes

    def codes(self, rows: slice | None = None) -> np.ndarray:
        """Signed int8 codes [M, K] (or of a row slice), as the GEMV weight operand."""
        if self._codes is not None:
            return self._codes if rows is None else self._codes[rows]
        p = self.packed if rows is None else self.packed[rows]
        return unpack_int4(p, (p.shape[0], self.shape[1]))

    def keep_codes(self) -> None:
        self._codes = self.codes()

    def dequant_rows(self, idx: np.ndarray) -> np.ndarray:
        """Host-side row lookup: float32 ``q · scale`` of the selected rows. The codes come from one
        table lookup per packed byte (`_NIBBLES`: what `unpack_int4` then a float32 cast give, two
        NumPy calls instead of ~15: a decode step looks up two rows)."""
        p = np.asarray(self.packed)[idx]  # (a plain array: a memmap's fancy index makes a memmap)
        q = _NIBBLES[p].reshape(len(p), -1)[:, :self.shape[1]]
        s = self.scale[idx]
        if self.group is None:
            return q * s[:, None]
        return (q.reshape(len(idx), -1, self.group) * s[:, :, None]).reshape(len(idx), -1)


class Int4Store:
    """Every Gemma 3n tensor in its device format: `Int4Matrix` for matrices, BF16 for vectors."""

    # set by `gemma3n_quant.cache.load_store` for a checkpoint read from files (None: not cached):
    # the INT4 image's content key and the cache directory, which the compiled-program cache shares
    content_key: str | None = None
    cache_root: Path | None = None

    def __init__(self, weights: Gemma3nWeights | None) -> None:
        if weights is None:  # `from_parts`
            return
        self.config = cfg = weights.config
        self.origin = weights.origin
        self.mats: dict[str, Int4Matrix] = {}
        self.vecs: dict[str, np.ndarray] = {}
        for name, shape in weights.shapes.items():
            if len(shape) == 1:
                self.vecs[name] = nx.bf16(weights.get(name))
            elif name in (EMBED, EMBED_PLE) or math.prod(shape) > _CHUNK_VALUES:
                group = cfg.hidden_size_per_layer_input if name == EMBED_PLE else None
                self.mats[name] = Int4Matrix.from_rows(lambda sl, n=name: weights.rows(n, sl), shape, group)
            else:
                self.mats[name] = Int4Matrix.quantize(weights.get(name))
        self._finish()

    @classmethod
    def from_parts(cls, config, origin: str, mats: dict[str, Int4Matrix], vecs: dict[str, np.ndarray]
                   ) -> Int4Store:
        """A store from already quantized tensors (the INT4 cache, `gemma3n_quant.cache`)."""
        self = cls(None)
        self.config, self.origin, self.mats, self.vecs = config, origin, dict(mats), dict(vecs)
        self._finish()
        return self

    def _finish(self) -> None:
        self._add_padded_twins()
        if self.nbytes_codes() <= _UNPACKED_CACHE_BYTES:  # small models: unpack once, not per GEMV
            for n, m in self.mats.items():
                if n != EMBED_PLE:
                    m.keep_codes()

    def _add_padded_twins(self) -> None:
        """Word-padded copies (``name@pad``) of the tensors `padding.plan` names: zero rows (scale 1.0),
        zero columns or zero elements at the pad positions; the INT4 codes are the originals."""
        for name, (axis, idx, n) in plan(self.config).items():
            if axis == "vec":
                if name in self.vecs:
                    self.vecs[name + PAD] = pad_vector(self.vecs[name], idx, n)
                continue
            if name not in self.mats:
                continue
            m = self.mats[name]
            codes = m.codes()
            rows, k = m.shape
            if axis == "rows":
                q = np.zeros((n, k), np.int8)
                q[idx] = codes
                scale = np.ones(n, F32)
                scale[idx] = m.scale
                shape = (n, k)
            else:
                q = np.zeros((rows, n), np.int8)
                q[:, idx] = codes
                scale, shape = m.scale.copy(), (rows, n)
            self.mats[name + PAD] = Int4Matrix(pack_int4(q), scale, shape)

    def mat(self, name: str) -> Int4Matrix:
        if name == LM_HEAD and name not in self.mats:
            name = EMBED  # tied
        try:
            return self.mats[name]
        except KeyError:
            raise ModelError(f"{self.origin}: no INT4 matrix {name!r}") from None

    def vec(self, name: str) -> np.ndarray:
        try:
            return self.vecs[name]
        except KeyError:
            raise ModelError(f"{self.origin}: no vector {name!r}") from None

    def nbytes_codes(self) -> int:
        return sum(m.shape[0] * m.shape[1] for n, m in self.mats.items() if n != EMBED_PLE)

    @property
    def nbytes(self) -> int:
        """Device bytes: packed INT4 + float32 scales + BF16 vectors."""
        return sum(m.nbytes for m in self.mats.values()) + sum(2 * v.size for v in self.vecs.values())


# ---- KV cache -----------------------------------------------------------------------------------

class QuantKVCache:
    """Per producer layer: K and V codes [kv_heads, capacity, head_dim] (+ float32 scales [kv_heads,
    capacity] for int8/int4). Positions are absolute; sliding layers read only their window.

    Optional hard cap (the pccx KV ring, `set_ring`): a layer with no sliding window keeps at most
    ``max_tokens`` entries. Once full, position p >= max_tokens overwrites ring slot
    ``sink + (p - sink) % (max_tokens - sink)``: the first ``sink`` positions (the attention sink)
    stay, the rest is a local window of the most recent ``max_tokens - sink`` positions. A wrapped
    ring is attended in slot order (sink, then the ring's physical order), the order the device
    streams it. Sliding layers never need eviction (they read their own window, in position order).
    """

    def __init__(self, kv_heads: int, head_dim: int, fmt: str = "fp16") -> None:
        if fmt not in KV_FORMATS:
            raise ConfigError(f"unknown KV cache format {fmt!r} (known: {', '.join(KV_FORMATS)})")
        self.fmt, self.heads, self.dim = fmt, kv_heads, head_dim
        self.layers: dict[int, dict[str, np.ndarray]] = {}
        self.length: dict[int, int] = {}
        self.max_tokens: int | None = None
        self.sink = 0
        self.capped: frozenset[int] = frozenset()

    def set_ring(self, max_tokens: int | None, sink: int = 0, layers: tuple[int, ...] = ()) -> None:
        """Hard cap for the given (full-attention) producer layers; None = grow without limit."""
        if max_tokens is not None and not 0 <= sink < max_tokens:
            raise ConfigError(f"KV ring: need 0 <= sink < max_tokens (sink={sink}, max_tokens={max_tokens})")
        self.max_tokens, self.sink = max_tokens, int(sink)
        self.capped = frozenset(layers) if max_tokens is not None else frozenset()
        self.reset()

    def reset(self) -> None:
        self.layers.clear()
        self.length.clear()

    def slot(self, layer: int, n: int) -> int:
        """Ring slot of absolute position ``n`` (the position itself without a cap)."""
        cap = self.max_tokens
        if layer not in self.capped or cap is None or n < cap:
            return n
        return self.sink + (n - self.sink) % (cap - self.sink)

    def append(self, layer: int, k: tuple[np.ndarray, np.ndarray | None],
               v: tuple[np.ndarray, np.ndarray | None]) -> None:
        """Store one token's K and V as `kv_quantize` produced them: codes [kv_heads, head_dim], scales."""
        (kq, ks), (vq, vs) = k, v
        n = self.length.get(layer, 0)
        row = self.slot(layer, n)
        buf = self.layers.get(layer)
        if buf is None or buf["k"].shape[1] == row:
            cap = max(16, 2 * row)
            if layer in self.capped:
                cap = min(cap, self.max_tokens)
            new = {"k": np.zeros((self.heads, cap, self.dim), kq.dtype),
                   "v": np.zeros((self.heads, cap, self.dim), vq.dtype)}
            if ks is not None:
                new |= {"ks": np.zeros((self.heads, cap), F32), "vs": np.zeros((self.heads, cap), F32)}
            if buf is not None:
                for key, arr in buf.items():
                    new[key][:, :row] = arr[:, :row]
            buf = self.layers[layer] = new
        buf["k"][:, row], buf["v"][:, row] = kq, vq
        if ks is not None:
            buf["ks"][:, row], buf["vs"][:, row] = ks, vs
        self.length[layer] = n + 1

    def read(self, layer: int, head: int, lo: int, hi: int
             ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]:
        """K codes [n, d], K scales [n] | None, V codes [n, d], V scales [n] | None for rows lo..hi-1."""
        buf = self.layers[layer]
        ks = buf["ks"][head, lo:hi] if "ks" in buf else None
        vs = buf["vs"][head, lo:hi] if "vs" in buf else None
        return buf["k"][head, lo:hi], ks, buf["v"][head, lo:hi], vs

    def append_batch(self, layer: int, entries: list[tuple]) -> None:
        """A prefill chunk's K/V rows, in position order (``entries``: (k, v) per token)."""
        for k, v in entries:
            self.append(layer, k, v)

    def attend(self, layer: int, head: int, window: int | None, length: int | None = None
               ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]:
        """The entries a query attends to, in attention order: the last ``window`` positions (sliding
        layers), every stored position, or, once a capped ring has wrapped, all its slots in slot order.
        ``length``: the query sees only the first ``length`` positions (a prefill chunk's earlier
        token, the chunk's later rows already stored; not valid once a capped ring has wrapped)."""
        n = self.length[layer] if length is None else min(int(length), self.length[layer])
        if window is not None and layer not in self.capped:
            return self.read(layer, head, max(0, n - window), n)
        if window is not None:
            raise ConfigError(f"KV layer {layer} has a sliding window and a capped ring")
        return self.read(layer, head, 0, n if layer not in self.capped else min(n, self.max_tokens))

    @property
    def nbytes(self) -> int:
        """Bytes the stored tokens occupy in the device format (INT4 counted packed)."""
        per = {"fp16": 2.0, "int8": 1.0, "int4": 0.5}[self.fmt]
        tot = 0.0
        for layer, n in self.length.items():
            n = min(n, self.max_tokens) if layer in self.capped else n
            tot += 2 * n * self.heads * (self.dim * per + (4 if self.fmt != "fp16" else 0))
        return int(tot)
