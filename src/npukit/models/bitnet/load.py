"""Loading BitNet b1.58 weights: Hugging Face directories (master weights, online quantization, or
packed uint8 + ``weight_scale``, offline), GGUF files (TQ1_0 / TQ2_0 / I2_S ternary tensors) and
deterministic synthetic weights for a shape preset.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError, FormatError, ModelError
from npukit.formats import ternary as tf
from npukit.models.bitnet.config import BitNetConfig
from npukit.models.bitnet.model import (
    F32,
    LINEARS,
    BitNet,
    BitNetWeights,
    LayerWeights,
    TernaryLinear,
    absmean_ternarize,
)
from npukit.models.gguf import GGUFFile

_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
_NORMS = ("input_layernorm", "post_attention_layernorm", "attn_sub_norm", "ffn_sub_norm")


def _hf_name(i: int, name: str) -> str:
    if name in _ATTN or name == "attn_sub_norm":
        return f"model.layers.{i}.self_attn.{name}"
    if name in LINEARS or name == "ffn_sub_norm":
        return f"model.layers.{i}.mlp.{name}"
    return f"model.layers.{i}.{name}"


def weights_from_tensors(cfg: BitNetConfig, get: Any, has: Any) -> BitNetWeights:
    """Build weights from HF-named tensors. ``get(name) -> np.ndarray`` (float32 for floats, raw
    uint8 for packed projections), ``has(name) -> bool``."""
    layers = []
    for i in range(cfg.num_hidden_layers):
        lins = {}
        for name, (out, _inp) in cfg.linear_shapes().items():
            key = _hf_name(i, name)
            w = get(f"{key}.weight")
            if has(f"{key}.weight_scale"):  # offline: packed uint8 (or unpacked ternary) + multiplier
                scale = F32(np.asarray(get(f"{key}.weight_scale"), dtype=F32).reshape(-1)[0])
                if w.dtype == np.uint8:
                    try:
                        t = tf.unpack_hf_2bit(w, out)
                    except FormatError as exc:
                        raise ModelError(f"{key}.weight: {exc}") from None
                else:
                    t = np.asarray(w)
                    if not np.all(np.isin(t, (-1, 0, 1))):
                        raise ModelError(f"{key}.weight has weight_scale but is not ternary")
                    t = t.astype(np.int8)
                lins[name] = TernaryLinear(name, t, scale, online=False)
            else:
                t, s = absmean_ternarize(w)
                lins[name] = TernaryLinear(name, t, s, online=True)
        norms = {n: np.asarray(get(f"{_hf_name(i, n)}.weight"), dtype=F32) for n in _NORMS}
        layers.append(LayerWeights(lins, **norms))
    embed = np.asarray(get("model.embed_tokens.weight"), dtype=F32)
    if cfg.tie_word_embeddings or not has("lm_head.weight"):
        head = embed
    else:
        head = np.asarray(get("lm_head.weight"), dtype=F32)
    w = BitNetWeights(embed, layers, np.asarray(get("model.norm.weight"), dtype=F32), head)
    w.validate(cfg)
    return w


def load_hf_dir(path: str | Path) -> tuple[BitNetConfig, BitNetWeights]:
    """A Hugging Face BitNet directory: ``config.json`` plus safetensors (sharded or not)."""
    from npukit.models.safetensors import open_checkpoint

    p = Path(path)
    try:
        cfg_dict = json.loads((p / "config.json").read_text())
    except FileNotFoundError:
        raise ModelError(f"{p}: no config.json") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ModelError(f"{p / 'config.json'}: not valid JSON") from None
    cfg = BitNetConfig.from_hf(cfg_dict)
    ck = open_checkpoint(p)
    keys = set(ck.keys())

    def get(name: str) -> np.ndarray:
        if name not in keys:
            raise ModelError(f"{p}: tensor {name!r} missing")
        if ck.dtype(name) in ("U8", "I8"):
            return np.asarray(ck.raw(name))
        return ck.float32(name)

    return cfg, weights_from_tensors(cfg, get, keys.__contains__)


# -- GGUF -------------------------------------------------------------------------------------------
_GGUF_LINEAR = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
                "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
_GGUF_NORM = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
              "attn_sub_norm": "attn_sub_norm", "ffn_sub_norm": "ffn_sub_norm"}


def _ternary_from_gguf(g: GGUFFile, name: str, shape: tuple[int, int]) -> TernaryLinear:
    kind = g.type_name(name)
    raw = g.raw(name)
    try:
        if kind in ("TQ1_0", "TQ2_0"):
            w = tf.from_gguf(raw, kind, shape)
            # BitNet tensors are ternary × one per-tensor scale: every nonzero block's absmax (d) agrees
            d = np.abs(w).reshape(-1, tf.QK_K).max(axis=1)
            nz = d[d > 0]
            if nz.size and not np.all(nz == nz[0]):
                raise ModelError(f"GGUF tensor {name}: blocks carry different scales "
                                 "(not per-tensor ternary)")
            scale = F32(nz[0]) if nz.size else F32(0)
            t = np.sign(w).astype(np.int8)
        elif kind == "I2_S":
            t, s = tf.from_i2s(raw, shape)
            t, scale = t.astype(np.int8), F32(s)
        else:
            raise ModelError(f"GGUF tensor {name} is {kind}; a BitNet projection needs TQ1_0, TQ2_0 or I2_S")
    except FormatError as exc:
        raise ModelError(f"GGUF tensor {name}: {exc}") from None
    return TernaryLinear(name.split(".")[-2], t, scale, online=False)


def load_gguf(path: str | Path) -> tuple[BitNetConfig, BitNetWeights]:
    """A llama.cpp-style BitNet GGUF (arch ``bitnet``; tensor names ``blk.N.attn_q.weight`` …,
    RoPE in the rotate-half (NEOX) order, so q/k rows are not permuted)."""
    g = GGUFFile(path)
    arch = g.meta.get("general.architecture", "bitnet")

    def m(key: str, default: Any = None) -> Any:
        v = g.meta.get(f"{arch}.{key}", default)
        if v is None:
            raise ModelError(f"{path}: GGUF metadata {arch}.{key} missing")
        return v

    emb_shape = g.shape("token_embd.weight")
    heads = int(m("attention.head_count"))
    hidden = int(m("embedding_length"))
    cfg = BitNetConfig.from_hf({
        "vocab_size": emb_shape[0], "hidden_size": hidden,
        "intermediate_size": int(m("feed_forward_length")), "num_hidden_layers": int(m("block_count")),
        "num_attention_heads": heads, "num_key_value_heads": int(m("attention.head_count_kv", heads)),
        "head_dim": int(m("attention.key_length", hidden // heads)),
        "rms_norm_eps": float(m("attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(m("rope.freq_base", 500000.0)),
        "max_position_embeddings": int(m("context_length", 4096)),
        "tie_word_embeddings": "output.weight" not in g.tensors,
        "bos_token_id": g.meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": g.meta.get("tokenizer.ggml.eos_token_id"),
        "quantization_config": {"quant_method": "bitnet", "linear_class": "autobitlinear",
                                "quantization_mode": "offline"},
    })
    layers = []
    for i in range(cfg.num_hidden_layers):
        lins = {n: _ternary_from_gguf(g, f"blk.{i}.{gn}.weight", cfg.linear_shapes()[n])
                for n, gn in _GGUF_LINEAR.items()}
        for n in lins:
            lins[n].name = n
        norms = {n: g.float32(f"blk.{i}.{gn}.weight") for n, gn in _GGUF_NORM.items()}
        layers.append(LayerWeights(lins, **norms))
    embed = g.float32("token_embd.weight")
    head = g.float32("output.weight") if "output.weight" in g.tensors else embed
    w = BitNetWeights(embed, layers, g.float32("output_norm.weight"), head)
    w.validate(cfg)
    return cfg, w


# -- synthetic ----------------------------------------------------------------------------------------
def synthetic_weights(cfg: BitNetConfig, seed: int = 0) -> BitNetWeights:
    """Deterministic random master weights (online quantization), scaled so activations stay O(1)."""
    rng = np.random.default_rng(seed)
    layers = []
    for _ in range(cfg.num_hidden_layers):
        lins = {}
        for name, (o, i) in cfg.linear_shapes().items():
            w = (rng.standard_normal((o, i), dtype=F32) * F32(1.0 / np.sqrt(i))).astype(F32)
            t, s = absmean_ternarize(w)
            lins[name] = TernaryLinear(name, t, s, online=True)
        norms = {n: (1.0 + 0.1 * rng.standard_normal(d, dtype=F32)).astype(F32)
                 for n, d in (("input_layernorm", cfg.hidden_size),
                              ("post_attention_layernorm", cfg.hidden_size),
                              ("attn_sub_norm", cfg.hidden_size), ("ffn_sub_norm", cfg.intermediate_size))}
        layers.append(LayerWeights(lins, **norms))
    # small embeddings (as trained checkpoints have) so the layers, not the token itself, drive the logits
    embed = (rng.standard_normal((cfg.vocab_size, cfg.hidden_size), dtype=F32) * F32(0.05)).astype(F32)
    norm = np.ones(cfg.hidden_size, F32)
    return BitNetWeights(embed, layers, norm, embed)


def load_bitnet(source: str | Path, *, mode: str = "golden", overrides: dict[str, Any] | None = None,
                seed: int = 0, **kwargs: Any) -> BitNet:
    """A BitNet from a HF directory, a ``.gguf`` file or a model preset name (synthetic weights;
    ``overrides`` shrink the preset's config, e.g. ``{"num_hidden_layers": 2}``)."""
    p = Path(source)
    if p.is_dir():
        cfg, w = load_hf_dir(p)
    elif p.suffix == ".gguf" and p.is_file():
        cfg, w = load_gguf(p)
    else:
        from npukit.models.presets import model_preset

        try:
            d = model_preset(str(source))
        except ConfigError:
            raise ModelError(f"{source}: not a model directory, .gguf file or model preset") from None
        d.update(overrides or {})
        d["quantization_config"] = dict(d.get("quantization_config") or {}, quantization_mode="online")
        cfg = BitNetConfig.from_hf(d)
        w = synthetic_weights(cfg, seed)
    return BitNet(cfg, w, mode=mode, **kwargs)
