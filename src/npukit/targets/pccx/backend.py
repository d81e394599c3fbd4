"""The ``pccx`` target for Gemma 3n: the model compiled to pccx programs and run on the simulated NPU.

Options (``npukit generate --target pccx``): ``hw`` (preset name or TOML path, default
``pccx-v002-kv260``) with ``set`` overrides, ``kv_max_tokens`` / ``kv_sink`` / ``kv_window`` (the
KV ring; window = max_tokens - sink), ``trace`` (Perfetto JSON of the timed tokens), ``executor``
(``fast``, the default: the pre-decoded bit-identical replay; ``reference``: the readable
simulator), ``prefill`` (``gemm``, the default: the prompt in chunks whose weight
matrices are GEMMs, `PccxDriver.prefill`; ``decode``: token by token through the decode program).

Stats: simulated cycles per decode token, per-engine utilisation, the bottleneck and the projected
tok/s on the chosen hardware, and the prompt's simulated cycles (``prefill_cycles``,
``prefill_cycles_per_token``, ``projected_prefill_tok_per_s``), each a ``derived`` figure (source:
hw preset + pccx timing model), plus the compile report (instruction counts per type, extensions
and why, L2 peak, constant cache, host DDR image; a prefill chunk's own under ``prefill_chunk``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from npukit import hw as hwmod
from npukit.errors import ConfigError, ModelError
from npukit.evidence import Ledger, Tier
from npukit.runtime.backends import register_backend
from npukit.targets.pccx.gemma3n_quant import KV_FORMATS
from npukit.targets.pccx.gemma3n_quant.cache import load_store
from npukit.targets.pccx.kv_ring import ring_size

# at most this many program runs (the last ones) go into a --trace file: each is ~10 k events at hidden
# 1024, and building them is most of what --trace costs (16 runs measured 1.17-1.27x a 64-token run)
TRACE_TOKENS = 8
PREFILL_MODES = ("gemm", "decode")


class Gemma3nPccx:
    target = "pccx"
    acyclic_steps = True  # a decode step leaves no reference cycles (`runtime.generate.YOUNG_THRESHOLD`)

    def __init__(self, model: Any, kv: str = "fp16", hw: str | None = None, overrides: Sequence[str] = (),
                 kv_max_tokens: int | None = None, kv_sink: int | None = None, kv_window: int | None = None,
                 trace: str | None = None, executor: str = "fast", profile: str = "extended",
                 prefill: str = "gemm") -> None:
        # imported here, not at the top: listing the targets (every `npukit generate`) must not import
        # numba and the compiler; before t0, so ``setup_s`` keeps counting the setup alone, as before
        from npukit.targets.pccx.driver import PccxDriver

        t0 = time.perf_counter()
        if prefill not in PREFILL_MODES:
            raise ConfigError(f"unknown prefill mode {prefill!r} (known: {', '.join(PREFILL_MODES)})")
        self.prefill_mode = prefill
        self.hw_name = hw or "pccx-v002-kv260"
        self.overrides = list(overrides or ())
        self.hw = hwmod.load_hw(self.hw_name, self.overrides, expect="pccx")
        self.kv, self.trace_path = kv, trace
        cap, sink = ring_size(kv_max_tokens, kv_sink, kv_window)
        self.store, self.int4_source = load_store(model.weights)  # INT4 image cached by content hash
        # NPUKIT_PCCX_TIMING_WORKERS=N: the timing model in N worker processes beside the generation loop
        # (bit-identical cycles); off by default: on 2 shared cores it measured slower than in line
        workers = int(os.environ.get("NPUKIT_PCCX_TIMING_WORKERS", "0") or 0)
        self.drv = PccxDriver(self.hw, profile, executor, timing="pool" if workers > 0 else True,
                              timing_workers=workers or None).open().load(self.store)
        if getattr(self.drv.dev, "backend", None) == "numpy":  # numba missing: say so once, at start
            print("npukit: note: numba is not importable; --target pccx runs its NumPy kernels "
                  "(bit-identical, several times slower)", file=sys.stderr)
        self.drv.kv_init(kv, cap, sink).start()
        self.setup_s = time.perf_counter() - t0
        self.prefill_tokens = 0

    def reset(self) -> None:
        self.drv.reset()
        self.prefill_tokens = 0

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        if not len(ids):
            raise ModelError("no input tokens")
        self._forget_old_trace()
        logits = self.drv.prefill([int(t) for t in ids], batched=self.prefill_mode == "gemm")
        self.prefill_tokens = len(ids)
        self._forget_old_timing()
        return logits

    def step(self, token: int) -> np.ndarray:
        cfg = self.store.config
        if not 0 <= token < cfg.vocab_size:
            raise ModelError(f"token id {token} out of range [0, {cfg.vocab_size})")
        if self.drv.position >= cfg.max_position_embeddings:
            raise ModelError(f"context exceeds max_position_embeddings {cfg.max_position_embeddings}")
        self._forget_old_trace()
        logits = self.drv.step(token)
        self._forget_old_timing()
        return logits

    def _forget_old_trace(self) -> None:
        """The executor's instruction trace keeps this call's program runs only: nothing here reads
        older entries (the timing model gets each run's Work records from the run itself), and kept
        they held every Work record alive, ~2 600 per token (~70 MB per 1 000 tokens)."""
        trace = getattr(self.drv.dev, "trace", None)
        if trace:
            trace.clear()  # in place: the executor's compiled steps append to this very list

    def _forget_old_timing(self) -> None:
        """Keep the schedules a trace or the figures can still use (the last TRACE_TOKENS runs); the
        cycle counts stay in every record."""
        recs = self.drv.records
        # by index, as the slice recs[max(0, len(recs) - TRACE_TOKENS - 1)::-1] walked them (no copy)
        for i in range(max(0, len(recs) - TRACE_TOKENS - 1) if recs else -1, -1, -1):
            r = recs[i]
            if r.timed is None:  # (`timed`, not `timing`: a schedule not built yet is never built)
                break
            if r is not recs[-1]:
                r.timed = None

    def close(self) -> None:
        """End of a generation: wait for the timing workers, write the --trace file once (it covers the
        last TRACE_TOKENS runs)."""
        self.drv.sync(TRACE_TOKENS)
        if self.trace_path:
            self._write_trace()

    def _write_trace(self) -> None:
        """One JSON document: each run's events encoded on their own (two halves on two cores), with
        the garbage collector paused."""
        from pathlib import Path

        from npukit.sim.trace import dumps, encode_each, gc_paused, to_trace

        runs = [r for r in self.drv.records[-TRACE_TOKENS:] if r.timed is not None]
        starts, t_us = {}, 0.0  # one timeline: each run starts where the one before it ended
        for r in runs:
            starts[id(r)] = t_us
            t_us += r.timing.seconds * 1e6

        def encode(r: Any) -> bytes:
            last = r.position + r.tokens - 1
            what = f"prefill {r.position}..{last}" if r.tokens > 1 else f"token {r.position}"
            events = to_trace(r.timing, process=f"pccx {self.hw_name} {what}", pid=r.position + 1,
                              start_us=starts[id(r)])
            return dumps(events["traceEvents"])[1:-1]

        with gc_paused():
            parts = [p for p in encode_each(runs, encode) if p]
        with Path(self.trace_path).open("wb") as f:
            f.write(b'{"traceEvents":[' + b",".join(parts) + b'],"displayTimeUnit":"ns"}')

    def figures(self) -> Ledger:
        self.drv.sync(TRACE_TOKENS)
        led = Ledger()
        recs = [r for r in self.drv.records if r.cycles is not None]
        if not recs:
            return led
        src = f"hw {self.hw_name}" + (f" ({', '.join(self.overrides)})" if self.overrides else "") + \
            " + pccx timing model (targets/pccx/timing.py)"
        clock = self.hw.clocks.core_hz
        prompt = [r for r in recs if r.phase == "prefill"]
        if prompt:
            total, n = float(sum(r.cycles for r in prompt)), sum(r.tokens for r in prompt)
            how = f"prefill={self.prefill_mode}, {n} prompt tokens in {len(prompt)} program runs"
            led.add("prefill_cycles", total, "cycles", Tier.DERIVED, src + f", {how}")
            led.add("prefill_cycles_per_token", total / n, "cycles", Tier.DERIVED, src + f", {how}")
            led.add("projected_prefill_tok_per_s", clock * n / total, "tok/s", Tier.DERIVED,
                    src + ", core clock · prompt tokens / prefill cycles")
        decode = [r for r in recs if r.phase == "decode"] or recs
        cyc = float(np.mean([r.cycles / r.tokens for r in decode]))
        led.add("cycles_per_token", cyc, "cycles", Tier.DERIVED, src + ", mean over decode tokens")
        led.add("projected_tok_per_s", clock / cyc, "tok/s", Tier.DERIVED, src + ", core clock / cycles")
        last = decode[-1].timed  # (its engines alone: the full schedule of a prefill chunk costs ~0.1 s)
        engines, last_cycles = last.engines(), last.cycles
        util = {}
        for name, e in engines.items():
            util[name] = e.busy / last_cycles if last_cycles else 0.0
            led.add(f"util_{name}", util[name], "fraction", Tier.DERIVED, src + ", last token, busy / cycles")
        weights = engines["gemv"].stalls.get("weights", 0.0) / last_cycles if last_cycles else 0.0
        led.add("gemv_weight_stall", weights, "fraction", Tier.DERIVED, src + ", last token")
        return led

    def bottleneck(self) -> str:
        self.drv.sync(TRACE_TOKENS)
        recs = [r for r in self.drv.records if r.timed is not None]
        if not recs:
            return "n/a"
        engines = recs[-1].timed.engines()
        cand = {f"{k} engine": v.busy for k, v in engines.items()}
        cand["weight stream (DDR)"] = engines["gemv"].stalls.get("weights", 0.0) + 0.0
        return max(cand, key=cand.get)

    def stats(self) -> dict[str, Any]:
        self.drv.sync(TRACE_TOKENS)
        recs = self.drv.records
        return {"target": self.target, "kv": self.kv, "position": self.drv.position, "hw": self.hw_name,
                "overrides": self.overrides, "executor": self.drv.executor, "prefill": self.prefill_mode,
                "kv_ring": {"max_tokens": self.drv.ring.max_tokens, "sink": self.drv.ring.sink},
                "setup_seconds": round(self.setup_s, 3), "int4_weights": self.int4_source,
                "instructions_per_token": recs[-1].instructions if recs else 0,
                "simulated_cycles_per_token": [r.cycles for r in recs if r.phase == "decode"],
                "simulated_prefill_runs": [{"position": r.position, "tokens": r.tokens, "cycles": r.cycles,
                                            "instructions": r.instructions}
                                           for r in recs if r.phase == "prefill"],
                "bottleneck": self.bottleneck(),
                **self.figures().to_json(),
                "compile": self.drv.compile_report()}


register_backend("gemma3n", "pccx", Gemma3nPccx, kv_modes=KV_FORMATS,
                 help="compiled onto pccx v002 (extended profile), run on the simulated NPU; timing derived")
