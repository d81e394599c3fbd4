"""ternfpga's on-fabric glue units and the host's integer glue, bit-exact, with FSM cycle counts.

Fixed-point contracts (refs/ternary.md §1.5; ternfpga ``rtl/attention_unit.sv``,
``rtl/ffn_glue_unit.sv``, ``soc/firmware/gen_glue_luts.py``):

* attention unit — int16 q, K, V; ``s_j = Σ_d q_d·k_jd`` (48-bit); ``idx_j = min((max s − s_j) >>
  shift, 4095)``; ``e_j = EXP[idx_j]`` with ``EXP[i] = clip(round(2^15·exp(−0.01·i)), 0, 32767)``
  (entry 0 would be 32768 and is clipped); outputs ``num_d = Σ_j e_j·v_jd`` and ``sum_e = Σ_j e_j``;
  the host divides ``ctx_d = num_d // sum_e`` (floor). The softmax temperature is the power-of-two
  ``shift`` only.
* FFN-glue unit — ``N_i = relu(g_i)²·u_i·w_i`` (88-bit), ``M = max(max|N|, 1)``,
  ``R = bitlen(M) + 24``, one restoring divide ``recip = (127 << R) // M``, then per channel
  ``h_i = sign(N_i)·min((|N_i|·recip + 2^(R−1)) >> R, 127)``. Every dequant scale and the RMSNorm
  normalizer cancel in ``127·N_i / max|N|``, so the unit needs only integer inputs.
* host RMSNorm (before requant) — ``h = (x·w_q15) >> 15``, ``x_q = trunc(127·h / max|h|)``;
  host RoPE — Q15 cos/sin tables, ``o_i = (a·c − b·s) >> 15``, ``o_{i+D/2} = (b·c + a·s) >> 15``.

Cycle counts are the FSMs' own counters, derived state by state from the RTL (see
`attention_cycles`, `ffn_glue_cycles`); they reproduce the on-board measurements exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npukit.errors import FormatError

EXP_N = 4096
EXP_LSB = 0.01  # one table step = 0.01 of a logit: the table covers drops of 0..40.95


def exp_table() -> np.ndarray:
    """The 4096-entry Q15 exp table; entry 0 (2^15) clips to 32767 to fit int16."""
    i = np.arange(EXP_N, dtype=np.float64)
    return np.clip(np.rint(np.exp(-EXP_LSB * i) * 32768.0), 0, 32767).astype(np.int64)


_EXP = exp_table()


# -- cycle models (derived from the RTL state machines) -----------------------------------------------
@dataclass(frozen=True)
class AttentionTiming:
    """attention_unit FSM: SCORE streams T·D MACs then drains its 2-register read/MAC pipe; EXP runs
    T table look-ups through a 3-stage pipe (read score, index+LUT, accumulate) and waits for it to
    empty; AV streams T·D MACs + 2; FIN is one cycle."""

    mac_drain: int = 2
    exp_pipe: int = 3
    fin: int = 1

    def cycles(self, T: int, D: int) -> int:
        return (T * D + self.mac_drain) + (T + self.exp_pipe) + (T * D + self.mac_drain) + self.fin


@dataclass(frozen=True)
class FFNGlueTiming:
    """ffn_glue_unit FSM: each of the two passes issues F reads, then waits for the 1-cycle BRAM read
    and the 8 compute stages to drain, plus the cycle that sees the pipe empty; between them a
    restoring divider retires one quotient bit per cycle over its 128-bit width, plus a load cycle;
    FIN is one cycle."""

    bram_read: int = 1
    pipe_stages: int = 8
    detect: int = 1
    divider_bits: int = 128
    fin: int = 1

    def cycles(self, F: int) -> int:
        per_pass = F + self.bram_read + self.pipe_stages + self.detect
        return 2 * per_pass + (self.divider_bits + 1) + self.fin


def attention_cycles(T: int, D: int, timing: AttentionTiming = AttentionTiming()) -> int:
    return timing.cycles(T, D)


def ffn_glue_cycles(F: int, timing: FFNGlueTiming = FFNGlueTiming()) -> int:
    return timing.cycles(F)


# -- attention unit ---------------------------------------------------------------------------------
def _check_int(a: np.ndarray, bits: int, what: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in "iu":
        raise FormatError(f"{what}: expected an integer array, got {a.dtype}")
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if a.size and (int(a.min()) < lo or int(a.max()) > hi):
        raise FormatError(f"{what}: values exceed signed {bits}-bit range")
    return a.astype(np.int64)


def attention_unit(q: np.ndarray, k: np.ndarray, v: np.ndarray, score_shift: int,
                   t_max: int = 128) -> tuple[np.ndarray, int, int]:
    """One query against T cached keys/values. Returns (num[D] int64, sum_e, cycles)."""
    q = _check_int(q, 16, "attention_unit q")
    k = _check_int(k, 16, "attention_unit k")
    v = _check_int(v, 16, "attention_unit v")
    if q.ndim != 1 or k.ndim != 2 or k.shape != v.shape or k.shape[1] != q.shape[0]:
        raise FormatError(f"attention_unit: q {q.shape}, k {k.shape}, v {v.shape} do not agree")
    T, D = k.shape
    if not 1 <= T <= t_max:
        raise FormatError(f"attention_unit: {T} keys, the unit holds 1..{t_max}")
    if not 0 <= score_shift < 64:
        raise FormatError(f"attention_unit: score_shift {score_shift} is not a 6-bit value")
    s = k @ q  # |s| < 2^37: exact in int64, within the unit's 48-bit accumulator
    idx = np.minimum((s.max() - s) >> score_shift, EXP_N - 1)
    e = _EXP[idx]
    num = e @ v
    return num, int(e.sum()), attention_cycles(T, D)


def attention_context(num: np.ndarray, sum_e: int) -> np.ndarray:
    """The host's division step (Python floor division, as ternfpga's oracle)."""
    return np.asarray(num, dtype=np.int64) // int(sum_e)


def score_shift_for(q_step: float, k_step: float, head_dim: int) -> int:
    """The host's choice of the power-of-two temperature for int16 q = x/q_step, k = x/k_step.

    A logit is ``s·q_step·k_step/√D`` and one table step is 0.01 of a logit, i.e. a score drop of
    ``0.01·√D/(q_step·k_step)``; ternfpga rounds its log2 to the nearest integer (so the effective
    temperature is off by up to √2), clamped to the 6-bit CSR.
    """
    val = 0.01 * np.sqrt(head_dim) / (q_step * k_step)
    return int(np.clip(np.rint(np.log2(val)), 0, 63))


# -- FFN glue unit ----------------------------------------------------------------------------------
def ffn_glue_unit(gate: np.ndarray, up: np.ndarray, w_q: np.ndarray) -> tuple[np.ndarray, int, int]:
    """relu(gate)²·up·w_q and int8 requant with one reciprocal. Returns (h_q int8, max|N|, cycles)."""
    g = _check_int(gate, 32, "ffn_glue gate")
    u = _check_int(up, 32, "ffn_glue up")
    w = _check_int(w_q, 16, "ffn_glue w_q")
    if not (g.shape == u.shape == w.shape) or g.ndim != 1:
        raise FormatError(f"ffn_glue: gate {g.shape}, up {u.shape}, w {w.shape} must be equal 1-D")
    # the RTL's operand registers: relu(gate) 21 bits unsigned, up 22 bits signed
    if g.size and (int(g.max()) >= 1 << 21 or int(np.abs(u).max()) >= 1 << 21):
        raise FormatError("ffn_glue: gate/up exceed the unit's 21-bit operand width")
    r = np.maximum(g, 0).astype(object)
    n = r * r * u.astype(object) * w.astype(object)  # up to 88 bits: Python integers
    mag = np.abs(n)
    m = max(int(mag.max()) if n.size else 0, 1)
    R = m.bit_length() + 24
    recip = restoring_divide(127 << R, m)
    h = np.minimum((mag * recip + (1 << (R - 1))) >> R, 127)
    hq = np.where(n < 0, -h, h).astype(np.int8)
    return hq, m, ffn_glue_cycles(g.size)


def restoring_divide(n: int, d: int, bits: int = 128) -> int:
    """The unit's restoring divider: one quotient bit per cycle, most significant first."""
    if not 0 < d < 1 << bits or not 0 <= n < 1 << bits:
        raise FormatError(f"restoring divider: operands exceed {bits} bits")
    q = r = 0
    for i in range(bits - 1, -1, -1):
        r = (r << 1) | ((n >> i) & 1)
        if r >= d:
            r -= d
            q |= 1 << i
    return q


def quantize_norm_weight(w: np.ndarray) -> np.ndarray:
    """ternfpga's fixed-point norm weight: round(w·(2^15 − 1)/max|w|) as int16 (scale folds away)."""
    w = np.asarray(w, dtype=np.float64)
    m = float(np.max(np.abs(w))) or 1.0
    return np.rint(w * (32767.0 / m)).astype(np.int16)


# -- host integer glue ------------------------------------------------------------------------------
def rmsnorm_requant(x: np.ndarray, w_q15: np.ndarray) -> np.ndarray:
    """Integer RMSNorm feeding an int8 requant: h = (x·w) >> 15, x_q = trunc(127·h / max|h|)."""
    x = _check_int(x, 32, "rmsnorm x")
    w = _check_int(w_q15, 16, "rmsnorm w")
    h = (x * w) >> 15
    m = max(int(np.abs(h).max()) if h.size else 0, 1)
    p = h * 127
    qt = np.abs(p) // m  # C division truncates toward zero
    return np.where(p < 0, -qt, qt).astype(np.int8)


def rope_tables_q15(head_dim: int, max_pos: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) int16 tables indexed [pos, i] for i < head_dim/2: round(·2^15), clipped to int16."""
    half = head_dim // 2
    inv = theta ** (-2.0 * np.arange(half) / head_dim)
    ang = np.arange(max_pos)[:, None] * inv[None, :]
    c = np.clip(np.rint(np.cos(ang) * 32768.0), -32768, 32767).astype(np.int16)
    s = np.clip(np.rint(np.sin(ang) * 32768.0), -32768, 32767).astype(np.int16)
    return c, s


def rope_q15(x: np.ndarray, pos: int, cos_t: np.ndarray, sin_t: np.ndarray) -> np.ndarray:
    """Rotate-half RoPE on integer x (..., D) with Q15 tables; arithmetic shifts floor."""
    x = _check_int(x, 32, "rope x")
    half = x.shape[-1] // 2
    if not 0 <= pos < cos_t.shape[0] or cos_t.shape[1] != half:
        raise FormatError(f"rope: position {pos} or head_dim {x.shape[-1]} outside the table")
    c, s = cos_t[pos].astype(np.int64), sin_t[pos].astype(np.int64)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([(a * c - b * s) >> 15, (b * c + a * s) >> 15], axis=-1)
