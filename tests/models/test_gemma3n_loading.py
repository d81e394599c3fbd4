"""Loading Gemma 3n from Hugging Face directories (sharded, multimodal key layout, bf16) and presets."""

import json
import resource

import numpy as np
import pytest
import torch
from gemma3n_tiny import TINY, cached_dir, cached_model
from safetensors.torch import save_file

from npukit.errors import ConfigError, ModelError
from npukit.models.gemma3n import Gemma3nReference
from npukit.models.loading import load_model

pytestmark = pytest.mark.hf  # transformers / safetensors are the oracles

IDS = [2, 17, 33, 4, 90, 61, 8, 8, 45, 12, 77, 3, 29, 50]


def _hf_logits(model, ids=IDS):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].numpy()


def _ours(path, ids=IDS):
    return Gemma3nReference(load_model(path).weights).forward(ids, all_logits=True)


def test_sharded_checkpoint(tmp_path):
    m = cached_model(0)
    m.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("*.safetensors"))) > 2
    np.testing.assert_allclose(_ours(tmp_path), _hf_logits(m), atol=1e-4, rtol=0)


def _multimodal_dir(tmp_path, m):
    """The text part of a Gemma3nForConditionalGeneration checkpoint: ``model.language_model.*``
    keys, vision/audio tensors beside them, k/v tensors for KV-shared layers (as the hub files
    carry), the config nested under ``text_config``."""
    sd = {("model.language_model." + k[len("model."):]): v.contiguous()
          for k, v in m.state_dict().items() if k.startswith("model.")}
    sd["model.vision_tower.timm_model.conv_stem.conv.weight"] = torch.zeros(4, 3, 3, 3)
    sd["model.embed_audio.embedding.weight"] = torch.zeros(8, 4)
    n, d = TINY["num_hidden_layers"], TINY["head_dim"]
    for i in range(n - TINY["num_kv_shared_layers"], n):
        pre = f"model.language_model.layers.{i}.self_attn"
        sd[f"{pre}.k_proj.weight"] = torch.zeros(2 * d, TINY["hidden_size"])
        sd[f"{pre}.k_norm.weight"] = torch.zeros(d)
    save_file(sd, tmp_path / "model.safetensors", metadata={"format": "pt"})
    text = json.loads((cached_dir(0) / "config.json").read_text())
    cfg = {"model_type": "gemma3n", "architectures": ["Gemma3nForConditionalGeneration"],
           "text_config": text, "vision_config": {"model_type": "gemma3n_vision"},
           "audio_config": {"model_type": "gemma3n_audio"}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def test_conditional_generation_key_layout(tmp_path):
    m = cached_model(0)
    d = _multimodal_dir(tmp_path, m)
    loaded = load_model(d)
    assert loaded.weights.prefix == "model.language_model."
    np.testing.assert_allclose(_ours(d), _hf_logits(m), atol=1e-4, rtol=0)


def test_transformers_maps_the_multimodal_prefix_too(tmp_path):
    """transformers 5.23 itself loads ``model.language_model.*`` into Gemma3nForCausalLM (the key
    mapping we mirror): the two layouts are the same model."""
    from transformers import Gemma3nForCausalLM

    m = cached_model(0)
    sd = {("model.language_model." + k[len("model."):]): v.contiguous()
          for k, v in m.state_dict().items() if k.startswith("model.")}
    save_file(sd, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "config.json").write_text((cached_dir(0) / "config.json").read_text())
    back = Gemma3nForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    np.testing.assert_array_equal(_hf_logits(back), _hf_logits(m))
    np.testing.assert_allclose(_ours(tmp_path), _hf_logits(m), atol=1e-4, rtol=0)


def test_bf16_checkpoint_is_widened_exactly(tmp_path):
    m = cached_model(0)
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in m.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "config.json").write_text((cached_dir(0) / "config.json").read_text())
    w = load_model(tmp_path).weights
    assert w.source.dtype("model.embed_tokens.weight") == "BF16" and not w.is_mapped("embed_tokens.weight")
    np.testing.assert_array_equal(w.get("layers.1.mlp.up_proj.weight"),
                                  sd["model.layers.1.mlp.up_proj.weight"].float().numpy())
    # oracle: transformers in float32 with the bf16-rounded weights
    from transformers import Gemma3nForCausalLM

    ref = Gemma3nForCausalLM(m.config).eval()
    ref.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    ref.tie_weights()
    np.testing.assert_allclose(_ours(tmp_path), _hf_logits(ref), atol=1e-4, rtol=0)


def test_tokenizer_is_loaded_when_present(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    d = tmp_path / "m"
    d.mkdir()
    for f in cached_dir(0).iterdir():
        (d / f.name).symlink_to(f)
    vocab = {f"w{i}": i for i in range(TINY["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(d / "tokenizer.json"))
    loaded = load_model(d)
    assert loaded.tokenizer.encode("w5 w7").ids == [5, 7]
    (d / "tokenizer.json").unlink()
    (d / "tokenizer.json").write_text("{broken")
    with pytest.raises(ModelError, match="tokenizer"):
        load_model(d)


def test_e4b_preset_is_lazy():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    m = load_model("gemma3n-e4b")
    assert m.origin == "preset" and m.config.num_hidden_layers == 35 and m.tokenizer is None
    w = m.weights
    rows = w.rows("embed_tokens_per_layer.weight", np.array([262143, 7, 7]))
    assert rows.shape == (3, 35 * 256) and np.array_equal(rows[1], rows[2])
    q = w.get("layers.34.self_attn.q_proj.weight")
    assert q.shape == (2048, 2048) and q.dtype == np.float32
    name = "layers.34.self_attn.q_proj.weight"
    np.testing.assert_array_equal(w.rows(name, np.array([1000, 3])), q[[1000, 3]])
    np.testing.assert_array_equal(w.rows(name, slice(511, 1030)), q[511:1030])
    assert 0.01 < q.std() < 0.05 and abs(q.mean()) < 1e-3  # ~1/sqrt(2048) scale
    norm = w.get("layers.0.input_layernorm.weight")
    assert norm.min() > 0.75 and norm.max() < 1.25
    again = load_model("gemma3n-e4b").weights.get("layers.34.self_attn.q_proj.weight")
    np.testing.assert_array_equal(again, q)  # deterministic
    other = load_model("gemma3n-e4b", seed=1).weights.get("layers.34.self_attn.q_proj.weight")
    assert not np.array_equal(other, q)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 400  # nowhere near the 27 GB of float32 weights


def test_load_errors(tmp_path):
    with pytest.raises(ConfigError, match="no model directory or preset"):
        load_model("not-a-model")
    with pytest.raises(ModelError, match=r"config\.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ConfigError, match="model_type 'llama'"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text("[")
    with pytest.raises(ModelError, match="unreadable config"):
        load_model(tmp_path)
