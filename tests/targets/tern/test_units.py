"""Fabric units and host integer glue, each against an oracle written here from refs/ternary.md §1.5
(Python integers, one element at a time), plus the FSM cycle counts against ternfpga's board runs."""

import math
from fractions import Fraction

import numpy as np
import pytest

from npukit.errors import FormatError
from npukit.targets.tern import units


def _exp_entry(i: int) -> int:
    return min(32767, max(0, round(math.exp(-0.01 * i) * 32768)))


def test_exp_table():
    t = units.exp_table()
    assert t.shape == (4096,)
    assert t[0] == 32767  # 2^15 would wrap int16: ternfpga's bug, clipped (seeds/002 Phases 5 & 6)
    assert all(int(t[i]) == _exp_entry(i) for i in range(4096))
    assert t[-1] == round(math.exp(-40.95) * 32768)  # 0 — the table covers drops up to 40.95


def _attn_oracle(q, k, v, shift):
    T, D = len(k), len(q)
    s = [sum(int(q[d]) * int(k[j][d]) for d in range(D)) for j in range(T)]
    m = max(s)
    e = [_exp_entry(min((m - sj) >> shift, 4095)) for sj in s]
    num = [sum(e[j] * int(v[j][d]) for j in range(T)) for d in range(D)]
    return num, sum(e)


@pytest.mark.parametrize(("T", "D", "shift", "amp"), [(64, 16, 10, 3000), (7, 8, 0, 20), (128, 4, 20, 32767),
                                                      (1, 12, 5, 100)])
def test_attention_unit_bit_exact(T, D, shift, amp):
    rng = np.random.default_rng(T + D + shift)
    q = rng.integers(-amp, amp + 1, D).astype(np.int16)
    k = rng.integers(-amp, amp + 1, (T, D)).astype(np.int16)
    v = rng.integers(-32768, 32768, (T, D)).astype(np.int16)
    num, sum_e, cycles = units.attention_unit(q, k, v, shift)
    want_num, want_sum = _attn_oracle(q, k, v, shift)
    assert num.tolist() == want_num and sum_e == want_sum
    ctx = units.attention_context(num, sum_e)
    assert ctx.tolist() == [n // want_sum for n in want_num]  # Python floor, as ternfpga's oracle
    assert cycles == 2 * T * D + T + 8


def test_attention_cycles_match_board():
    # seeds/002 Phase 6: "MEASURED attention cycles/query = 16456 (T=64, D=128)"
    assert units.attention_cycles(64, 128) == 16456


def _ffn_oracle(g, u, w):
    n = [max(int(a), 0) ** 2 * int(b) * int(c) for a, b, c in zip(g, u, w, strict=True)]
    m = max(max(abs(x) for x in n), 1)
    r = m.bit_length() + 24
    recip = (127 << r) // m
    out = []
    for x in n:
        h = min((abs(x) * recip + (1 << (r - 1))) >> r, 127)
        out.append(-h if x < 0 else h)
    return out, m


@pytest.mark.parametrize(("F", "gmax"), [(6912, 300_000), (32, 40), (100, 1), (5, 2_000_000)])
def test_ffn_glue_unit_bit_exact(F, gmax):
    rng = np.random.default_rng(F)
    g = rng.integers(-gmax, gmax + 1, F).astype(np.int32)
    u = rng.integers(-gmax, gmax + 1, F).astype(np.int32)
    w = rng.integers(-32767, 32768, F).astype(np.int16)
    hq, m, cycles = units.ffn_glue_unit(g, u, w)
    want, want_m = _ffn_oracle(g, u, w)
    assert hq.dtype == np.int8 and hq.tolist() == want and m == want_m
    assert cycles == 2 * F + 150
    # the reciprocal trick is within one LSB of exact round(127·N/max|N|) (refs/ternary.md §1.5)
    n = [max(int(a), 0) ** 2 * int(b) * int(c) for a, b, c in zip(g, u, w, strict=True)]
    exact = [round(Fraction(127 * x, want_m)) for x in n]
    assert max(abs(a - b) for a, b in zip(want, exact, strict=True)) <= 1


def test_ffn_glue_all_zero_and_cycles_match_board():
    hq, m, _ = units.ffn_glue_unit(np.zeros(8, np.int32), np.ones(8, np.int32), np.ones(8, np.int16))
    assert m == 1 and not hq.any()  # max|N| forced to >= 1
    # seeds/002 Phase 8: "MEASURED ffn-glue cycles/layer = 13974 (F=6912)"
    assert units.ffn_glue_cycles(6912) == 13974


def test_ffn_glue_rejects_operands_wider_than_the_rtl():
    with pytest.raises(FormatError, match="21-bit"):
        units.ffn_glue_unit(np.array([1 << 21], np.int32), np.ones(1, np.int32), np.ones(1, np.int16))


def test_rmsnorm_requant_against_c_semantics():
    rng = np.random.default_rng(3)
    x = rng.integers(-(1 << 20), 1 << 20, 257).astype(np.int32)
    w = rng.integers(-32768, 32768, 257).astype(np.int16)
    got = units.rmsnorm_requant(x, w)
    h = [(int(a) * int(b)) >> 15 for a, b in zip(x, w, strict=True)]
    m = max(abs(v) for v in h)
    want = [int(Fraction(127 * v, m)) for v in h]  # C '/' truncates toward zero
    assert got.tolist() == want


def test_rope_q15_against_scalar_oracle():
    D, theta = 16, 500000.0
    cos_t, sin_t = units.rope_tables_q15(D, 130, theta)
    rng = np.random.default_rng(4)
    x = rng.integers(-30000, 30000, (3, D)).astype(np.int32)
    pos = 97
    got = units.rope_q15(x, pos, cos_t, sin_t)
    for r in range(3):
        for i in range(D // 2):
            ang = pos * theta ** (-2 * i / D)
            c = max(-32768, min(32767, round(math.cos(ang) * 32768)))
            s = max(-32768, min(32767, round(math.sin(ang) * 32768)))
            a, b = int(x[r, i]), int(x[r, i + D // 2])
            assert got[r, i] == (a * c - b * s) >> 15
            assert got[r, i + D // 2] == (b * c + a * s) >> 15
    # departure from float RoPE: Q15 tables + flooring shift stay within 2 LSB per element
    half = D // 2
    ang = pos * theta ** (-2 * np.arange(half) / D)
    a, b = x[:, :half].astype(float), x[:, half:].astype(float)
    ref = np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], axis=1)
    assert np.abs(got - ref).max() <= 2.0


def test_score_shift_rounds_log2():
    # drop per table step = 0.01·√D/(qs·ks): 0.01·√128/(1/64·1/64) = 463.4 -> log2 = 8.86 -> 9
    assert units.score_shift_for(1 / 64, 1 / 64, 128) == 9


def test_attention_input_checks():
    with pytest.raises(FormatError, match="16-bit"):
        units.attention_unit(np.array([40000]), np.zeros((1, 1), np.int64), np.zeros((1, 1), np.int64), 0)
    with pytest.raises(FormatError, match="holds"):
        units.attention_unit(np.zeros(2, np.int16), np.zeros((65, 2), np.int16), np.zeros((65, 2), np.int16),
                             0, t_max=64)
