"""Typed Gemma 3n text-decoder configuration parsed from a Hugging Face ``config.json`` dictionary.

Accepts a ``Gemma3nTextConfig`` dictionary (``model_type: gemma3n_text``) or a
``Gemma3nForConditionalGeneration`` one (``model_type: gemma3n``, text part under ``text_config``).
``save_pretrained`` writes only the fields that differ from the defaults, so every missing field
takes the transformers default (those of E4B). Both RoPE spellings are understood: the legacy
``rope_theta``/``rope_local_base_freq`` keys and the newer per-layer-type ``rope_parameters``.
Anything npukit does not implement raises `ConfigError` naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from npukit.errors import ConfigError

SLIDING = "sliding_attention"
FULL = "full_attention"
LAYER_TYPES = (SLIDING, FULL)
SUPPORTED_ACTIVATIONS = ("gelu_pytorch_tanh",)
TEXT_MODEL_TYPES = ("gemma3n_text",)
MULTIMODAL_MODEL_TYPES = ("gemma3n",)

# transformers Gemma3nTextConfig defaults (E4B text), used for fields a config.json leaves out (and the
# base of the E2B/E4B shape presets, `npukit.models.presets`).
HF_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_400,
    "vocab_size_per_layer_input": 262_144,
    "hidden_size": 2048,
    "hidden_size_per_layer_input": 256,
    "intermediate_size": 16_384,
    "num_hidden_layers": 35,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 32_768,
    "rms_norm_eps": 1e-6,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": 2,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "sliding_window": 512,
    "layer_types": None,
    "final_logit_softcapping": 30.0,
    "altup_active_idx": 0,
    "altup_coef_clip": 120.0,
    "altup_correct_scale": True,
    "altup_num_inputs": 4,
    "num_kv_shared_layers": 15,
    "laurel_rank": 64,
    "activation_sparsity_pattern": None,
}
_DEFAULT_THETA = {FULL: 1_000_000.0, SLIDING: 10_000.0}
# The Gaussian top-k multiplier: the standard normal quantile at the layer's sparsity
# (icdf(0.95) = 1.6448536 in float32), computed as transformers does, in float32.


@dataclass(frozen=True)
class Gemma3nConfig:
    vocab_size: int
    vocab_size_per_layer_input: int
    hidden_size: int
    hidden_size_per_layer_input: int
    intermediate_size: tuple[int, ...]
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_activation: str
    max_position_embeddings: int
    rms_norm_eps: float
    pad_token_id: int | None
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None
    tie_word_embeddings: bool
    sliding_window: int
    layer_types: tuple[str, ...]
    rope_theta: dict[str, float]
    final_logit_softcapping: float | None
    altup_active_idx: int
    altup_correct_scale: bool
    altup_num_inputs: int
    num_kv_shared_layers: int
    laurel_rank: int
    activation_sparsity: tuple[float, ...]

    # ---- derived structure -------------------------------------------------------------------
    @property
    def first_kv_shared_layer(self) -> int:
        return self.num_hidden_layers - self.num_kv_shared_layers

    @property
    def kv_source(self) -> tuple[int, ...]:
        """For each layer, the layer whose K/V it attends to: itself, or for the last
        ``num_kv_shared_layers`` layers the last earlier layer of the same attention type."""
        first = self.first_kv_shared_layer
        out = list(range(self.num_hidden_layers))
        for i in range(first, self.num_hidden_layers):
            out[i] = max(j for j in range(first) if self.layer_types[j] == self.layer_types[i])
        return tuple(out)

    def is_kv_shared(self, layer: int) -> bool:
        return layer >= self.first_kv_shared_layer

    @property
    def kv_producers(self) -> tuple[int, ...]:
        """Layers that compute their own K/V (and so own a cache)."""
        return tuple(range(self.first_kv_shared_layer))

    def window(self, layer: int) -> int | None:
        """Number of most recent keys (current one included) a layer may see; None = unbounded."""
        return self.sliding_window if self.layer_types[layer] == SLIDING else None

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def ple_dim(self) -> int:
        """Width of the per-layer-embedding table row: all layers' per-layer inputs side by side."""
        return self.num_hidden_layers * self.hidden_size_per_layer_input

    def sparsity_multiplier(self, layer: int) -> float | None:
        """The float32 standard-normal quantile for the layer's sparsity, or None for a dense layer."""
        p = self.activation_sparsity[layer]
        if p <= 0.0:
            return None
        return float(_f32_norm_ppf(p))

    def to_dict(self) -> dict[str, Any]:
        """A transformers ``Gemma3nTextConfig``-style dictionary (new ``rope_parameters`` form)."""
        return {
            "model_type": "gemma3n_text",
            "architectures": ["Gemma3nForCausalLM"],
            "vocab_size": self.vocab_size,
            "vocab_size_per_layer_input": self.vocab_size_per_layer_input,
            "hidden_size": self.hidden_size,
            "hidden_size_per_layer_input": self.hidden_size_per_layer_input,
            "intermediate_size": list(self.intermediate_size),
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_activation": self.hidden_activation,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "pad_token_id": self.pad_token_id,
            "eos_token_id": list(self.eos_token_ids),
            "bos_token_id": self.bos_token_id,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": False,
            "sliding_window": self.sliding_window,
            "layer_types": list(self.layer_types),
            "rope_parameters": {t: {"rope_type": "default", "rope_theta": th}
                                for t, th in self.rope_theta.items()},
            "final_logit_softcapping": self.final_logit_softcapping,
            "altup_active_idx": self.altup_active_idx,
            "altup_correct_scale": self.altup_correct_scale,
            "altup_num_inputs": self.altup_num_inputs,
            "num_kv_shared_layers": self.num_kv_shared_layers,
            "laurel_rank": self.laurel_rank,
            "activation_sparsity_pattern": list(self.activation_sparsity),
        }

    # ---- parsing ---------------------------------------------------------------------------
    @classmethod
    def from_hf(cls, raw: dict[str, Any]) -> Gemma3nConfig:
        raw = _text_section(raw)
        # transformers' defaults describe one whole model (E4B): a config with no shape keys is that
        # model, but a config that gives some shape keys and lacks others would mix two models and
        # fail later on a shape that no longer agrees, so name the missing key.
        missing = [k for k in SHAPE_KEYS if k not in raw]
        if missing and len(missing) < len(SHAPE_KEYS):
            raise ConfigError(f"model config lacks {missing[0]!r}")
        c = {**HF_TEXT_DEFAULTS, **{k: v for k, v in raw.items() if k in HF_TEXT_DEFAULTS}}
        n = _pos_int(c, "num_hidden_layers")
        hidden = _pos_int(c, "hidden_size")
        _check_attention(c, raw)
        inter, lt, sp = _per_layer_lists(c, n)
        shared = c["num_kv_shared_layers"]
        if not isinstance(shared, int) or not 0 <= shared < n:
            raise ConfigError(f"model config: num_kv_shared_layers must be in [0, {n})")
        if shared and set(lt[: n - shared]) != set(lt):
            raise ConfigError("model config: num_kv_shared_layers leaves a layer type with no KV producer")
        act = c["altup_active_idx"]
        if not isinstance(act, int) or not 0 <= act < c["altup_num_inputs"]:
            raise ConfigError("model config: altup_active_idx out of range")
        cap = c["final_logit_softcapping"]
        if cap is not None and (not isinstance(cap, int | float) or cap <= 0):
            raise ConfigError("model config: final_logit_softcapping must be positive or null")
        eos = c["eos_token_id"]
        eos = () if eos is None else (eos,) if isinstance(eos, int) else tuple(eos)
        return cls(
            vocab_size=c["vocab_size"],
            vocab_size_per_layer_input=c["vocab_size_per_layer_input"],
            hidden_size=hidden,
            hidden_size_per_layer_input=c["hidden_size_per_layer_input"],
            intermediate_size=tuple(inter),
            num_hidden_layers=n,
            num_attention_heads=c["num_attention_heads"],
            num_key_value_heads=c["num_key_value_heads"],
            head_dim=c["head_dim"],
            hidden_activation=c["hidden_activation"],
            max_position_embeddings=c["max_position_embeddings"],
            rms_norm_eps=float(c["rms_norm_eps"]),
            pad_token_id=c["pad_token_id"],
            eos_token_ids=tuple(int(e) for e in eos),
            bos_token_id=c["bos_token_id"],
            tie_word_embeddings=bool(c["tie_word_embeddings"]),
            sliding_window=c["sliding_window"],
            layer_types=tuple(lt),
            rope_theta=_rope_thetas(raw),
            final_logit_softcapping=None if cap is None else float(cap),
            altup_active_idx=c["altup_active_idx"],
            altup_correct_scale=bool(c["altup_correct_scale"]),
            altup_num_inputs=c["altup_num_inputs"],
            num_kv_shared_layers=shared,
            laurel_rank=c["laurel_rank"],
            activation_sparsity=tuple(float(v) for v in sp),
        )


def _text_section(raw: Any) -> dict[str, Any]:
    """The text decoder's part of a config: a multimodal Gemma 3n config nests it in text_config."""
    if not isinstance(raw, dict):
        raise ConfigError("model config: expected a JSON object")
    mt = raw.get("model_type", "gemma3n_text")
    if mt in MULTIMODAL_MODEL_TYPES:
        text = raw.get("text_config")
        if not isinstance(text, dict):
            raise ConfigError("model config: text_config missing or not an object")
        raw = text
        mt = raw.get("model_type", "gemma3n_text")
    if mt not in TEXT_MODEL_TYPES:
        raise ConfigError(f"model config: model_type {mt!r} is not a Gemma 3n text decoder")
    return raw


def _check_attention(c: dict[str, Any], raw: dict[str, Any]) -> None:
    """Sizes positive, heads grouped evenly, and no feature the decoder does not implement."""
    for f in ("vocab_size", "vocab_size_per_layer_input", "hidden_size_per_layer_input",
              "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
              "sliding_window", "laurel_rank", "altup_num_inputs"):
        _pos_int(c, f)
    if c["num_attention_heads"] % c["num_key_value_heads"]:
        raise ConfigError("model config: num_attention_heads must be a multiple of num_key_value_heads")
    if c["head_dim"] % 2:
        raise ConfigError("model config: head_dim must be even for RoPE")
    if c["hidden_activation"] not in SUPPORTED_ACTIVATIONS:
        raise ConfigError(f"model config: hidden_activation {c['hidden_activation']!r} unsupported "
                          f"(supported: {', '.join(SUPPORTED_ACTIVATIONS)})")
    if c["attention_bias"]:
        raise ConfigError("model config: attention_bias=true is unsupported (Gemma 3n has no biases)")
    if raw.get("use_bidirectional_attention"):
        raise ConfigError("model config: use_bidirectional_attention is unsupported")


def _per_layer_lists(c: dict[str, Any], n: int) -> tuple[list[int], list[str], list[float]]:
    """intermediate_size, layer_types and activation_sparsity_pattern, each expanded to n layers."""
    inter = c["intermediate_size"]
    inter = [inter] * n if isinstance(inter, int) and not isinstance(inter, bool) else inter
    if not isinstance(inter, list) or len(inter) != n or not all(_is_pos_int(v) for v in inter):
        raise ConfigError(f"model config: intermediate_size must be a positive int or {n} of them")
    lt = c["layer_types"]
    if lt is None:
        lt = [FULL if (i + 1) % 5 == 0 else SLIDING for i in range(n)]
    if not isinstance(lt, list) or len(lt) != n:
        raise ConfigError(f"model config: layer_types must list {n} entries")
    for t in lt:
        if t not in LAYER_TYPES:
            raise ConfigError(f"model config: layer_types entry {t!r} unsupported")
    sp = c["activation_sparsity_pattern"]
    if sp is None:
        k = 10 if n > 10 else 0
        sp = [0.95] * k + [0.0] * (n - k)
    elif isinstance(sp, int | float) and not isinstance(sp, bool):
        sp = [float(sp)] * n
    if not isinstance(sp, list) or len(sp) != n or not all(
            isinstance(v, int | float) and 0.0 <= v < 1.0 for v in sp):
        raise ConfigError(f"model config: activation_sparsity_pattern must list {n} values in [0, 1)")
    return inter, lt, sp


def _is_pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


SHAPE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads")


def _pos_int(c: dict[str, Any], field: str) -> int:
    if not _is_pos_int(c[field]):
        raise ConfigError(f"model config: {field} must be a positive integer, got {c[field]!r}")
    return c[field]


def _rope_thetas(raw: dict[str, Any]) -> dict[str, float]:
    """θ per layer type from either config form; only the default (unscaled) RoPE is supported."""
    params = raw.get("rope_parameters")
    scaling = raw.get("rope_scaling")
    out: dict[str, float] = {}
    for t, legacy in ((FULL, "rope_theta"), (SLIDING, "rope_local_base_freq")):
        p = params.get(t) if isinstance(params, dict) else None
        if isinstance(params, dict) and "rope_theta" in params and t not in params:
            p = params  # a flat rope_parameters dict applies to every layer type
        if t == FULL and isinstance(scaling, dict):
            p = {**(p or {}), **scaling}
        p = p or {}
        if not isinstance(p, dict):
            raise ConfigError(f"model config: rope_parameters.{t} must be an object")
        rtype = p.get("rope_type", p.get("type", "default"))
        if rtype != "default":
            raise ConfigError(f"model config: rope_parameters.{t}.rope_type {rtype!r} unsupported "
                              "(only 'default')")
        theta = p.get("rope_theta", raw.get(legacy, _DEFAULT_THETA[t]))
        if not isinstance(theta, int | float) or theta <= 0:
            raise ConfigError(f"model config: rope_theta for {t} must be positive")
        out[t] = float(theta)
    return out


def _f32_norm_ppf(p: float) -> float:
    """Standard normal quantile as torch computes it for float32: sqrt(2)·erfinv(2p − 1), in float32.

    erfinv by Newton iteration on math.erf (float64, converged), then rounded to float32 — the value
    torch returns (icdf(0.95) = 1.6448536 in float32)."""
    import numpy as np

    y = float(np.float32(2.0) * np.float32(p) - np.float32(1.0))
    x = 0.0
    for _ in range(100):
        err = math.erf(x) - y
        x -= err / (2.0 / math.sqrt(math.pi) * math.exp(-x * x))
        if abs(err) < 1e-17:
            break
    return float(np.float32(np.float32(math.sqrt(2.0)) * np.float32(x)))
