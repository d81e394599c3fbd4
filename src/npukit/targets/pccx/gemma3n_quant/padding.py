"""Word padding for Gemma 3n shapes that are not multiples of the 128-bit L2 word (8 BF16 values).

pccx addresses L2 in whole words, so every vector an instruction reads must start on a word. The
reference slices three vectors at model-dependent offsets: the attention heads of Q/K/V (stride
``head_dim``), the RoPE halves of a Q/K head (``head_dim / 2``) and the per-layer inputs (stride
``hidden_size_per_layer_input``). When a stride is not a whole number of words the W4A8 reference
(and so the compiled program, which is the reference recorded) lays those vectors out padded:

* a head is ``D = 2 · hp`` values, ``hp = ceil8(head_dim / 2)``: first RoPE half at 0, second at
  ``hp``, zeros in between and after (V: the ``head_dim`` values at 0, zeros after);
* the per-layer inputs are ``L`` blocks of ``pp = ceil8(p)`` values, block i at ``i · pp``.

The padded vectors come straight out of GEMVs whose INT4 matrices have **zero rows** inserted at the
pad positions (row scale 1.0): a zero row accumulates 0, so the pad outputs are +0 exactly and every
real row is the same dot product, quantized with the same activation exponent, as before. o_proj,
which reads the heads side by side, gets **zero columns** at the pad positions: the activation's
exponent is max|x| over the vector, unchanged by +0 entries, each real product is unchanged and the
zero columns add 0, so every output is bit-identical. Why each op over padded values is exact:

* RMSNorm of a head: SQUARE(+0) = +0, and the serial float32 REDUCE_SUM adds +0 to a partial sum of
  squares (≥ +0), which leaves it unchanged; the mean divides by the real ``head_dim`` (the
  reference passes it), so r is unchanged; SCALE(+0, r) and MUL by the zero-padded γ are +0.
* RoPE: cos and ±sin rows are zero-padded the same way; SWAP_HALVES moves whole ``hp`` halves, so
  real elements meet their real partners; pads stay 0·0 + 0·0 = +0.
* Attention: the K cache stores the padded rows (pads quantize to code 0, the per-token absmax is
  unchanged), so q·k adds only 0 terms; V's padded columns give +0 outputs that meet o_proj's zero
  columns. Softmax, top-k statistics and GELU never see a pad: they run on unpadded vectors.
* Per-layer inputs: only the real ``p`` values of each block are read (a block starts on a word).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WORD = 8  # BF16 values per 128-bit L2 word
PAD = "@pad"  # suffix of a padded twin of a store matrix or vector


def ceil_word(n: int) -> int:
    return -(-int(n) // WORD) * WORD


@dataclass(frozen=True)
class Layout:
    head_dim: int  # the model's
    D: int  # stored head length (= head_dim when it is a multiple of 16)
    hp: int  # RoPE half stride
    p: int  # per-layer input width
    pp: int  # per-layer input stride

    @property
    def heads_padded(self) -> bool:
        return self.head_dim != self.D

    @property
    def ple_padded(self) -> bool:
        return self.pp != self.p

    def head_index(self, heads: int, halves: bool) -> np.ndarray:
        """Padded position of each of ``heads · head_dim`` values (halves: RoPE layout)."""
        d, h2 = self.head_dim, self.head_dim // 2
        j = np.arange(d)
        within = np.where(j < h2, j, self.hp + j - h2) if halves else j
        return (np.arange(heads)[:, None] * self.D + within[None, :]).ravel()

    def ple_index(self, layers: int) -> np.ndarray:
        return (np.arange(layers)[:, None] * self.pp + np.arange(self.p)[None, :]).ravel()


def layout(cfg) -> Layout:
    d, p = int(cfg.head_dim), int(cfg.hidden_size_per_layer_input)
    hp = ceil_word(d // 2)
    return Layout(d, 2 * hp if d % (2 * WORD) else d, hp if d % (2 * WORD) else d // 2, p, ceil_word(p))


def plan(cfg) -> dict[str, tuple[str, np.ndarray, int]]:
    """Store tensors that get a padded twin: name -> (axis "rows" | "cols" | "vec", new index of each
    old row / column / element, new length)."""
    lay, out = layout(cfg), {}
    hq, hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    if lay.heads_padded:
        for i in range(cfg.num_hidden_layers):
            pre = f"layers.{i}.self_attn."
            out[pre + "q_proj.weight"] = ("rows", lay.head_index(hq, True), hq * lay.D)
            out[pre + "o_proj.weight"] = ("cols", lay.head_index(hq, False), hq * lay.D)
            out[pre + "q_norm.weight"] = ("vec", lay.head_index(1, True), lay.D)
            if cfg.kv_source[i] == i:
                out[pre + "k_proj.weight"] = ("rows", lay.head_index(hkv, True), hkv * lay.D)
                out[pre + "v_proj.weight"] = ("rows", lay.head_index(hkv, False), hkv * lay.D)
                out[pre + "k_norm.weight"] = ("vec", lay.head_index(1, True), lay.D)
    if lay.ple_padded:
        n = cfg.num_hidden_layers
        out["per_layer_model_projection.weight"] = ("rows", lay.ple_index(n), n * lay.pp)
    return out


def pad_vector(v: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, v.dtype)
    out[idx] = v
    return out
