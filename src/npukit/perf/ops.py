"""Per-token decode op lists derived from a Hugging Face ``config.json`` dictionary.

Each op of one batch-1 decode step is a row of an `OpTable` (structure of arrays, so a sweep
evaluates thousands of design points against the same table with NumPy broadcasting). Counts are
in *elements*; bit widths are applied later by `npukit.perf.roofline`, so one table serves every
weight and KV format.

Attention terms grow with the number of visible keys ``L_eff = min(context, cap)``: ``cap`` is the
sliding window for sliding layers and infinite for global ones. Gemma 3n KV-shared layers read the
producer's cache but store nothing and have no K/V projections.

Families: ``gemma3n`` (Gemma 3n text: AltUp, LAuReL, PLE, KV sharing, sliding window, Gaussian
top-k) and ``llama`` (LLaMA-style decoder blocks; BitNet b1.58 is one, plus its two sub-norms).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError

# op kinds: "gemv" streams a weight matrix; "lookup" reads one table row; "attn" reads the KV
# cache; "sfu" is element-wise / reduction work on a special-function unit.
KINDS = ("gemv", "lookup", "attn", "sfu")
ACT_BYTES = 2  # activations move as BF16 on chip (docs/numerics.md)


@dataclass
class _Op:
    name: str
    layer: int
    kind: str
    group: str
    rows: int = 0  # weight rows (outputs); one row scale each
    cols: int = 0  # weight columns (inputs)
    lookup: int = 0  # table elements read (lookup ops)
    sfu: float = 0.0
    sfu_ctx: float = 0.0  # SFU elements per visible key
    macs_ctx: float = 0.0  # MACs per visible key (attention)
    kv_ctx: float = 0.0  # KV elements read per visible key
    kv_heads_ctx: float = 0.0  # (token, head) scale entries read per visible key
    kv_write: float = 0.0  # KV elements written per token
    kv_heads_write: float = 0.0
    cap: float = math.inf
    density: float = 1.0  # model-intrinsic fraction of weight rows/cols used (Gaussian top-k)
    sparse_ok: bool = False  # FFN projection whose rows/cols can be skipped for zero activations
    act_elems: float = 0.0  # activation elements read + written on chip (fixed part)
    act_ctx: float = 0.0  # activation elements per visible key (attention scores)


@dataclass
class OpTable:
    """Decode-step ops of one model as parallel arrays (index = op)."""

    model: str
    family: str
    names: list[str]
    layers: np.ndarray
    kinds: np.ndarray  # str
    groups: np.ndarray  # str
    w_elems: np.ndarray  # weight elements streamed (dense)
    w_rows: np.ndarray  # per-row scale entries
    lookup_elems: np.ndarray
    macs: np.ndarray  # fixed MACs (dense)
    macs_ctx: np.ndarray
    sfu: np.ndarray
    sfu_ctx: np.ndarray
    kv_ctx: np.ndarray
    kv_heads_ctx: np.ndarray
    kv_write: np.ndarray
    kv_heads_write: np.ndarray
    cap: np.ndarray
    density: np.ndarray
    sparse_ok: np.ndarray
    act_elems: np.ndarray
    act_ctx: np.ndarray
    kv_store_ctx: np.ndarray  # KV elements *stored* per cached token, per op (producers only)
    config: dict[str, Any] = field(repr=False, default_factory=dict)
    total_params: float = 0.0  # every weight the checkpoint holds (for capacity checks)

    def __len__(self) -> int:
        return len(self.names)

    def l_eff(self, context: np.ndarray | float) -> np.ndarray:
        """Visible keys per op: shape (P, N) for P contexts."""
        ctx = np.asarray(context, dtype=np.float64).reshape(-1, 1)
        return np.minimum(ctx, self.cap[None, :])

    def n_layers(self) -> int:
        return int(self.layers.max()) + 1 if len(self) else 0


def load_config(model: str | Path | dict[str, Any]) -> dict[str, Any]:
    """A preset name, a path to ``config.json`` (or its directory), a Gemma 3 / Llama ``.gguf`` file, or a
    dict already loaded."""
    if isinstance(model, dict):
        return model
    path = Path(model)
    if path.suffix == ".gguf":  # a Gemma 3 / Llama GGUF file: the shape from its metadata
        if not path.is_file():
            raise ConfigError(f"--model {model}: no such file")
        from npukit.models.llm.config import gguf_llm_config

        return gguf_llm_config(str(path)).to_hf_config()
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ConfigError(f"--model {model}: the directory has no config.json")
    if path.suffix == ".json" or os.sep in str(model):
        if not path.is_file():
            raise ConfigError(f"--model {model}: no such file")
        try:
            cfg = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read model config: {exc}") from None
        # multimodal Gemma 3n checkpoints nest the text part
        return cfg.get("text_config", cfg) if isinstance(cfg, dict) else cfg
    from npukit.models.presets import model_preset

    return model_preset(str(model))


def family_of(cfg: dict[str, Any]) -> str:
    mt = str(cfg.get("model_type", ""))
    if mt.startswith("gemma3n"):
        return "gemma3n"
    if mt in ("bitnet", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text"):
        return "llama"
    raise ConfigError(f"model_type {mt!r} is not supported by npukit.perf (gemma3n, bitnet, llama-like)")


def _req(cfg: dict[str, Any], key: str) -> Any:
    if key not in cfg:
        raise ConfigError(f"model config lacks {key!r}")
    return cfg[key]


def _attention(ops: list[_Op], i: int, d: int, nh: int, nkv: int, hd: int, cap: float,
               produces: bool, rope: bool = True) -> None:
    """Q/K/V projections (K/V only for producers), RoPE, scores, softmax, context, O."""
    ops.append(_Op(f"L{i}.q_proj", i, "gemv", "attn_proj", rows=nh * hd, cols=d, act_elems=d + nh * hd))
    if produces:
        for n in ("k_proj", "v_proj"):
            ops.append(_Op(f"L{i}.{n}", i, "gemv", "attn_proj", rows=nkv * hd, cols=d,
                           act_elems=d + nkv * hd))
    rope_elems = (nh + (nkv if produces else 0)) * hd if rope else 0
    ops.append(_Op(f"L{i}.qk_norm_rope", i, "sfu", "attn_sfu",
                   sfu=(nh + 2 * nkv * produces) * hd + 2 * rope_elems,
                   kv_write=2 * nkv * hd if produces else 0, kv_heads_write=2 * nkv if produces else 0,
                   cap=cap, act_elems=2 * (nh + 2 * nkv * produces) * hd))
    # scores: every Q head dots every visible key of its KV group; K read once per KV head
    ops.append(_Op(f"L{i}.attn_qk", i, "attn", "attn_core", macs_ctx=nh * hd, kv_ctx=nkv * hd,
                   kv_heads_ctx=nkv, cap=cap, act_elems=nh * hd, act_ctx=nh))
    # softmax: max, exp, sum, scale over heads × keys (5 score passes through L2)
    ops.append(_Op(f"L{i}.softmax", i, "sfu", "attn_sfu", sfu_ctx=3 * nh, cap=cap, act_ctx=5 * nh))
    ops.append(_Op(f"L{i}.attn_av", i, "attn", "attn_core", macs_ctx=nh * hd, kv_ctx=nkv * hd,
                   kv_heads_ctx=nkv, cap=cap, act_elems=nh * hd, act_ctx=nh))
    ops.append(_Op(f"L{i}.o_proj", i, "gemv", "attn_proj", rows=d, cols=nh * hd, act_elems=d + nh * hd))


def _gemma3n(cfg: dict[str, Any]) -> tuple[list[_Op], float]:
    d = int(_req(cfg, "hidden_size"))
    n = int(_req(cfg, "num_hidden_layers"))
    nh, nkv = int(_req(cfg, "num_attention_heads")), int(_req(cfg, "num_key_value_heads"))
    hd = int(cfg.get("head_dim", d // nh))
    vocab = int(_req(cfg, "vocab_size"))
    ffn = cfg["intermediate_size"]
    ffn = [int(x) for x in ffn] if isinstance(ffn, list) else [int(ffn)] * n
    window = float(cfg.get("sliding_window") or math.inf)
    types = cfg.get("layer_types") or [
        "full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(n)]
    shared = int(cfg.get("num_kv_shared_layers", 0))
    ple = int(cfg.get("hidden_size_per_layer_input", 0))
    vocab_ple = int(cfg.get("vocab_size_per_layer_input", vocab))
    streams = int(cfg.get("altup_num_inputs", 1))
    rank = int(cfg.get("laurel_rank", 0))
    pattern = cfg.get("activation_sparsity_pattern") or [0.0] * n
    if len(ffn) != n or len(types) != n or len(pattern) != n:
        raise ConfigError("gemma3n config: intermediate_size, layer_types and activation_sparsity_pattern "
                          "need one entry per layer")
    first_shared = n - shared
    ops: list[_Op] = []
    # token entry: embedding row, PLE row (all layers), PLE projection, AltUp init projections
    ops.append(_Op("embed_tokens", -1, "lookup", "embed", lookup=d, act_elems=d))
    if ple:
        ops.append(_Op("embed_tokens_per_layer", -1, "lookup", "embed", lookup=n * ple, act_elems=n * ple))
        ops.append(_Op("per_layer_model_projection", -1, "gemv", "ple", rows=n * ple, cols=d,
                       act_elems=d + n * ple))
        ops.append(_Op("per_layer_norm", -1, "sfu", "ple", sfu=3 * n * ple, act_elems=2 * n * ple))
    for k in range(streams - 1):
        ops.append(_Op(f"altup_projections.{k}", -1, "gemv", "altup", rows=d, cols=d, act_elems=2 * d))
    for i in range(n):
        sliding = types[i] == "sliding_attention"
        cap = window if sliding else math.inf
        produces = i < first_shared
        if streams > 1:
            ops.append(_Op(f"L{i}.altup_predict", i, "gemv", "altup", rows=4, cols=d,
                           sfu=2 * d + streams * streams * d, act_elems=(2 * streams + 1) * d))
        ops.append(_Op(f"L{i}.input_norm", i, "sfu", "norm", sfu=2 * d, act_elems=2 * d))
        if rank:
            ops.append(_Op(f"L{i}.laurel_left", i, "gemv", "laurel", rows=rank, cols=d, act_elems=d + rank))
            ops.append(_Op(f"L{i}.laurel_right", i, "gemv", "laurel", rows=d, cols=rank,
                           sfu=2 * d, act_elems=2 * d + rank))
        _attention(ops, i, d, nh, nkv, hd, cap, produces)
        ops.append(_Op(f"L{i}.attn_norms_residual", i, "sfu", "norm", sfu=6 * d, act_elems=6 * d))
        f = ffn[i]
        dens = 1.0 - float(pattern[i])
        ops.append(_Op(f"L{i}.gate_proj", i, "gemv", "ffn", rows=f, cols=d, act_elems=d + f))
        # Gaussian top-k: mean and std reductions, threshold; then GELU(gate)·up
        ops.append(_Op(f"L{i}.ffn_act", i, "sfu", "ffn_sfu",
                       sfu=(4 if pattern[i] > 0 else 0) * f + 2 * f, act_elems=3 * f))
        ops.append(_Op(f"L{i}.up_proj", i, "gemv", "ffn", rows=f, cols=d, density=dens, sparse_ok=True,
                       act_elems=d + f))
        ops.append(_Op(f"L{i}.down_proj", i, "gemv", "ffn", rows=d, cols=f, density=dens, sparse_ok=True,
                       act_elems=d + f))
        ops.append(_Op(f"L{i}.ffn_norms_residual", i, "sfu", "norm", sfu=5 * d, act_elems=4 * d))
        if streams > 1:
            ops.append(_Op(f"L{i}.altup_correct", i, "gemv", "altup", rows=4, cols=d,
                           sfu=2 * d + 2 * streams * d, act_elems=(2 * streams + 1) * d))
        if ple:
            ops.append(_Op(f"L{i}.per_layer_input_gate", i, "gemv", "ple", rows=ple, cols=d,
                           sfu=2 * ple, act_elems=d + 2 * ple))
            ops.append(_Op(f"L{i}.per_layer_projection", i, "gemv", "ple", rows=d, cols=ple,
                           sfu=2 * d + (streams - 1) * d, act_elems=ple + streams * d))
    for k in range(streams - 1):
        ops.append(_Op(f"altup_unembed_projections.{k}", -1, "gemv", "altup", rows=d, cols=d,
                       act_elems=2 * d))
    ops.append(_Op("final_norm", -1, "sfu", "norm", sfu=2 * d + 2 * streams * d, act_elems=2 * d))
    ops.append(_Op("lm_head", -1, "gemv", "lm_head", rows=vocab, cols=d, act_elems=d + vocab))
    if cfg.get("final_logit_softcapping"):
        ops.append(_Op("softcap", -1, "sfu", "lm_head", sfu=3 * vocab, act_elems=2 * vocab))
    # checkpoint parameters (for DRAM capacity): streamed matrices + tables held but read by row
    total = vocab * d + vocab_ple * n * ple
    return ops, float(total)


def _llama(cfg: dict[str, Any]) -> tuple[list[_Op], float]:
    d = int(_req(cfg, "hidden_size"))
    n = int(_req(cfg, "num_hidden_layers"))
    nh = int(_req(cfg, "num_attention_heads"))
    nkv = int(cfg.get("num_key_value_heads", nh))
    hd = int(cfg.get("head_dim") or d // nh)
    vocab = int(_req(cfg, "vocab_size"))
    f = int(_req(cfg, "intermediate_size"))
    window = float(cfg.get("sliding_window") or math.inf) if cfg.get("use_sliding_window", True) else math.inf
    bitnet = cfg.get("model_type") == "bitnet"
    ops: list[_Op] = [_Op("embed_tokens", -1, "lookup", "embed", lookup=d, act_elems=d)]
    for i in range(n):
        ops.append(_Op(f"L{i}.input_norm", i, "sfu", "norm", sfu=2 * d, act_elems=2 * d))
        _attention(ops, i, d, nh, nkv, hd, window, produces=True)
        if bitnet:  # attn_sub_norm before o_proj
            ops.insert(len(ops) - 1, _Op(f"L{i}.attn_sub_norm", i, "sfu", "norm", sfu=2 * nh * hd,
                                         act_elems=2 * nh * hd))
        ops.append(_Op(f"L{i}.post_attn_norm_residual", i, "sfu", "norm", sfu=3 * d, act_elems=3 * d))
        ops.append(_Op(f"L{i}.gate_proj", i, "gemv", "ffn", rows=f, cols=d, act_elems=d + f))
        ops.append(_Op(f"L{i}.up_proj", i, "gemv", "ffn", rows=f, cols=d, sparse_ok=True, act_elems=d + f))
        # act(gate)·up (+ ffn_sub_norm for BitNet)
        ops.append(_Op(f"L{i}.ffn_act", i, "sfu", "ffn_sfu", sfu=(4 if bitnet else 2) * f, act_elems=3 * f))
        ops.append(_Op(f"L{i}.down_proj", i, "gemv", "ffn", rows=d, cols=f, sparse_ok=True, act_elems=d + f))
        ops.append(_Op(f"L{i}.residual", i, "sfu", "norm", sfu=d, act_elems=3 * d))
    ops.append(_Op("final_norm", -1, "sfu", "norm", sfu=2 * d, act_elems=2 * d))
    ops.append(_Op("lm_head", -1, "gemv", "lm_head", rows=vocab, cols=d, act_elems=d + vocab))
    return ops, float(vocab * d)  # the embedding table (lm_head is streamed, or tied to it)


def build_ops(model: str | Path | dict[str, Any], name: str | None = None) -> OpTable:
    """The decode-step op table of a model preset, ``config.json`` path or config dict."""
    cfg = load_config(model)
    if not isinstance(cfg, dict):
        raise ConfigError("model config must be a JSON object")
    fam = family_of(cfg)
    try:
        ops, table_params = _gemma3n(cfg) if fam == "gemma3n" else _llama(cfg)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"model config has a malformed field: {exc}") from None
    f64 = lambda xs: np.asarray(xs, dtype=np.float64)  # noqa: E731
    gemv = [o.kind == "gemv" for o in ops]
    w = f64([o.rows * o.cols for o in ops])
    lm_tied = cfg.get("tie_word_embeddings", True)
    streamed = float(w.sum()) - (float(w[[o.name for o in ops].index("lm_head")]) if lm_tied else 0.0)
    return OpTable(
        model=name or str(model if isinstance(model, str) else cfg.get("model_type")),
        family=fam,
        names=[o.name for o in ops],
        layers=np.asarray([o.layer for o in ops], dtype=np.int64),
        kinds=np.asarray([o.kind for o in ops]),
        groups=np.asarray([o.group for o in ops]),
        w_elems=w,
        w_rows=f64([o.rows if g else 0 for o, g in zip(ops, gemv, strict=True)]),
        lookup_elems=f64([o.lookup for o in ops]),
        macs=w.copy(),
        macs_ctx=f64([o.macs_ctx for o in ops]),
        sfu=f64([o.sfu for o in ops]),
        sfu_ctx=f64([o.sfu_ctx for o in ops]),
        kv_ctx=f64([o.kv_ctx for o in ops]),
        kv_heads_ctx=f64([o.kv_heads_ctx for o in ops]),
        kv_write=f64([o.kv_write for o in ops]),
        kv_heads_write=f64([o.kv_heads_write for o in ops]),
        cap=f64([o.cap for o in ops]),
        density=f64([o.density for o in ops]),
        sparse_ok=np.asarray([o.sparse_ok for o in ops]),
        act_elems=f64([o.act_elems for o in ops]),
        act_ctx=f64([o.act_ctx for o in ops]),
        # each producer stores K and V once per cached token, capped by its window
        kv_store_ctx=f64([o.kv_write for o in ops]),
        config=cfg,
        total_params=streamed + table_params,
    )
