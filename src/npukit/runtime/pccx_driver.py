"""Host driver for Gemma 3n on pccx: open → load → kv_init → start → step (one token per call).

* `open` builds the executor: ``"reference"`` is the readable simulator (`targets/pccx/sim.py`),
  ``"fast"`` the pre-decoded one (`targets/pccx/fastsim.py`, same interface: ``host``,
  ``load_program``, ``run`` → Work list, ``status``, ``error``) when it is installed.
* `load` quantizes nothing itself: it writes the `Int4Store`'s INT4 tiles, row scales and vectors
  into host DDR (`npukit.compiler.image`, zero-copy views) and maps the staging area.
* `kv_init(max_tokens, sink)` lays out the KV ring after the weights (`npukit.runtime.kv_ring`).
* `start` wires the reference model for lowering (`npukit.compiler.lower`).
* `step(token)`: pick the compiled program of the token's attention-span bucket (lowered and
  compiled once per bucket, `npukit.compiler.codegen.Program`), patch the position-dependent
  descriptors (span rows and lengths), write the per-token host inputs (embedding row, PLE row,
  RoPE rows; constants once per program) into staging, run the program segments, performing the
  host KV write between them, read the logits back, and time the token's Work records on the
  hardware model (`targets/pccx/timing.py`). Compile once, replay per token: docs/compiler.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npukit.compiler.codegen import CodeGen, CompileStats, Program, report_extensions
from npukit.compiler.image import STAGING_BASE, STAGING_BYTES, DeviceImage
from npukit.compiler.lower import eval_recipe, lower_step, span_bucket, trace_model, window_key
from npukit.errors import ConfigError, NpukitError
from npukit.models.gemma3n_quant.store import Int4Store
from npukit.runtime.kv_ring import KVRing
from npukit.sim.timing import TimingResult
from npukit.sim.work import Work
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.hw import PccxHw
from npukit.targets.pccx.timing import simulate_works

EXECUTORS = ("reference", "fast")


class DeviceError(NpukitError):
    """The device raised its error interrupt while running a compiled program."""


def make_executor(hw: PccxHw, profile: str, executor: str) -> Any:
    if executor == "reference":
        from npukit.targets.pccx.sim import Simulator

        return Simulator(hw, profile)
    if executor == "fast":
        try:
            mod = importlib.import_module("npukit.targets.pccx.fastsim")
        except ImportError:
            raise ConfigError("executor 'fast' needs npukit.targets.pccx.fastsim (not installed)") from None
        return mod.FastSimulator(hw, profile, weights="auto")
    raise ConfigError(f"unknown executor {executor!r} (known: {', '.join(EXECUTORS)})")


@dataclass
class Variant:
    """One compiled program (a span bucket) and what the host writes for it."""

    key: tuple
    program: Program
    static_inputs: list[tuple[int, np.ndarray]]  # constants: written when the program is switched in
    recipes: list[tuple[int, tuple]]  # per-token host inputs: (staging address, recipe)
    output: tuple[int, int]  # logits (host address, elements)


@dataclass
class TokenRecord:
    position: int
    instructions: int
    compile_s: float
    run_s: float
    cycles: float | None
    timing: TimingResult | None = field(default=None, repr=False)


class PccxDriver:
    def __init__(self, hw: PccxHw | None = None, profile: str = "extended", executor: str = "reference",
                 timing: bool = True) -> None:
        self.hw = hw or PccxHw()
        self.profile, self.executor, self.timing = profile, executor, timing
        self.dev: Any = None
        self.image: DeviceImage | None = None
        self.ring: KVRing | None = None
        self.model: Any = None
        self.records: list[TokenRecord] = []
        self.stats = CompileStats()
        self.last_stats: CompileStats | None = None
        self.variants: dict[tuple, Variant] = {}
        self._current: Variant | None = None
        self._pos = 0

    # ---- setup -------------------------------------------------------------------------------
    def open(self) -> PccxDriver:
        self.dev = make_executor(self.hw, self.profile, self.executor)
        self.dev.host.map(STAGING_BASE, STAGING_BYTES)
        return self

    def load(self, store: Int4Store) -> PccxDriver:
        if self.dev is None:
            raise ConfigError("driver: open() before load()")
        self.store = store
        self.image = DeviceImage(store, self.dev.host)
        return self

    def kv_init(self, kv: str = "fp16", max_tokens: int | None = None, sink: int = 0) -> PccxDriver:
        if self.image is None:
            raise ConfigError("driver: load() before kv_init()")
        cfg = self.store.config
        cap = cfg.max_position_embeddings if max_tokens is None else int(max_tokens)
        self.kv = kv
        self.ring = KVRing(cfg, kv, self.dev.host, self.image.end, cap, sink)
        return self

    def start(self) -> PccxDriver:
        if self.ring is None:
            raise ConfigError("driver: kv_init() before start()")
        self.model, _ = trace_model(self.store, self.kv, self.image, self.ring)
        return self

    def reset(self) -> None:
        self.model.reset()
        self.records.clear()
        self._pos = 0

    @property
    def position(self) -> int:
        return self._pos

    # ---- programs ----------------------------------------------------------------------------
    def spans(self, n: int) -> dict[int, tuple[int, int]]:
        """Per window class (0 = full attention): (first ring row, rows) a query at length n reads."""
        out: dict[int, tuple[int, int]] = {}
        for layer in self.ring.layers:
            out.setdefault(window_key(self.ring, layer), self.ring.span(layer, n))
        return out

    def variant(self, spans: dict[int, tuple[int, int]]) -> Variant:
        """The program for these spans' buckets, lowered and compiled on first use."""
        key = tuple(sorted((wk, span_bucket(c, wk or self.ring.max_tokens)) for wk, (_, c) in spans.items()))
        v = self.variants.get(key)
        if v is None:
            self.model.reset()
            self.model.cache.bucket = dict(key)
            ops = lower_step(self.model, 0)  # host input values come from the recipes per token
            prog = CodeGen(self.hw, self.profile).compile_program(ops.nodes)
            prog.check(spans)  # the fast field patching encodes as the ISA does
            dyn = {a for a, _ in ops.recipes}
            (out,) = ops.outputs
            v = self.variants[key] = Variant(key, prog, [(a, b) for a, b in ops.host_inputs if a not in dyn],
                                             ops.recipes, out)
        return v

    # ---- one token ---------------------------------------------------------------------------
    def step(self, token: int) -> np.ndarray:
        if self.model is None:
            raise ConfigError("driver: start() before step()")
        t0 = time.perf_counter()
        pos = self._pos
        spans = self.spans(pos + 1)
        v = self.variant(spans)
        v.program.patch(spans)
        host = self.dev.host
        if self._current is not v:
            for addr, bits in v.static_inputs:
                host.write(addr, bits.astype("<u2"))
            self._current = v
        memo: dict = {}
        for addr, recipe in v.recipes:
            host.write(addr, eval_recipe(self.model, recipe, [int(token)], pos, memo).astype("<u2"))
        t1 = time.perf_counter()
        stats = v.program.stats
        works: list[Work] = []
        tagged = self.executor == "fast"
        for j, seg in enumerate(v.program.segments):
            if tagged:  # the fast executor diffs the patched words against this segment's last ones
                self.dev.load_program(seg.words, tag=(v.key, j))
            else:
                self.dev.load_program(seg.words)
            out = self.dev.run()
            if self.dev.error is not None:
                raise DeviceError(f"token at position {pos}: {self.dev.error}")
            if self.timing and works:  # the timing model wants one index space for the token
                base = len(works)
                out = [dataclasses.replace(w, index=base + w.index) for w in out]
            works.extend(out)
            if seg.host is not None:
                self._host_step(seg.host, pos)
        addr, n = v.output
        logits = nx.from_bits(host.read(addr, 2 * n).view("<u2")).astype(np.float32)
        t2 = time.perf_counter()
        timing = simulate_works(self.hw, works) if self.timing else None
        self.records.append(TokenRecord(pos, len(works), t1 - t0, t2 - t1,
                                        None if timing is None else timing.cycles, timing))
        self.last_stats = stats
        self._pos += 1
        return logits

    def _host_step(self, st: Any, pos: int) -> None:
        cfg = self.store.config
        shape = (cfg.num_key_value_heads, cfg.head_dim)
        rd = self.dev.host.read
        k = nx.from_bits(rd(st.k_addr, 2 * st.n).view("<u2")).reshape(shape)
        v = nx.from_bits(rd(st.v_addr, 2 * st.n).view("<u2")).reshape(shape)
        self.ring.write(st.layer, pos, k, v)

    # ---- reports -----------------------------------------------------------------------------
    def compile_report(self) -> dict[str, Any]:
        st = self.last_stats or CompileStats()
        img, ring = self.image, self.ring
        return {
            "profile": self.profile,
            "executor": self.executor,
            "per_token": st.to_json(),
            "extensions": report_extensions(st),
            "l2_words": self.hw.l2.words,
            "host_ddr": {"weights_bytes": img.weight_bytes if img else 0,
                         "regions": [dataclasses.asdict(r) for r in (img.regions if img else [])],
                         "kv_ring_bytes": ring.nbytes if ring else 0,
                         "kv_max_tokens": ring.max_tokens if ring else None,
                         "kv_sink": ring.sink if ring else None},
        }
