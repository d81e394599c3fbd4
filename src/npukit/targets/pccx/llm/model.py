"""`LlmW4A8`: a GGUF Gemma 3 / Llama decoder with pccx's W4A8 matrix arithmetic and KV formats.

Every matrix product (q, k, v, o, gate, up, down and the tied LM head) is the grouped pccx GEMV of
`npukit.targets.pccx.llm.w4a8` on BF16 activations, with the weights made once by the policy of
`npukit.targets.pccx.llm.policy` (per GGUF type; the classes in ``keep_int8`` at 8 bits, by default
the tied embedding / LM head); the embedding rows are read from the same table (one copy serves lookup
and LM head). Keys and values enter the cache through pccx's KV write path
(`npukit.targets.pccx.memory.kv_quantize`: fp16, or int8 / int4 absmax per token, head and group of
``kv_group`` elements of the head vector). The vector operations between the products (norms, RoPE,
softmax, SiLU / GELU) are the float32 reference's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from npukit.errors import ConfigError
from npukit.models.llm.reference import LlmReference
from npukit.models.llm.weights import LlmWeights, unpermute_rows
from npukit.targets.pccx.llm.calibration import CalibrationUnavailable, calibrated_matrices, needs_gptq
from npukit.targets.pccx.llm.policy import POLICIES, permute_rows, policy_matrix
from npukit.targets.pccx.llm.w4a8 import GroupedMatrix, bf16_f32, grouped_gemm, relative_error
from npukit.targets.pccx.memory import KV_FORMATS, kv_quantize

KV_MODES = KV_FORMATS  # the pccx KV formats (`memory.KV_FORMATS`)
DEFAULT_KEEP_INT8 = ("embed",)  # the ablation's costliest class (docs/models.md)
DEFAULT_KV_GROUP = 32
# GGUF tensor name part -> tensor class (the unit of the error report and of the INT8 ablation)
CLASSES = {"attn_q": "q", "attn_k": "k", "attn_v": "v", "attn_output": "o", "ffn_gate": "gate",
           "ffn_up": "up", "ffn_down": "down", "token_embd": "embed", "output": "embed"}


def tensor_class(name: str) -> str:
    part = name.split(".")[-2]
    return CLASSES[part]


class LlmW4A8(LlmReference):
    """``keep_int8``: tensor classes held at 8 bits instead of INT4 (the policy's choice, and the
    ablation); ``policy``: "gptq" (per GGUF type, the matrices it re-quantises to INT4 GPTQ-rounded on
    calibration text, `calibration`; the default), "gguf" (the same rounded to nearest) or "absmax"
    (the first policy, for comparison);
    ``kv_group``: elements of a head vector sharing one KV scale (``head_dim``: one per head)."""

    def __init__(self, weights: LlmWeights, kv: str = "fp16", keep_int8: Iterable[str] = DEFAULT_KEEP_INT8,
                 policy: str = "gptq", kv_group: int = DEFAULT_KV_GROUP) -> None:
        if kv not in KV_MODES:
            raise ConfigError(f"kv mode {kv!r} unsupported on quant (use one of {', '.join(KV_MODES)})")
        keep = set(keep_int8)
        unknown = keep - set(CLASSES.values())
        if unknown:
            raise ConfigError(f"unknown tensor class(es) {sorted(unknown)} (known: "
                              f"{', '.join(sorted(set(CLASSES.values())))})")
        if policy not in POLICIES:
            raise ConfigError(f"unknown weight policy {policy!r} (known: {', '.join(POLICIES)})")
        if kv_group <= 0 or weights.cfg.head_dim % kv_group:
            raise ConfigError(f"kv group {kv_group} does not divide head_dim {weights.cfg.head_dim}")
        super().__init__(weights, kv="fp32", linear=self._linear)
        self.kv, self.keep_int8, self.policy, self.kv_group = kv, keep, policy, kv_group
        self.matrices: dict[str, GroupedMatrix] = {}
        self.errors: dict[str, list[tuple[float, int]]] = {}
        self.sources: dict[str, set[str]] = {}
        self._gptq: dict[str, GroupedMatrix] | None = None
        self.calibration_note = ""

    def gptq_matrices(self) -> dict[str, GroupedMatrix]:
        """The calibrated matrices (cached on disk); empty, with a note, when calibration cannot run."""
        if self._gptq is None:
            try:
                self._gptq = calibrated_matrices(self.w)
            except CalibrationUnavailable as e:
                self._gptq, self.calibration_note = {}, f"round-to-nearest: {e}"
        return self._gptq

    def _make(self, name: str, w: np.ndarray, keep8: bool) -> GroupedMatrix:
        g = self.w.gguf
        if self.policy == "gptq" and not keep8 and needs_gptq(self.w, name):
            got = self.gptq_matrices().get(name)
            if got is not None:
                return got
        policy = "gguf" if self.policy == "gptq" else self.policy
        return policy_matrix(g.type_name(name), g.raw(name), w, keep8, policy)

    def matrix(self, name: str) -> GroupedMatrix:
        got = self.matrices.get(name)
        if got is None:
            w = self.w.tensor(name)
            cls = tensor_class(name)
            got = self._make(name, w, cls in self.keep_int8)
            if got.source.endswith("lossless") and cls in ("q", "k") and not self.cfg.gemma:
                heads = self.cfg.num_heads if cls == "q" else self.cfg.num_kv_heads
                got = permute_rows(got, unpermute_rows(np.arange(w.shape[0])[:, None], heads)[:, 0])
            self.sources.setdefault(cls, set()).add(got.source)
            self.errors.setdefault(cls, []).append((relative_error(w, got), w.size))
            self.matrices[name] = got
        return got

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return grouped_gemm(bf16_f32(x), self.matrix(name))

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        return self.matrix("token_embd.weight").rows(tokens)

    def kv_store(self, x: np.ndarray) -> np.ndarray:
        """x (heads, T, head_dim) -> the values the cache holds (fp16, or codes · scale per group)."""
        v = bf16_f32(x)
        if self.kv == "fp16":
            return kv_quantize(v, "fp16")[0].astype(np.float32)
        groups = v.reshape(*v.shape[:-1], v.shape[-1] // self.kv_group, self.kv_group)
        codes, scale = kv_quantize(groups, self.kv)
        assert scale is not None
        return (codes.astype(np.float32) * scale[..., None]).reshape(v.shape)

    def class_errors(self) -> dict[str, float]:
        """Weighted mean relative Frobenius error of each tensor class quantised so far."""
        return {c: sum(e * n for e, n in v) / sum(n for _, n in v) for c, v in sorted(self.errors.items())}

    def stats(self) -> dict[str, Any]:
        c = self.cfg
        bits = {"fp16": 16, "int8": 8, "int4": 4}[self.kv]
        scales = 0 if self.kv == "fp16" else 4 * c.head_dim // self.kv_group
        per_token = 2 * c.num_layers * c.num_kv_heads * (c.head_dim * bits // 8 + scales)
        return {"positions": self.pos, "kv_bytes": per_token * self.pos, "kv": self.kv,
                "weight_error": self.class_errors(),
                "weight_policy": {c: sorted(s) for c, s in sorted(self.sources.items())},
                **({"calibration": self.calibration_note} if self.calibration_note else {})}
