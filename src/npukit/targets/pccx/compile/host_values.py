"""Values the host makes for a compiled pccx program: a host vector's BF16 bits as they cross into L2
(`host_bits`), the per-token host inputs a program's recipes name (`eval_recipe`), and the BF16
rounding of the scalar constants a trace uses (`bf16_scalar`, memoised)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.compile.ir import CompileError
from npukit.targets.pccx.gemma3n_quant.model import Gemma3nW4A8

F32 = np.float32

_BF16: dict[tuple, np.float32] = {}  # (value, its sign) -> the scalar rounded to BF16 (`bf16_scalar`)


def bf16_scalar(x: Any) -> np.float32:
    """`numerics.bf16` of one scalar, memoised by value and sign (-0.0 apart; a NaN is never found: made
    each time): a chunk program's trace rounds its few constants tens of thousands of times."""
    try:
        key = (x, math.copysign(1.0, x))
        got = _BF16.get(key)
    except TypeError:  # (an array or another unhashable scalar)
        return nx.bf16(x)[()]
    if got is None:
        if len(_BF16) >= 1 << 12:
            _BF16.clear()
        got = _BF16[key] = nx.bf16(x)[()]
    return got


def host_bits(x: Any) -> np.ndarray:
    """A host vector as it crosses into L2 (`PccxOps.host_to_l2`): float32, then one BF16 rounding —
    round to nearest even on the float32 bit pattern (what `numerics.to_bits` computes, in a few vector
    operations: per token this runs on the embedding, PLE and RoPE rows); NaN -> 0x7FC0 | sign."""
    u = np.ascontiguousarray(x, F32).reshape(-1).view(np.uint32)
    bits = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        bits[nan] = ((u[nan] >> 16) & 0x8000) | 0x7FC0
    return bits


def eval_recipe(model: Gemma3nW4A8, recipe: tuple, tokens: list[int], pos: int, memo: dict) -> np.ndarray:
    """The BF16 bits of one per-token host input. Programs are lowered from position 0 with token ids
    0, 1, … (decode: one token, id 0), so a recipe's token / position argument is the token's index
    in ``tokens``, which start at position ``pos``. ``memo`` shares RoPE rows within a call."""
    kind = recipe[0]
    if kind == "rope":
        key = ("rope", recipe[1], recipe[3])
        if key not in memo:
            memo[key] = tuple(host_bits(r) for r in Gemma3nW4A8.host_rope(model, recipe[1], pos + recipe[3]))
        return memo[key][recipe[2]]
    if kind == "embed":
        return host_bits(Gemma3nW4A8.host_embed(model, tokens[recipe[1]]))
    if kind == "ple":
        return host_bits(Gemma3nW4A8.host_ple(model, tokens[recipe[1]]))
    raise CompileError(f"unknown host input recipe {recipe!r}")
