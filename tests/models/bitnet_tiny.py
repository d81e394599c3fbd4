"""Tiny random BitNet b1.58 checkpoints written as Hugging Face directories and GGUF files.

Weights are random here (numpy) and written with npukit's safetensors writer or the PyPI ``gguf``
writer; transformers (AutoBitLinear) reads the same directories as the independent oracle.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # transformers' BitNet quant functions are compiled

LINEARS = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def config(mode: str = "online", **over) -> dict:
    c = dict(architectures=["BitNetForCausalLM"], model_type="bitnet", vocab_size=256, hidden_size=64,
             intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, hidden_act="relu2", max_position_embeddings=128, rms_norm_eps=1e-5,
             rope_theta=500000.0, tie_word_embeddings=True, attention_bias=False, bos_token_id=1,
             eos_token_id=2,
             quantization_config={"quant_method": "bitnet", "linear_class": "autobitlinear",
                                  "quantization_mode": mode})
    c.update(over)
    return c


def shapes(c: dict) -> dict[str, tuple[int, int]]:
    h, f = c["hidden_size"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    return {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q),
            "gate_proj": (f, h), "up_proj": (f, h), "down_proj": (h, f)}


def float_weights(c: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Master weights (float32) under HF names; norms randomised so a sign or index bug shows."""
    rng = np.random.default_rng(seed)
    sd = {"model.embed_tokens.weight": rng.standard_normal((c["vocab_size"], c["hidden_size"])) * 0.05,
          "model.norm.weight": 1 + 0.2 * rng.standard_normal(c["hidden_size"])}
    for i in range(c["num_hidden_layers"]):
        for n, (o, k) in shapes(c).items():
            sd[f"model.layers.{i}.{LINEARS[n]}.{n}.weight"] = rng.standard_normal((o, k)) / np.sqrt(k)
        h = c["hidden_size"]
        for n, d in (("input_layernorm", h), ("post_attention_layernorm", h),
                     ("self_attn.attn_sub_norm", h), ("mlp.ffn_sub_norm", c["intermediate_size"])):
            sd[f"model.layers.{i}.{n}.weight"] = 1 + 0.2 * rng.standard_normal(d)
    return {k: v.astype(np.float32) for k, v in sd.items()}


def ternary_weights(c: dict, seed: int = 0) -> tuple[dict[str, np.ndarray], dict]:
    """Float non-ternary tensors plus per-projection (trits, scale) with fp16-exact scales."""
    rng = np.random.default_rng(seed + 1)
    sd = float_weights(c, seed)
    tern = {}
    for name in list(sd):
        if name.split(".")[-2] in LINEARS:
            o, k = sd.pop(name).shape
            t = rng.choice(np.array([-1, 0, 1], np.int8), size=(o, k), p=[0.3, 0.4, 0.3])
            scale = float(np.float16(rng.uniform(0.02, 0.08)))
            tern[name] = (t, scale)
    return sd, tern


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 → bf16 bit patterns (uint16)."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_online(path: Path, c: dict, sd: dict[str, np.ndarray], bf16: bool = True) -> Path:
    from npukit.models.safetensors import save_safetensors

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(c))
    if bf16:
        save_safetensors(path / "model.safetensors", {k: bf16_bits(v) for k, v in sd.items()},
                         dtypes={k: "BF16" for k in sd})
    else:
        save_safetensors(path / "model.safetensors", sd)
    return path


def write_offline(path: Path, c: dict, sd: dict[str, np.ndarray], tern: dict) -> Path:
    from npukit.formats.ternary import pack_hf_2bit
    from npukit.models.safetensors import save_safetensors

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(dict(c, quantization_config=dict(
        c["quantization_config"], quantization_mode="offline"))))
    out = dict(sd)
    for name, (t, s) in tern.items():
        out[name] = pack_hf_2bit(t)
        out[name[: -len("weight")] + "weight_scale"] = np.array([s], np.float32)
    save_safetensors(path / "model.safetensors", out)
    return path


def write_gguf(path: Path, c: dict, sd: dict[str, np.ndarray], tern: dict, kind: str = "TQ1_0",
               extra_kv: Callable[[Any], None] | None = None) -> Path:
    """``extra_kv(writer)`` may add metadata (a tokenizer) before the file is written."""
    import gguf

    gmap = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
            "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
    nmap = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
            "attn_sub_norm": "attn_sub_norm", "ffn_sub_norm": "ffn_sub_norm"}
    w = gguf.GGUFWriter(str(path), "bitnet")
    w.add_block_count(c["num_hidden_layers"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_key_length(c["head_dim"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    qt = getattr(gguf.GGMLQuantizationType, kind)
    for i in range(c["num_hidden_layers"]):
        for n, g in gmap.items():
            t, s = tern[f"model.layers.{i}.{LINEARS[n]}.{n}.weight"]
            blob = gguf.quants.quantize((t * np.float32(s)).astype(np.float32), qt)
            w.add_tensor(f"blk.{i}.{g}.weight", blob, raw_dtype=qt)
        for n, g in nmap.items():
            pre = {"attn_sub_norm": "self_attn.", "ffn_sub_norm": "mlp."}.get(n, "")
            w.add_tensor(f"blk.{i}.{g}.weight", sd[f"model.layers.{i}.{pre}{n}.weight"])
    if extra_kv is not None:
        extra_kv(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def hf_greedy(path: Path, prompt: list[int], n: int) -> tuple[list[int], list[np.ndarray]]:
    """transformers' own decode loop with its KV cache: greedy tokens and each step's logits."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    model.eval()
    toks, logits = [], []
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        for _ in range(n):
            lg = out.logits[0, -1].float().numpy()
            tok = int(lg.argmax())
            toks.append(tok)
            logits.append(lg)
            out = model(torch.tensor([[tok]]), past_key_values=out.past_key_values, use_cache=True)
    return toks, logits
