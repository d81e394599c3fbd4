"""pccx's compiler as stages of the shared `npukit.compile.pipeline.Pipeline`.

lower (the W4A8 reference traced into IR nodes; a decode step or a prefill chunk) → codegen (nodes to
instruction segments, constant-cache plan, patches) → check (the position-dependent fields encode as
the ISA does for the spans the program was built for). `run["lower"]` keeps the traced
`LoweringOps` (host inputs, recipes, outputs) next to the program, as rk3588's pipeline keeps its plan.
"""

from __future__ import annotations

from typing import Any

from npukit.compile.pipeline import Pipeline, Run, Stage
from npukit.targets.pccx.compile.codegen import CodeGen, Program
from npukit.targets.pccx.compile.lower import LoweringOps, lower_step
from npukit.targets.pccx.compile.lower_prefill import lower_prefill
from npukit.targets.pccx.gemma3n_quant.model import Gemma3nW4A8


def _lower(model: Gemma3nW4A8, ctx: dict[str, Any]) -> LoweringOps:
    tokens = ctx.get("prefill_tokens")
    return lower_step(model, 0) if tokens is None else lower_prefill(model, tokens)


def _codegen(ops: LoweringOps, ctx: dict[str, Any]) -> Program:
    return CodeGen(ctx["hw"], ctx["profile"]).compile_program(ops.nodes)


def _check(prog: Program, ctx: dict[str, Any]) -> Program:
    spans = ctx.get("spans")
    if spans is not None:
        prog.check(spans)
    return prog


PIPELINE = Pipeline([
    Stage("lower", Gemma3nW4A8, LoweringOps, _lower),
    Stage("codegen", LoweringOps, Program, _codegen),
    Stage("check", Program, Program, _check),
])


def compile_model(model: Gemma3nW4A8, hw: Any, profile: str, spans: dict | None = None,
                  prefill_tokens: int | None = None) -> Run:
    """One program: a decode step (``prefill_tokens`` None) or a prefill chunk of that many tokens;
    ``spans`` (decode) are checked against the program's patches."""
    return PIPELINE.run(model, hw=hw, profile=profile, spans=spans, prefill_tokens=prefill_tokens)
