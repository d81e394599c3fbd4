"""Transformer encoders from Hugging Face directories: the BERT/MiniLM family and the SigLIP/ViT family.

One loader for both: ``config.json`` gives the shape, ``model.safetensors`` (read with npukit's own
reader, no torch) the weights, renamed to one canonical per-layer dictionary; a sentence-transformers
directory (``modules.json``) adds its tokenizer, pooling and normalization. Synthetic presets write a
directory with the same files (SmolVLM's vision-encoder shapes, seeded random weights) so the same
loader reads them and transformers can load them too.

`forward_fp32` is the float32 NumPy forward pass used for calibration ranges and the host side
(embeddings, pooling); the NPU arithmetic lives in ``npukit.targets.rk3588``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError, ModelError
from npukit.models.safetensors import open_checkpoint, save_safetensors

LAYER_KEYS = ("q_w", "q_b", "k_w", "k_b", "v_w", "v_b", "o_w", "o_b", "ln1_g", "ln1_b",
              "fc1_w", "fc1_b", "fc2_w", "fc2_b", "ln2_g", "ln2_b")
# canonical key -> (BERT name, SigLIP name) inside one layer; linear weights are [out, in] as in HF
_LAYER_NAMES = {
    "q_w": ("attention.self.query.weight", "self_attn.q_proj.weight"),
    "q_b": ("attention.self.query.bias", "self_attn.q_proj.bias"),
    "k_w": ("attention.self.key.weight", "self_attn.k_proj.weight"),
    "k_b": ("attention.self.key.bias", "self_attn.k_proj.bias"),
    "v_w": ("attention.self.value.weight", "self_attn.v_proj.weight"),
    "v_b": ("attention.self.value.bias", "self_attn.v_proj.bias"),
    "o_w": ("attention.output.dense.weight", "self_attn.out_proj.weight"),
    "o_b": ("attention.output.dense.bias", "self_attn.out_proj.bias"),
    "ln1_g": ("attention.output.LayerNorm.weight", "layer_norm1.weight"),
    "ln1_b": ("attention.output.LayerNorm.bias", "layer_norm1.bias"),
    "fc1_w": ("intermediate.dense.weight", "mlp.fc1.weight"),
    "fc1_b": ("intermediate.dense.bias", "mlp.fc1.bias"),
    "fc2_w": ("output.dense.weight", "mlp.fc2.weight"),
    "fc2_b": ("output.dense.bias", "mlp.fc2.bias"),
    "ln2_g": ("output.LayerNorm.weight", "layer_norm2.weight"),
    "ln2_b": ("output.LayerNorm.bias", "layer_norm2.bias"),
}
_ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh"}


@dataclass(frozen=True)
class EncoderConfig:
    family: str  # "bert" (post-LN, token embeddings) | "siglip" (pre-LN, patch embeddings)
    hidden: int
    layers: int
    heads: int
    intermediate: int
    act: str = "gelu"  # "gelu" (erf) | "gelu_tanh"
    eps: float = 1e-12
    vocab: int = 0
    max_positions: int = 0
    type_vocab: int = 0
    image_size: int = 0
    patch: int = 0
    channels: int = 3

    def __post_init__(self) -> None:
        if self.family not in ("bert", "siglip"):
            raise ConfigError(f"encoder family must be bert or siglip, got {self.family!r}")
        if min(self.hidden, self.layers, self.heads, self.intermediate) <= 0 or self.hidden % self.heads:
            raise ConfigError(f"bad encoder shape: hidden {self.hidden}, heads {self.heads}, "
                              f"layers {self.layers}, intermediate {self.intermediate}")
        if self.act not in ("gelu", "gelu_tanh"):
            raise ConfigError(f"unsupported activation {self.act!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def pre_norm(self) -> bool:
        return self.family == "siglip"

    @property
    def seq_len(self) -> int:
        """Tokens per input for the vision family (patches); 0 for text (depends on the input)."""
        return (self.image_size // self.patch) ** 2 if self.family == "siglip" else 0

    @property
    def params(self) -> int:
        per = 4 * self.hidden * (self.hidden + 1) + 2 * self.hidden * self.intermediate
        return self.layers * (per + self.intermediate + self.hidden + 4 * self.hidden)

    def to_hf(self) -> dict[str, Any]:
        """A transformers config.json for this shape."""
        if self.family == "bert":
            return {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": self.hidden,
                    "num_hidden_layers": self.layers, "num_attention_heads": self.heads,
                    "intermediate_size": self.intermediate, "hidden_act": "gelu",
                    "layer_norm_eps": self.eps, "vocab_size": self.vocab,
                    "max_position_embeddings": self.max_positions, "type_vocab_size": self.type_vocab}
        return {"architectures": ["SiglipVisionModel"], "model_type": "siglip_vision_model",
                "hidden_size": self.hidden, "num_hidden_layers": self.layers,
                "num_attention_heads": self.heads, "intermediate_size": self.intermediate,
                "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": self.eps,
                "image_size": self.image_size, "patch_size": self.patch, "num_channels": self.channels,
                "vision_use_head": False}


def config_from_hf(cfg: dict[str, Any], where: str = "config.json") -> EncoderConfig:
    """Read a transformers config (BERT, SigLIP vision, or a SigLIP/Idefics3 with ``vision_config``)."""
    model_type = cfg.get("model_type", "")
    if "vision_config" in cfg and model_type != "bert":
        cfg = cfg["vision_config"]
        model_type = "siglip_vision_model"
    try:
        act = _ACTS[cfg.get("hidden_act", "gelu")]
    except KeyError:
        raise ConfigError(f"{where}: unsupported hidden_act {cfg.get('hidden_act')!r}") from None
    try:
        if model_type in ("bert",):
            return EncoderConfig("bert", cfg["hidden_size"], cfg["num_hidden_layers"],
                                 cfg["num_attention_heads"], cfg["intermediate_size"], act,
                                 float(cfg.get("layer_norm_eps", 1e-12)), vocab=cfg["vocab_size"],
                                 max_positions=cfg["max_position_embeddings"],
                                 type_vocab=cfg.get("type_vocab_size", 2))
        if model_type in ("siglip_vision_model", "siglip", "idefics3_vision", "smolvlm_vision"):
            return EncoderConfig("siglip", cfg["hidden_size"], cfg["num_hidden_layers"],
                                 cfg["num_attention_heads"], cfg["intermediate_size"], act,
                                 float(cfg.get("layer_norm_eps", 1e-6)), image_size=cfg["image_size"],
                                 patch=cfg["patch_size"], channels=cfg.get("num_channels", 3))
    except KeyError as exc:
        raise ConfigError(f"{where}: missing key {exc.args[0]!r}") from None
    raise ConfigError(f"{where}: model_type {model_type!r} is not a BERT or SigLIP/ViT encoder")


@dataclass
class Encoder:
    config: EncoderConfig
    embed: dict[str, np.ndarray]  # bert: word, pos, type, ln_g, ln_b; siglip: patch_w, patch_b, pos
    layers: list[dict[str, np.ndarray]]
    final_ln: tuple[np.ndarray, np.ndarray] | None = None  # SigLIP post_layernorm
    path: Path | None = None
    tokenizer: Any = None  # tokenizers.Tokenizer (text family)
    pooling: str = "mean"
    normalize: bool = True
    max_seq_length: int = 512
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.meta.get("name") or (self.path.name if self.path else self.config.family)

    def tokenize(self, texts: list[str]) -> list[np.ndarray]:
        if self.tokenizer is None:
            raise ModelError(f"{self.name}: a vision encoder takes images, not text")
        return [np.asarray(e.ids, dtype=np.int64) for e in self.tokenizer.encode_batch(texts)]

    def embed_tokens(self, ids: np.ndarray) -> np.ndarray:
        """Host side: word + position + type-0 embeddings, then the embedding LayerNorm (float32)."""
        e = self.embed
        x = e["word"][ids] + e["pos"][: len(ids)] + e["type"][0]
        return layernorm_fp32(x, e["ln_g"], e["ln_b"], self.config.eps)

    def embed_patches(self, pixels: np.ndarray) -> np.ndarray:
        """Host side: the patch convolution as a matmul over flattened patches, plus positions."""
        c = self.config
        g = c.image_size // c.patch
        p = pixels.reshape(c.channels, g, c.patch, g, c.patch).transpose(1, 3, 0, 2, 4).reshape(g * g, -1)
        w = self.embed["patch_w"].reshape(c.hidden, -1)
        return (p.astype(np.float32) @ w.T + self.embed["patch_b"] + self.embed["pos"]).astype(np.float32)

    def pool(self, hidden: np.ndarray) -> np.ndarray:
        """sentence-transformers' Pooling (mean over tokens) then Normalize (L2)."""
        v = hidden.astype(np.float64).mean(axis=0) if self.pooling == "mean" else hidden[0].astype(np.float64)
        if self.normalize:
            v = v / max(np.linalg.norm(v), 1e-12)
        return v.astype(np.float32)


def layernorm_fp32(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return ((x - mu) / np.sqrt(var + eps) * g + b).astype(np.float32)


def erf_fp32(x: np.ndarray) -> np.ndarray:
    """erf to ~1.5e-7 absolute (Abramowitz & Stegun 7.1.26), vectorized; enough for float32 work."""
    x = np.asarray(x, dtype=np.float64)
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return s * (1.0 - poly * np.exp(-a * a))


def gelu_fp32(x: np.ndarray, approx: str) -> np.ndarray:
    if approx == "gelu_tanh":
        y = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    else:
        y = 0.5 * x * (1 + erf_fp32(x / math.sqrt(2)))
    return np.asarray(y, dtype=np.float32)


def forward_fp32(enc: Encoder, x: np.ndarray, record: dict[str, float] | None = None) -> np.ndarray:
    """The encoder stack in float32 NumPy on one input's embeddings ``x`` [T, H].

    ``record`` (optional) collects the peak |value| of each named intermediate, the calibration
    ranges the sandwich pass reads (``layer{i}.<site>``).
    """
    c = enc.config

    def note(name: str, v: np.ndarray) -> None:
        if record is not None:
            record[name] = max(record.get(name, 0.0), float(np.abs(v).max()))

    x = x.astype(np.float32)
    for i, w in enumerate(enc.layers):
        p = f"layer{i}"
        h = layernorm_fp32(x, w["ln1_g"], w["ln1_b"], c.eps) if c.pre_norm else x
        a = _attention_fp32(h, w, c)
        o = a @ w["o_w"].T + w["o_b"]
        r = x + o
        note(f"{p}.attn_residual", r)
        note(f"{p}.attn_residual_dev", r - r.mean(-1, keepdims=True))
        if c.pre_norm:
            x = r
            h = layernorm_fp32(x, w["ln2_g"], w["ln2_b"], c.eps)
        else:
            x = h = layernorm_fp32(r, w["ln1_g"], w["ln1_b"], c.eps)
        f = h @ w["fc1_w"].T + w["fc1_b"]
        note(f"{p}.fc1", f)
        f = gelu_fp32(f, c.act) @ w["fc2_w"].T + w["fc2_b"]
        r = x + f
        note(f"{p}.mlp_residual", r)
        note(f"{p}.mlp_residual_dev", r - r.mean(-1, keepdims=True))
        x = r if c.pre_norm else layernorm_fp32(r, w["ln2_g"], w["ln2_b"], c.eps)
    if enc.final_ln is not None:
        x = layernorm_fp32(x, *enc.final_ln, c.eps)
    return x.astype(np.float32)


def _attention_fp32(h: np.ndarray, w: dict[str, np.ndarray], c: EncoderConfig) -> np.ndarray:
    t, d = h.shape[0], c.head_dim
    q = (h @ w["q_w"].T + w["q_b"]).reshape(t, c.heads, d).transpose(1, 0, 2)
    k = (h @ w["k_w"].T + w["k_b"]).reshape(t, c.heads, d).transpose(1, 0, 2)
    v = (h @ w["v_w"].T + w["v_b"]).reshape(t, c.heads, d).transpose(1, 0, 2)
    s = q @ k.transpose(0, 2, 1) / np.float32(math.sqrt(d))
    s = np.exp(s - s.max(-1, keepdims=True))
    p = s / s.sum(-1, keepdims=True)
    return (p @ v).transpose(1, 0, 2).reshape(t, c.hidden).astype(np.float32)


# loading -----------------------------------------------------------------------------------------

def load_encoder(path: str | Path, layers: int | None = None) -> Encoder:
    """Load a BERT/MiniLM or SigLIP/ViT encoder from a Hugging Face directory (or a preset name)."""
    path = Path(path)
    if not path.is_dir():
        if str(path) in PRESETS:
            return load_encoder(synthetic_dir(str(path)), layers)
        raise ModelError(f"{path}: not a model directory or preset (presets: {', '.join(PRESETS)})")
    cfg_path = path / "config.json"
    try:
        cfg = config_from_hf(json.loads(cfg_path.read_text()), str(cfg_path))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"{cfg_path}: cannot read ({exc.__class__.__name__})") from None
    if layers is not None:
        if not 0 < layers <= cfg.layers:
            raise ConfigError(f"--layers must be 1..{cfg.layers}, got {layers}")
        cfg = replace(cfg, layers=layers)
    ckpt = open_checkpoint(path)
    names = ckpt.keys()
    enc = _read_weights(cfg, ckpt, names, str(path))
    enc.path = path
    meta_path = path / "npukit_preset.json"
    if meta_path.exists():
        enc.meta = json.loads(meta_path.read_text())
    _read_sentence_transformers(enc, path)
    return enc


def _prefix(names: list[str], anchor: str) -> str:
    for n in names:
        if n.endswith(anchor):
            return n[: -len(anchor)]
    raise ModelError(f"checkpoint has no tensor ending in {anchor!r}")


def _read_weights(cfg: EncoderConfig, ckpt: Any, names: list[str], where: str) -> Encoder:
    def get(name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        if name not in names:
            raise ModelError(f"{where}: missing tensor {name!r}")
        arr = np.array(ckpt.float32(name), dtype=np.float32)
        if shape is not None and arr.shape != shape:
            raise ModelError(f"{where}: {name} has shape {arr.shape}, expected {shape}")
        return arr

    h, f = cfg.hidden, cfg.intermediate
    shapes = {"q_w": (h, h), "k_w": (h, h), "v_w": (h, h), "o_w": (h, h), "fc1_w": (f, h), "fc2_w": (h, f),
              "fc1_b": (f,)}
    bert = cfg.family == "bert"
    if bert:
        base = _prefix(names, "embeddings.word_embeddings.weight")
        e = base + "embeddings."
        embed = {"word": get(e + "word_embeddings.weight"), "pos": get(e + "position_embeddings.weight"),
                 "type": get(e + "token_type_embeddings.weight"), "ln_g": get(e + "LayerNorm.weight"),
                 "ln_b": get(e + "LayerNorm.bias")}
        layer_fmt, final = base + "encoder.layer.{}.", None
    else:
        base = _prefix(names, "embeddings.patch_embedding.weight")
        e = base + "embeddings."
        embed = {"patch_w": get(e + "patch_embedding.weight"), "patch_b": get(e + "patch_embedding.bias"),
                 "pos": get(e + "position_embedding.weight")}
        layer_fmt = base + "encoder.layers.{}."
        final = (get(base + "post_layernorm.weight"), get(base + "post_layernorm.bias"))
    layers = []
    for i in range(cfg.layers):
        pre = layer_fmt.format(i)
        layers.append({k: get(pre + _LAYER_NAMES[k][0 if bert else 1], shapes.get(k, None if k.endswith("_w")
                                                                                 else (h,)))
                       for k in LAYER_KEYS})
    return Encoder(cfg, embed, layers, final)


def _read_sentence_transformers(enc: Encoder, path: Path) -> None:
    tok = path / "tokenizer.json"
    if tok.exists():
        from tokenizers import Tokenizer

        enc.tokenizer = Tokenizer.from_file(str(tok))
        enc.tokenizer.no_padding()
        st = path / "sentence_bert_config.json"
        if st.exists():
            enc.max_seq_length = int(json.loads(st.read_text()).get("max_seq_length", 512))
        enc.tokenizer.enable_truncation(min(enc.max_seq_length, enc.config.max_positions or 512))
    pool = path / "1_Pooling" / "config.json"
    if pool.exists():
        p = json.loads(pool.read_text())
        enc.pooling = "mean" if p.get("pooling_mode_mean_tokens") else "cls"
    modules = path / "modules.json"
    if modules.exists():
        kinds = [m.get("type", "") for m in json.loads(modules.read_text())]
        enc.normalize = any(k.endswith("Normalize") for k in kinds)


# synthetic presets (SmolVLM's vision-encoder shapes) ------------------------------------------------

PRESETS: dict[str, dict[str, Any]] = {
    # SmolVLM-256M/500M vision tower = SigLIP base patch16 at 512 px: 1024 patches x 768, 12 layers;
    # the seed's exporter pads inputs to 1024x768 and cuts 12 layers into 24 shards.
    "smolvlm-siglip-base-512": {"hidden": 768, "layers": 12, "heads": 12, "intermediate": 3072,
                                "image_size": 512, "patch": 16},
    # SmolVLM-Instruct (v1) vision tower = SigLIP so400m patch14 at 384 px: 729 patches x 1152, 27 layers.
    "smolvlm-siglip-so400m-384": {"hidden": 1152, "layers": 27, "heads": 16, "intermediate": 4304,
                                  "image_size": 384, "patch": 14},
}


def preset_config(name: str, layers: int | None = None, image_size: int | None = None) -> EncoderConfig:
    """A preset's shape; ``layers`` / ``image_size`` shrink it (tests: fewer layers or patches)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown encoder preset {name!r} (known: {', '.join(PRESETS)})")
    p = dict(PRESETS[name])
    if layers is not None:
        p["layers"] = layers
    if image_size is not None:
        if image_size < p["patch"] or image_size % p["patch"]:
            raise ConfigError(f"image size must be a positive multiple of the patch size {p['patch']}, "
                              f"got {image_size}")
        p["image_size"] = image_size
    return EncoderConfig("siglip", act="gelu_tanh", eps=1e-6, **p)


def shape_only(name: str, layers: int | None = None, image_size: int | None = None) -> Encoder:
    """A preset's encoder with zero weights (lazy pages): for compiling and timing, not for numbers."""
    cfg = preset_config(name, layers, image_size)
    h, f = cfg.hidden, cfg.intermediate
    shapes = {"q_w": (h, h), "k_w": (h, h), "v_w": (h, h), "o_w": (h, h), "fc1_w": (f, h), "fc2_w": (h, f),
              "fc1_b": (f,)}
    layers_ = [{k: np.zeros(shapes.get(k, (h,)), np.float16) for k in LAYER_KEYS} for _ in range(cfg.layers)]
    return Encoder(cfg, {}, layers_, (np.zeros(h, np.float16), np.zeros(h, np.float16)),
                   meta={"name": f"{name} (shapes only)"})


def synthetic_dir(name: str, layers: int | None = None, seed: int = 0, spikes: float = 0.0,
                  root: str | Path | None = None, image_size: int | None = None) -> Path:
    """Write (once) an HF directory for preset ``name`` with seeded random weights; return its path.

    ``spikes`` > 0 plants the activation spikes the seed met in SigLIP: two residual channels whose
    position embeddings carry values of that size (documented as synthetic, not a real checkpoint).
    """
    cfg = preset_config(name, layers, image_size)
    root = Path(root) if root else Path.home() / ".cache" / "npukit" / "encoders"
    tag = f"{name}-L{cfg.layers}-px{cfg.image_size}-s{seed}" + (f"-spike{spikes:g}" if spikes else "")
    out = root / tag
    if (out / "model.safetensors").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    h, f = cfg.hidden, cfg.intermediate

    def rnd(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float32)

    pre = "vision_model."
    pos = rnd(cfg.seq_len, h, std=0.5)
    if spikes:
        pos[:, :2] += np.float32(spikes) * np.sign(rnd(cfg.seq_len, 2, std=1.0) + 0.5)
    t: dict[str, np.ndarray] = {
        pre + "embeddings.patch_embedding.weight": rnd(h, cfg.channels, cfg.patch, cfg.patch),
        pre + "embeddings.patch_embedding.bias": rnd(h),
        pre + "embeddings.position_embedding.weight": pos,
        pre + "post_layernorm.weight": 1 + rnd(h), pre + "post_layernorm.bias": rnd(h),
    }
    shapes = {"q_w": (h, h), "k_w": (h, h), "v_w": (h, h), "o_w": (h, h), "fc1_w": (f, h), "fc2_w": (h, f),
              "fc1_b": (f,)}
    for i in range(cfg.layers):
        for k in LAYER_KEYS:
            shape = shapes.get(k, (h,))
            val = 1 + rnd(*shape) if k.endswith("_g") else rnd(*shape, std=0.05 if k.endswith("_w") else 0.02)
            t[f"{pre}encoder.layers.{i}.{_LAYER_NAMES[k][1]}"] = val
    save_safetensors(out / "model.safetensors", t)
    (out / "config.json").write_text(json.dumps(cfg.to_hf(), indent=1))
    (out / "npukit_preset.json").write_text(json.dumps({"name": name, "seed": seed, "spikes": spikes,
                                                         "synthetic": True}))
    return out
