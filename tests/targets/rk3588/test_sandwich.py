"""The sandwich on a SigLIP-shaped encoder whose activations spike (synthetic weights, SmolVLM shapes)."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.models.encoder import load_encoder, synthetic_dir
from npukit.targets.rk3588.compile import CompileOptions
from npukit.targets.rk3588.runner import calibration_inputs, cosine, encode, synthetic_images


@pytest.fixture(scope="module")
def spiky(tmp_path_factory):
    root = tmp_path_factory.mktemp("enc")
    return load_encoder(synthetic_dir("smolvlm-siglip-base-512", layers=2, image_size=96, spikes=300.0,
                                      root=root))


@pytest.fixture(scope="module")
def hf_hidden(spiky):
    import torch
    from transformers import SiglipVisionModel

    model = SiglipVisionModel.from_pretrained(str(spiky.path)).eval()
    img = synthetic_images(spiky, 1)[0]
    with torch.no_grad():
        h = model(pixel_values=torch.tensor(img)[None]).last_hidden_state[0].numpy()
    return img, h


@pytest.mark.slow
def test_collapse_without_sandwich_and_recovery_with_it(spiky, hf_hidden, hw):
    img, ref = hf_hidden
    x = spiky.embed_patches(img)
    off = encode(spiky, [x], hw, CompileOptions(sandwich=False))
    on = encode(spiky, [x], hw, CompileOptions())
    tok_off = [cosine(a, b) for a, b in zip(off.hidden[0], ref, strict=True)]
    tok_on = [cosine(a, b) for a, b in zip(on.hidden[0], ref, strict=True)]
    assert np.mean(tok_off) < 0.5  # the seed's "cosine 0.02": LayerNorm variance overflowed to inf
    assert min(tok_on) >= 0.999
    assert on.plan.sites and all(s.exp < 0 for s in on.plan.sites)
    assert all(s.node.endswith(("ln1", "ln2", "post_layernorm")) for s in on.plan.sites)


def test_applied_only_where_needed(tmp_path, hw):
    calm = load_encoder(synthetic_dir("smolvlm-siglip-base-512", layers=1, image_size=64, root=tmp_path))
    from npukit.targets.rk3588.compile import compile_graph
    from npukit.targets.rk3588.graph import build_graph

    g = build_graph(calm, calm.config.seq_len)
    plan = compile_graph(g, hw, CompileOptions(), calibration_inputs(calm))
    assert plan.sites == [] and not any(n.op == "scale" for n in plan.graph.nodes)
