from __future__ import annotations

import numpy as np
import pytest

from npukit.hw import load_hw


@pytest.fixture(scope="session")
def hw():
    return load_hw("rk3588")


@pytest.fixture(scope="session")
def minilm():
    from npukit.targets.rk3588.runner import resolve_model

    return resolve_model("minilm")


@pytest.fixture(scope="session")
def minilm_hf(minilm):
    """transformers fp32 BertModel on the same directory (the independent oracle)."""
    import torch
    from transformers import AutoModel

    torch.set_num_threads(1)
    return AutoModel.from_pretrained(str(minilm.path), dtype=torch.float32).eval()


def hf_sentence_embedding(model, ids: np.ndarray) -> np.ndarray:
    """sentence-transformers' modules on transformers' output: mean pooling, then L2 normalization."""
    import torch

    with torch.no_grad():
        h = model(input_ids=torch.tensor(ids)[None]).last_hidden_state[0].double().numpy()
    v = h.mean(0)
    return v / np.linalg.norm(v)
