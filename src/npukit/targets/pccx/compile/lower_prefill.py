"""Lowering of a prefill chunk: `Gemma3nW4A8.forward_batch` onto GEMMs with N = T (the chunk's tokens).

`PrefillOps` adds the two batched operations to `LoweringOps`:

* ``batch(parts)`` — the T activation vectors of a GEMM as one L2 block, row t at element
  ``t · Kp`` (``Kp`` = K rounded up to whole 8-element words, the GEMM's activation stride). A part
  that is a whole, not yet placed buffer is placed there (no instruction); anything else is copied.
* ``gemm(W, X)`` — one GEMM per weight tile, N = T, result rows at a stride of ``Mp`` (M in whole
  words, the GEMM's result stride). The simulator quantizes every activation row with its own
  exponent (`npukit.targets.pccx.sim` ``_matop``), so row t equals the GEMV of token t bit for bit.
  A row chunk that the image splits into several tiles (M > 65,528 with K < 256; no Gemma 3n size)
  falls back to one GEMV per token and tile.

Attention stays per token (a score GEMV over the ring per head, bucket-padded: the decode numerics),
each token's span with its own patched descriptors (`KVOperand.slot`); the chunk's KV blocks go to
the host in one step per producer layer (`SymbolicKVCache.append_batch`).

`lower_prefill` traces a chunk of T tokens from position 0 with token ids 0..T-1, so the recipes of
the per-token host inputs name the token's index (`host_values.eval_recipe`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npukit.targets.pccx.compile.ir import CompileError, Node, Ref, Weight
from npukit.targets.pccx.compile.lower import LoweringOps, _ptr, _tile_weight
from npukit.targets.pccx.gemma3n_quant.model import Gemma3nW4A8
from npukit.targets.pccx.isa import ELEMS_PER_WORD, words_of

GEMM_MAX_N = 65535  # the fmap N field is 16 bits


def padded(n: int) -> int:
    """Elements of a row that starts every GEMM vector on an L2 word."""
    return words_of(n) * ELEMS_PER_WORD


class PrefillOps(LoweringOps):
    """`LoweringOps` plus ``batch`` and ``gemm`` (see module doc)."""

    def batch(self, parts: list[Any]) -> np.ndarray:
        refs = [self.ref(p) for p in parts]
        k = refs[0].n
        if any(r.n != k for r in refs):
            raise CompileError("GEMM activation rows differ in length")
        kp = padded(k)
        arr, buf = self._new((len(refs), kp), "batch")
        for t, r in enumerate(refs):
            whole = r.off == 0 and r.n == r.buf.n and r.buf.parent is None and not r.buf.shared
            if whole:
                r.buf.alias(buf, t * kp)
            else:
                self.nodes.append(Node("copy", out=Ref(buf, t * kp, r.n), srcs=(r,), label="gemm row"))
        view = arr[:, :k]
        self._batches[_ptr(view)] = (Ref(buf, 0, len(refs) * kp), len(refs), kp)
        self._keep.append(view)
        return view

    def gemm(self, w: Any, xb: Any, w_scale: Any = None, dest: Any = None, fmt: str = "int4") -> np.ndarray:
        if dest is not None:
            raise CompileError("GEMM accumulation is not used by the reference")
        if w_scale is None:
            raise CompileError("a weight GEMM needs its row scales (they name the weight tile)")
        entry = self._batches.get(_ptr(xb)) if isinstance(xb, np.ndarray) else None
        if entry is None or xb.shape != (entry[1], w.shape[1]):
            raise CompileError("GEMM operand is not a batch of this program")
        xr, n, kp = entry
        if n > GEMM_MAX_N:
            raise CompileError(f"GEMM with N={n} exceeds the 16-bit shape field")
        name, lo = self.image.matrix_of_scales(w_scale)
        hi = lo + int(np.size(w_scale))
        m = hi - lo
        mp = padded(m)
        arr, buf = self._new((n, mp), name)
        tiles = self.image.tiles_for(name, lo, hi)
        if len(tiles) == 1:
            wt = _tile_weight(tiles[0])
            self.nodes.append(Node("gemv", out=Ref(buf, 0, n * mp), srcs=(xr,), weight=wt,
                                   label=f"{wt.name} N={n}", attrs={"n": n}))
        else:
            for t in range(n):
                x_t = Ref(xr.buf, xr.off + t * kp, w.shape[1])
                for tile in tiles:
                    wt: Weight = _tile_weight(tile)
                    self.nodes.append(Node("gemv", out=Ref(buf, t * mp + tile.lo - lo, tile.hi - tile.lo),
                                           srcs=(x_t,), weight=wt, label=wt.name))
        return arr[:, :m]


def lower_prefill(model: Gemma3nW4A8, tokens: int, logits: bool = True) -> PrefillOps:
    """Trace a prefill chunk of ``tokens`` tokens from position 0 into a fresh `PrefillOps` (attention
    spans at the lengths in ``model.cache.bucket``; ``logits=False``: the layers only)."""
    vocab = model.cfg.vocab_size
    if not 1 <= tokens <= vocab:
        raise CompileError(f"prefill chunk of {tokens} tokens: lowered with ids 0..T-1 < vocab {vocab}")
    old: LoweringOps = model.ops  # type: ignore[assignment]
    ops = PrefillOps(old.image, old.ring)
    model.ops = ops
    model.cache.ops = ops  # type: ignore[attr-defined]
    model.reset()
    model.forward_batch(list(range(tokens)), logits=logits)
    return ops
