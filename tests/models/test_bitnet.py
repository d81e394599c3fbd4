"""BitNet b1.58 reference against transformers' BitNet (AutoBitLinear), and the loaders."""

import bitnet_tiny as tiny
import numpy as np
import pytest

from npukit.errors import ConfigError, ModelError
from npukit.models.bitnet import BitNet, BitNetConfig, act_quant, load_bitnet, load_gguf, load_hf_dir

PROMPT = [5, 17, 42, 99]


def _npukit_steps(m: BitNet, n: int):
    toks, logits = [], []
    m.generate(PROMPT, n, on_step=lambda t, lg: (toks.append(t), logits.append(lg.copy())))
    return toks, logits


@pytest.mark.hf
@pytest.mark.slow
def test_golden_matches_transformers_online_bf16(tmp_path):
    c = tiny.config("online")
    path = tiny.write_online(tmp_path / "hf", c, tiny.float_weights(c))
    hf_toks, hf_logits = tiny.hf_greedy(path, PROMPT, 24)
    toks, logits = _npukit_steps(load_bitnet(path, mode="golden"), 24)
    assert toks == hf_toks
    assert len(set(toks)) > 3  # the run is not a trivial repetition
    for a, b in zip(logits, hf_logits, strict=True):
        assert np.abs(a - b).max() < 1e-3


@pytest.mark.hf
@pytest.mark.slow
def test_golden_matches_transformers_offline_packed(tmp_path):
    c = tiny.config("offline")
    sd, tern = tiny.ternary_weights(c)
    path = tiny.write_offline(tmp_path / "hf", c, sd, tern)
    hf_toks, hf_logits = tiny.hf_greedy(path, PROMPT, 20)
    toks, logits = _npukit_steps(load_bitnet(path, mode="golden"), 20)
    assert toks == hf_toks
    assert max(np.abs(a - b).max() for a, b in zip(logits, hf_logits, strict=True)) < 1e-3


def test_golden_projection_matches_hand_arithmetic(tmp_path):
    c = tiny.config("online")
    m = load_bitnet(tiny.write_online(tmp_path / "hf", c, tiny.float_weights(c), bf16=False), mode="golden")
    lin = m.w.layers[0].linears["up_proj"]
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    q, a = act_quant(x)
    y = m.linear(0, lin, x)
    for r in range(2):  # AutoBitLinear: fake-quantized x times the dequantized ternary weight
        for o in (0, 7, 127):
            acc = sum(int(q[r, k]) * int(lin.t[o, k]) for k in range(64))
            assert abs(float(y[r, o]) - acc / (float(a[r, 0]) * float(lin.scale))) < 1e-5 * max(1, abs(acc))
    # the integer datapath departs from golden only by its fixed-point glue
    qm = BitNet(m.cfg, m.w, mode="quant")
    lg, lq = m.forward(PROMPT, m.new_cache()), qm.forward(PROMPT, qm.new_cache())
    assert np.abs(lg - lq).max() < 0.05 * np.abs(lg).max()


@pytest.mark.parametrize("kind", ["TQ1_0", "TQ2_0"])
@pytest.mark.parametrize("mode", ["golden", "quant"])
def test_gguf_ternary_equals_safetensors(tmp_path, kind, mode):
    c = tiny.config("offline", hidden_size=256, intermediate_size=512, head_dim=64)
    sd, tern = tiny.ternary_weights(c, seed=3)
    st = load_bitnet(tiny.write_offline(tmp_path / "hf", c, sd, tern), mode=mode)
    gg = load_bitnet(tiny.write_gguf(tmp_path / "m.gguf", c, sd, tern, kind), mode=mode)
    for name in ("q_proj", "down_proj"):
        assert np.array_equal(st.w.layers[1].linears[name].t, gg.w.layers[1].linears[name].t)
    la = st.forward(PROMPT, st.new_cache())
    lb = gg.forward(PROMPT, gg.new_cache())
    assert np.array_equal(la, lb)


def test_preset_with_synthetic_weights():
    m = load_bitnet("bitnet-b1.58-2b-4t", mode="quant", overrides=dict(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16))
    assert m.cfg.rope_theta == 500000.0 and m.cfg.kv_groups == 2
    toks = m.generate([1, 2, 3], 12)
    assert len(toks) == 12 and all(0 <= t < 300 for t in toks)


def test_config_and_load_errors(tmp_path):
    with pytest.raises(ConfigError, match="relu2"):
        BitNetConfig.from_hf(dict(tiny.config(), hidden_act="silu"))
    with pytest.raises(ConfigError, match="autobitlinear"):
        BitNetConfig.from_hf(dict(tiny.config(), quantization_config={"linear_class": "bitlinear"}))
    with pytest.raises(ConfigError, match="missing"):
        BitNetConfig.from_hf({"model_type": "bitnet"})
    with pytest.raises(ModelError, match=r"config\.json"):
        load_hf_dir(tmp_path)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUX" + bytes(20))
    with pytest.raises(ModelError, match="magic"):
        load_gguf(bad)
    with pytest.raises(ModelError, match="not a model"):
        load_bitnet("no-such-model")
    c = tiny.config()
    m = load_bitnet(tiny.write_online(tmp_path / "hf", c, tiny.float_weights(c)))
    with pytest.raises(ModelError, match="out of range"):
        m.forward([256], m.new_cache())


@pytest.mark.hf
def test_gguf_file_brings_its_tokenizer_and_eos(tmp_path):
    """A BitNet GGUF whose metadata holds a byte-level tokenizer (token id = byte value, spelled in
    GPT-2's byte alphabet as transformers spells it) loads with that tokenizer and its EOS id."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    from npukit.models.loading import load_model

    spelling = bytes_to_unicode()
    tokens = [spelling[b] for b in range(256)]

    def tokenizer_kv(w):
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
        w.add_token_types([1] * 256)
        w.add_token_scores([0.0] * 256)  # no merges (an empty list is not written): derived, none
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)

    c = tiny.config("offline", hidden_size=256, intermediate_size=512, head_dim=64)
    sd, tern = tiny.ternary_weights(c, seed=3)
    m = load_model(tiny.write_gguf(tmp_path / "m.gguf", c, sd, tern, "TQ2_0", tokenizer_kv))
    text = "hi, caf\u00e9!\n"
    assert m.tokenizer.encode(text).ids == list(text.encode("utf-8"))
    assert m.tokenizer.decode(list(text.encode("utf-8"))) == text
    assert m.eos_token_ids == (2,) and m.config.bos_token_id == 1
