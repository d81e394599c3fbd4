"""The generation loop: prompt → prefill → sample → step …, streaming tokens as they come.

`generate` drives any `Backend`; the result carries the generated ids, optionally the logits that
chose each of them, and statistics whose timings are ``measured`` (wall clock around the backend
calls) and whose rates are ``derived``, plus the process's peak RSS (``resource.getrusage``).
Generation stops after ``max_new_tokens`` or at a stop token (which is kept in the output).
"""

from __future__ import annotations

import gc
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npukit.errors import ConfigError, ModelError
from npukit.evidence import Ledger, Tier
from npukit.runtime.backends import Backend
from npukit.runtime.sampling import Sampler, SamplingParams


@dataclass
class GenerationResult:
    prompt: list[int]
    tokens: list[int]
    stop_reason: str  # "length" or "stop_token"
    figures: Ledger
    backend_stats: dict[str, Any] = field(default_factory=dict)
    logits: list[np.ndarray] | None = None  # one float32 vocabulary row per generated token

    def stats_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": len(self.prompt),
            "generated_tokens": len(self.tokens),
            "stop_reason": self.stop_reason,
            **self.figures.to_json(),
            "backend": self.backend_stats,
        }

    def to_json(self, with_logits: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt_ids": self.prompt, "tokens": self.tokens, "stats": self.stats_json()}
        if with_logits:
            if self.logits is None:
                raise ConfigError("logits were not kept for this generation")
            out["logits"] = [row.astype(np.float32).tolist() for row in self.logits]
        return out


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports ru_maxrss in KiB)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(kib) * (1 if sys.platform == "darwin" else 1024)


# a backend whose steps leave no reference cycles behind (``acyclic_steps = True``; measured for pccx:
# 0 cyclic objects per decode token, ~2 700 new tracked ones that stay alive) has what each step made
# frozen after it, and young collections run after this many allocations instead of 700: they found
# nothing to free and only rescanned the step's survivors (1.4-1.8 ms a hidden-1024 pccx token)
YOUNG_THRESHOLD = 10_000


@contextmanager
def long_lived_frozen(young: int | None = None) -> Iterator[None]:
    """Generate with the objects made so far frozen (`gc.freeze`: never scanned again) and full
    collections deferred until the end. A simulated backend holds hundreds of thousands of long-lived
    objects (compiled programs, caches); each full collection scanned them all (measured: ~0.5 s
    every ~13 pccx tokens, a third of the decode time). Young collections still run (after ``young``
    allocations if given), so short-lived cycles are still freed; thresholds and the frozen set are
    restored afterwards."""
    old = gc.get_threshold()
    ours = gc.get_freeze_count() == 0  # (a caller that froze objects itself keeps managing them)
    if ours:
        gc.freeze()
    gc.set_threshold(max(old[0], young or 0), old[1], 1 << 30)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        if ours:
            gc.unfreeze()


def generate(backend: Backend, prompt: Sequence[int], max_new_tokens: int,
             sampling: SamplingParams | None = None, stop_ids: Sequence[int] = (),
             vocab_size: int | None = None, keep_logits: bool = False,
             on_token: Callable[[int], None] | None = None) -> GenerationResult:
    """Generate up to ``max_new_tokens`` tokens after ``prompt`` (the backend is reset first).
    ``on_token`` sees each token as soon as it is chosen (the CLI streams and draws progress there)."""
    prompt = [int(t) for t in prompt]
    if not prompt:
        raise ConfigError("empty prompt: give at least one token")
    if max_new_tokens < 0:
        raise ConfigError(f"max-new-tokens must be >= 0, got {max_new_tokens}")
    if vocab_size is not None:
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        if bad:
            raise ModelError(f"prompt token id {bad[0]} out of range [0, {vocab_size})")
    sampler = Sampler(sampling)
    stops = set(stop_ids)
    seen = list(prompt)
    tokens: list[int] = []
    kept: list[np.ndarray] | None = [] if keep_logits else None
    stop_reason = "length"
    backend.reset()
    compiled0 = _compile_seconds()
    acyclic = bool(getattr(backend, "acyclic_steps", False))
    # the prompt too: its programs' plans are long-lived objects by the million (pccx hidden 1024, a
    # 512-token prompt: ~2.2 M, ~700 of them cyclic garbage), which young and middle collections
    # rescanned, and full ones where a process's earlier objects were few (in such a process: 7.5-8.5 s
    # under the default collector with twelve full collections, 5.8-6.0 s so)
    with long_lived_frozen(YOUNG_THRESHOLD if acyclic else None):
        t0 = time.perf_counter()
        logits = backend.prefill(prompt)
        t_prefill = time.perf_counter() - t0
        if acyclic:  # what the prompt made and kept is never scanned either (unfrozen at the end)
            gc.freeze()
        t1 = time.perf_counter()
        for k in range(max_new_tokens):
            tok = sampler(logits, seen)
            tokens.append(tok)
            seen.append(tok)
            if kept is not None:
                kept.append(np.array(logits, dtype=np.float32, copy=True))
            if on_token is not None:
                on_token(tok)
            if tok in stops:
                stop_reason = "stop_token"
                break
            if k + 1 < max_new_tokens:  # the last token needs no forward pass
                logits = backend.step(tok)
                if acyclic:  # what the step made and kept is never scanned (unfrozen at the end)
                    gc.freeze()
        finish = getattr(backend, "close", None)  # e.g. a --trace file, written once, not per token;
        if finish is not None:  # inside decode_s: work a backend deferred (pccx timing) is still its cost
            finish()
    t_decode = time.perf_counter() - t1
    steps = max(len(tokens) - 1, 0)
    led = Ledger()
    src = "time.perf_counter around backend calls"
    led.add("prefill_s", t_prefill, "s", Tier.MEASURED, src)
    led.add("decode_s", t_decode, "s", Tier.MEASURED, src + " (sampling included)")
    led.add("wall_s", t_prefill + t_decode, "s", Tier.MEASURED, src)
    if t_prefill > 0:
        led.add("prefill_tok_per_s", len(prompt) / t_prefill, "tok/s", Tier.DERIVED,
                "prompt tokens / prefill_s")
    if steps and t_decode > 0:
        led.add("decode_tok_per_s", steps / t_decode, "tok/s", Tier.DERIVED, "decode steps / decode_s")
    compiling = _compile_seconds() - compiled0
    if compiling > 0:  # a first run on this CPU: numba compiled kernels (cached on disk for later runs)
        led.add("kernel_compile_s", compiling, "s", Tier.MEASURED,
                "numba compile events during prefill and decode (once per machine and target)")
    led.add("peak_rss_mib", peak_rss_bytes() / 2**20, "MiB", Tier.MEASURED, "resource.getrusage ru_maxrss")
    return GenerationResult(prompt, tokens, stop_reason, led, dict(backend.stats()), kept)


def _compile_seconds() -> float:
    """Seconds spent compiling numba kernels so far in this process (0 when numba never compiled)."""
    report = sys.modules.get("npukit.sim.compile_report")
    return report.compile_seconds() if report is not None else 0.0
