"""Shape presets: Hugging Face ``config.json`` dictionaries for the models npukit targets.

Each preset is the exact dictionary a Hugging Face checkpoint of that model ships (text part
only), so the same code path parses a preset and a real model directory. Sources:
Gemma 3n — transformers ``Gemma3nTextConfig`` defaults (E4B) and the E2B hub config;
BitNet b1.58 2B-4T — the hub ``config.json`` of ``microsoft/bitnet-b1.58-2B-4T``.
Presets carry no weights; loaders fill them with deterministic synthetic values.
"""

from __future__ import annotations

import copy
from typing import Any

from npukit.errors import ConfigError
from npukit.models.gemma3n.config import HF_TEXT_DEFAULTS


def _gemma3n(num_layers: int, intermediate: int, kv_shared: int) -> dict[str, Any]:
    """transformers' defaults (E4B text) with a model's depth, FFN width, KV sharing and the fields a
    hub config.json spells out."""
    return {
        "architectures": ["Gemma3nForCausalLM"],
        "model_type": "gemma3n_text",
        **HF_TEXT_DEFAULTS,
        "intermediate_size": [intermediate] * num_layers,
        "num_hidden_layers": num_layers,
        "layer_types": [
            "full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(num_layers)
        ],
        "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10_000.0,
        "num_kv_shared_layers": kv_shared,
        "activation_sparsity_pattern": [0.95] * 10 + [0.0] * (num_layers - 10),
    }


_PRESETS: dict[str, dict[str, Any]] = {
    "gemma3n-e4b": _gemma3n(num_layers=35, intermediate=16384, kv_shared=15),
    "gemma3n-e2b": _gemma3n(num_layers=30, intermediate=8192, kv_shared=10),
    "bitnet-b1.58-2b-4t": {
        "architectures": ["BitNetForCausalLM"],
        "model_type": "bitnet",
        "vocab_size": 128256,
        "hidden_size": 2560,
        "intermediate_size": 6912,
        "num_hidden_layers": 30,
        "num_attention_heads": 20,
        "num_key_value_heads": 5,
        "head_dim": 128,
        "hidden_act": "relu2",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "quantization_config": {
            "quant_method": "bitnet",
            "linear_class": "autobitlinear",
            "quantization_mode": "offline",
        },
    },
    # the BitNet architecture at toy size (synthetic weights): quick runs such as golden vectors for RTL
    "bitnet-tiny": {
        "architectures": ["BitNetForCausalLM"],
        "model_type": "bitnet",
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "hidden_act": "relu2",
        "max_position_embeddings": 128,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "quantization_config": {
            "quant_method": "bitnet",
            "linear_class": "autobitlinear",
            "quantization_mode": "offline",
        },
    },
}


def model_preset_names() -> list[str]:
    return sorted(_PRESETS)


def model_preset(name: str) -> dict[str, Any]:
    """A fresh copy of a preset's config dictionary."""
    try:
        return copy.deepcopy(_PRESETS[name])
    except KeyError:
        raise ConfigError(
            f"unknown model preset {name!r}; known: {', '.join(model_preset_names())}"
        ) from None
