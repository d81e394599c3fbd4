"""Host driver for Gemma 3n on pccx: open → load → kv_init → start → step (one token per call).

* `open` builds the executor: ``"reference"`` is the readable simulator (`targets/pccx/sim.py`),
  ``"fast"`` the pre-decoded one (`targets/pccx/fastsim.py`, same interface: ``host``,
  ``load_program``, ``run`` → Work list, ``status``, ``error``) when it is installed.
* `load` quantizes nothing itself: it writes the `Int4Store`'s INT4 tiles, row scales and vectors
  into host DDR (`npukit.targets.pccx.compile.image`, zero-copy views) and maps the staging area.
* `kv_init(max_tokens, sink)` lays out the KV ring after the weights (`npukit.targets.pccx.kv_ring`).
* `start` wires the reference model for lowering (`npukit.targets.pccx.compile.lower`).
* `step(token)`: pick the compiled program of the token's attention-span bucket (lowered and
  compiled once per bucket, `npukit.targets.pccx.compile.codegen.Program`), patch the position-dependent
  descriptors (span rows and lengths), write the per-token host inputs (embedding row, PLE row,
  RoPE rows; constants once per program) into staging, run the program segments, performing the
  host KV write between them, read the logits back, and time the token's Work records on the
  hardware model (`targets/pccx/timing.py`). Compile once, replay per token: docs/compiler.md.
* `prefill(tokens)`: the prompt in chunks of T tokens, each one program whose weight matrices are
  GEMMs with N = T (`npukit.targets.pccx.compile.lower_prefill`), compiled once per (T, span buckets). T is
  ``prefill_limit()`` (the most tokens whose activations fit L2, from the allocator's peak at T = 1
  and 2) or what is left of the prompt; a chunk never holds a position at or past the smallest
  sliding window or ring cap except as its first token (its later K/V writes would evict entries its
  earlier tokens still read), and such tokens, and chunks of one, run through `step`. One
  `TokenRecord` per chunk (``tokens`` = T, ``phase`` = "prefill"), timed as a whole.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npukit.errors import ConfigError, ModelError, NpukitError
from npukit.sim.timing import TimingResult
from npukit.sim.work import Work
from npukit.targets.pccx.compile.codegen import CodeGen, CompileStats, Program, report_extensions
from npukit.targets.pccx.compile.image import STAGING_BASE, STAGING_BYTES, DeviceImage
from npukit.targets.pccx.compile.ir import CapacityError
from npukit.targets.pccx.compile.lower import span_bucket, trace_model, window_key
from npukit.targets.pccx.compile.lower_prefill import GEMM_MAX_N, lower_prefill
from npukit.targets.pccx.compile.progcache import ProgramCache
from npukit.targets.pccx.compile.steps import compile_model
from npukit.targets.pccx.gemma3n_quant.store import Int4Store
from npukit.targets.pccx.host_inputs import HostInputs
from npukit.targets.pccx.hw import PccxHw
from npukit.targets.pccx.kv_ring import KVRing
from npukit.targets.pccx.switch import AheadBuild
from npukit.targets.pccx.timing import _OpRecord, to_ops
from npukit.targets.pccx.timing_token import TimedRun, TokenTimer

EXECUTORS = ("reference", "fast")
# the next span bucket's program is built over the decode steps before the switch (fast executor,
# `switch.AheadBuild`): from SWITCH_LOOKAHEAD steps ahead (or the switch before it), in a few slices
# (`switch.SWITCH_SLICES`), each an even share of what is left and at most `slice_cap` changed plan steps
# (~15 µs each) per token it stands for; 16, not 32: a run that ends in a bucket's first half does not
# build the next bucket's program (from a 4-token prompt, 32 tokens paid ~8 ms of bucket 128's at 1024)
SWITCH_LOOKAHEAD = 16
SWITCH_SLICE = 128


class DeviceError(NpukitError):
    """The device raised its error interrupt while running a compiled program."""


def make_executor(hw: PccxHw, profile: str, executor: str) -> Any:
    if executor == "reference":
        from npukit.targets.pccx.sim import Simulator

        return Simulator(hw, profile)
    if executor == "fast":
        try:
            mod = importlib.import_module("npukit.targets.pccx.fast.fastsim")
        except ImportError:
            raise ConfigError("executor 'fast' needs npukit.targets.pccx.fast.fastsim (not installed)") \
                from None
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
    """One program run: a decode token, or a prefill chunk of ``tokens`` tokens from ``position``."""

    position: int
    instructions: int
    compile_s: float
    run_s: float
    known_cycles: float | None  # (read `cycles`: the schedule may still be running on the timing thread)
    timed: Any = field(default=None, repr=False)  # a `TimedRun`: its full schedule is built when asked for
    tokens: int = 1
    phase: str = "decode"  # decode | prefill (prompt tokens, batched or one by one)
    key: int = -1  # the run's number in the timing pool (timing="pool")

    @property
    def cycles(self) -> float | None:
        """The run's simulated cycles (waited for if its schedule is still being computed)."""
        if self.known_cycles is None and self.timed is not None:
            self.known_cycles = self.timed.cycles
        return self.known_cycles

    @cycles.setter
    def cycles(self, value: float | None) -> None:
        self.known_cycles = value

    @property
    def timing(self) -> TimingResult | None:
        """The run's full schedule (ops, stalls, usage), computed on first use; None once dropped."""
        return None if self.timed is None else self.timed.result()

    @timing.setter
    def timing(self, value: TimingResult | None) -> None:
        self.timed = None if value is None else TimedRun(value.cycles, value)


def slice_cap(calls: int) -> int:
    """The most plan steps one decode token builds ahead with ``calls`` tokens left before the switch:
    SWITCH_SLICE, or more when fewer tokens than the window are left (a short prompt), so that the
    build still finishes by the switch (about SWITCH_LOOKAHEAD slices in all)."""
    return max(SWITCH_SLICE, -(-SWITCH_SLICE * SWITCH_LOOKAHEAD // max(calls, 1)))


class PccxDriver:
    def __init__(self, hw: PccxHw | None = None, profile: str = "extended", executor: str = "reference",
                 timing: bool | str = True, prefill_chunk: int | None = None,
                 timing_workers: int | None = None) -> None:
        if prefill_chunk is not None and prefill_chunk < 1:
            raise ConfigError(f"prefill chunk must be >= 1 token, got {prefill_chunk}")
        self.prefill_chunk = prefill_chunk  # an upper bound on T_max (None: what L2 allows)
        self._last_works: list[Work] = []  # the Work records of the last program run, per segment
        self.hw = hw or PccxHw()
        # timing: True (in line), False (none) or "pool" (worker processes, `timing_pool`; `sync` fills
        # the records' cycles, and the schedules of the latest runs)
        self.profile, self.executor, self.timing = profile, executor, timing
        self.pool: Any = None
        self.timer = TokenTimer(self.hw)  # one token's Work records → cycles (schedule on demand)
        self.timing_workers = timing_workers
        self._runs = 0
        self.dev: Any = None
        self.image: DeviceImage | None = None
        self.ring: KVRing | None = None
        self.model: Any = None
        self.records: list[TokenRecord] = []
        self.stats = CompileStats()
        self.last_stats: CompileStats | None = None
        self.last_prefill_stats: CompileStats | None = None
        self.variants: dict[tuple, Variant] = {}
        self._current: Variant | None = None
        self._pos = 0
        self._prefill_limit: int | None = None
        self.programs = ProgramCache(self)  # compiled variants on disk (a checkpoint seen before)
        self._ahead_missed: set[tuple] = set()  # span buckets `_prepare_ahead` found on no disk
        self._ahead: AheadBuild | None = None  # the program `_prepare_ahead` is building
        self._first_decode_due = False  # a prompt ran: the next decode step builds its program first
        self._decoded_stored: dict[tuple, bool] = {}  # (previous key, key) -> its decoded words on disk
        self._planned_prefill: Variant | None = None  # the prefill program last planned in this process
        self._keys: dict[int, tuple] = {}  # position -> span-bucket key (`_key_at`)
        self._dirty: dict[tuple, list[list[int]]] = {}  # program key -> per segment, its span-patched words
        self._switch: tuple | None = None  # (from, to, next switch): `_next_switch`'s last answer

    # ---- setup -------------------------------------------------------------------------------
    def open(self) -> PccxDriver:
        self.dev = make_executor(self.hw, self.profile, self.executor)
        self.dev.host.map(STAGING_BASE, STAGING_BYTES)
        if self.timing == "pool" and self.pool is None:
            from npukit.targets.pccx.timing_pool import TimingPool

            try:
                self.pool = TimingPool(self.hw, self.timing_workers)
            except (OSError, ValueError, RuntimeError):  # no processes here: time in line
                self.timing = True
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
        self._keys.clear()
        self._switch, self._ahead = None, None
        self.ring = KVRing(cfg, kv, self.dev.host, self.image.end, cap, sink)
        return self

    def start(self) -> PccxDriver:
        if self.ring is None:
            raise ConfigError("driver: kv_init() before start()")
        self.model, _ = trace_model(self.store, self.kv, self.image, self.ring)
        self.inputs = HostInputs(self.model, self.dev.host, self.store)
        return self

    def reset(self) -> None:
        self.model.reset()
        self.records.clear()
        self._pos = 0

    @property
    def last_works(self) -> list[Work]:
        """The last program run's Work records, numbered across its segments (made on request)."""
        ws = self._last_works
        if all(w.index == i for i, w in enumerate(ws)):
            return ws
        return [dataclasses.replace(w, index=i) for i, w in enumerate(ws)]

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
        key = self._bucket_key(spans)
        v = self.variants.get(key) or self.programs.get(key, Variant)
        if v is None:
            self.model.reset()
            self.model.cache.bucket = dict(key)
            run = compile_model(self.model, self.hw, self.profile, spans=spans)  # host inputs: per token
            ops, prog = run["lower"], run.value
            dyn = {a for a, _ in ops.recipes}
            (out,) = ops.outputs
            v = Variant(key, prog, [(a, b) for a, b in ops.host_inputs if a not in dyn], ops.recipes, out)
            self.programs.put(key, v)
        self.variants[key] = v
        return v

    def _bucket_key(self, spans: dict[int, tuple[int, int]]) -> tuple:
        return tuple(sorted((wk, span_bucket(c, wk or self.ring.max_tokens)) for wk, (_, c) in spans.items()))

    def prefill_variant(self, tokens: int, spans: dict[int, tuple[int, int]]) -> Variant:
        """The prefill program for a chunk of ``tokens`` tokens whose last token sees ``spans``."""
        key = ("prefill", tokens, self._bucket_key(spans))
        v = self.variants.get(key) or self.programs.get(key, Variant)  # CapacityError: did not fit before
        if v is None:
            with self.programs.remember_unfit(key):
                self.model.cache.bucket = dict(key[2])
                run = compile_model(self.model, self.hw, self.profile, prefill_tokens=tokens)
                ops, prog = run["lower"], run.value
            dyn = {a for a, _ in ops.recipes}
            (out,) = ops.outputs
            v = Variant(key, prog, [(a, b) for a, b in ops.host_inputs if a not in dyn], ops.recipes, out)
            self.programs.put(key, v)
        self.variants[key] = v
        return v

    # ---- prefill -----------------------------------------------------------------------------
    def prefill_limit(self) -> int:
        """T_max: the most prompt tokens one chunk holds. In the layers the allocator's L2 peak grows
        by a fixed amount per token (T rows of every live activation), so the layers' peak is
        measured at T = 1 and 2 and extrapolated to ``hw.l2.words`` (the last token's unembedding
        and logits do not grow with T); a chunk that still does not fit lowers T (`prefill`)."""
        if self._prefill_limit is None:
            spans = self.spans(2)
            name = ("prefill_limit", self._bucket_key(spans))
            fit = self.programs.get(name, int)
            if fit is None:
                peaks = []
                for t in (1, 2):
                    self.model.cache.bucket = dict(self._bucket_key(spans))
                    ops = lower_prefill(self.model, t, logits=False)
                    peaks.append(CodeGen(self.hw, self.profile).compile(ops.nodes)[1].l2_peak_words)
                per = max(peaks[1] - peaks[0], 1)
                fit = 1 + (self.hw.l2.words - peaks[0]) // per
                self.programs.put(name, fit)
            self._prefill_limit = max(1, min(fit, GEMM_MAX_N, self.store.config.vocab_size,
                                             self.prefill_chunk or GEMM_MAX_N))
        return self._prefill_limit

    def batch_horizon(self) -> int:
        """Positions below this may share a chunk: the smallest sliding window or ring cap (a later
        write in the chunk at or past it would evict an entry an earlier token of the chunk reads)."""
        return min((r.window or self.ring.max_tokens) for r in self.ring.layers.values())

    def chunk_length(self, pos: int, remaining: int) -> int:
        """Tokens in the next chunk from ``pos``: T_max, or what is left of the prompt or of the batch
        horizon (a prompt compiles at most two chunk lengths); 1 means `step`."""
        return min(remaining, self.prefill_limit(), max(1, self.batch_horizon() - pos))

    def prefill(self, tokens: list[int] | np.ndarray, batched: bool = True) -> np.ndarray:
        """Run the prompt; the logits (float32) of its last token. ``batched=False``: token by token."""
        if self.model is None:
            raise ConfigError("driver: start() before prefill()")
        ids = [int(t) for t in np.asarray(tokens, dtype=np.int64).reshape(-1)]
        cfg = self.store.config
        if not ids:
            raise ModelError("no input tokens")
        bad = [t for t in ids if not 0 <= t < cfg.vocab_size]
        if bad:
            raise ModelError(f"token id {bad[0]} out of range [0, {cfg.vocab_size})")
        if self._pos + len(ids) > cfg.max_position_embeddings:
            raise ModelError(f"prompt of {len(ids)} tokens at position {self._pos} exceeds "
                             f"max_position_embeddings {cfg.max_position_embeddings}")
        i, logits = 0, None
        while i < len(ids):
            n = self.chunk_length(self._pos, len(ids) - i) if batched else 1
            while n > 1:
                try:
                    logits = self._prefill_chunk(ids[i:i + n])
                    break
                except CapacityError:  # did not fit after all: remember a smaller limit
                    self._prefill_limit = max(1, n * 3 // 4)
                    n = self.chunk_length(self._pos, len(ids) - i)
            if n == 1:
                logits = self.step(ids[i], phase="prefill")
            i += n
        self._first_decode_due = True  # (built by the first decode step: a run decoding none pays nothing)
        return logits

    def _prepare_first_decode(self) -> None:
        """Build the first decode token's program whole before it runs (plan, fused tables, timing rows;
        ~40-60 ms at hidden 1024; the timing pass a program's second run calls is loaded with the first
        run's FIFO links, `timing_token._link_derive`). Called by the first decode step, not at the
        prompt's end: a run decoding no token does not pay it. Only a program compiled (in memory or on
        disk) is built; the results are the same either way (`_prepare_ahead`)."""
        prepare = getattr(self.dev, "prepare_program", None)
        if prepare is None or self._pos >= self.store.config.max_position_embeddings:
            return
        spans = self.spans(self._pos + 1)
        key = self._bucket_key(spans)
        v = self.variants.get(key) or self.programs.get(key, Variant)
        if v is None:
            return
        self.variants[key] = v
        v.program.patch(spans)
        self._seed_decoded(key)
        works: list[Work] = []
        for j, seg in enumerate(v.program.segments):
            prepare(seg.words, (key, j), None, None, works)
        self._store_decoded(v)
        if self.timing is True and works:
            self.timer.remember(works)

    def _seed_decoded(self, key: tuple, base: tuple | None = None) -> None:
        """Seed the fast executor's decode and label memos from decode program ``key``'s decoded words
        on disk that program ``base`` (the one running before it; None: none) lacks, once per pair
        (`fast.decoded.seed_variant`): building its plan then decodes none of its words."""
        if (base, key) not in self._decoded_stored and hasattr(self.dev, "prepare_program") \
                and self.programs.active:
            from npukit.targets.pccx.fast import decoded

            self._decoded_stored[base, key] = decoded.seed_variant(self.programs, self.dev, key, base)

    def _store_decoded(self, v: Variant, base: Variant | None = None) -> None:
        """Store program ``v``'s decoded words (its plan built), less those of program ``base`` (the one
        running before it), when they are not on disk yet."""
        name = (None if base is None else base.key, v.key)
        self._seed_decoded(name[1], name[0])  # (a pair not looked up yet: whether its entry is there)
        if self._decoded_stored.get(name) is False:
            from npukit.targets.pccx.fast import decoded

            self._decoded_stored[name] = True
            decoded.store_variant(self.programs, self.dev, v.key, [seg.words for seg in v.program.segments],
                                  name[0], [seg.words for seg in base.program.segments] if base else ())

    def _prefill_chunk(self, ids: list[int]) -> np.ndarray:
        t0 = time.perf_counter()
        pos0, n = self._pos, len(ids)
        first = ("prefill", n, self._bucket_key(self.spans(pos0 + n))) not in self.variants
        v = self.prefill_variant(n, self.spans(pos0 + n))
        spans = {(wk, t): sp for t in range(n) for wk, sp in self.spans(pos0 + t + 1).items()}
        if not first or self.executor != "fast" or not self.programs.active:
            return self._run(v, ids, pos0, spans, t0, "prefill")
        from npukit.targets.pccx.fast import decoded

        # a program's first run in this process: its words decoded by an earlier one (on disk), or
        # stored for a later one, less those of the prefill program planned before it (`decoded`)
        base, self._planned_prefill = self._planned_prefill, v
        return decoded.run_prefill(self.programs, self.dev, v, base,
                                   lambda: self._run(v, ids, pos0, spans, t0, "prefill"))

    # ---- one token ---------------------------------------------------------------------------
    def step(self, token: int, phase: str = "decode") -> np.ndarray:
        if self.model is None:
            raise ConfigError("driver: start() before step()")
        t0 = time.perf_counter()  # (the step's record counts the first decode program's build below)
        if self._first_decode_due and phase == "decode":
            self._first_decode_due = False
            self._prepare_first_decode()
        pos = self._pos
        spans = self.spans(pos + 1)
        v = self.variant(spans)
        before = self._current
        logits = self._run(v, [int(token)], pos, spans, t0, phase)
        if v is not before:  # its words all decoded now: stored if not on disk (a program compiled here)
            self._store_decoded(v, before if before is not None and before.key[0] != "prefill" else None)
        elif phase == "decode":  # (the switching token does its own work only)
            self._prepare_ahead()
        return logits

    def _key_at(self, pos: int) -> tuple:
        """The span-bucket key of the token at ``pos`` (memoised: every decode step asks for a few)."""
        key = self._keys.get(pos)
        if key is None:
            if len(self._keys) > 4096:
                self._keys.clear()
            key = self._keys[pos] = self._bucket_key(self.spans(pos + 1))
        return key

    def _next_switch(self) -> tuple[int, tuple] | None:
        """(position, bucket key) of the first decode token within SWITCH_LOOKAHEAD that runs another
        program than the next token, or None (memoised until that position is passed)."""
        now = self._pos
        cached = self._switch
        if cached is not None and cached[0] <= now < cached[1]:
            return cached[2]
        key = self._key_at(now)
        last = min(now + SWITCH_LOOKAHEAD, self.store.config.max_position_embeddings - 1)
        found = next(((p, self._key_at(p)) for p in range(now + 1, last + 1) if self._key_at(p) != key), None)
        # a switch found holds for every position up to it; none found, for this position only
        self._switch = (now, found[0] if found else now + 1, found)
        return found

    def _prepare_ahead(self) -> None:
        """Build part of the program the decode steps switch to within SWITCH_LOOKAHEAD tokens (a new
        span bucket), so the token that crosses into it finds its plan made: the switch's cost is
        spread over the tokens before it (the plans and so every result are the same either way).
        A few calls, evenly apart, each build an equal share of what is left (`AheadBuild.slice_now`,
        `AheadBuild.budget`); the last one builds all that is left. Only a program already
        compiled (on disk or in memory) is built ahead; lowering a new one is not."""
        prepare = getattr(self.dev, "prepare_program", None)
        nxt = self._next_switch() if prepare is not None else None
        if nxt is None:
            return
        at, key = nxt
        now = self._key_at(self._pos)
        v = self.variants.get(key)
        if v is None:  # one call: the disk read (a few ms); a miss is not asked again
            if key not in self._ahead_missed:
                v = self.programs.get(key, Variant)
                if v is None:
                    self._ahead_missed.add(key)
                else:
                    self.variants[key] = v
                    self._seed_decoded(key, now)  # (before the next token's span words are decoded)
            return
        build = self._ahead
        if build is None or build.key != key:
            # its span-patched words as the switching token will patch them (a program not running now),
            # so the switch recompiles none of them and the fused runs' copies are bound for their shapes
            v.program.patch(self.spans(at + 1))
            self._seed_decoded(key, now)
            cur = self.variants.get(now)
            build = self._ahead = AheadBuild.of(key, v.program, cur.program if cur else None, now,
                                                at - self._pos)
        calls = at - self._pos
        if build.finished or not build.slice_now(calls):
            return
        works = build.pending if self.timing is True else []
        last = build.slices_left(calls) == 1  # the last slice builds what is left, tables included
        budget = build.budget(calls) if last else min(build.budget(calls), slice_cap(calls) * build.stride)
        for j, seg in enumerate(v.program.segments):
            if budget <= 0 and not last:
                break
            if build.done[j]:
                continue
            made = prepare(seg.words, (key, j), (now, j), None if last else budget, works)  # (tables: steps)
            budget -= made
            build.todo[j] = max(0, build.todo[j] - made)
            if made == 0 or last:  # the slot is ready (steps and fused tables): nothing left to do
                build.done[j], build.todo[j] = True, 0
        if build.finished:
            self._store_decoded(v, self.variants.get(build.base))
        if self.timing is True and build.remember_now(calls):  # the new steps' fixed Work
            self.timer.remember(works)  # records' timing rows, a batch at a time (their own cost per call)
            works.clear()

    def _run(self, v: Variant, ids: list[int], pos: int, spans: dict, t0: float, phase: str) -> np.ndarray:
        """Patch, stage the inputs, run the segments with the host KV steps; the last token's logits."""
        v.program.patch(spans)
        host = self.dev.host
        if self._current is not v:
            for addr, bits in v.static_inputs:
                host.write(addr, bits.astype("<u2"))
            self._current = v
        self.inputs.stage(v.key, v.recipes, ids, pos)
        t1 = time.perf_counter()
        stats = v.program.stats
        works: list[Work] = []
        tagged = self.executor == "fast"
        dirty = self._dirty.get(v.key) if tagged else None
        if tagged and dirty is None:  # per segment, the words the span patches rewrite
            dirty = self._dirty[v.key] = [[p.index for p in v.program.patches if p.seg == j]
                                          for j in range(len(v.program.segments))]
        for j, seg in enumerate(v.program.segments):
            if dirty is not None:  # the fast executor re-checks only the words the span patches rewrote
                self.dev.load_program(seg.words, tag=(v.key, j), dirty=dirty[j])
            else:
                self.dev.load_program(seg.words)
            out = self.dev.run()
            if self.dev.error is not None:
                raise DeviceError(f"token at position {pos}: {self.dev.error}")
            works.extend(out)  # one index space for the token: the timing model numbers ops by position
            if seg.host is not None:
                self._host_step(seg.host, pos)
        addr, n = v.output
        logits = self.inputs.read_floats(addr, n)  # (a new float32 array)
        t2 = time.perf_counter()
        timed, key = None, self._runs
        self._runs += 1
        if self.pool is not None:
            self.pool.submit(key, to_ops(self.hw, works, _OpRecord, renumber=True))
        elif self.timing:
            timed = self.timer.time(works)  # (its cycles may still be computing beside the next run)
            if self.records:
                _ = self.records[-1].cycles  # known by now (`time` settled it): kept in the record
        self._last_works = works
        self.records.append(TokenRecord(pos, len(works), t1 - t0, t2 - t1, None, timed, len(ids), phase, key))
        if phase == "prefill" and len(ids) > 1:
            self.last_prefill_stats = stats
        else:
            self.last_stats = stats
        self._pos += len(ids)
        return logits

    def sync(self, full: int = 16) -> None:
        """timing="pool": wait for the workers, fill every record's cycles and the schedules of the
        latest ``full`` runs (older schedules are not kept). Else: wait for the schedule still on the
        timing thread, if any (the backend's ``close``, inside the generation's decode time)."""
        if self.pool is None:
            self.timer.settle()
            return
        cycles = self.pool.wait()
        recs = self.records
        for r in recs:
            if r.cycles is None and r.key in cycles:
                r.cycles = cycles[r.key]
        want = {r.key: r for r in recs[-full:] if r.timing is None}
        for k, res in self.pool.results(list(want)).items():
            want[k].timing = res

    def close(self) -> None:
        self.timer.close()
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def _host_step(self, st: Any, pos: int) -> None:
        """Quantize the staged K/V blocks into the ring (`KVRing.store_staged`)."""
        self.ring.store_staged(st, pos)

    # ---- reports -----------------------------------------------------------------------------
    def compile_report(self) -> dict[str, Any]:
        st = self.last_stats or CompileStats()
        img, ring = self.image, self.ring
        return {
            "profile": self.profile,
            "executor": self.executor,
            "per_token": st.to_json(),
            "extensions": report_extensions(st),
            **({"prefill_chunk": self.last_prefill_stats.to_json(),
                "prefill_extensions": report_extensions(self.last_prefill_stats),
                "prefill_max_chunk": self._prefill_limit} if self.last_prefill_stats else {}),
            "l2_words": self.hw.l2.words,
            "host_ddr": {"weights_bytes": img.weight_bytes if img else 0,
                         "regions": [dataclasses.asdict(r) for r in (img.regions if img else [])],
                         "kv_ring_bytes": ring.nbytes if ring else 0,
                         "kv_max_tokens": ring.max_tokens if ring else None,
                         "kv_sink": ring.sink if ring else None},
        }
