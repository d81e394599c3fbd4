"""Op tables against hand arithmetic from the published model shapes (refs/pccx_gemma3n.md §5.4-5.5,
refs/ternary.md §1.6)."""

import json

import numpy as np
import pytest

from npukit.errors import ConfigError
from npukit.perf.ops import build_ops


def test_gemma3n_e4b_weights_touched_per_token():
    t = build_ops("gemma3n-e4b")
    d, f, v = 2048, 16384, 262400
    per_layer = 2 * d * d + 3 * d * f + 2 * 64 * d + 2 * 256 * d + 2 * 4 * d  # q,o; FFN; LAuReL; PLE; router
    kv_proj = 20 * 2 * 512 * d  # only the 20 non-shared layers project K and V
    glob = 8960 * d + 6 * d * d + v * d  # PLE projection, AltUp in/out, lm_head
    hand = 35 * per_layer + kv_proj + glob
    assert t.w_elems.sum() == hand
    assert t.w_elems.sum() == pytest.approx(4.486e9, rel=1e-3)  # refs §5.4: ≈ 4 486 M
    assert t.total_params == pytest.approx(6_835_235_568, rel=1e-3)  # refs §5.4 (norms excluded)


@pytest.mark.parametrize(("ctx", "read_mb", "stored_mb"), [(1024, 44.0, 25.2), (8192, 146.8, 83.9),
                                                          (32768, 499.0, 285.0)])
def test_gemma3n_kv_sliding_window_and_sharing(ctx, read_mb, stored_mb):
    # refs §5.5 table, fp16 (2 bytes per element)
    t = build_ops("gemma3n-e4b")
    L = t.l_eff(ctx)[0]
    assert (t.kv_ctx * L).sum() * 2 / 1e6 == pytest.approx(read_mb, rel=6e-3)
    assert (t.kv_store_ctx * L).sum() * 2 / 1e6 == pytest.approx(stored_mb, rel=6e-3)
    # attention MACs: 4096 · L_eff per layer (8 heads × 256 for QK and again for AV)
    leff = [min(ctx, 512) if (i + 1) % 5 else ctx for i in range(35)]
    assert (t.macs_ctx * L).sum() == 4096 * sum(leff)


def test_gemma3n_shared_layers_have_no_kv_projection():
    t = build_ops("gemma3n-e4b")
    assert "L19.k_proj" in t.names and "L20.k_proj" not in t.names
    assert t.kv_write[t.layers >= 20].sum() == 0
    # Gaussian top-k layers 0-9 keep 5 % of up/down rows
    up = [t.names.index(f"L{i}.up_proj") for i in (0, 9, 10)]
    assert t.density[up].tolist() == pytest.approx([0.05, 0.05, 1.0])
    saved = (t.w_elems * (1 - t.density)).sum()
    assert saved == pytest.approx(10 * 2 * 16384 * 2048 * 0.95)  # refs §7.1: −0.638 G


def test_bitnet_layer_weights_match_ternfpga_ledger():
    t = build_ops("bitnet-b1.58-2b-4t")
    layer0 = t.w_elems[t.layers == 0].sum()
    assert layer0 == 2 * 2560**2 + 2 * 2560 * 640 + 3 * 2560 * 6912  # 69.47 M, refs/ternary.md §1.6
    assert t.w_elems[t.names.index("lm_head")] == 128256 * 2560
    assert t.total_params == pytest.approx(2.41e9, rel=2e-3)
    L = t.l_eff(100)[0]
    assert (t.kv_ctx * L).sum() == 30 * 2 * 5 * 128 * 100  # no window: every layer reads all keys
    assert np.isinf(t.cap).all()


def test_config_json_path_and_bad_configs(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
           "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    t = build_ops(tmp_path)
    assert t.family == "llama" and t.n_layers() == 2
    assert t.w_elems.sum() == 2 * (64 * 64 * 2 + 2 * 32 * 64 + 3 * 64 * 128) + 100 * 64
    assert t.total_params == t.w_elems.sum() + 100 * 64  # untied embedding table held too
    with pytest.raises(ConfigError, match="not supported"):
        build_ops({**cfg, "model_type": "t5"})
    with pytest.raises(ConfigError, match="lacks 'vocab_size'"):
        build_ops({k: v for k, v in cfg.items() if k != "vocab_size"})
    with pytest.raises(ConfigError, match="unknown model preset"):
        build_ops("no-such-model")
