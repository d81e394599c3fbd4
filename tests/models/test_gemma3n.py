"""Gemma 3n float reference against transformers (the independent oracle) on tiny random models."""

import json

import numpy as np
import pytest
import torch
from gemma3n_tiny import TINY, cached_dir, cached_greedy, cached_model, hf_config, hf_model, save_hf

from npukit.errors import ConfigError, ModelError
from npukit.models.gemma3n import (
    Gemma3nConfig,
    Gemma3nReference,
    Gemma3nWeights,
    expected_shapes,
    parameter_count,
    synthetic_weights,
)
from npukit.models.gemma3n.weights import DictSource
from npukit.models.loading import load_model
from npukit.models.presets import model_preset

pytestmark = pytest.mark.hf  # transformers / safetensors are the oracles

PROMPT = (5, 7, 9, 11, 2, 3, 4, 50, 60, 70)
STEPS = 24


def _run_ref(ref: Gemma3nReference, prompt, forced):
    """Prefill then one step per forced token; the logits before each forced token."""
    out = [ref.prefill(list(prompt))]
    out += [ref.step(t) for t in forced[:-1]]
    return np.stack(out)


def test_greedy_run_matches_transformers_every_step():
    toks, hf_logits = cached_greedy(0, PROMPT, STEPS)
    model = load_model(cached_dir(0))
    assert model.family == "gemma3n" and model.origin == "checkpoint"
    ref = Gemma3nReference(model.weights)
    ours = _run_ref(ref, PROMPT, toks)
    assert ref.pos == len(PROMPT) + STEPS - 1 > 2 * TINY["sliding_window"]
    np.testing.assert_allclose(ours, hf_logits, atol=1e-4, rtol=0)
    assert list(ours.argmax(axis=1)) == toks
    assert np.abs(hf_logits).max() > 1.0  # logits are not trivially small


def test_full_sequence_forward_matches_transformers():
    m = cached_model(0)
    ids = list(np.random.default_rng(3).integers(0, TINY["vocab_size"], 30))
    with torch.no_grad():
        want = m(input_ids=torch.tensor([ids])).logits[0].numpy()
    ref = Gemma3nReference(load_model(cached_dir(0)).weights)
    got = ref.forward(ids, all_logits=True)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    # chunked prefill (two pieces) agrees with the single pass at the last position
    ref.reset()
    ref.forward(ids[:17])
    np.testing.assert_allclose(ref.forward(ids[17:])[-1], want[-1], atol=1e-4, rtol=0)


def test_correct_output_scale_matters():
    """The per-layer-input path is live: zeroing correct_output_scale changes the logits."""
    w = load_model(cached_dir(0)).weights
    tensors = {n: np.array(w.get(n)) for n in w.shapes}
    base = Gemma3nReference(Gemma3nWeights(w.config, DictSource(tensors))).prefill(list(PROMPT))
    for i in range(w.config.num_hidden_layers):
        tensors[f"layers.{i}.altup.correct_output_scale"][:] = 0
    zeroed = Gemma3nReference(Gemma3nWeights(w.config, DictSource(tensors))).prefill(list(PROMPT))
    assert np.abs(base - zeroed).max() > 1e-2


def test_variant_configs_match_transformers(tmp_path):
    """No KV sharing, another softcap, a different active AltUp stream, untied lm_head, all-sparse layers."""
    over = dict(num_kv_shared_layers=0, final_logit_softcapping=50.0, altup_active_idx=1,
                tie_word_embeddings=False, activation_sparsity_pattern=[0.9] * 8,
                rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 777.0},
                                 "sliding_attention": {"rope_type": "default", "rope_theta": 33.0}})
    m = hf_model(5, **over)
    d = save_hf(m, tmp_path / "m")
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9]
    with torch.no_grad():
        hf32 = m(input_ids=torch.tensor([ids])).logits[0].numpy()
        exact = m.double()(input_ids=torch.tensor([ids])).logits[0].numpy()
    model = load_model(d)
    assert model.config.rope_theta == {"full_attention": 777.0, "sliding_attention": 33.0}
    assert not model.config.tie_word_embeddings
    got = Gemma3nReference(model.weights).forward(ids, all_logits=True)
    # Sparse layers (mean + k·std cut-offs over the FFN width) magnify float32 rounding: two float32
    # runs that sum in different orders (transformers on an AVX2 AMD host against ours) differed by
    # 2.5e-4 here, so the oracle is transformers in float64, and ours may be off it by no more than
    # twice what transformers' own float32 run is (1.1e-4 against 1.4e-4 on a Zen 3 host).
    hf_err, our_err = np.abs(hf32 - exact).max(), np.abs(got - exact).max()
    assert hf_err < 1e-3, f"transformers float32 is {hf_err:.2e} off its float64 run"
    assert our_err <= 2 * hf_err + 1e-5, f"ours {our_err:.2e} off float64, transformers float32 {hf_err:.2e}"


def test_streamed_plan_and_fp16_kv_agree():
    toks, hf_logits = cached_greedy(0, PROMPT, STEPS)
    w = load_model(cached_dir(0)).weights
    streamed = Gemma3nReference(w, plan="streamed")
    assert streamed.plan == "streamed"
    np.testing.assert_allclose(_run_ref(streamed, PROMPT, toks), hf_logits, atol=1e-4, rtol=0)
    half = _run_ref(Gemma3nReference(w, kv="fp16"), PROMPT, toks)
    err = np.abs(half - hf_logits).max()
    assert 0 < err < 0.05  # fp16 rounding of K/V is visible but small


def test_memory_plan_refuses_rather_than_swapping():
    cfg = Gemma3nConfig.from_hf(model_preset("gemma3n-e4b"))
    w = synthetic_weights(cfg)
    assert Gemma3nReference(w, budget_bytes=64 << 30).plan == "resident"
    assert Gemma3nReference(w, budget_bytes=24 << 30).plan == "streamed"
    with pytest.raises(ModelError, match="GiB available"):
        Gemma3nReference(w, budget_bytes=256 << 20)


def test_out_of_vocab_ids_raise():
    ref = Gemma3nReference(load_model(cached_dir(0)).weights)
    with pytest.raises(ModelError, match="out of range"):
        ref.prefill([1, TINY["vocab_size"]])
    with pytest.raises(ModelError, match="out of range"):
        ref.prefill([-1])


# ---- config and names -------------------------------------------------------------------

def test_shapes_and_names_match_transformers_e2b():
    """Our canonical tensor list equals transformers' own parameters (meta device, no memory)."""
    from transformers import Gemma3nTextConfig, Gemma3nTextModel

    raw = model_preset("gemma3n-e2b")
    with torch.device("meta"):
        hf = Gemma3nTextModel(Gemma3nTextConfig(**{k: v for k, v in raw.items() if k != "architectures"}))
    theirs = {n: tuple(p.shape) for n, p in hf.named_parameters()}
    cfg = Gemma3nConfig.from_hf(raw)
    assert expected_shapes(cfg) == theirs
    assert parameter_count(cfg) == sum(p.numel() for p in hf.parameters())
    modes = hf.config.kv_sharing_modes
    for i, src in enumerate(cfg.kv_source):
        assert (modes[i] == "reuse") == (src != i)
        if src != i:
            assert modes[src] == "store" and cfg.layer_types[src] == cfg.layer_types[i]


def test_config_forms_and_defaults():
    saved = json.loads((cached_dir(0) / "config.json").read_text())
    a = Gemma3nConfig.from_hf(saved)
    legacy = {k: v for k, v in saved.items() if k != "rope_parameters"}
    legacy |= {"rope_theta": TINY["rope_theta"], "rope_local_base_freq": TINY["rope_local_base_freq"]}
    assert Gemma3nConfig.from_hf(legacy) == a
    wrapped = {"model_type": "gemma3n", "architectures": ["Gemma3nForConditionalGeneration"],
               "text_config": saved, "vision_config": {"model_type": "gemma3n_vision"}}
    assert Gemma3nConfig.from_hf(wrapped) == a
    hf = hf_config()
    assert a.sparsity_multiplier(0) == pytest.approx(1.6448536, abs=1e-7)
    assert a.sparsity_multiplier(2) is None
    assert a.layer_types == tuple(hf.layer_types)
    # an almost empty config takes transformers' defaults (E4B)
    e4b = Gemma3nConfig.from_hf({"model_type": "gemma3n_text"})
    assert e4b == Gemma3nConfig.from_hf(model_preset("gemma3n-e4b"))
    assert Gemma3nConfig.from_hf(e4b.to_dict()) == e4b


@pytest.mark.parametrize("field, value", [
    ("hidden_activation", "silu"),
    ("attention_bias", True),
    ("layer_types", ["chunked_attention"] * 8),
    ("rope_parameters", {"full_attention": {"rope_type": "yarn", "rope_theta": 1.0}}),
    ("num_kv_shared_layers", 8),
    ("intermediate_size", [4, 4]),
    ("hidden_size", 0),
])
def test_unsupported_configs_name_the_field(field, value):
    saved = json.loads((cached_dir(0) / "config.json").read_text())
    saved[field] = value
    with pytest.raises(ConfigError, match=field):
        Gemma3nConfig.from_hf(saved)


def test_not_gemma3n_is_rejected():
    with pytest.raises(ConfigError, match="model_type"):
        Gemma3nConfig.from_hf({"model_type": "llama"})


def test_shape_mismatch_names_tensor():
    w = load_model(cached_dir(0)).weights
    tensors = {n: np.array(w.get(n)) for n in w.shapes}
    tensors["layers.2.mlp.up_proj.weight"] = tensors["layers.2.mlp.up_proj.weight"][:, :-1]
    with pytest.raises(ModelError, match=r"layers\.2\.mlp\.up_proj\.weight.*shape"):
        Gemma3nWeights(w.config, DictSource(tensors))
    del tensors["norm.weight"]
    with pytest.raises(ModelError, match=r"missing tensor 'norm\.weight'"):
        Gemma3nWeights(w.config, DictSource(tensors))
