"""BitNet b1.58 ``quant``: the integer reference of ternfpga's whole datapath, in plain NumPy.

Where ternfpga defines an integer path, this module computes it (refs/ternary.md §1.5; ternfpga
``soc/firmware/bench_glue_int.c``, ``models/attn_unit_ref.py``, ``models/ffn_glue_unit_ref.py``):

* host RMSNorm into the int8 requant: ``h = (x·w_q15) >> 15``, ``x_q = trunc(127·h / max|h|)`` (C
  division; the 1/rms factor cancels), ``w_q15 = round(w·32767/max|w|)``;
* projections: int8 activations × ternary weights, exact int32 accumulation;
* RoPE on the int32 q/k accumulators with Q15 cos/sin tables, ``(a·c − b·s) >> 15`` (floor);
* the attention unit: int16 q, K, V; ``s_j = Σ q·k``; ``idx = min((max s − s_j) >> shift, 4095)``;
  ``e = EXP[idx]`` (Q15 table of ``exp(−0.01 i)``, entry 0 clipped to 32767);
  ``num_d = Σ e_j·v_jd``; the host's ``ctx_d = num_d // Σ e`` (floor);
* the FFN-glue unit: ``N = relu(g)²·u·w_q``, ``M = max(max|N|, 1)``, ``R = bitlen(M) + 24``,
  ``recip = (127 << R) // M``, ``h = sign(N)·min((|N|·recip + 2^(R−1)) >> R, 127)``.

What ternfpga leaves to the host and npukit decides (documented in docs/targets/tern.md):

* the residual stream is fixed point, int32 Q15.16 (`RES_FRAC`); the embedding row (float) is
  rounded into it;
* scale bookkeeping is float64 on the host: the real value an int8 requant stands for
  (``max|rmsnorm(x)|/127``, as AutoBitLinear's per-token scale), the weight scale, the dequant of
  projection outputs into the residual, and the per-query int16 steps of q, K, V
  (``max|·|/32767``, as ternfpga's attention oracle); the K/V cache holds real values (float32);
* the softmax temperature: ``"fold"`` (default) picks ``shift = floor(log2(0.01·√D/(qs·ks)))`` and
  widens q's step so that one table step is exactly 0.01 of a logit; ``"pow2"`` is ternfpga's host
  choice, ``shift = round(log2(·))`` with the step left as is (temperature off by up to √2);
* the final RMSNorm and the tied LM head stay float32 on the host (the LM head is a bf16 matrix,
  not ternary; seeds/002 keeps it on the host).

The integer steps are delegated to an ``ops`` object (`RefOps` here) so that a target can execute
them on its own units (``npukit.targets.tern.ops``) and be compared bit for bit.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from npukit.errors import ConfigError, ModelError
from npukit.models.bitnet.norm import rms_norm

F32 = np.float32
RES_FRAC = 16  # residual stream fixed point: int32 with 16 fraction bits
EXP_N = 4096
EXP_LSB = 0.01
Q15 = 15
TEMPERATURES = ("fold", "pow2")


# -- prepared constants ("ROM" contents, built once per model) --------------------------------------
def exp_table_q15() -> np.ndarray:
    """EXP[i] = round(2^15·e^(−0.01 i)), clipped to int16 (entry 0 is 32767)."""
    i = np.arange(EXP_N, dtype=np.float64)
    return np.minimum(np.rint(np.exp(-EXP_LSB * i) * (1 << Q15)), 32767).astype(np.int64)


def norm_weight_q15(w: np.ndarray) -> np.ndarray:
    """ternfpga's fixed-point norm weight: round(w·(2^15 − 1)/max|w|) as int16."""
    w = np.asarray(w, dtype=np.float64)
    m = float(np.abs(w).max()) if w.size else 0.0
    return np.rint(w * (32767.0 / (m or 1.0))).astype(np.int16)


def rope_tables(head_dim: int, n_pos: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """Q15 cos/sin (n_pos, head_dim/2) int16, as ternfpga's gen_glue_luts.py builds them."""
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    ang = np.outer(np.arange(n_pos, dtype=np.float64), inv)
    c = np.clip(np.rint(np.cos(ang) * (1 << Q15)), -32768, 32767).astype(np.int16)
    s = np.clip(np.rint(np.sin(ang) * (1 << Q15)), -32768, 32767).astype(np.int16)
    return c, s


# -- the ops a target may execute -------------------------------------------------------------------
class IntOps(Protocol):
    def matvec(self, layer: int, lin: Any, q: np.ndarray) -> np.ndarray: ...
    def rmsnorm_requant(self, layer: int, name: str, x: np.ndarray, w_q15: np.ndarray) -> np.ndarray: ...
    def rope(self, layer: int, name: str, x: np.ndarray, pos: np.ndarray, cos_t: np.ndarray,
             sin_t: np.ndarray) -> np.ndarray: ...
    def attention(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  shift: int) -> tuple[np.ndarray, np.ndarray]: ...
    def ffn_glue(self, layer: int, g: np.ndarray, u: np.ndarray, w_q: np.ndarray) -> np.ndarray: ...


class RefOps:
    """The integer reference of each step (vectorized over tokens and heads)."""

    def __init__(self) -> None:
        self.exp = exp_table_q15()

    def matvec(self, layer: int, lin: Any, q: np.ndarray) -> np.ndarray:
        return (q.astype(np.int64) @ lin.t.T.astype(np.int64)).astype(np.int32)

    def rmsnorm_requant(self, layer: int, name: str, x: np.ndarray, w_q15: np.ndarray) -> np.ndarray:
        h = (x.astype(np.int64) * w_q15.astype(np.int64)) >> Q15
        m = np.maximum(np.abs(h).max(axis=-1, keepdims=True), 1)
        p = 127 * h
        return (np.sign(p) * (np.abs(p) // m)).astype(np.int8)  # C '/' truncates toward zero

    def rope(self, layer: int, name: str, x: np.ndarray, pos: np.ndarray, cos_t: np.ndarray,
             sin_t: np.ndarray) -> np.ndarray:
        """x (T, heads, D) integers, pos (T,)."""
        half = x.shape[-1] // 2
        c = cos_t[pos].astype(np.int64)[:, None, :]
        s = sin_t[pos].astype(np.int64)[:, None, :]
        a, b = x[..., :half].astype(np.int64), x[..., half:].astype(np.int64)
        return np.concatenate([(a * c - b * s) >> Q15, (b * c + a * s) >> Q15], axis=-1)

    def attention(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  shift: int) -> tuple[np.ndarray, np.ndarray]:
        """One query: q (heads, D), k/v (S, heads, D) int16 (kv heads already repeated).
        Returns (num (heads, D), sum_e (heads,)) int64."""
        s = np.einsum("hd,shd->hs", q.astype(np.int64), k.astype(np.int64))
        idx = np.minimum((s.max(axis=1, keepdims=True) - s) >> shift, EXP_N - 1)
        e = self.exp[idx]
        return np.einsum("hs,shd->hd", e, v.astype(np.int64)), e.sum(axis=1)

    def ffn_glue(self, layer: int, g: np.ndarray, u: np.ndarray, w_q: np.ndarray) -> np.ndarray:
        """g, u (T, F) int32 accumulators, w_q (F,) int16 → h_q (T, F) int8 (88-bit N: Python ints)."""
        out = np.empty(g.shape, np.int8)
        w = w_q.astype(object)
        for t in range(g.shape[0]):
            r = np.maximum(g[t], 0).astype(object)
            n = r * r * u[t].astype(object) * w
            mag = np.abs(n)
            m = max(int(mag.max()), 1)
            R = m.bit_length() + 24
            recip = (127 << R) // m
            h = np.minimum((mag * recip + (1 << (R - 1))) >> R, 127)
            out[t] = np.where(n < 0, -h, h).astype(np.int64)
        return out


# -- host scale bookkeeping (float64) ----------------------------------------------------------------
def _norm_max(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """max|rmsnorm(x)·w| per row: the real value 127 stands for after the integer requant."""
    x = np.asarray(x, dtype=np.float64)
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return np.maximum(np.abs(x * np.asarray(w, np.float64)).max(axis=-1, keepdims=True) / rms, 1e-5)


def _weight_step(lin: Any) -> float:
    return 1.0 / float(lin.scale) if lin.online else float(lin.scale)


def _int16(x: np.ndarray, step: float) -> np.ndarray:
    return np.clip(np.rint(x / step), -32768, 32767).astype(np.int16)


def _step(x: np.ndarray) -> float:
    m = float(np.abs(x).max()) if x.size else 0.0
    return m / 32767.0 if m > 0 else 1.0


def temperature(qs: float, ks: float, head_dim: int, mode: str) -> tuple[int, float]:
    """(score_shift, q step) so that one exp-table step is 0.01 of a logit (``fold``: exactly, by
    widening q's step by < 2×; ``pow2``: ternfpga's rounding of the shift, step unchanged)."""
    val = EXP_LSB * np.sqrt(head_dim) / (qs * ks)
    if mode == "pow2":
        return int(np.clip(np.rint(np.log2(val)), 0, 63)), qs
    shift = int(np.clip(np.floor(np.log2(val)), 0, 63))
    return shift, max(qs, EXP_LSB * np.sqrt(head_dim) / (ks * 2.0**shift))


class IntegerDatapath:
    """The integer forward pass; ``model`` is a `BitNet` (config, weights, observer, KV cache type)."""

    def __init__(self, model: Any, ops: IntOps | None = None, temperature: str = "fold") -> None:
        if temperature not in TEMPERATURES:
            raise ConfigError(f"temperature {temperature!r} is not one of {', '.join(TEMPERATURES)}")
        self.m, self.ops, self.temperature = model, ops or RefOps(), temperature
        c = model.cfg
        self.wq15 = [{n: norm_weight_q15(getattr(lw, n)) for n in
                      ("input_layernorm", "post_attention_layernorm", "attn_sub_norm", "ffn_sub_norm")}
                     for lw in model.w.layers]
        self.cos_t, self.sin_t = rope_tables(c.head_dim, c.max_position_embeddings, c.rope_theta)

    def forward(self, ids: np.ndarray, cache: Any) -> np.ndarray:
        c, w = self.m.cfg, self.m.w
        start = cache.length
        T = ids.size
        if start + T > c.max_position_embeddings:
            raise ModelError(f"position {start + T - 1} beyond the RoPE table "
                             f"(max_position_embeddings {c.max_position_embeddings})")
        pos = np.arange(start, start + T)
        x = np.rint(w.embed[ids].astype(np.float64) * (1 << RES_FRAC)).astype(np.int64)
        for i, lw in enumerate(w.layers):
            x = self._residual(x + self._attention(i, lw, x, cache, pos))
            x = self._residual(x + self._ffn(i, lw, x))
        xf = (x.astype(np.float64) / (1 << RES_FRAC)).astype(F32)
        return (rms_norm(xf, w.norm, c.rms_norm_eps) @ w.lm_head.T).astype(F32)

    # -- pieces -----------------------------------------------------------------------------------
    @staticmethod
    def _residual(x: np.ndarray) -> np.ndarray:
        if x.size and int(np.abs(x).max()) >= 1 << 31:
            raise ModelError("the residual stream overflows int32 Q15.16 fixed point")
        return x

    def _real(self, x: np.ndarray) -> np.ndarray:
        return x.astype(np.float64) / (1 << RES_FRAC)

    def _norm(self, i: int, name: str, x: np.ndarray, w: np.ndarray, real: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
        """Integer requant of x, and the real value one int8 LSB stands for (T, 1)."""
        q = self.ops.rmsnorm_requant(i, name, x, self.wq15[i][name])
        return q, _norm_max(real, w, self.m.cfg.rms_norm_eps) / 127.0

    def _proj(self, i: int, lin: Any, q: np.ndarray) -> np.ndarray:
        if self.m.observer:
            self.m.observer(i, lin.name, q, q)
        acc = np.asarray(self.ops.matvec(i, lin, q))
        if acc.dtype != np.int32 or acc.shape != (q.shape[0], lin.shape[0]):
            raise ModelError(f"matvec for {lin.name} returned {acc.dtype} {acc.shape}")
        return acc

    def _to_residual(self, acc: np.ndarray, lsb: np.ndarray, lin: Any) -> np.ndarray:
        real = acc.astype(np.float64) * lsb * _weight_step(lin)
        return np.rint(real * (1 << RES_FRAC)).astype(np.int64)

    def _attention(self, i: int, lw: Any, x: np.ndarray, cache: Any, pos: np.ndarray) -> np.ndarray:
        c, L = self.m.cfg, lw.linears
        T, D = x.shape[0], c.head_dim
        xq, lsb = self._norm(i, "input_layernorm", x, lw.input_layernorm, self._real(x))
        aq = self._proj(i, L["q_proj"], xq).reshape(T, c.num_attention_heads, D)
        ak = self._proj(i, L["k_proj"], xq).reshape(T, c.num_key_value_heads, D)
        av = self._proj(i, L["v_proj"], xq).reshape(T, c.num_key_value_heads, D)
        # RoPE on the integer accumulators (per-token scales commute with the rotation)
        rq = self.ops.rope(i, "q", aq, pos, self.cos_t, self.sin_t)
        rk = self.ops.rope(i, "k", ak, pos, self.cos_t, self.sin_t)
        q = rq * (lsb * _weight_step(L["q_proj"]))[:, :, None]
        k = (rk * (lsb * _weight_step(L["k_proj"]))[:, :, None]).astype(F32)
        v = (av * (lsb * _weight_step(L["v_proj"]))[:, :, None]).astype(F32)
        cache.k[i] = np.concatenate([cache.k[i], k])
        cache.v[i] = np.concatenate([cache.v[i], v])
        ctx = np.empty((T, c.q_dim), np.int64)
        vstep = np.empty((T, 1))
        for t in range(T):
            S = int(pos[t]) + 1  # causal window: keys 0..pos[t]
            kw = cache.k[i][:S].astype(np.float64)
            vw = cache.v[i][:S].astype(np.float64)
            ks, vs = _step(kw), _step(vw)
            shift, qs = temperature(_step(q[t]), ks, D, self.temperature)
            num, sum_e = self.ops.attention(
                i, _int16(q[t], qs), np.repeat(_int16(kw, ks), c.kv_groups, axis=1),
                np.repeat(_int16(vw, vs), c.kv_groups, axis=1), shift)
            ctx[t] = (np.asarray(num, np.int64) // np.asarray(sum_e, np.int64)[:, None]).reshape(-1)
            vstep[t] = vs
        oq, olsb = self._norm(i, "attn_sub_norm", ctx, lw.attn_sub_norm, ctx * vstep)
        return self._to_residual(self._proj(i, L["o_proj"], oq), olsb, L["o_proj"])

    def _ffn(self, i: int, lw: Any, x: np.ndarray) -> np.ndarray:
        L = lw.linears
        xq, lsb = self._norm(i, "post_attention_layernorm", x, lw.post_attention_layernorm, self._real(x))
        g = self._proj(i, L["gate_proj"], xq)
        u = self._proj(i, L["up_proj"], xq)
        hq = np.asarray(self.ops.ffn_glue(i, g, u, self.wq15[i]["ffn_sub_norm"]))
        if hq.dtype != np.int8 or hq.shape != g.shape:
            raise ModelError(f"ffn_glue returned {hq.dtype} {hq.shape}")
        # the real value of one h_q LSB: max|ffn_sub_norm(relu(g)²·u)| / 127 (host, float64)
        gr = g * (lsb * _weight_step(L["gate_proj"]))
        ur = u * (lsb * _weight_step(L["up_proj"]))
        H = np.maximum(gr, 0.0) ** 2 * ur
        hlsb = _norm_max(H, lw.ffn_sub_norm, self.m.cfg.rms_norm_eps) / 127.0
        return self._to_residual(self._proj(i, L["down_proj"], hq), hlsb, L["down_proj"])
