"""Activation-sparsity analyser: hand-built activations, and a tiny model's relu² zeros."""

import numpy as np
import pytest

from npukit.errors import ConfigError
from npukit.models.bitnet import BitNet, act_quant, load_bitnet
from npukit.targets.tern.sparsity import LayerSparsity, SparsityAnalyser

TINY = dict(vocab_size=200, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8)


def test_layer_statistics_by_hand():
    lay = LayerSparsity()
    x = np.array([[1, 0, 0, 2],
                  [0, 0, 3, 4],
                  [5, 0, 0, 6]], np.float32)
    lay.add(x)
    assert lay.zero_fraction == 6 / 12
    # channel 1 always zero; 0 and 2 data-dependent; 3 always active
    assert lay.ever_zero.tolist() == [True, True, True, False]
    assert lay.ever_active.tolist() == [True, False, True, True]
    # active sets {0,3},{2,3},{0,3}: Jaccard 1/3 then 1/3
    assert lay.jaccard == pytest.approx([1 / 3, 1 / 3])


def test_tiny_model_relu2_zeros():
    # the float model, as ternfpga measured it (zeros of the down_proj input before the int8 requant)
    m = load_bitnet("bitnet-b1.58-2b-4t", overrides=TINY, mode="golden")
    plain = BitNet(m.cfg, m.w, mode="golden")
    seen = {}

    def spy(layer, name, x, q):  # independent count: relu(gate)·up is zero where gate <= 0 or up == 0
        if name == "gate_proj":
            L = m.w.layers[layer].linears
            g, u = plain.linear(layer, L["gate_proj"], x), plain.linear(layer, L["up_proj"], x)
            seen.setdefault(layer, []).append((g <= 0) | (u == 0))

    an = SparsityAnalyser(m)
    obs = m.observer
    m.observer = lambda *a: (spy(*a), obs(*a))
    an.run([[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11]])
    led = an.ledger("tiny synthetic model")
    for i in range(2):
        z = np.concatenate(seen[i])
        assert led[f"sparsity.zero_fraction.layer{i}"].value == pytest.approx(float(z.mean()))
    assert 0 < led["sparsity.zero_fraction"].value < 1
    assert led["sparsity.zero_fraction"].tier == "measured"
    assert 0 <= led["sparsity.token_jaccard"].value <= 1
    d, z = led["sparsity.data_dependent_channels"].value, led["sparsity.always_zero_channels"].value
    assert 0 <= d <= 1 and d + z <= 1
    assert act_quant(np.zeros((1, 4), np.float32))[0].tolist() == [[0, 0, 0, 0]]  # zeros stay exactly zero


def test_empty_analysis_is_an_error():
    m = load_bitnet("bitnet-b1.58-2b-4t", overrides=TINY)
    with pytest.raises(ConfigError, match="no tokens"):
        SparsityAnalyser(m).ledger("nothing")
