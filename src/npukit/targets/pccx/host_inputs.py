"""The per-token host inputs of a compiled pccx program, written into staging before each run.

A program's recipes (`compile.host_values.eval_recipe`) name the rows the host makes per token: the embedding
row, the per-layer-embedding row and, per layer type, the RoPE cos and sin rows. A decode step makes six,
and each one position by position is a dozen small NumPy calls (~25 µs apiece in a warm loop, twice
that after the compiled block has run through the caches). The RoPE rows depend only on the position,
so a decode step takes them from a block of ROPE_BLOCK positions made in one vectorised pass
(`Gemma3nW4A8.host_rope_rows`, the same bits as `host_rope` position by position), made when a step
first asks for a position outside the block it has. The rows go straight into a view of the staging
region (one `HostDDR.touched` for all of them) instead of one checked `HostDDR.write` each. The
embedding and per-layer-embedding rows are INT4 codes times a row (or group) scale times a constant:
each of their elements takes one of 16 values per scale, so a step rounds those 16 (per group) to BF16
once and looks each code's bits up (`_token_row`), instead of widening, scaling and rounding the whole
row (the same bits: the same float32 products, rounded by the same `host_bits`).

A prompt chunk keeps the per-position path: its rows are made in its own call, as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npukit.models.gemma3n.weights import EMBED, EMBED_PLE
from npukit.targets.pccx.compile.host_values import eval_recipe, host_bits
from npukit.targets.pccx.gemma3n_quant.model import Gemma3nW4A8
from npukit.targets.pccx.gemma3n_quant.store import Int4Store
from npukit.targets.pccx.memory import HostWords

# positions per block of RoPE rows: one block costs about as much as two positions made one by one
ROPE_BLOCK = 64
# a packed INT4 byte -> where its two codes (low nibble first) sit in the 16 values of codes -8 .. 7
_CODE_INDEX = np.array([[(b & 0xF) ^ 8, (b >> 4) ^ 8] for b in range(256)], np.intp)
_CODES = np.arange(-8, 8, dtype=np.float32)


class HostInputs:
    """Stages a program's per-token host input rows (`stage`) for one model and host DDR."""

    def __init__(self, model: Gemma3nW4A8, host: Any, store: Int4Store) -> None:
        self.model, self.host = model, host
        cfg, lay = model.cfg, model.lay
        # recipe kind -> (packed codes, scales, row length, per element 16 · its scale group (None: one
        # scale a row), factor, rows of the table (None: any id)); the per-layer rows land in blocks of
        # lay.pp words (`Gemma3nW4A8.host_ple`)
        self._tables: dict[str, tuple] = {}
        for kind, name, factor, vocab in (("embed", EMBED, model._sqrt_h, None),
                                          ("ple", EMBED_PLE, model._sqrt_p, cfg.vocab_size_per_layer_input)):
            mat = store.mat(name)
            k = mat.shape[1]
            groups = None if mat.group is None else 16 * (np.arange(k) // mat.group)
            self._tables[kind] = (np.asarray(mat.packed), np.asarray(mat.scale, np.float32), k, groups,
                                  np.float32(factor), vocab)
        self._ple_blocks = (cfg.num_hidden_layers, lay.p, lay.pp) if lay.ple_padded else None
        # layer type -> (first position, cos rows, sin rows) as BF16 bits [ROPE_BLOCK, head_dim]
        self._rope: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}
        # program key -> (its recipes, per recipe its staging words or None: no view, first and end byte)
        self._dests: dict[Any, tuple[list, list[np.ndarray | None], int, int]] = {}
        self._words = HostWords(host)  # staging rows' views (`_stage_each`) and the logits (`read_floats`)

    def stage(self, key: Any, recipes: list[tuple[int, tuple]], ids: list[int], pos: int) -> None:
        """Write the rows of ``recipes`` (program ``key``'s) for tokens ``ids`` from position ``pos``."""
        dests = self._dests.get(key) if len(ids) == 1 else None
        if dests is None or dests[0] is not recipes:  # (a program made anew under a known key: planned again)
            self._stage_each(key, recipes, ids, pos)
            return
        _, views, lo, hi = dests
        for dst, (addr, recipe) in zip(views, recipes, strict=True):
            bits = self.rope_bits(recipe[1], pos + recipe[3])[recipe[2]] if recipe[0] == "rope" else \
                self._token_row(recipe[0], ids[recipe[1]])
            if dst is None:
                self.host.write(addr, bits)
            else:
                dst[:] = bits
        self.host.touched(lo, hi - lo)

    def _stage_each(self, key: Any, recipes: list[tuple[int, tuple]], ids: list[int], pos: int) -> None:
        """Each row made position by position and written with `HostDDR.write`; a decode program's
        first call also finds the staging views its later calls write through."""
        memo: dict = {}
        views: list[np.ndarray | None] = []
        lo, hi = None, 0
        for addr, recipe in recipes:
            bits = eval_recipe(self.model, recipe, ids, pos, memo).astype("<u2", copy=False)
            self.host.write(addr, bits)
            views.append(self._words.view(addr, bits.size))
            lo, hi = addr if lo is None else min(lo, addr), max(hi, addr + 2 * bits.size)
        if len(ids) == 1 and lo is not None:
            self._dests[key] = (recipes, views, lo, hi)

    def _token_row(self, kind: str, token: int) -> np.ndarray:
        """The BF16 bits of token ``token``'s embedding (``kind`` "embed") or per-layer-embedding ("ple")
        row: what `eval_recipe` gives, from one rounding of the 16 values each scale group can take."""
        packed, scales, k, groups, factor, vocab = self._tables[kind]
        row = token if vocab is None or token < vocab else 0  # (`Gemma3nW4A8.host_ple`: row 0 past its table)
        values = host_bits((_CODES[None, :] * scales[row].reshape(-1, 1)) * factor)  # [groups · 16]
        at = _CODE_INDEX[packed[row]].reshape(-1)[:k]
        if groups is not None:
            at = at + groups
        bits = values[at]
        if kind == "ple" and self._ple_blocks is not None:  # each layer's block padded to pp words
            layers, p, pp = self._ple_blocks
            out = np.zeros((layers, pp), np.uint16)
            out[:, :p] = bits.reshape(layers, p)
            return out.reshape(-1)
        return bits

    def read_floats(self, addr: int, n: int) -> np.ndarray:
        """``n`` BF16 words of host DDR from ``addr`` (a program's logits) widened to a new float32 array:
        `numerics.from_bits` read through a view of the region, widened and shifted in place (one
        vocabulary-sized array made instead of three)."""
        out = self._words.read(addr, n).astype(np.uint32)
        out <<= 16
        return out.view(np.float32)

    def rope_bits(self, layer_type: str, pos: int) -> tuple[np.ndarray, np.ndarray]:
        """The BF16 bits of the cos and sin rows of ``layer_type`` at ``pos`` (what `eval_recipe` gives
        for its two RoPE recipes), from the block holding ``pos`` (made here when it is not held)."""
        got = self._rope.get(layer_type)
        if got is None or not got[0] <= pos < got[0] + ROPE_BLOCK:
            cos, sin = Gemma3nW4A8.host_rope_rows(self.model, layer_type, pos, ROPE_BLOCK)
            got = self._rope[layer_type] = (pos, host_bits(cos).reshape(cos.shape),
                                            host_bits(sin).reshape(sin.shape))
        first, cos_bits, sin_bits = got
        return cos_bits[pos - first], sin_bits[pos - first]
