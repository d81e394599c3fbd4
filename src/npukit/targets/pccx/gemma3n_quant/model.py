"""W4A8 Gemma 3n decode, written only as calls to the pccx operation set (`PccxOps`).

Every line that touches model values on the device is one ``self.ops.<primitive>(...)`` call, in
the order a pccx program would issue the instructions; everything lives in L2 as BF16. The
semantics are transformers' Gemma 3n (refs §5.3), mapped onto instructions as follows:

* RMSNorm: SQUARE → REDUCE_SUM → SCALE(÷n) → ADD eps → RSQRT → SCALE(x, r) → MUL γ.
* GEMV: INT4 weights with an FP32 row scale, INT8 activations by emax alignment (numerics §2-3).
  Matrices larger than one chunk are issued as several GEMVs over row ranges (same values).
* attention, per query head: GEMV against the K cache (FP16, or INT8/INT4 with per-token scale as
  the GEMV row scale), findemax; softmax = EXP(sub_emax) → REDUCE_SUM → SCALE(÷sum); for a
  quantized V cache the per-token V scale is folded into the probabilities with one MUL; then
  GEMV against Vᵀ.
* RoPE: MUL(q, cos) and MUL(swap_halves(q), ±sin) → ADD, cos/sin rows from a host table
  (a BF16 angle ``pos · θ^(-2i/d)`` would be too coarse beyond position 256).
* Gaussian top-k: REDUCE_SUM → SCALE(÷n) = μ; SCALE(μ, −1) → ADD → SQUARE → REDUCE_SUM →
  SCALE(÷n) → SQRT = σ; SCALE(σ, z, accm onto μ) = cutoff; RELU_BIAS(gate, cutoff).
* AltUp mixing: SCALE with ``accm`` (one rounding per term); softcap: SCALE(÷c) → TANH → SCALE(c).
* max(m, 1e-5) in the AltUp magnitude: RELU_BIAS(m, 1e-5) → ADD 1e-5 (equal to the max except
  when m lies within a factor ~2^8 of 1e-5, where the subtraction rounds).

Prefill (`Gemma3nW4A8.forward_batch`): the same per-token ops for a chunk of T tokens, each weight
matrix one GEMM (``ops.gemm`` over ``ops.batch``: N = T, one activation exponent per token, so each
row equals the GEMV), the layer's T KV writes before the chunk's causal attention; bit-identical to
T ``step`` calls (docs/compiler.md, "Prefill").

Host side (float32, marked ``host``): token-embedding and per-layer-embedding row lookups from the
INT4 tables (dequantized, scaled by √d), RoPE tables, sampling on the returned logits.

Constants (the pccx constant cache holds BF16): 1/√2, z = icdf(0.95) → 1.6484375, eps, 1/√d.
Divisions by a count n use SCALE with ``recip_scale`` when n is exact in BF16 (all Gemma sizes).
Extended-profile primitives (not in the pccx v002 ISA): TANH, MUL, ADD, RELU_BIAS, RSQRT, SQUARE.
"""

from __future__ import annotations

import math

import numpy as np

from npukit.errors import ModelError
from npukit.models.gemma3n.weights import EMBED, EMBED_PLE, LM_HEAD, Gemma3nWeights
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.gemma3n_quant.padding import PAD, layout, plan
from npukit.targets.pccx.gemma3n_quant.store import Int4Store, QuantKVCache
from npukit.targets.pccx.ops import PccxOps

F32 = np.float32
GEMV_CHUNK_VALUES = 1 << 24  # weights per GEMV instruction before a matrix is split by rows
CVO_MAX_LENGTH = 65535  # the CVO length field is 16 bits
CVO_TILE = 65528  # elementwise CVOs over longer vectors: tiles of whole L2 words (8 BF16) under the limit
NEG_INF = F32(-np.inf)


def gemv_chunk_rows(k: int) -> int:
    """Rows per GEMV when a matrix is split (``GEMV_CHUNK_VALUES`` weights), a whole number of L2
    words so every chunk's output starts on a word (rows are independent: same values)."""
    return max(8, GEMV_CHUNK_VALUES // k // 8 * 8)


def _is_bf16(n: float) -> bool:
    return float(nx.bf16(n)[()]) == n


class Gemma3nW4A8:
    """W4A8 decode: ``reset()``, ``step(token) -> logits``, ``forward(ids, all_logits)``."""

    def __init__(self, store: Int4Store, kv: str = "fp16", ops: PccxOps | None = None) -> None:
        self.s = store
        self.cfg = cfg = store.config
        self.ops = ops if ops is not None else PccxOps()
        self.kv = kv
        self.lay = layout(cfg)  # word padding of heads and per-layer inputs (`padding`)
        self._padded = frozenset(plan(cfg))
        self.cache = QuantKVCache(cfg.num_key_value_heads, self.lay.D, kv)
        self.pos = 0
        self._sqrt_h = F32(math.sqrt(cfg.hidden_size))
        self._sqrt_p = F32(math.sqrt(cfg.hidden_size_per_layer_input))
        self._inv_freq = {lt: F32(1.0) / np.power(F32(th), np.arange(0, cfg.head_dim, 2, dtype=F32)
                                                   / F32(cfg.head_dim)) for lt, th in cfg.rope_theta.items()}

    @classmethod
    def from_weights(cls, weights: Gemma3nWeights, kv: str = "fp16", ops: PccxOps | None = None
                     ) -> Gemma3nW4A8:
        return cls(Int4Store(weights), kv, ops)

    # ---- API -----------------------------------------------------------------------------------
    def reset(self) -> None:
        self.cache.reset()
        self.pos = 0

    def forward(self, ids: list[int] | np.ndarray, all_logits: bool = False) -> np.ndarray:
        """Decode ``ids`` one token at a time at the next positions; float32 logits [T or 1, vocab]."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ModelError("no input tokens")
        rows = [self.step(int(t)) for t in ids]
        return np.stack(rows if all_logits else rows[-1:])

    def prefill(self, ids: list[int] | np.ndarray) -> np.ndarray:
        return self.forward(ids)[-1]

    def step(self, token: int) -> np.ndarray:
        cfg = self.cfg
        if not 0 <= token < cfg.vocab_size:
            raise ModelError(f"token id {token} out of range [0, {cfg.vocab_size})")
        if self.pos >= cfg.max_position_embeddings:
            raise ModelError(f"context exceeds max_position_embeddings {cfg.max_position_embeddings}")
        x0 = self._embed(token)
        pli = self._per_layer_inputs(token, x0)
        xs = self._altup_init(x0)
        for i in range(cfg.num_hidden_layers):
            xs = self._layer(i, xs, pli[i])
        self.pos += 1
        return self._logits(self._unembed(xs))

    def forward_batch(self, ids: list[int] | np.ndarray, all_logits: bool = False, logits: bool = True
                      ) -> np.ndarray:
        """One prefill chunk of T tokens at the next positions, weight matrices as GEMMs over the T
        activations; float32 logits [1 (the last token) or T, vocab], bit-identical to T `step` calls.

        Per layer: the per-token ops of every token, one GEMM per weight matrix (N = T: each vector
        keeps its own activation exponent, so a GEMM row equals the GEMV), the layer's T KV writes,
        then causal attention of token t over positions ..pos+t (the later writes are past its span).
        A capped ring must not wrap inside the chunk (a write would evict an entry an earlier token
        of the chunk still reads): such a chunk is a `ModelError`; run those tokens with `step`.
        ``logits=False`` stops after the layers (returns an empty array; a compiler's L2 probe).
        """
        cfg = self.cfg
        ids = [int(t) for t in np.asarray(ids, dtype=np.int64).reshape(-1)]
        if not ids:
            raise ModelError("no input tokens")
        bad = [t for t in ids if not 0 <= t < cfg.vocab_size]
        if bad:
            raise ModelError(f"token id {bad[0]} out of range [0, {cfg.vocab_size})")
        T, pos0 = len(ids), self.pos
        if pos0 + T > cfg.max_position_embeddings:
            raise ModelError(f"context exceeds max_position_embeddings {cfg.max_position_embeddings}")
        cap = getattr(self.cache, "max_tokens", None)
        if T > 1 and cap is not None and getattr(self.cache, "capped", ()) and pos0 + T - 1 >= cap:
            raise ModelError(f"prefill chunk at positions {pos0}..{pos0 + T - 1} would wrap the KV ring "
                             f"(max_tokens {cap}); run the tokens from position {max(pos0, cap)} one by one")
        x0 = [self._embed(t) for t in ids]
        x0b = self._batch(x0)
        pli = self._per_layer_inputs_batch(ids, x0b)
        xs = self._altup_init_batch(x0, x0b)
        for i in range(cfg.num_hidden_layers):
            xs = self._layer_batch(i, xs, [p[i] for p in pli])
        self.pos += T
        if not logits:
            return np.zeros((0, cfg.vocab_size), F32)
        rows = xs if all_logits else xs[-1:]
        return np.stack([self._logits(self._unembed(x)) for x in rows])

    # ---- batched building blocks (prefill) -----------------------------------------------------
    def _batch(self, xs: list[np.ndarray]) -> np.ndarray:
        return self.ops.batch(xs)

    def _gemm(self, name: str, xb: np.ndarray) -> list[np.ndarray]:
        """``_gemv`` for a batch of activations (rows of ``xb``): one GEMM per row chunk; per-token rows."""
        m = self.s.mat(self._pad_name(name))
        rows, k = m.shape
        step = gemv_chunk_rows(k)
        n = xb.shape[0]
        if rows <= step:
            y = self.ops.gemm(m.codes(), xb, w_scale=m.scale, fmt="int4")
            return [y[t] for t in range(n)]
        parts = [self.ops.gemm(m.codes(slice(lo, lo + step)), xb, w_scale=m.scale[lo:lo + step], fmt="int4")
                 for lo in range(0, rows, step)]
        return [self.ops.concat([p[t] for p in parts]) for t in range(n)]

    def _per_layer_inputs_batch(self, ids: list[int], x0b: np.ndarray) -> list[list[np.ndarray]]:
        cfg, o = self.cfg, self.ops
        p, pp = self.lay.p, self.lay.pp
        ys = [o.host_to_l2(self.host_ple(t)) for t in ids]
        projs = self._gemm("per_layer_model_projection.weight", x0b)
        gamma = self._vec("per_layer_projection_norm.weight")
        out = []
        for y, proj in zip(ys, projs, strict=True):
            proj = o.cvo_scale(proj, o.const(cfg.hidden_size ** -0.5))
            per = []
            for i in range(cfg.num_hidden_layers):
                normed = self._rms(proj[i * pp:i * pp + p], gamma)
                per.append(o.cvo_scale(o.cvo_add(normed, y[i * pp:i * pp + p]), o.const(2 ** -0.5)))
            out.append(per)
        return out

    def _altup_init_batch(self, x0: list[np.ndarray], x0b: np.ndarray) -> list[list[np.ndarray]]:
        targets = [self._magnitude(x, clamp=False) for x in x0]
        xs = [[x] for x in x0]
        for k in range(self.cfg.altup_num_inputs - 1):
            ps = self._gemm(f"altup_projections.{k}.weight", x0b)
            for t, p in enumerate(ps):
                xs[t].append(self._match_magnitude(p, targets[t]))
        return xs

    def _router_batch(self, i: int, xs: list[np.ndarray]) -> list[np.ndarray]:
        rb = self._batch([self._router_in(i, x) for x in xs])
        r = self._gemm(f"layers.{i}.altup.modality_router.weight", rb)
        return [self.ops.cvo_tanh(v) for v in r]

    def _layer_batch(self, i: int, xs: list[list[np.ndarray]], pli: list[np.ndarray]
                     ) -> list[list[np.ndarray]]:
        """`_layer` for T tokens: the same per-token ops, each weight matrix one GEMM."""
        cfg, o, a, n = self.cfg, self.ops, self.cfg.altup_active_idx, self.cfg.altup_num_inputs
        pre = f"layers.{i}."

        def vec(name: str) -> np.ndarray:
            return self._vec(pre + name)

        cs = self._gemm(pre + "altup.prediction_coefs.weight",
                        self._batch(self._router_batch(i, [x[a] for x in xs])))
        preds = [self._altup_predict(x, c) for x, c in zip(xs, cs, strict=True)]
        actives = [p[a] for p in preds]
        x = [self._rms(v, self._vec(pre + "input_layernorm.weight")) for v in actives]
        xb = self._batch(x)
        lls = self._gemm(pre + "laurel.linear_left.weight", xb)
        lrs = self._gemm(pre + "laurel.linear_right.weight", self._batch(lls))
        laurel = [o.cvo_add(v, self._rms(lr, self._vec(pre + "laurel.post_laurel_norm.weight")))
                  for v, lr in zip(x, lrs, strict=True)]
        attn = self._attention_batch(i, xb)
        post_attn = vec("post_attention_layernorm.weight")
        hs = [o.cvo_scale(o.cvo_add(o.cvo_add(act, self._rms(at, post_attn)), lau), o.const(2 ** -0.5))
              for act, at, lau in zip(actives, attn, laurel, strict=True)]
        yb = self._batch([self._rms(h, self._vec(pre + "pre_feedforward_layernorm.weight")) for h in hs])
        gates = self._gemm(pre + "mlp.gate_proj.weight", yb)
        z = cfg.sparsity_multiplier(i)
        if z is not None:
            gates = [self._gaussian_topk(g, z) for g in gates]
        ups = self._gemm(pre + "mlp.up_proj.weight", yb)
        ds = self._gemm(pre + "mlp.down_proj.weight",
                        self._batch([o.cvo_mul(o.cvo_gelu(g), u) for g, u in zip(gates, ups, strict=True)]))
        activated = [o.cvo_add(h, self._rms(d, self._vec(pre + "post_feedforward_layernorm.weight")))
                     for h, d in zip(hs, ds, strict=True)]
        mods = self._router_batch(i, activated)
        ccs = self._gemm(pre + "altup.correction_coefs.weight", self._batch(mods))
        corrs, gs = [], []
        for t in range(len(xs)):
            innov = o.cvo_add(activated[t], o.cvo_scale(actives[t], F32(-1.0)))
            *corr, g = self._altup_correct(i, preds[t], innov, o.cvo_add(ccs[t], F32(1.0)))
            corrs.append(corr)
            gs.append(g)
        gates2 = self._gemm(pre + "per_layer_input_gate.weight", self._batch(gs))
        gs = [o.cvo_mul(o.cvo_gelu(g), p) for g, p in zip(gates2, pli, strict=True)]
        projs = self._gemm(pre + "per_layer_projection.weight", self._batch(gs))
        out = []
        for corr, pr in zip(corrs, projs, strict=True):
            g = self._rms(pr, self._vec(pre + "post_per_layer_input_norm.weight"))
            out.append([corr[0], *(o.cvo_add(corr[k], g) for k in range(1, n))])
        return out

    def _attention_batch(self, i: int, xb: np.ndarray) -> list[np.ndarray]:
        cfg, pos0, n = self.cfg, self.pos, xb.shape[0]
        pre = f"layers.{i}.self_attn."
        ropes = [self._rope(cfg.layer_types[i], pos0 + t) for t in range(n)]
        q_rows = self._gemm(pre + "q_proj.weight", xb)
        qs = [self._q_heads(i, q, *r) for q, r in zip(q_rows, ropes, strict=True)]
        if cfg.kv_source[i] == i:  # producer: the chunk's T K/V rows are written before any query reads
            ks, vs = self._gemm(pre + "k_proj.weight", xb), self._gemm(pre + "v_proj.weight", xb)
            self.cache.append_batch(i, [self._kv_heads(i, k, v, *r)
                                        for k, v, r in zip(ks, vs, ropes, strict=True)])
        ctx = [self._attend_heads(i, q, pos0 + t + 1) for t, q in enumerate(qs)]
        return self._gemm(pre + "o_proj.weight", self._batch(ctx))

    # ---- building blocks ---------------------------------------------------------------------
    def _gemv(self, name: str, x: np.ndarray) -> np.ndarray:
        m = self.s.mat(self._pad_name(name))
        rows, k = m.shape
        step = gemv_chunk_rows(k)
        if rows <= step:
            return self.ops.gemv(m.codes(), x, w_scale=m.scale, fmt="int4")
        parts = [self.ops.gemv(m.codes(slice(lo, lo + step)), x, w_scale=m.scale[lo:lo + step], fmt="int4")
                 for lo in range(0, rows, step)]
        return self.ops.concat(parts)

    def _div(self, x: np.ndarray, n: int) -> np.ndarray:
        """x / n: SCALE with recip_scale when n is a BF16 value, else SCALE by BF16(1/n)."""
        if _is_bf16(n):
            return self.ops.cvo_scale(x, self.ops.const(n), recip=True)
        return self.ops.cvo_scale(x, self.ops.const(1.0 / n))

    def _mean_square(self, x: np.ndarray, n: int | None = None) -> np.ndarray:
        """mean(x²) over ``n`` real values (default all; a padded head's zeros add +0 to the sum)."""
        o = self.ops
        return self._div(o.reduce_sum(o.cvo_square(x)), x.shape[-1] if n is None else n)

    def _rms(self, x: np.ndarray, gamma: np.ndarray | None, n: int | None = None) -> np.ndarray:
        o = self.ops
        m = o.cvo_add(self._mean_square(x, n), o.const(self.cfg.rms_norm_eps))
        y = o.cvo_scale(x, o.cvo_rsqrt(m))
        return y if gamma is None else o.cvo_mul(y, gamma)

    def _magnitude(self, x: np.ndarray, clamp: bool) -> np.ndarray:
        """sqrt(mean(x²)), optionally of max(mean, 1e-5) as transformers clamps the AltUp streams."""
        o = self.ops
        m = self._mean_square(x)
        if clamp:
            eps = o.const(1e-5)
            m = o.cvo_add(o.cvo_relu_bias(m, eps), eps)
        return o.cvo_sqrt(m)

    def _match_magnitude(self, p: np.ndarray, target: np.ndarray) -> np.ndarray:
        o = self.ops
        return o.cvo_scale(o.cvo_scale(p, target), self._magnitude(p, clamp=True), recip=True)

    def _vec(self, name: str) -> np.ndarray:
        return self.s.vec(self._pad_name(name))

    def _pad_name(self, name: str) -> str:
        """The word-padded twin of a tensor the layout pads (`padding.plan`), else the tensor itself."""
        return name + PAD if name in self._padded else name

    # ---- token entry -------------------------------------------------------------------------
    # host-side inputs of a step (float32/float64 on the host; a compiled program re-evaluates them
    # per token without re-lowering, so each is one method of (token) or (layer type, position))
    def host_embed(self, token: int) -> np.ndarray:
        row = self.s.mat(EMBED).dequant_rows(np.array([token]))[0]  # host: INT4 row lookup
        return row * self._sqrt_h  # host float32 scale

    def host_ple(self, token: int) -> np.ndarray:
        pid = token if token < self.cfg.vocab_size_per_layer_input else 0  # out-of-table ids use row 0
        row = self.s.mat(EMBED_PLE).dequant_rows(np.array([pid]))[0] * self._sqrt_p
        lay = self.lay
        if not lay.ple_padded:
            return row
        out = np.zeros((self.cfg.num_hidden_layers, lay.pp), row.dtype)  # layer i's block at i · pp
        out[:, :lay.p] = row.reshape(-1, lay.p)
        return out.ravel()

    def host_rope(self, layer_type: str, pos: int) -> tuple[np.ndarray, np.ndarray]:
        """cos and sign-folded sin ([-sin, sin] halves) rows for ``pos`` (float64, before BF16): row 0 of
        `host_rope_rows` from ``pos``."""
        cos, sin = self.host_rope_rows(layer_type, pos, 1)
        return cos[0], sin[0]

    def host_rope_rows(self, layer_type: str, first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """cos and sign-folded sin rows [count, D] of positions ``first`` .. ``first + count - 1`` in one
        vectorised pass (`host_rope` is its one-row case). A row is the same bits in a batch as alone
        (float32 products, then NumPy's float64 cos and sin, elementwise: checked for every position up to
        the maximum, tests/targets/pccx/test_gemma3n_quant.py), for ~1/count of the calls."""
        # float32 products as transformers computes them
        freqs = np.arange(first, first + count).astype(F32)[:, None] * self._inv_freq[layer_type][None, :]
        c, s = np.cos(freqs.astype(np.float64)), np.sin(freqs.astype(np.float64))
        h = c.shape[1]
        hp = self.lay.hp if self.lay.heads_padded else h  # the second half's offset (0, hp or h)
        cos, sin = np.zeros((count, self.lay.D)), np.zeros((count, self.lay.D))
        cos[:, :h], cos[:, hp:hp + h], sin[:, :h], sin[:, hp:hp + h] = c, c, -s, s
        return cos, sin

    def _embed(self, token: int) -> np.ndarray:
        return self.ops.host_to_l2(self.host_embed(token))  # one BF16 rounding

    def _per_layer_inputs(self, token: int, x0: np.ndarray) -> list[np.ndarray]:
        cfg, o = self.cfg, self.ops
        p, pp = self.lay.p, self.lay.pp  # layer i's block at i · pp (word padding)
        y = o.host_to_l2(self.host_ple(token))  # host row, one BF16 rounding
        proj = self._gemv("per_layer_model_projection.weight", x0)
        proj = o.cvo_scale(proj, o.const(cfg.hidden_size ** -0.5))
        gamma = self._vec("per_layer_projection_norm.weight")
        out = []
        for i in range(cfg.num_hidden_layers):
            normed = self._rms(proj[i * pp:i * pp + p], gamma)
            out.append(o.cvo_scale(o.cvo_add(normed, y[i * pp:i * pp + p]), o.const(2 ** -0.5)))
        return out

    def _altup_init(self, x0: np.ndarray) -> list[np.ndarray]:
        target = self._magnitude(x0, clamp=False)
        xs = [x0]
        for k in range(self.cfg.altup_num_inputs - 1):
            xs.append(self._match_magnitude(self._gemv(f"altup_projections.{k}.weight", x0), target))
        return xs

    # ---- decoder layer -----------------------------------------------------------------------
    def _router_in(self, i: int, x: np.ndarray) -> np.ndarray:
        r = self._rms(x, self._vec(f"layers.{i}.altup.router_norm.weight"))
        return self._div(r, self.cfg.hidden_size)

    def _router(self, i: int, x: np.ndarray) -> np.ndarray:
        r = self._router_in(i, x)
        return self.ops.cvo_tanh(self._gemv(f"layers.{i}.altup.modality_router.weight", r))

    def _altup_predict(self, xs: list[np.ndarray], c: np.ndarray) -> list[np.ndarray]:
        """pred[j] = xs[j] + Σ_k C[j, k] · xs[k] (SCALE with accm, one rounding per term)."""
        o, n = self.ops, self.cfg.altup_num_inputs
        pred = []
        for j in range(n):
            acc = o.cvo_scale(xs[0], c[j * n])
            for k in range(1, n):
                acc = o.cvo_scale(xs[k], c[j * n + k], dst=acc)
            pred.append(o.cvo_add(acc, xs[j]))
        return pred

    def _altup_correct(self, i: int, pred: list[np.ndarray], innov: np.ndarray, cc: np.ndarray
                       ) -> list[np.ndarray]:
        """corr[j] = pred[j] + cc[j] · innov; the gated per-layer input goes in at the PLE step."""
        o = self.ops
        corr = [o.cvo_scale(innov, cc[j], dst=pred[j]) for j in range(self.cfg.altup_num_inputs)]
        g = corr[self.cfg.altup_active_idx]
        if self.cfg.altup_correct_scale:
            g = o.cvo_mul(g, self._vec(f"layers.{i}.altup.correct_output_scale"))
        return [*corr, g]

    def _layer(self, i: int, xs: list[np.ndarray], pli: np.ndarray) -> list[np.ndarray]:
        cfg, o, a, n = self.cfg, self.ops, self.cfg.altup_active_idx, self.cfg.altup_num_inputs
        pre = f"layers.{i}."
        # AltUp predict: pred[j] = xs[j] + Σ_k C[j, k] · xs[k]
        c = self._gemv(pre + "altup.prediction_coefs.weight", self._router(i, xs[a]))
        pred = self._altup_predict(xs, c)
        active = pred[a]
        x = self._rms(active, self._vec(pre + "input_layernorm.weight"))
        # LAuReL
        lr = self._gemv(pre + "laurel.linear_right.weight", self._gemv(pre + "laurel.linear_left.weight", x))
        laurel = o.cvo_add(x, self._rms(lr, self._vec(pre + "laurel.post_laurel_norm.weight")))
        attn = self._rms(self._attention(i, x), self._vec(pre + "post_attention_layernorm.weight"))
        h = o.cvo_scale(o.cvo_add(o.cvo_add(active, attn), laurel), o.const(2 ** -0.5))
        # MLP
        y = self._rms(h, self._vec(pre + "pre_feedforward_layernorm.weight"))
        gate = self._gemv(pre + "mlp.gate_proj.weight", y)
        z = cfg.sparsity_multiplier(i)
        if z is not None:
            gate = self._gaussian_topk(gate, z)
        up = self._gemv(pre + "mlp.up_proj.weight", y)
        d = self._gemv(pre + "mlp.down_proj.weight", o.cvo_mul(o.cvo_gelu(gate), up))
        activated = o.cvo_add(h, self._rms(d, self._vec(pre + "post_feedforward_layernorm.weight")))
        # AltUp correct: corr[j] = pred[j] + (C'(mod)[j] + 1) · (activated − pred[a])
        mod = self._router(i, activated)
        innov = o.cvo_add(activated, o.cvo_scale(active, F32(-1.0)))
        cc = o.cvo_add(self._gemv(pre + "altup.correction_coefs.weight", mod), F32(1.0))
        *corr, g = self._altup_correct(i, pred, innov, cc)
        # per-layer input, into the shadow streams only
        g = o.cvo_mul(o.cvo_gelu(self._gemv(pre + "per_layer_input_gate.weight", g)), pli)
        g = self._rms(self._gemv(pre + "per_layer_projection.weight", g),
                      self._vec(pre + "post_per_layer_input_norm.weight"))
        return [corr[0], *(o.cvo_add(corr[k], g) for k in range(1, n))]

    def _gaussian_topk(self, gate: np.ndarray, z: float) -> np.ndarray:
        o = self.ops
        n = gate.shape[-1]
        mean = self._div(o.reduce_sum(gate), n)
        centred = o.cvo_add(gate, o.cvo_scale(mean, F32(-1.0)))
        std = o.cvo_sqrt(self._mean_square(centred))
        cutoff = o.cvo_scale(std, o.const(z), dst=mean)
        return o.cvo_relu_bias(gate, cutoff)

    def _rope(self, layer_type: str, pos: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Host table row for this position: BF16 cos and sign-folded sin ([-sin, sin] halves)."""
        c, s = self.host_rope(layer_type, self.pos if pos is None else pos)
        return self.ops.host_to_l2(c), self.ops.host_to_l2(s)

    def _rotate(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        o = self.ops
        return o.cvo_add(o.cvo_mul(x, cos), o.cvo_mul(o.swap_halves(x), sin))

    def _attention(self, i: int, x: np.ndarray) -> np.ndarray:
        cfg = self.cfg
        pre = f"layers.{i}.self_attn."
        cos, sin = self._rope(cfg.layer_types[i])
        qs = self._q_heads(i, self._gemv(pre + "q_proj.weight", x), cos, sin)
        if cfg.kv_source[i] == i:  # producer: compute, normalise, rotate and store this token's K/V
            k = self._gemv(pre + "k_proj.weight", x)
            v = self._gemv(pre + "v_proj.weight", x)
            self.cache.append(i, *self._kv_heads(i, k, v, cos, sin))
        return self._gemv(pre + "o_proj.weight", self._attend_heads(i, qs))

    def _q_heads(self, i: int, q: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> list[np.ndarray]:
        d, D, gq = self.lay.head_dim, self.lay.D, self._vec(f"layers.{i}.self_attn.q_norm.weight")
        return [self._rotate(self._rms(q[h * D:(h + 1) * D], gq, d), cos, sin)
                for h in range(self.cfg.num_attention_heads)]

    def _kv_heads(self, i: int, k: np.ndarray, v: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> tuple:
        """One token's K (normalised, rotated) and V (normalised) heads, through the KV write path."""
        o, d, D, nh = self.ops, self.lay.head_dim, self.lay.D, self.cfg.num_key_value_heads
        gk = self._vec(f"layers.{i}.self_attn.k_norm.weight")
        ks = [self._rotate(self._rms(k[h * D:(h + 1) * D], gk, d), cos, sin) for h in range(nh)]
        vs = [self._rms(v[h * D:(h + 1) * D], None, d) for h in range(nh)]
        return o.kv_quantize(o.stack(ks), self.kv), o.kv_quantize(o.stack(vs), self.kv)

    def _attend_heads(self, i: int, qs: list[np.ndarray], length: int | None = None) -> np.ndarray:
        """Every query head against the KV cache (``length``: positions visible, default all stored);
        the heads' contexts side by side, the o_proj operand."""
        cfg, o = self.cfg, self.ops
        src, win, fmt = cfg.kv_source[i], cfg.window(i), self.kv
        group = cfg.num_attention_heads // cfg.num_key_value_heads
        outs = []
        for h in range(cfg.num_attention_heads):
            kc, kscale, vc, vscale = self.cache.attend(src, h // group, win, length)
            scores = o.gemv(kc, qs[h], w_scale=kscale, fmt=fmt)
            e_max = o.findemax(NEG_INF, scores)
            p = o.cvo_exp(scores, e_max)
            p = o.cvo_scale(p, o.reduce_sum(p), recip=True)
            if vscale is not None:
                p = o.cvo_mul(p, vscale)
            outs.append(o.gemv(np.ascontiguousarray(vc.T), p, fmt=fmt))
        return o.concat(outs)

    # ---- output ------------------------------------------------------------------------------
    def _unembed(self, xs: list[np.ndarray]) -> np.ndarray:
        o, n = self.ops, self.cfg.altup_num_inputs
        target = self._magnitude(xs[0], clamp=False)
        acc = xs[0]
        for k in range(1, n):
            p = self._gemv(f"altup_unembed_projections.{k - 1}.weight", xs[k])
            acc = o.cvo_add(acc, self._match_magnitude(p, target))
        return self._rms(self._div(acc, n), self._vec("norm.weight"))

    def _logits(self, h: np.ndarray) -> np.ndarray:
        o, cap = self.ops, self.cfg.final_logit_softcapping
        logits = self._gemv(LM_HEAD, h)
        if cap is not None:
            parts = []
            for lo in range(0, logits.shape[0], CVO_TILE):
                t = o.cvo_scale(logits[lo:lo + CVO_TILE], o.const(cap), recip=True)
                parts.append(o.cvo_scale(o.cvo_tanh(t), o.const(cap)))
            logits = o.concat(parts)
        return o.l2_to_host(logits)
