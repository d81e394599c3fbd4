"""A fast pccx executor with the reference simulator's observable behaviour, bit for bit.

`FastSimulator` is a `npukit.targets.pccx.sim.Simulator` (same state: host DDR, L2, constant caches,
S/e_max, STATUS, error interrupt, log, trace, Work records) that decodes a program **once** into a plan
of pre-bound steps and replays it: a CVO or MEMSET step holds its L2 views and its Work record from
load time; a GEMV/GEMM or MEMCPY step binds its operands (L2 views, host-DDR views, unpacked weights,
Work) the first time it runs and rebinds only when the constant-cache entries it reads change, e.g.
a KV length the host updates per token. INT4 weights are unpacked once per host address into int8
codes (numba) or float32 codes (NumPy BLAS path) and kept until a write to host DDR overlaps them.

The arithmetic is in `npukit.targets.pccx.fast.kernels` (numba when installed, else NumPy; both are exact,
see that module). Anything the fast path does not cover — a fault (so the reference raises the
identical error interrupt), a GEMM whose output overlaps its input, FP16 weights without numba, an
operand split over several host regions — runs through the reference `Simulator._exec`, so the
behaviour stays the reference's by construction (`fallbacks` counts those). The extended profile's
weight layouts and LOAD_SCALAR have fast steps. A program that differs from the last one of its
length only in some words (the driver's per-token descriptor patches) reuses the other steps.

Host buffers attached with ``host.map`` and then modified directly (not via ``host.write`` or a
device MEMCPY) must be announced with `FastSimulator.invalidate`, or cached INT4 codes go stale.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from npukit.errors import ConfigError, DecodeError
from npukit.sim.work import Work, make_work, work_from
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import format_instr
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.fast.ddr import TrackedDDR
from npukit.targets.pccx.fast.fastcvo import FusedCvoStep, compile_cvo, work_like
from npukit.targets.pccx.fast.fastmat import asm_text
from npukit.targets.pccx.fast.fastrun import fuse_groups, repatch_groups
from npukit.targets.pccx.fast.faststeps import CacheSet, CopyStep, MatStep, SregSet
from npukit.targets.pccx.fast.state import Codes
from npukit.targets.pccx.fast.twins import TwinChooser
from npukit.targets.pccx.isa import SPEC, SREG_EMAX, DestCache, Device, Memset, Op, decode
from npukit.targets.pccx.isa import Instr as _Instr
from npukit.targets.pccx.memory import WORD_BYTES, DeviceFault, row_bytes
from npukit.targets.pccx.sim import STATUS_BUSY, STATUS_DONE, STATUS_ERROR, ErrorRecord, Simulator

_EXC = (DecodeError, DeviceFault, ArithmeticError, ValueError)
_E = 8  # BF16 elements per L2 word
_MAX_PLANS = 8
_MAX_DECODED = 1 << 18  # decoded words kept (decode is a pure function of the word)
_QUIET = {"over": "ignore", "invalid": "ignore"}  # the NumPy FP-warning state steps run under
_CC = (DestCache.FMAP, DestCache.WEIGHT)
_CVO, _GEMV, _GEMM, _MEMSET, _MEMCPY = Op.CVO, Op.GEMV, Op.GEMM, Op.MEMSET, Op.MEMCPY


def _fusable(step: Callable[[], Work]) -> tuple[bool, bool]:
    """Whether a step can be a row of a fused run, and whether a run may stop before it."""
    return getattr(step, "fuse", None) is not None, getattr(step, "fuse_may_end", False)


# a MEMSET's value fields (a, b, c): a word that differs from another only there decodes to that one's
# instruction with these values, and for a constant-cache MEMSET validity does not read them (`isa.check`)
_VALUE_FIELDS = tuple((f.name, f.lo, f.mask) for f in SPEC[Op.MEMSET]
                      if f.name in ("a_value", "b_value", "c_value") and not f.pieces)
_VALUE_BITS = sum(mask << lo for _, lo, mask in _VALUE_FIELDS)
_PLAIN_MEMSET = "__slots__" not in vars(Memset) and not hasattr(Memset, "__post_init__")  # (`_respan`)


def _values_only(was_ins: Any, was: int, word: int) -> bool:
    """Whether ``word`` is the constant-cache MEMSET ``was_ins`` (`decode(was)`) with other values only."""
    return isinstance(was_ins, Memset) and not (word ^ was) & ~_VALUE_BITS and was_ins.dest_cache in _CC


def _respan(was_ins: Any, was: int, word: int) -> _Instr | None:
    """`decode(word)` from ``was_ins`` (`decode(was)`) where both are constant-cache MEMSETs that differ in
    their values only (the driver's per-token span patches: the spec's generic decode is ~20-70 µs), else
    None (then decode it)."""
    if not _values_only(was_ins, was, word):
        return None
    if not _PLAIN_MEMSET:
        return dataclasses.replace(was_ins, **{name: (word >> lo) & mask for name, lo, mask in _VALUE_FIELDS})
    ins = object.__new__(Memset)  # (a plain frozen dataclass: what its __init__ stores, one update)
    fields = ins.__dict__
    fields.update(was_ins.__dict__)
    for name, lo, mask in _VALUE_FIELDS:
        fields[name] = (word >> lo) & mask
    return ins


def _respan_work(idx: int, was_step: Any, was_ins: Memset, ins: Memset) -> Work | None:
    """The Work of MEMSET ``ins`` at ``idx``, which is ``was_ins`` with new values: the old step's record
    with the new label (`_respan_label`), where that step (`_compile_memset`'s) was at this index; else None
    (the record is made)."""
    old = getattr(was_step, "work", None)
    if old is None or old.index != idx:
        return None
    return work_from(vars(old), label=_respan_label(old.label, was_ins, ins))


def _respan_label(was_label: str, was_ins: Memset, ins: Memset) -> str:
    """`format_instr(ins)` from ``was_label`` (`format_instr(was_ins)`) where ``ins`` is ``was_ins`` with
    new values (`_respan`): the three value operands replaced in place when they stand there as
    decimals, as a constant-cache MEMSET shows them; else formatted anew."""
    parts = was_label.split(" ")
    old = [f"a={was_ins.a_value}", f"b={was_ins.b_value}", f"c={was_ins.c_value}"]
    at = parts.index(old[0]) if old[0] in parts else -1
    if at < 0 or parts[at: at + 3] != old:
        return format_instr(ins)
    parts[at: at + 3] = f"a={ins.a_value}", f"b={ins.b_value}", f"c={ins.c_value}"
    return " ".join(parts)


@dataclass(eq=False)
class _Tagged:
    """A tagged program slot (`FastSimulator.load_program`): its words, plan and fused runs as last loaded."""

    words: list[int]
    plan: list[Callable[[], Work]]
    groups: list


class FastSimulator(Simulator):
    """Drop-in `Simulator` that replays a pre-decoded, pre-bound plan (see the module docstring).

    ``backend``: "numba" (default when installed) or "numpy". ``weights``: "int8" unpacks INT4 images
    (``"auto"``: int8 codes for matrices under 2^20 weights, which stay in cache, packed above, where
    the GEMV is bound by memory bandwidth and the packed image is half the bytes)
    once into cached codes (up to ``cache_bytes``); "packed" reads the nibbles in place (numba only).
    """

    def __init__(self, hw: Any = None, profile: str = "extended", backend: str | None = None,
                 weights: str = "int8", cache_bytes: int = 8 << 30) -> None:
        self._regs = np.zeros(2, np.uint16)  # S and e_max bits (properties below), set by __init__
        super().__init__(hw, profile)
        backend = backend or kx.BACKENDS[0]
        if backend not in kx.BACKENDS:
            raise ConfigError(f"fastsim backend {backend!r} unavailable here (available: "
                              f"{', '.join(kx.BACKENDS)})")
        if weights not in ("int8", "packed", "auto"):
            raise ConfigError(f"fastsim weights mode {weights!r}: use int8, packed or auto")
        self.backend = backend
        self.weights = weights
        self.cache_bytes = int(cache_bytes)
        self.host = TrackedDDR(self.hw.ddr.size_bytes, self.invalidate)
        self.flat = self.l2.reshape(-1)  # a view: the binders slice L2 as one row
        self.fallbacks = 0
        self._k = kx._numba_kernels() if backend == "numba" else {}
        self.twins = TwinChooser()  # large GEMVs: parallel or serial twin, by what each costs now
        # packed INT4 on a SIMD row dot (VNNI, AVX2, SSSE3) beats unpacked int8 codes from K = 128 (AVX2
        # 256x1024: 5.1 vs 11.5 us)
        self.simd_rows = backend == "numba" and kx.simd() not in ("portable", "none")
        self._codes: dict[tuple, Codes] = {}
        self._cached_bytes = 0
        self._plans: dict[tuple[int, ...], list[Callable[[], Work]]] = {}
        self._by_len: dict[Any, tuple[tuple[int, ...], list[Callable[[], Work]]]] = {}
        self._codes_span = (0, 0)  # host bytes covered by cached codes (a cheap test in invalidate)
        self._plan: list[Callable[[], Work]] = []
        self._fused: dict[tuple[int, ...], list] = {}  # program -> fused SFU runs (fastcvo.fuse_groups)
        self._groups: list = []
        self._plan_of: list[int] | None = None
        self._qbuf = np.zeros(1 << 16, np.int8)
        self._decoded: dict[int, _Instr | DecodeError] = {}
        self._tagged: dict[Any, _Tagged] = {}
        self._preparing: dict[Any, Any] = {}  # tag -> `ahead.PlanJob`: slots built ahead, part-way

    # S and e_max live in one array that the fused SFU runs (`fastcvo`) update in place
    @property
    def s_reg(self) -> np.uint16:
        return self._regs[0]

    @s_reg.setter
    def s_reg(self, value: Any) -> None:
        self._regs[0] = value

    @property
    def e_max(self) -> np.uint16:
        return self._regs[1]

    @e_max.setter
    def e_max(self, value: Any) -> None:
        self._regs[1] = value

    # -- host side --
    def invalidate(self, addr: int = 0, n: int | None = None) -> None:
        """Forget cached INT4 codes overlapping host bytes [addr, addr+n) (everything when n is None)."""
        if not self._codes:
            return
        end = addr + n if n is not None else None
        lo, hi = self._codes_span
        if end is not None and (end <= lo or addr >= hi):
            return
        for key, c in list(self._codes.items()):
            if end is None or (c.start < end and addr < c.end):
                c.valid = False
                self._cached_bytes -= c.codes.nbytes
                del self._codes[key]

    def load_program(self, words: Any, tag: Any = None, dirty: Iterable[int] | None = None) -> None:
        """Load a program; ``tag`` names a program slot (e.g. one segment of a compiled step) whose
        previous words the new ones are diffed against (default: the last program of the same length).
        ``dirty`` (with ``tag``): the only indices whose words can differ from that slot's last load
        (the driver's span patches), so only those are compared, not the whole program."""
        if tag is not None and dirty is not None:
            if tag in self._preparing:  # built ahead part-way (`prepare_program`): finish it
                self.prepare_program(words, tag)
            slot = self._tagged.get(tag)
            if slot is not None and len(slot.words) == len(words):
                self._load_patched(slot, words, dirty)
                return
        super().load_program(words)
        key = tuple(self.program)
        plan = self._plans.get(key)
        by = ("tag", tag) if tag is not None else len(key)
        if plan is None:
            base = self._by_len.get(by)
            if base is None and tag is not None:  # a new slot (a new span bucket's segment): diff against
                base = self._by_len.get(len(key))  # the last program of its length, most words repeat
            if base is not None and len(base[0]) != len(key):
                base = None
            groups, old_groups, changed = None, None, frozenset()
            if base is not None:  # a patched program (new descriptors): rebuild only the changed steps
                old_key, old_plan = base
                patched = [i for i, (w, ow) in enumerate(zip(key, old_key, strict=True)) if w != ow]
                plan = list(old_plan)
                for i in patched:
                    plan[i] = self._compile(i, key[i])
                changed = frozenset(patched)
                old_groups = self._fused.get(old_key)
                if old_groups is not None and not any(
                        hasattr(plan[i], "fuse") or hasattr(old_plan[i], "fuse") for i in changed):
                    groups = old_groups  # the fused SFU runs are untouched by the patch
            else:
                plan = [self._compile(i, w) for i, w in enumerate(self.program)]
            if len(self._plans) >= _MAX_PLANS:
                del self._fused[next(iter(self._plans))]
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = plan
            self._fused[key] = fuse_groups(self, plan, old_groups, changed) if groups is None else groups
        self._by_len[by] = (key, plan)
        if tag is not None:
            self._by_len[len(key)] = (key, plan)
        self._plan, self._plan_of, self._groups = plan, self.program, self._fused[key]
        if tag is not None:  # the slot's own copies: `_load_patched` edits them in place
            self._tagged[tag] = _Tagged(self.program, list(plan), list(self._groups))

    def prepare_program(self, words: Any, tag: Any, base: Any = None, limit: int | None = None,
                        works: list[Work] | None = None) -> int:
        """Build tagged slot ``tag`` for ``words`` ahead of its first load, at most ``limit`` steps per
        call (`npukit.targets.pccx.fast.ahead`); the steps compiled (0: ready)."""
        from npukit.targets.pccx.fast.ahead import prepare

        return prepare(self, words, tag, base, limit, works)

    @staticmethod
    def _slot(words: list[int], plan: list, groups: list) -> _Tagged:
        return _Tagged(words, plan, groups)

    def _load_patched(self, slot: _Tagged, words: Any, dirty: Iterable[int]) -> None:
        """`load_program` of a tagged slot's program with only the ``dirty`` words possibly changed."""
        old = slot.words
        changed = [i for i in dirty if int(words[i]) != old[i]]
        if changed:
            new = slot.words = list(old)  # a loaded program list is never changed afterwards
            plan, refuse, same = slot.plan, False, True
            for i in changed:
                new[i] = int(words[i])
                before = _fusable(plan[i])
                plan[i] = self._compile(i, new[i], old[i], plan[i])
                after = _fusable(plan[i])
                refuse = refuse or before[0] or after[0]
                same = same and before == after
            if refuse and same:  # the runs keep their bounds: patch the ones holding a patched step
                slot.groups = repatch_groups(plan, slot.groups, changed, not self._preparing)
            elif refuse:  # a step became (or stopped being) fusable: regroup
                slot.groups = fuse_groups(self, plan, slot.groups, frozenset(changed))
        self.program, self.pc, self.error = slot.words, 0, None
        self.status &= ~(STATUS_DONE | STATUS_ERROR)
        self._plan, self._plan_of, self._groups = slot.plan, slot.words, slot.groups

    # -- execution (same contract as Simulator.step/run) --
    def step(self) -> Work | None:
        if self.halted:
            return None
        if self._plan_of is not self.program:
            self._replan()
        idx = self.pc
        self.status |= STATUS_BUSY
        try:
            with np.errstate(**_QUIET):
                work = self._plan[idx]()
        except _EXC as exc:
            self._interrupt(idx, exc)
            return None
        self.pc = idx + 1
        if self.pc >= len(self.program):
            self.status = (self.status | STATUS_DONE) & ~STATUS_BUSY
        return work

    def run(self, max_steps: int | None = None) -> list[Work]:
        if self._plan_of is not self.program:
            self._replan()
        out: list[Work] = []
        plan, n = self._plan, len(self.program)
        limit = n if max_steps is None else min(n, self.pc + max_steps)
        if self.status & STATUS_ERROR:
            limit = 0
        if self.pc < limit:
            self.status |= STATUS_BUSY
        with np.errstate(**_QUIET):  # once per run: the SFU steps set no FP-warning state of their own
            idx, exc = self._loop(plan, self.pc, limit, out)
        if exc is not None:
            self.pc = idx
            self._interrupt(idx, exc)
            return out
        self.pc = idx
        if idx >= n:
            self.status = (self.status | STATUS_DONE) & ~STATUS_BUSY
        if not self.program:
            self.status |= STATUS_DONE
        return out

    def _loop(self, plan: list[Callable[[], Work]], idx: int, limit: int,
              out: list[Work]) -> tuple[int, Exception | None]:
        """Steps [idx, limit) into ``out``: (the next index, None) or (the faulting index, its error)."""
        groups = self._groups
        try:
            while idx < limit:
                g = groups[idx]
                if g is not None and g[0] <= limit:  # a fused SFU run (fastcvo.fuse_groups)
                    ws = g[1]()
                    if ws:  # all its steps, or the ones before a copy that must rebind
                        out.extend(ws)
                        idx += len(ws)
                        continue
                out.append(plan[idx]())
                idx += 1
        except _EXC as exc:
            return idx, exc
        return idx, None

    def _replan(self) -> None:
        prog = self.program
        pc, status, error = self.pc, self.status, self.error
        self.load_program(prog)
        self.pc, self.status, self.error = pc, status, error

    def _interrupt(self, idx: int, exc: Exception) -> None:
        reason = exc.reason if isinstance(exc, DecodeError) else str(exc)
        self.error = ErrorRecord(idx, self.program[idx], reason)
        self.log.append(str(self.error))
        self.status = (self.status | STATUS_ERROR) & ~STATUS_BUSY

    # -- plan building --
    def _compile(self, idx: int, word: int, was: int | None = None, was_step: Any = None
                 ) -> Callable[[], Work]:
        """The step of ``word`` at ``idx``; ``was``: the word there before and ``was_step`` its step (a span
        patch: a MEMSET whose values alone changed is its old instruction with the new values, `_respan`,
        and its label the old one with the new values, `_respan_label`, its Work the old one's so)."""
        ins, was_work = self._decoded.get(word), None
        if ins is None:
            was_ins = self._decoded.get(was) if was is not None else None
            ins = _respan(was_ins, was, word) if was is not None else None
            if ins is not None:
                was_work = _respan_work(idx, was_step, was_ins, ins)
            try:
                ins = ins or decode(word, self.profile, self.limits)
            except DecodeError as exc:
                ins = exc
            if len(self._decoded) < _MAX_DECODED:
                self._decoded[word] = ins
        elif was is not None and type(ins) is Memset:  # a patch back to a word seen before (a sliding
            # window's ring descriptors cycle): its record from the old step's too, not made and formatted
            # anew (~25 µs each; 9 a token at hidden 1024 past the 512-token window)
            was_ins = self._decoded.get(was)
            if _values_only(was_ins, was, word):
                was_work = _respan_work(idx, was_step, was_ins, ins)
        if isinstance(ins, DecodeError):
            err = ins

            def fault() -> Work:
                raise err

            return fault
        op = ins.op
        if op == _CVO:  # (first: three in four steps)
            body = compile_cvo(self, idx, ins)
            if body is None:
                return self._reference(idx, ins)
            return body if type(body) is FusedCvoStep else self._traced(ins, body)
        if op in (_GEMV, _GEMM):
            return self._compile_mat(idx, ins)
        if op == _MEMSET:
            return self._compile_memset(idx, ins, was_work)
        if op == _MEMCPY:
            return self._compile_memcpy(idx, ins)
        return self._reference(idx, ins)  # pragma: no cover - an opcode added to the ISA later

    def _traced(self, ins: _Instr, body: Callable[[], Work]) -> Callable[[], Work]:
        trace = self.trace

        def step() -> Work:
            w = body()
            trace.append((ins, w))
            return w

        step.work = body.work  # its Work record, fixed at load time (a fused-run CVO: `FusedCvoStep`)
        return step

    def _reference(self, idx: int, ins: _Instr) -> Callable[[], Work]:
        def step() -> Work:
            self.fallbacks += 1
            w = Simulator._exec(self, idx, ins)
            self.trace.append((ins, w))
            return w

        return step

    def _compile_memset(self, idx: int, ins: _Instr, work: Work | None = None) -> Callable[[], Work]:
        if work is None:  # (else its record from the caller: a span patch's, the old step's relabelled)
            work = work_like(idx, ins, lambda: make_work(idx, "ctrl", format_instr(ins),
                                                         is_async=bool(ins.async_)))
        if ins.dest_cache == DestCache.SREG:  # (records, not closures: `fast.faststeps`)
            return SregSet(self, ins, work, ins.dest_addr == SREG_EMAX)
        return CacheSet(self, ins, work)  # (its Work's label: the next span patch's start, `_respan_label`)

    def _bind_memcpy(self, idx: int, ins: _Instr,
                     entry: np.ndarray) -> tuple[Work, Callable[[], None]] | None:
        """The copy the shape entry ``entry`` (words, hi, lo) describes, as its Work and a closure that
        moves the words; None when it falls outside L2 or host memory (the reference path then reports it)."""
        asy = bool(ins.async_)
        words, hi, lo = entry.tolist()
        nbytes = words * WORD_BYTES
        host_addr = (((hi << 16) | lo) + ins.aux_addr) * WORD_BYTES
        label = f"{asm_text(ins)}  ; {words} words"
        lim = self.limits.l2_words
        if ins.from_device == Device.HOST:
            d0 = ins.dest_addr
            view = self.host.view(host_addr, nbytes)
            if d0 + words > lim or view is None:
                return None
            src = view.view("<u2").reshape(words, _E)
            dst = self.l2[d0: d0 + words]

            def mover() -> None:
                dst[...] = src

            work = make_work(idx, "dma", label + f" from host 0x{host_addr:X}", ddr_read_bytes=nbytes,
                             onchip_write_bytes=nbytes, writes=((d0, d0 + words),), is_async=asy)
        else:
            s0 = ins.src_addr
            if s0 + words > lim:
                return None
            srcl = self.l2[s0: s0 + words]
            if ins.to_device == Device.HOST:
                view = self.host.view(host_addr, nbytes)
                if view is None:
                    return None
                hv = view.view("<u2").reshape(words, _E)
                inval = self.invalidate

                def mover() -> None:
                    hv[...] = srcl
                    inval(host_addr, nbytes)

                work = make_work(idx, "dma", label + f" to host 0x{host_addr:X}", ddr_write_bytes=nbytes,
                                 onchip_read_bytes=nbytes, reads=((s0, s0 + words),), is_async=asy)
            else:
                d0 = ins.dest_addr
                if d0 + words > lim:
                    return None
                dstl = self.l2[d0: d0 + words]

                def mover() -> None:
                    dstl[...] = srcl.copy()

                work = make_work(idx, "dma", label, onchip_read_bytes=nbytes, onchip_write_bytes=nbytes,
                                 reads=((s0, s0 + words),), writes=((d0, d0 + words),), is_async=asy)
        return work, mover

    def _compile_memcpy(self, idx: int, ins: _Instr) -> Callable[[], Work]:
        return CopyStep(self, idx, ins)  # (a record, not closures: `fast.faststeps`)

    def _compile_mat(self, idx: int, ins: _Instr) -> Callable[[], Work]:
        return MatStep(self, idx, ins)

    # -- INT4 code cache --
    def int4_codes(self, addr: int, m: int, k: int, w_scale: bool) -> Codes | None:
        """Unpacked codes of the INT4 image at ``addr`` (cached), or None if over the cache budget or
        not readable as one region (the caller then takes another path)."""
        key = (addr, m, k, w_scale, self.backend)
        c = self._codes.get(key)
        if c is not None:
            return c
        rb = row_bytes("int4", k)
        end = addr + m * rb
        s_addr = end + (-(m * rb)) % WORD_BYTES
        body = self.host.view(addr, m * rb)
        sb = self.host.view(s_addr, 4 * m) if w_scale else np.zeros(0, np.uint8)
        if body is None or sb is None:
            return None
        dtype = np.int8 if self.backend == "numba" else np.float32
        size = m * k * np.dtype(dtype).itemsize
        if self._cached_bytes + size > self.cache_bytes:
            return None
        codes = nx.unpack_int4(body.reshape(m, rb), k).astype(dtype)
        scale = sb.view("<f4").astype(np.float32)
        c = Codes(addr, max(end, s_addr + 4 * m) if w_scale else end, codes, scale)
        self._codes[key] = c
        self._cached_bytes += codes.nbytes
        lo, hi = self._codes_span
        self._codes_span = (min(lo, c.start) if hi else c.start, max(hi, c.end))
        return c

    def int4_kmajor_codes(self, addr: int, m: int, k: int) -> Codes | None:
        """Unpacked codes [K, M] of a K-major INT4 image (cached like `int4_codes`), scales after."""
        key = (addr, m, k, "kmajor", self.backend)
        c = self._codes.get(key)
        if c is not None:
            return c
        rb = row_bytes("int4", m)
        body = self.host.view(addr, k * rb)
        if body is None:
            return None
        dtype = np.int8 if self.backend == "numba" else np.float32
        if self._cached_bytes + m * k * np.dtype(dtype).itemsize > self.cache_bytes:
            return None
        codes = nx.unpack_int4(body.reshape(k, rb), m).astype(dtype)
        c = Codes(addr, addr + k * rb, codes, np.zeros(0, np.float32))
        self._codes[key] = c
        self._cached_bytes += codes.nbytes
        lo, hi = self._codes_span
        self._codes_span = (min(lo, c.start) if hi else c.start, max(hi, c.end))
        return c

