"""`LlmPccxOffload`: the GGUF LLM families with every matrix product compiled to a pccx program
(`npukit.targets.pccx.llm.program`) and run on the functional simulator, timed by the pccx timing model.

What runs where (the first step of the ``pccx`` target for these families; docs/models.md says what is
missing): the matrix products — q, k, v, o, gate, up, down and the LM head, with the weight policy's
INT4/INT8 groups and FP16 offsets — are programs on the simulated NPU, one grouped GEMV per matrix
(slice) in the extended profile (`npukit.targets.pccx.grouped`: bit for bit v002's per-group sequence);
everything between them (norms, RoPE, attention over the KV cache, GELU / SiLU, the embedding lookup) is
the quant target's float32 host code. So the logits are bit-identical to the ``quant`` target by
construction of the same arithmetic, and tests compare them. Each matrix's program and host images are
built once, on first use, and its weight images stay in the simulator's host DDR; a token's cycles are
the timing model's schedule of all its product runs as one instruction stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from npukit.errors import NpukitError
from npukit.models.llm.weights import LlmWeights
from npukit.targets.pccx.asm import assemble
from npukit.targets.pccx.isa import ELEMS_PER_WORD
from npukit.targets.pccx.llm.model import DEFAULT_KEEP_INT8, LlmW4A8
from npukit.targets.pccx.llm.program import HOST_BASE, grouped_product_program
from npukit.targets.pccx.llm.w4a8 import bf16_f32
from npukit.targets.pccx.memory import WORD_BYTES
from npukit.targets.pccx.sim import Simulator
from npukit.targets.pccx.timing import simulate_works

PROFILE = "extended"  # the grouped GEMV is an extended-profile weight layout (docs/targets/pccx.md)


def make_simulator(hw: Any) -> Simulator:
    """The pre-decoded fast executor when it is installed (bit-identical, `FastSimulator`), else the
    reference simulator; extended profile either way (grouped GEMVs)."""
    try:
        from npukit.targets.pccx.fast.fastsim import FastSimulator
    except ImportError:
        return Simulator(hw, PROFILE)
    return FastSimulator(hw, PROFILE, weights="auto")


@dataclass
class _Compiled:
    words: list[int]
    y_word: int
    rows: int
    instructions: int


class LlmPccxOffload(LlmW4A8):
    """``hw``: a `PccxHw` (the simulator's limits and the timing model's rates)."""

    def __init__(self, weights: LlmWeights, hw: Any, kv: str = "fp16",
                 keep_int8: Iterable[str] = DEFAULT_KEEP_INT8) -> None:
        super().__init__(weights, kv=kv, keep_int8=keep_int8)
        self.sim = make_simulator(hw)
        self.hw = self.sim.hw
        self.programs: dict[str, _Compiled] = {}
        self.next_host = HOST_BASE
        self.token_cycles: list[float] = []  # cycles of the matrix products of each forward row
        self.instructions = 0
        self._cycle_memo: dict[tuple[Any, ...], float] = {}

    def _compile(self, name: str) -> _Compiled:
        got = self.programs.get(name)
        if got is None:
            w = self.matrix(name)
            m, k = w.codes.shape
            y_word = -(-k // ELEMS_PER_WORD)
            prog = grouped_product_program(w, 0, y_word, host_base=self.next_host)
            for at, image in prog.images:
                self.sim.host.write(at, np.frombuffer(image, np.uint8))
                self.next_host = max(self.next_host, at + -(-len(image) // WORD_BYTES) * WORD_BYTES)
            got = _Compiled(assemble(prog.source, PROFILE, self.hw), y_word, m, prog.instructions)
            self.programs[name] = got
        return got

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        prog = self._compile(name)
        xs = bf16_f32(np.atleast_2d(x))
        out = np.empty((xs.shape[0], prog.rows), np.float32)
        bits = (xs.view(np.uint32) >> np.uint32(16)).astype(np.uint16)  # xs is BF16 already: exact
        for t, row in enumerate(bits):  # one GEMV program run per token (N = 1)
            self.sim.write_l2_bits(0, row)
            self.sim.load_program(prog.words, name, ())  # (fast executor: the program's cached plan)
            works = self.sim.run()
            if self.sim.error is not None:
                raise NpukitError(f"pccx device error in {name}: {self.sim.error}")
            out[t] = (self.sim.read_l2_bits(prog.y_word, prog.rows).astype(np.uint32) << np.uint32(16)
                      ).view(np.float32)
            # the LM head may run on the last row only: its work belongs to the last token
            self._works[len(self._works) - len(xs) + t].extend(works)
            self.instructions += len(works)
        return out

    def forward(self, ids: Any, all_logits: bool = True) -> np.ndarray:
        n = len(np.atleast_1d(ids))
        self._works: list[list[Any]] = [[] for _ in range(n)]
        logits = super().forward(ids, all_logits)
        # one schedule per token: its products' runs in order, numbered as one stream (weight fetches
        # of the next product may overlap the current one; L2 hazards keep the order)
        self.token_cycles.extend(self._schedule(w) for w in self._works)
        self._works = []
        return logits

    def _schedule(self, works: list[Any]) -> float:
        """The timing model's cycles for one token's instruction stream, memoised on the stream itself
        (every decode token runs the same Work records: the model is deterministic in them)."""
        key = tuple(works)
        got = self._cycle_memo.get(key)
        if got is None:
            if len(self._cycle_memo) >= 64:
                self._cycle_memo.clear()
            got = self._cycle_memo[key] = simulate_works(self.hw, works, renumber=True).cycles
        return got

    def prefill(self, ids: Any) -> np.ndarray:
        self.reset()
        return self.forward(ids, all_logits=False)[-1]  # the LM head for the last position only

    def reset(self) -> None:
        super().reset()
        self.token_cycles = []
