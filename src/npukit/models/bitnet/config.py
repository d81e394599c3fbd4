"""BitNet b1.58 shapes, parsed from a Hugging Face ``config.json`` dictionary (or a model preset)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from npukit.errors import ConfigError


@dataclass(frozen=True)
class BitNetConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = True
    quantization_mode: str = "online"  # "online": master weights; "offline": packed uint8 + weight_scale
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return () if self.eos_token_id is None else (self.eos_token_id,)

    @property
    def kv_groups(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(out, in) of the seven ternary projections of one decoder layer, in execution order."""
        h, f = self.hidden_size, self.intermediate_size
        return {
            "q_proj": (self.q_dim, h), "k_proj": (self.kv_dim, h), "v_proj": (self.kv_dim, h),
            "o_proj": (h, self.q_dim), "gate_proj": (f, h), "up_proj": (f, h), "down_proj": (h, f),
        }

    def ternary_weights_per_layer(self) -> int:
        return sum(o * i for o, i in self.linear_shapes().values())

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> BitNetConfig:
        if cfg.get("model_type") not in (None, "bitnet"):
            raise ConfigError(f"model_type {cfg.get('model_type')!r} is not a BitNet config")
        try:
            hidden = int(cfg["hidden_size"])
            heads = int(cfg["num_attention_heads"])
            kv = int(cfg.get("num_key_value_heads", heads))
            rope = cfg.get("rope_theta")
            if rope is None:
                rope = (cfg.get("rope_parameters") or {}).get("rope_theta", 500000.0)
            q = cfg.get("quantization_config") or {}
            mode = q.get("quantization_mode", "online") if q else "online"
            act = cfg.get("hidden_act", "relu2")
            out = cls(
                vocab_size=int(cfg["vocab_size"]), hidden_size=hidden,
                intermediate_size=int(cfg["intermediate_size"]),
                num_hidden_layers=int(cfg["num_hidden_layers"]), num_attention_heads=heads,
                num_key_value_heads=kv, head_dim=int(cfg.get("head_dim") or hidden // heads),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)), rope_theta=float(rope),
                max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
                quantization_mode=str(mode),
                bos_token_id=_opt_int(cfg.get("bos_token_id")),
                eos_token_id=_opt_int(cfg.get("eos_token_id")),
            )
        except KeyError as exc:
            raise ConfigError(f"BitNet config is missing {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"BitNet config has a bad value: {exc}") from None
        if act != "relu2":
            raise ConfigError(f"BitNet hidden_act {act!r} unsupported (only relu2)")
        if q and q.get("linear_class", "autobitlinear") != "autobitlinear":
            raise ConfigError("only linear_class 'autobitlinear' is supported (BitLinear's weight_scale "
                              "has the inverse meaning)")
        if out.quantization_mode not in ("online", "offline"):
            raise ConfigError(f"quantization_mode {out.quantization_mode!r} is not online/offline")
        if heads % kv or out.head_dim % 2:
            raise ConfigError("num_attention_heads must be a multiple of num_key_value_heads, head_dim even")
        return out


def _opt_int(v: Any) -> int | None:
    if isinstance(v, list):
        v = v[0] if v else None
    return None if v is None else int(v)
