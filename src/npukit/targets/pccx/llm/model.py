"""`LlmW4A8`: a GGUF Gemma 3 / Llama decoder with pccx's W4A8 matrix arithmetic and KV formats.

Every matrix product (q, k, v, o, gate, up, down and the tied LM head) is the grouped pccx GEMV of
`npukit.targets.pccx.llm.w4a8` on BF16 activations, with the weights quantised once by its policy;
the embedding rows are read from the same INT4 table (one copy serves lookup and LM head). Keys and
values enter the cache through pccx's KV write path (`npukit.targets.pccx.memory.kv_quantize`: fp16,
or int8 / int4 absmax per token and head). The vector operations between the products (norms, RoPE,
softmax, SiLU / GELU) are the float32 reference's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from npukit.errors import ConfigError
from npukit.models.llm.reference import LlmReference
from npukit.models.llm.weights import LlmWeights
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.llm.w4a8 import GroupedMatrix, grouped_gemm, relative_error
from npukit.targets.pccx.memory import kv_quantize

KV_MODES = ("fp16", "int8", "int4")
DEFAULT_GROUP = 32
# GGUF tensor name part -> tensor class (the unit of the error report and of the INT8 ablation)
CLASSES = {"attn_q": "q", "attn_k": "k", "attn_v": "v", "attn_output": "o", "ffn_gate": "gate",
           "ffn_up": "up", "ffn_down": "down", "token_embd": "embed", "output": "embed"}


def tensor_class(name: str) -> str:
    part = name.split(".")[-2]
    return CLASSES[part]


class LlmW4A8(LlmReference):
    """``keep_int8``: tensor classes held in INT8 instead of INT4 (the ablation)."""

    def __init__(self, weights: LlmWeights, kv: str = "fp16", group: int = DEFAULT_GROUP,
                 keep_int8: Iterable[str] = ()) -> None:
        if kv not in KV_MODES:
            raise ConfigError(f"kv mode {kv!r} unsupported on quant (use one of {', '.join(KV_MODES)})")
        keep = set(keep_int8)
        unknown = keep - set(CLASSES.values())
        if unknown:
            raise ConfigError(f"unknown tensor class(es) {sorted(unknown)} (known: "
                              f"{', '.join(sorted(set(CLASSES.values())))})")
        super().__init__(weights, kv="fp32", linear=self._linear)
        self.kv, self.group, self.keep_int8 = kv, group, keep
        self.matrices: dict[str, GroupedMatrix] = {}
        self.errors: dict[str, list[tuple[float, int]]] = {}

    def matrix(self, name: str) -> GroupedMatrix:
        got = self.matrices.get(name)
        if got is None:
            w = self.w.tensor(name)
            cls = tensor_class(name)
            got = GroupedMatrix.quantize(w, self.group, "int8" if cls in self.keep_int8 else "int4")
            self.errors.setdefault(cls, []).append((relative_error(w, got), w.size))
            self.matrices[name] = got
        return got

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return grouped_gemm(nx.bf16(x), self.matrix(name))

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        table = self.matrix("token_embd.weight")
        rows = table.codes[tokens].astype(np.float32)
        m, k = rows.shape
        return (rows.reshape(m, k // table.group, table.group) * table.scale[tokens][..., None]).reshape(m, k)

    def kv_store(self, x: np.ndarray) -> np.ndarray:
        codes, scale = kv_quantize(nx.bf16(x), self.kv)
        if scale is None:
            return codes.astype(np.float32)
        return codes.astype(np.float32) * scale[..., None]

    def class_errors(self) -> dict[str, float]:
        """Weighted mean relative Frobenius error of each tensor class quantised so far."""
        return {c: sum(e * n for e, n in v) / sum(n for _, n in v) for c, v in sorted(self.errors.items())}

    def stats(self) -> dict[str, Any]:
        c = self.cfg
        bits = {"fp16": 16, "int8": 8, "int4": 4}[self.kv]
        per_token = 2 * c.num_layers * c.num_kv_heads * c.head_dim * bits // 8
        return {"positions": self.pos, "kv_bytes": per_token * self.pos, "kv": self.kv,
                "weight_error": self.class_errors()}
