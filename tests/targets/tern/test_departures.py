"""How far ternfpga's integer glue departs from the float model (numbers quoted in docs/targets/tern.md).

Float side: the golden arithmetic (transformers' RMSNorm, softmax, ActQuant) on the same inputs.
"""

import numpy as np

from npukit.models.bitnet import act_quant, load_bitnet
from npukit.models.bitnet.model import rms_norm
from npukit.targets.tern import units

CFG = dict(vocab_size=200, hidden_size=256, intermediate_size=512, num_hidden_layers=1, num_attention_heads=4,
           num_key_value_heads=2, head_dim=64)


def _cos(a, b):
    a, b = np.ravel(a).astype(float), np.ravel(b).astype(float)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_ffn_glue_unit_vs_float_requant():
    m = load_bitnet("bitnet-b1.58-2b-4t", overrides=CFG, mode="quant", seed=1)
    L = m.w.layers[0]
    x = np.random.default_rng(0).standard_normal((16, 256)).astype(np.float32)
    qx, _ = act_quant(x)
    acc_g = qx.astype(np.int64) @ L.linears["gate_proj"].t.T.astype(np.int64)
    acc_u = qx.astype(np.int64) @ L.linears["up_proj"].t.T.astype(np.int64)
    g = m.linear(0, L.linears["gate_proj"], x)
    u = m.linear(0, L.linears["up_proj"], x)
    r = np.maximum(g, 0)
    want, _ = act_quant(rms_norm(r * r * u, L.ffn_sub_norm, 1e-5))  # golden down_proj input
    wq = units.quantize_norm_weight(L.ffn_sub_norm)
    got = np.stack([units.ffn_glue_unit(acc_g[t].astype(np.int32), acc_u[t].astype(np.int32), wq)[0]
                    for t in range(16)])
    diff = np.abs(got.astype(int) - want.astype(int))
    print(f"\nffn glue: {np.mean(diff == 0):.4%} equal, max {diff.max()} LSB")
    assert diff.max() <= 1 and np.mean(diff == 0) > 0.99  # ternfpga: 99.99% with 16-bit w


def test_attention_unit_vs_float_softmax():
    rng = np.random.default_rng(2)
    T, D = 64, 128
    q, k, v = rng.standard_normal(D), rng.standard_normal((T, D)), rng.standard_normal((T, D))
    s = k @ q / np.sqrt(D)
    p = np.exp(s - s.max())
    ref = (p / p.sum()) @ v
    qs, ks, vs = (np.abs(z).max() / 32767 for z in (q, k, v))  # int16 = float / step
    qi, ki, vi = (np.rint(z / st).astype(np.int16) for z, st in ((q, qs), (k, ks), (v, vs)))
    shift = units.score_shift_for(qs, ks, D)
    num, sum_e, _ = units.attention_unit(qi, ki, vi, shift)
    ctx = units.attention_context(num, sum_e) * vs
    c = _cos(ctx, ref)
    print(f"\nattention: cosine {c:.6f}, max abs err {np.abs(ctx - ref).max():.4f} (shift {shift})")
    assert c > 0.95  # dominated by the power-of-two temperature (off by up to √2); ternfpga: 0.999338


def test_rmsnorm_requant_vs_float():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 2560)).astype(np.float32)
    w = (1 + 0.2 * rng.standard_normal(2560)).astype(np.float32)
    want, _ = act_quant(rms_norm(x, w, 1e-5))
    xi = np.rint(x * 4096).astype(np.int32)  # residual in Q12 fixed point
    got = np.stack([units.rmsnorm_requant(r, units.quantize_norm_weight(w)) for r in xi])
    diff = np.abs(got.astype(int) - want.astype(int))
    print(f"\nrmsnorm: {np.mean(diff == 0):.4%} equal, max {diff.max()} LSB (truncation vs round)")
    assert diff.max() <= 1 and np.mean(diff == 0) > 0.5
