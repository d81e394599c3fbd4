"""The integer (quant) datapath: each step against a scalar oracle written from refs/ternary.md §1.5
(Python integers, one element at a time), and how far the whole integer run departs from golden."""

import math

import bitnet_tiny as tiny
import numpy as np
import pytest

from npukit.errors import ConfigError
from npukit.models.bitnet import BitNet, load_bitnet
from npukit.models.bitnet import intpath as ip

PROMPT = [5, 17, 42, 99]


def test_tables_and_norm_weight():
    e = ip.exp_table_q15()
    assert e[0] == 32767 and e[1] == round(32768 * math.exp(-0.01)) and e[4095] == 0
    c, s = ip.rope_tables(16, 70, 500000.0)
    for p, i in ((0, 0), (69, 3), (33, 7)):
        ang = p / 500000.0 ** (2 * i / 16)
        assert c[p, i] == max(-32768, min(32767, round(math.cos(ang) * 32768)))
        assert s[p, i] == max(-32768, min(32767, round(math.sin(ang) * 32768)))
    w = np.array([0.5, -2.0, 1.0], np.float32)
    assert ip.norm_weight_q15(w).tolist() == [round(0.5 * 32767 / 2), -32767, round(32767 / 2)]


def test_rmsnorm_requant_truncates_like_c():
    rng = np.random.default_rng(1)
    x = rng.integers(-(1 << 24), 1 << 24, (3, 50))
    w = rng.integers(-32768, 32768, 50).astype(np.int16)
    got = ip.RefOps().rmsnorm_requant(0, "n", x, w)
    for r in range(3):
        h = [(int(a) * int(b)) >> 15 for a, b in zip(x[r], w, strict=True)]
        m = max(max(abs(v) for v in h), 1)
        assert got[r].tolist() == [int(127 * v / m) for v in h]  # int() truncates toward zero


def test_rope_floor_shifts():
    c, s = ip.rope_tables(8, 10, 10000.0)
    x = np.random.default_rng(2).integers(-(1 << 20), 1 << 20, (2, 3, 8))
    got = ip.RefOps().rope(0, "q", x, np.array([4, 9]), c, s)
    for t, p in enumerate((4, 9)):
        for h in range(3):
            for i in range(4):
                a, b = int(x[t, h, i]), int(x[t, h, i + 4])
                assert got[t, h, i] == (a * int(c[p, i]) - b * int(s[p, i])) >> 15
                assert got[t, h, i + 4] == (b * int(c[p, i]) + a * int(s[p, i])) >> 15


def test_attention_against_scalar_loop():
    rng = np.random.default_rng(3)
    H, S, D, shift = 3, 9, 6, 7
    q = rng.integers(-3000, 3000, (H, D)).astype(np.int16)
    k = rng.integers(-3000, 3000, (S, H, D)).astype(np.int16)
    v = rng.integers(-32768, 32768, (S, H, D)).astype(np.int16)
    num, sum_e = ip.RefOps().attention(0, q, k, v, shift)
    for h in range(H):
        sc = [sum(int(q[h, d]) * int(k[j, h, d]) for d in range(D)) for j in range(S)]
        e = [min(32767, round(32768 * math.exp(-0.01 * min((max(sc) - x) >> shift, 4095)))) for x in sc]
        assert sum_e[h] == sum(e)
        assert num[h].tolist() == [sum(e[j] * int(v[j, h, d]) for j in range(S)) for d in range(D)]


def test_ffn_glue_reciprocal_requant():
    rng = np.random.default_rng(4)
    g = rng.integers(-40000, 40000, (2, 40)).astype(np.int32)
    u = rng.integers(-40000, 40000, (2, 40)).astype(np.int32)
    w = rng.integers(-32767, 32768, 40).astype(np.int16)
    got = ip.RefOps().ffn_glue(0, g, u, w)
    for t in range(2):
        n = [max(int(a), 0) ** 2 * int(b) * int(c) for a, b, c in zip(g[t], u[t], w, strict=True)]
        m = max(max(abs(x) for x in n), 1)
        r = m.bit_length() + 24
        rc = (127 << r) // m
        want = [(1 if x >= 0 else -1) * min((abs(x) * rc + (1 << (r - 1))) >> r, 127) for x in n]
        assert got[t].tolist() == want


def test_temperature_rules():
    qs, ks, D = 1e-4, 2e-4, 64
    val = 0.01 * 8 / (qs * ks)  # one table step in score units
    shift, q2 = ip.temperature(qs, ks, D, "pow2")
    assert shift == round(math.log2(val)) and q2 == qs
    shift, q2 = ip.temperature(qs, ks, D, "fold")
    assert shift == math.floor(math.log2(val)) and qs <= q2 < 2 * qs
    assert q2 * ks * 2**shift / math.sqrt(D) == pytest.approx(0.01)  # exactly 0.01 logit per step
    m = load_bitnet("bitnet-b1.58-2b-4t", overrides=dict(vocab_size=50, hidden_size=32, intermediate_size=64,
                    num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16))
    with pytest.raises(ConfigError, match="temperature"):
        BitNet(m.cfg, m.w, mode="quant", temperature="exact")


@pytest.mark.parametrize(("temp", "min_cos", "min_top1"), [("fold", 0.999, 0.85), ("pow2", 0.99, 0.85)])
def test_integer_run_departure_from_golden(tmp_path, temp, min_cos, min_top1):
    """Teacher-forced on golden's 24 greedy tokens: per-step logit cosine and top-1 agreement."""
    c = tiny.config("online")
    g = load_bitnet(tiny.write_online(tmp_path / "hf", c, tiny.float_weights(c, seed=7)), mode="golden")
    gl: list[np.ndarray] = []
    toks = g.generate(PROMPT, 24, on_step=lambda t, lg: gl.append(lg.copy()))
    q = BitNet(g.cfg, g.w, mode="quant", temperature=temp)
    ql = q.forward(PROMPT + toks, q.new_cache())[len(PROMPT) - 1:len(PROMPT) + 23]
    G = np.stack(gl)
    cos = [float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) for a, b in zip(ql, G, strict=True)]
    top1 = float(np.mean(ql.argmax(1) == G.argmax(1)))
    free = q.generate(PROMPT, 24)
    same = sum(a == b for a, b in zip(free, toks, strict=True))
    print(f"\n{temp}: cosine min {min(cos):.5f} mean {np.mean(cos):.5f}, top-1 {top1:.3f}, "
          f"free-run tokens equal {same}/24")
    assert min(cos) > min_cos and top1 >= min_top1
