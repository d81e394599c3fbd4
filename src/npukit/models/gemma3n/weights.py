"""Gemma 3n weights: canonical tensor names and shapes, checkpoint key mapping, synthetic weights.

Canonical names are those of transformers' ``Gemma3nTextModel`` (``layers.3.mlp.gate_proj.weight``,
``embed_tokens.weight``, …) plus ``lm_head.weight`` when embeddings are not tied. A checkpoint
stores them under a prefix: ``model.`` (``Gemma3nForCausalLM``), ``model.language_model.``
(``Gemma3nForConditionalGeneration``; transformers 5.23 maps this onto the causal-LM names with a
``PrefixChange(prefix_to_remove="language_model", model_prefix="model")``) or none (a bare text
model). KV-shared layers have no k/v projections or norms; checkpoints that carry them anyway
(the hub ones do) are fine — the keys are ignored, as transformers ignores them.

`Gemma3nWeights` validates presence and shape of every tensor up front and then hands out one
float32 tensor at a time (``get``) or rows of one (``rows``, for embedding lookups), so a caller
never has to hold the whole model. `SyntheticSource` generates deterministic weights per tensor
on demand from a seed and the tensor name, in fixed row blocks, so row lookups and whole-tensor
reads agree and nothing larger than one tensor is ever materialised.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping

import numpy as np

from npukit.errors import ModelError
from npukit.models.gemma3n.config import Gemma3nConfig
from npukit.models.safetensors import TensorSource

PREFIXES = ("model.language_model.", "model.", "language_model.model.", "language_model.", "")
EMBED = "embed_tokens.weight"
EMBED_PLE = "embed_tokens_per_layer.weight"
LM_HEAD = "lm_head.weight"
LOOKUP_TABLES = (EMBED_PLE,)  # only ever read by rows


def layer_shapes(cfg: Gemma3nConfig, i: int) -> dict[str, tuple[int, ...]]:
    """Canonical name → shape for decoder layer ``i`` (names relative to ``layers.{i}.``)."""
    h, n, p, r = cfg.hidden_size, cfg.altup_num_inputs, cfg.hidden_size_per_layer_input, cfg.laurel_rank
    d, inter = cfg.head_dim, cfg.intermediate_size[i]
    s: dict[str, tuple[int, ...]] = {
        "self_attn.q_proj.weight": (cfg.q_dim, h),
        "self_attn.q_norm.weight": (d,),
        "self_attn.o_proj.weight": (h, cfg.q_dim),
    }
    if not cfg.is_kv_shared(i):
        s |= {"self_attn.k_proj.weight": (cfg.kv_dim, h), "self_attn.v_proj.weight": (cfg.kv_dim, h),
              "self_attn.k_norm.weight": (d,)}
    s |= {
        "mlp.gate_proj.weight": (inter, h), "mlp.up_proj.weight": (inter, h),
        "mlp.down_proj.weight": (h, inter),
        "input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
        "pre_feedforward_layernorm.weight": (h,), "post_feedforward_layernorm.weight": (h,),
        "altup.correct_output_scale": (h,), "altup.correction_coefs.weight": (n, n),
        "altup.prediction_coefs.weight": (n * n, n), "altup.modality_router.weight": (n, h),
        "altup.router_norm.weight": (h,),
        "laurel.linear_left.weight": (r, h), "laurel.linear_right.weight": (h, r),
        "laurel.post_laurel_norm.weight": (h,),
        "per_layer_input_gate.weight": (p, h), "per_layer_projection.weight": (h, p),
        "post_per_layer_input_norm.weight": (h,),
    }
    return s


def expected_shapes(cfg: Gemma3nConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the text decoder needs, canonical name → shape, in execution order."""
    h = cfg.hidden_size
    s: dict[str, tuple[int, ...]] = {
        EMBED: (cfg.vocab_size, h),
        EMBED_PLE: (cfg.vocab_size_per_layer_input, cfg.ple_dim),
        "per_layer_model_projection.weight": (cfg.ple_dim, h),
        "per_layer_projection_norm.weight": (cfg.hidden_size_per_layer_input,),
    }
    for k in range(cfg.altup_num_inputs - 1):
        s[f"altup_projections.{k}.weight"] = (h, h)
    for i in range(cfg.num_hidden_layers):
        s |= {f"layers.{i}.{k}": v for k, v in layer_shapes(cfg, i).items()}
    for k in range(cfg.altup_num_inputs - 1):
        s[f"altup_unembed_projections.{k}.weight"] = (h, h)
    s["norm.weight"] = (h,)
    if not cfg.tie_word_embeddings:
        s[LM_HEAD] = (cfg.vocab_size, h)
    return s


def parameter_count(cfg: Gemma3nConfig) -> int:
    return sum(math.prod(v) for v in expected_shapes(cfg).values())


class Gemma3nWeights:
    """Validated, lazily read Gemma 3n weights over any `TensorSource`."""

    def __init__(self, cfg: Gemma3nConfig, source: TensorSource, origin: str = "checkpoint") -> None:
        self.config, self.source, self.origin = cfg, source, origin
        self.shapes = expected_shapes(cfg)
        keys = set(source.keys())
        self.prefix = self._find_prefix(keys)
        # the output head sits beside the decoder ("lm_head.weight"), not under its prefix
        self._keys = {n: self.prefix + n for n in self.shapes}
        if LM_HEAD in self._keys and LM_HEAD in keys:
            self._keys[LM_HEAD] = LM_HEAD
        missing = [k for k in self._keys.values() if k not in keys]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ModelError(f"{origin}: missing tensor {missing[0]!r}{more}")
        for n, want in self.shapes.items():
            key = self._keys[n]
            got = tuple(source.shape(key))
            if got != want:
                raise ModelError(f"{origin}: tensor {key!r} has shape {list(got)}, config needs {list(want)}")
            if source.dtype(key) not in ("F32", "F16", "BF16", "F64"):
                raise ModelError(f"{origin}: tensor {key!r} has non-float dtype {source.dtype(key)}")

    def _find_prefix(self, keys: set[str]) -> str:
        for pre in PREFIXES:
            if pre + EMBED in keys and pre + "layers.0.mlp.gate_proj.weight" in keys:
                return pre
        raise ModelError(f"{self.origin}: no Gemma 3n text-decoder tensors found "
                         f"(looked for {EMBED!r} under prefixes {', '.join(repr(p) for p in PREFIXES[:-1])})")

    def _key(self, name: str) -> str:
        if name == LM_HEAD and self.config.tie_word_embeddings:
            name = EMBED
        key = self._keys.get(name)
        if key is None:
            raise ModelError(f"{self.origin}: no Gemma 3n tensor {name!r}")
        return key

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.source.shape(self._key(name)))

    def get(self, name: str) -> np.ndarray:
        """One tensor as float32 (a read-only memmap view when stored as F32)."""
        return self.source.float32(self._key(name))

    def rows(self, name: str, index: np.ndarray | slice) -> np.ndarray:
        """Selected rows of a 2-D tensor as float32, without reading the rest."""
        return self.source.rows(self._key(name), index)

    def layer(self, i: int) -> dict[str, np.ndarray]:
        """All tensors of decoder layer ``i``, names relative to the layer."""
        return {k: self.get(f"layers.{i}.{k}") for k in layer_shapes(self.config, i)}

    def is_mapped(self, name: str) -> bool:
        """True when ``get`` costs no private memory (an F32 view of the memory map)."""
        return self.source.is_mapped(self._key(name))

    def nbytes_f32(self, names: list[str] | None = None) -> int:
        return 4 * sum(math.prod(self.shapes[n]) for n in (names or self.shapes))


# ---- synthetic weights ---------------------------------------------------------------------

_BLOCK_VALUES = 1 << 20  # values per generated block: the unit of random access


def _block_rows(shape: tuple[int, ...]) -> int:
    row = math.prod(shape[1:]) if len(shape) > 1 else 1
    return max(1, _BLOCK_VALUES // max(row, 1)) if len(shape) > 1 else max(1, shape[0] if shape else 1)


class SyntheticSource:
    """Deterministic pseudo-random float32 tensors, generated per tensor (in row blocks) on demand.

    ``init(name, shape) -> (centre, half_width)``: values are uniform in centre ± half_width. Each
    row block is seeded from (seed, name, block index), so any row is reproducible on its own."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]], seed: int,
                 init: Callable[[str, tuple[int, ...]], tuple[float, float]]) -> None:
        self.shapes = dict(shapes)
        self.seed = int(seed)
        self.init = init

    def keys(self) -> list[str]:
        return list(self.shapes)

    def shape(self, name: str) -> tuple[int, ...]:
        try:
            return self.shapes[name]
        except KeyError:
            raise ModelError(f"synthetic weights: no tensor {name!r}") from None

    def dtype(self, name: str) -> str:
        self.shape(name)
        return "F32"

    def is_mapped(self, name: str) -> bool:
        return False

    def _block(self, name: str, shape: tuple[int, ...], b: int, nrows: int,
               out: np.ndarray | None = None) -> np.ndarray:
        digest = hashlib.blake2b(f"{self.seed}/{name}/{b}".encode(), digest_size=8).digest()
        rng = np.random.Generator(np.random.PCG64(int.from_bytes(digest, "little")))
        centre, half = self.init(name, shape)
        if out is None:
            out = np.empty((nrows, *shape[1:]), np.float32)
        rng.random(dtype=np.float32, out=out)  # generated in place: no second copy of a block
        out *= np.float32(2.0 * half)
        out += np.float32(centre - half)
        return out

    def float32(self, name: str) -> np.ndarray:
        shape = self.shape(name)
        if len(shape) <= 1:
            return self._block(name, shape, 0, shape[0] if shape else 1).reshape(shape)
        return self.rows(name, slice(None))

    def rows(self, name: str, index: np.ndarray | slice) -> np.ndarray:
        shape = self.shape(name)
        if len(shape) < 2:
            return self.float32(name)[index]
        per = _block_rows(shape)
        if isinstance(index, slice):
            start, stop, step = index.indices(shape[0])
            if step == 1:
                out = np.empty((max(stop - start, 0), *shape[1:]), np.float32)
                for b in range(start // per, (stop - 1) // per + 1 if stop > start else 0):
                    lo, hi = b * per, min((b + 1) * per, shape[0])
                    a, z = max(lo, start), min(hi, stop)
                    if a == lo and z == hi:  # whole block: generate straight into the output
                        self._block(name, shape, b, hi - lo, out[a - start:z - start])
                    else:
                        out[a - start:z - start] = self._block(name, shape, b, hi - lo)[a - lo:z - lo]
                return out
            index = np.arange(start, stop, step)
        idx = np.asarray(index, dtype=np.int64)
        flat = idx.reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= shape[0]):
            raise ModelError(f"synthetic weights: row index out of range for {name!r}")
        out = np.empty((flat.size, *shape[1:]), np.float32)
        for b in np.unique(flat // per):
            lo, hi = int(b) * per, min((int(b) + 1) * per, shape[0])
            blk = self._block(name, shape, int(b), hi - lo)
            sel = (flat // per) == b
            out[sel] = blk[flat[sel] - lo]
        return out.reshape(*idx.shape, *shape[1:])


def gemma3n_init(cfg: Gemma3nConfig) -> Callable[[str, tuple[int, ...]], tuple[float, float]]:
    """Magnitudes that keep activations O(1) through every layer: unit-variance embeddings after
    their √d scales, 1/√fan_in projections, norm weights near 1, small AltUp coefficients."""
    sqrt3 = math.sqrt(3.0)  # uniform half-width for a given standard deviation

    def init(name: str, shape: tuple[int, ...]) -> tuple[float, float]:
        if name.endswith(EMBED):
            return 0.0, sqrt3 / math.sqrt(cfg.hidden_size)
        if name.endswith(EMBED_PLE):
            return 0.0, sqrt3 / math.sqrt(cfg.hidden_size_per_layer_input)
        if "coefs" in name:
            return 0.0, 0.1
        if name.endswith("correct_output_scale"):
            return 1.0, 0.5
        if len(shape) == 1:  # RMSNorm weights (Gemma 3n has no +1 offset)
            return 1.0, 0.2
        return 0.0, sqrt3 / math.sqrt(shape[1])

    return init


def synthetic_weights(cfg: Gemma3nConfig, seed: int = 0, origin: str = "synthetic") -> Gemma3nWeights:
    """Deterministic synthetic weights for a config (e.g. a shape preset), generated lazily."""
    return Gemma3nWeights(cfg, SyntheticSource(expected_shapes(cfg), seed, gemma3n_init(cfg)), origin)


class DictSource:
    """In-memory tensors (tests, converted state dicts)."""

    def __init__(self, tensors: Mapping[str, np.ndarray]) -> None:
        self.tensors = dict(tensors)

    def keys(self) -> list[str]:
        return list(self.tensors)

    def _t(self, name: str) -> np.ndarray:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelError(f"no tensor {name!r}") from None

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._t(name).shape)

    def dtype(self, name: str) -> str:
        t = self._t(name)
        return {"f4": "F32", "f2": "F16", "f8": "F64"}.get(t.dtype.str[1:], t.dtype.str[1:].upper())

    def float32(self, name: str) -> np.ndarray:
        return np.asarray(self._t(name), dtype=np.float32)

    def rows(self, name: str, index: np.ndarray | slice) -> np.ndarray:
        return np.asarray(self._t(name)[index], dtype=np.float32)

    def is_mapped(self, name: str) -> bool:
        return self._t(name).dtype == np.float32
