"""Code generation: in-place placement, L2 allocation, constant-cache planning, tiling, encoding.

1. **In place.** pccx's binary CVOs (MUL/ADD) and every ``accm`` write their result over an operand.
   The result takes that operand's storage when the operand dies there (for MUL/ADD either operand,
   they commute exactly); otherwise, or when the result already has a place (a part of a
   concatenation), the operand is first copied into the result's place (MEMCPY L2 → L2).
2. **Allocation.** Every root buffer lives from its first definition to its last use; a linear scan
   over the node order places roots first-fit in L2 words above a one-word scratch (the S-register
   load target) and frees them after their last use. The buffers sized by the attention span bucket
   (scores, their softmax, the -inf tail) are placed after the others, around them, so one bucket's
   program differs from the next only where a word names a span buffer. Peak usage must fit
   ``hw.l2.words``.
3. **Constant cache.** Each GEMV needs an fmap-shape entry (M, 1, K) and a weight entry (format |
   layout bits, host address); a MEMCPY an fmap entry (words, host window). Entries are reused when
   they already hold the value and replaced least-recently-used when the 64 are taken (a MEMSET);
   split scales take an adjacent pair (slot, slot + 1) from the top of the weight cache.
4. **S register.** SCALE/RELU_BIAS need S: a REDUCE_SUM already left its result there; otherwise
   a word-aligned scalar is loaded with REDUCE_SUM over one element (strict v002, exact for every
   value but −0.0, which these scalars never are), an element inside a vector with the extended
   LOAD_SCALAR (element ``len − 1``).
5. **Tiling / async.** Elementwise CVOs longer than 65,528 elements are split; MEMCPYs longer than
   65,535 words too. GEMVs are async (extended) except the ``findemax`` ones, CVOs and loads async,
   stores and the last instruction of each layer synchronous (one wait per layer).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from npukit.compile import liveness
from npukit.targets.pccx import isa
from npukit.targets.pccx.compile.ir import CapacityError, CompileError, Node, Ref
from npukit.targets.pccx.cvo import CVO, CvoForm
from npukit.targets.pccx.isa import (
    BINARY,
    ELEMS_PER_WORD,
    SREG_EMAX,
    STRICT_CVO,
    CvoFlag,
    CvoFunc,
    DestCache,
    Device,
    GemvFlag,
    words_of,
)
from npukit.targets.pccx.memory import (
    W_ACT_SCALE,
    W_KMAJOR,
    W_OFFSET_MASK,
    W_SPLIT_SCALES,
    WORD_BYTES,
    scale_entry,
    weight_entry,
)
from npukit.targets.pccx.numerics import BF16_NEG_INF

CVO_TILE = 65528
MEMCPY_MAX_WORDS = 65535
WINDOW = 1 << 20  # host window of one fmap descriptor; aux_addr reaches 2 MiB from it
PAIR_SLOTS = 8  # weight-cache slots (top of the cache) kept for (slot, slot + 1) pairs


@dataclass
class Segment:
    words: list[int]
    host: Any = None  # host step to run after the segment (None: end of token)
    marks: list[tuple[int, str]] = field(default_factory=list)  # (instruction index, label)


@dataclass(frozen=True)
class Patch:
    """One instruction whose fields depend on the position: the driver re-encodes it per token from the
    attention span (first ring row, rows) of its window class ``wk``."""

    seg: int
    index: int
    ins: Any  # the compiled instruction (row 0, bucket length)
    kind: str  # fmap_k | fmap_v | weight | scale | len
    wk: int
    arg: tuple = ()
    layout: tuple = ()  # (word with a, b, c cleared, their bit positions)

    def values(self, row0: int, count: int) -> tuple[int, int, int]:
        """The MEMSET's (a, b, c) for this span."""
        k, a, i = self.kind, self.arg, self.ins
        if k == "fmap_k":
            return count, i.b_value, i.c_value
        if k == "fmap_v":
            return i.a_value, i.b_value, count
        if k == "weight":
            fmt, base, rb, ext = a
            return weight_entry(fmt, base + row0 * rb, ext)
        return scale_entry(a[0] + 4 * row0)

    def at(self, row0: int, count: int) -> Any:
        a, b, c = self.values(row0, count)
        return isa.replace(self.ins, a_value=a, b_value=b, c_value=c)

    def word(self, row0: int, count: int) -> int:
        """The encoded MEMSET: the (a, b, c) bit fields replaced in the compiled word (checked against
        `isa.encode` when the patch is made, `Program.check`)."""
        a, b, c = self.values(row0, count)
        if not (0 <= a <= _MASK16 and 0 <= b <= _MASK16 and 0 <= c <= _MASK16):
            raise CompileError(f"span descriptor ({a}, {b}, {c}) does not fit the MEMSET fields")
        base, sa, sb, sc = self.layout
        return base | a << sa | b << sb | c << sc


@dataclass
class Program:
    """A compiled decode step for one span bucket: segments, stats, and the per-token patches."""

    segments: list[Segment]
    stats: CompileStats
    patches: list[Patch]
    profile: str
    limits: Any

    def patch(self, spans: dict[int, tuple[int, int]]) -> None:
        """Write the token's spans (window key -> (first row, rows)) into the program words."""
        for p in self.patches:
            row0, count = spans[p.wk]
            self.segments[p.seg].words[p.index] = p.word(row0, count)

    def check(self, spans: dict[int, tuple[int, int]]) -> None:
        """Patched words equal `isa.encode` of the patched instructions (and pass its validation)."""
        for p in self.patches:
            row0, count = spans[p.wk]
            if p.word(row0, count) != isa.encode(p.at(row0, count), self.profile, self.limits):
                raise CompileError(f"span patch of instruction {p.index} does not encode as the ISA does")


_MASK16 = 0xFFFF


def _memset_layout(ins: Any) -> tuple[int, int, int, int]:
    """(word with a, b, c cleared, bit position of a, b, c) of a MEMSET, from the ISA field table."""
    lo = {f.name: f.lo for f in isa.SPEC[isa.Op.MEMSET]}
    masks = {f.name: f.mask for f in isa.SPEC[isa.Op.MEMSET]}
    if any(masks[n] != _MASK16 for n in ("a_value", "b_value", "c_value")):
        raise CompileError("MEMSET value fields are not 16 bits")
    w = isa.encode(isa.replace(ins, a_value=0, b_value=0, c_value=0), "extended")
    return w, lo["a_value"], lo["b_value"], lo["c_value"]


@dataclass
class CompileStats:
    counts: Counter = field(default_factory=Counter)  # instruction type -> count
    extensions: Counter = field(default_factory=Counter)  # extension -> uses
    memsets: Counter = field(default_factory=Counter)  # cache -> MEMSETs
    cc_hits: int = 0
    l2_peak_words: int = 0
    copies_in_place: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"instructions": dict(sorted(self.counts.items())),
                "extensions": dict(sorted(self.extensions.items())),
                "memsets": dict(self.memsets), "constant_cache_hits": self.cc_hits,
                "l2_peak_words": self.l2_peak_words, "in_place_copies": self.copies_in_place}


EXTENSION_WHY = {
    "cvo.tanh": "v002 has no TANH (AltUp router, final softcap)",
    "cvo.mul": "v002 has no vector x vector multiply (RMSNorm gamma, GELU(gate)*up, RoPE, PLE gate)",
    "cvo.add": "v002 has no vector add (residuals, LAuReL, RoPE, eps)",
    "cvo.relu_bias": "the SFU's bias-and-clip front end is not encodable in v002 (Gaussian top-k)",
    "cvo.rsqrt": "v002 has no RSQRT (RMSNorm, one rounding)",
    "cvo.square": "v002 has no x^2 (RMSNorm, top-k variance)",
    "cvo.load_scalar": "v002 cannot move an element inside a vector into S (AltUp coefficients)",
    "gemv.async": "isa_pkg.sv has no async bit in GEMV (overlap: one wait per layer)",
    "gemm.async": "isa_pkg.sv has no async bit in GEMM either (prefill: the same one wait per layer)",
    "memset.sreg_emax": "v002 can only grow e_max; each softmax needs it reset to -inf",
    "weight.kmajor": "K-major image with zero-row skipping: sparse W_down (seed 001) and V as a GEMV operand",
    "weight.split_scales": "per-token K scales live in the ring, not after the window's rows",
    "weight.act_scale": "per-token V scales multiply the probabilities (the reference's MUL by FP32 scales)",
    "weight.byte_offset": "a sliding window may start on any ring row; rows are narrower than 16 bytes",
}


# the CVO flags as ints and as members, made once (an IntFlag operation builds a member: ~5 µs, and a
# prompt chunk's program has ~50 000 CVOs)
_ACCM, _SUB_EMAX = int(CvoFlag.ACCM), int(CvoFlag.SUB_EMAX)
_CVO_FLAGS: dict[int, CvoFlag] = {}


class _CCache:
    """One constant cache: value -> slot with LRU replacement (the least recently touched slot, a slot
    never used before any used one, in slot order), ``get`` and ``get_pair`` by dictionary."""

    def __init__(self, entries: int, reserve_pairs: int = 0) -> None:
        self.single = list(range(entries - 2 * reserve_pairs))
        self.pairs = [(s, s + 1) for s in range(entries - 2 * reserve_pairs, entries, 2)]
        self.held: dict[int, tuple[int, int, int]] = {}
        self.used: dict[int, int] = {}
        self.t = 0
        self._slot_of: dict[Any, int] = {}  # a value a single slot holds -> that slot
        self._order = dict.fromkeys(self.single)  # single slots, least recently touched first

    def _touch(self, s: int) -> None:
        self.t += 1
        self.used[s] = self.t

    def get(self, val: tuple[int, int, int]) -> tuple[int, bool]:
        s = self._slot_of.get(val)
        new = s is None
        if new:  # the least recently touched slot takes it (a value sits in one single slot at most)
            s = next(iter(self._order))
            self._slot_of.pop(self.held.get(s), None)
            self.held[s], self._slot_of[val] = val, s
        self._touch(s)
        del self._order[s]
        self._order[s] = None
        return s, new

    def get_pair(self, v0: tuple[int, int, int], v1: tuple[int, int, int]) -> tuple[int, list[int]]:
        for s0, s1 in self.pairs:
            if self.held.get(s0) == v0 and self.held.get(s1) == v1:
                self._touch(s0)
                return s0, []
        s0, s1 = min(self.pairs, key=lambda p: self.used.get(p[0], -1))
        self.held[s0], self.held[s1] = v0, v1
        self._touch(s0)
        return s0, [s0, s1]


def _host_entry(words: int, addr: int) -> tuple[tuple[int, int, int], int]:
    base = addr - addr % WINDOW
    unit = base // WORD_BYTES
    return (words, unit >> 16, unit & 0xFFFF), (addr - base) // WORD_BYTES


class CodeGen:
    def __init__(self, hw: Any, profile: str = "extended") -> None:
        self.hw, self.profile = hw, profile
        self.limits = isa.Limits.of(hw)

    # ---- 1. in place ---------------------------------------------------------------------------
    def _last_uses(self, nodes: list[Node]) -> dict[int, int]:
        last: dict[int, int] = {}
        for i, nd in enumerate(nodes):
            for r in self._reads(nd):
                last[id(r.root()[0])] = i
        return last

    @staticmethod
    def _reads(nd: Node) -> list[Ref]:
        out = list(nd.srcs)
        if isinstance(nd.scalar, Ref):
            out.append(nd.scalar)
        return out

    def _in_place(self, nodes: list[Node], stats: CompileStats) -> list[Node]:
        last = self._last_uses(nodes)
        out: list[Node] = []
        for i, nd in enumerate(nodes):
            if nd.kind == "cvo" and (nd.func in BINARY or nd.flags & _ACCM):
                cands = [1, 0] if nd.func in BINARY else [len(nd.srcs) - 1]
                placed = False
                if nd.out.buf.parent is None:
                    for c in cands:
                        r = nd.srcs[c]
                        root = r.root()[0]
                        if last.get(id(root)) == i and not root.shared and r.n == nd.out.n:
                            lo = last.get(id(nd.out.buf), i)
                            nd.out.buf.alias(r.buf, r.off)
                            last[id(root)] = max(i, lo)
                            if c != len(nd.srcs) - 1:
                                nd.srcs = (nd.srcs[1], nd.srcs[0])
                            placed = True
                            break
                if not placed:
                    dst = nd.srcs[-1]
                    out.append(Node("copy", out=nd.out, srcs=(dst,), label="in-place copy"))
                    stats.copies_in_place += 1
                nd.attrs["dst"] = nd.out
            out.append(nd)
        return out

    # ---- 2. allocation ---------------------------------------------------------------------------
    def _allocate(self, nodes: list[Node]) -> int:
        """Place every root; the peak end word. The buffers sized by the span bucket are placed around
        the others (first fit among themselves only), so every other buffer has the same address in
        every bucket's program and a bucket switch rewrites only the words that name a span buffer;
        where that split does not fit L2, all are placed first-fit together."""
        spans = liveness.lifetimes(
            [r.root()[0] for r in ([nd.out] if nd.out is not None else []) + self._reads(nd)] for nd in nodes)
        size, hi = (lambda b: words_of(b.n)), self.limits.l2_words
        fixed = [s for s in spans if s.item.span_class is None]
        moving = [s for s in spans if s.item.span_class is not None]
        try:  # word 0: scratch for S loads
            at, peak = liveness.first_fit(fixed, size, 1, hi)
            placed = [(s, at[j]) for j, s in enumerate(fixed)]
            more, peak = liveness.fit_around(moving, size, placed, 1, hi)
            placed += [(s, more[j]) for j, s in enumerate(moving)]
        except liveness.NoRoom:
            try:
                at, peak = liveness.first_fit(spans, size, 1, hi)
            except liveness.NoRoom as full:
                raise CapacityError(f"L2 is full: {full.item.name} needs {full.size} words at node "
                                    f"{full.node} ({hi} words in all)") from None
            placed = [(s, at[j]) for j, s in enumerate(spans)]
        for span, addr in placed:
            span.item.addr = addr
        return peak

    # ---- 3-5. emission ---------------------------------------------------------------------------
    def compile(self, nodes: list[Node]) -> tuple[list[Segment], CompileStats]:
        stats = CompileStats()
        nodes = self._in_place(nodes, stats)
        stats.l2_peak_words = self._allocate(nodes)
        self.fmap = _CCache(self.limits.cc_entries)
        self._named: dict[tuple, tuple] = {}  # a bucket-sized copy's fmap key -> its value (`_memcpy`)
        self.wcache = _CCache(self.limits.cc_entries, PAIR_SLOTS // 2)
        self.s_key: Any = None
        self.stats = stats
        segs = [Segment([])]
        self.instrs: list[Any] = []
        self.seg_start = 0
        self._pend: list[tuple[int, str, int, tuple]] = []
        self.patches: list[Patch] = []
        for nd in nodes:
            if nd.kind == "host":
                self._close(segs, nd.host)
                segs.append(Segment([]))
            elif nd.kind == "mark":
                if self.instrs:
                    self.instrs[-1] = isa.replace(self.instrs[-1], async_=False)
                segs[-1].marks.append((len(self.instrs), nd.label))
            else:
                _EMIT[nd.kind](self, nd)
        self._close(segs, None)
        return segs, stats

    def _close(self, segs: list[Segment], host: Any) -> None:
        if self.instrs:
            self.instrs[-1] = isa.replace(self.instrs[-1], async_=False)
        for ins in self.instrs:
            segs[-1].words.append(isa.encode(ins, self.profile, self.limits))
            self._count(ins)
        for i, kind, wk, arg in self._pend:
            self.patches.append(Patch(len(segs) - 1, i, self.instrs[i], kind, wk, arg,
                                      _memset_layout(self.instrs[i])))
        segs[-1].host = host
        self.instrs = []
        self._pend = []

    def compile_program(self, nodes: list[Node]) -> Program:
        segs, stats = self.compile(nodes)
        return Program(segs, stats, self.patches, self.profile, self.limits)

    def _dyn(self, kind: str, wk: int, arg: tuple = ()) -> None:
        """The next instruction appended depends on the position (see `Patch`)."""
        self._pend.append((len(self.instrs), kind, wk, arg))

    def _count(self, ins: Any) -> None:
        st = self.stats
        if ins.op == isa.Op.CVO:
            name = f"cvo.{ins.cvo_func.name.lower()}"
            st.counts[name] += 1
            if ins.cvo_func not in STRICT_CVO:
                st.extensions[name] += 1
        else:
            st.counts[ins.op.name.lower()] += 1
            if ins.op in (isa.Op.GEMV, isa.Op.GEMM) and ins.async_:
                st.extensions[f"{ins.op.name.lower()}.async"] += 1
            if ins.op == isa.Op.MEMSET and ins.dest_cache == DestCache.SREG:
                st.extensions["memset.sreg_emax"] += 1

    def _memset(self, cache: DestCache, slot: int, val: tuple, real: dict | None = None) -> None:
        """MEMSET ``val`` into ``slot``; a symbolic (position-dependent) ``val`` is looked up in ``real``:
        (placeholder entry, patch kind, window key, patch argument)."""
        if real is not None and val in real:
            ent, kind, wk, arg = real[val]
            if kind is not None:  # (None: a value named by a key, not patched)
                self._dyn(kind, wk, arg)
            val = ent
        self.instrs.append(isa.Memset(cache, slot, *val))
        self.stats.memsets[cache.name.lower()] += 1

    def _fmap(self, val: tuple, real: dict | None = None) -> int:
        s, new = self.fmap.get(val)
        if new:
            self._memset(DestCache.FMAP, s, val, real)
        else:
            self.stats.cc_hits += 1
        return s

    def _emit_gemv(self, nd: Node) -> None:
        w = nd.weight
        if not (0 < w.m <= 65535 and 0 < w.k <= 65535):
            raise CompileError(f"GEMV {w.name}: M={w.m}, K={w.k} exceed the 16-bit shape field")
        v0 = weight_entry(w.fmt, w.addr, w.ext)
        v1 = scale_entry(w.scale_addr) if w.ext & (W_SPLIT_SCALES | W_ACT_SCALE) else None
        real: dict | None = None
        n = int(nd.attrs.get("n", 1))  # GEMM (prefill): N activation vectors, one exponent each
        fkey: tuple = (w.m, n, w.k)
        if w.dyn is not None:  # a KV ring span: symbolic cache values, patched per token
            kind, wk, base, rb, sbase = w.dyn
            fkey = ("span", kind, wk, w.k if kind == "k" else w.m)
            real = {fkey: ((w.m, 1, w.k), f"fmap_{kind}", wk, ())}
            v0k = ("span-w", w.fmt, base, w.ext)
            real[v0k] = (v0, "weight", wk, (w.fmt, base, rb, w.ext))
            v0 = v0k
            if v1 is not None:
                v1k = ("span-s", sbase)
                real[v1k] = (v1, "scale", wk, (sbase,))
                v1 = v1k
            if rb % WORD_BYTES:
                self.stats.extensions["weight.byte_offset"] += 1
        elif v0[0] & W_OFFSET_MASK:
            self.stats.extensions["weight.byte_offset"] += 1
        fm = self._fmap(fkey, real)
        if v1 is not None:
            ws, fresh = self.wcache.get_pair(v0, v1)
            for s in fresh:
                self._memset(DestCache.WEIGHT, s, v0 if s == ws else v1, real)
        else:
            ws, new = self.wcache.get(v0)
            if new:
                self._memset(DestCache.WEIGHT, ws, v0, real)
            else:
                self.stats.cc_hits += 1
        for bit, name in ((W_KMAJOR, "weight.kmajor"), (W_SPLIT_SCALES, "weight.split_scales"),
                          (W_ACT_SCALE, "weight.act_scale")):
            if w.ext & bit:
                self.stats.extensions[name] += 1
        flags = (GemvFlag.W_SCALE if w.w_scale else GemvFlag(0)) | (
            GemvFlag.FINDEMAX if nd.findemax else GemvFlag(0))
        op = isa.Gemm if n > 1 else isa.Gemv
        self.instrs.append(op(nd.out.word(), nd.srcs[0].word(), flags, ws, fm, 0, async_=not nd.findemax))

    def _emit_emax_reset(self, nd: Node) -> None:
        self.instrs.append(isa.Memset(DestCache.SREG, SREG_EMAX, BF16_NEG_INF))

    def _load_s(self, s: Ref) -> None:
        key = (id(s.buf), s.off)
        if key == self.s_key:
            return
        r, off = s.root()
        base = r.addr + off // ELEMS_PER_WORD
        if off % ELEMS_PER_WORD == 0:
            self.instrs.append(isa.Cvo(CvoFunc.REDUCE_SUM, base, 0, 1, async_=True))
        else:
            self.instrs.append(isa.Cvo(CvoFunc.LOAD_SCALAR, base, 0, off % ELEMS_PER_WORD + 1, async_=True))
        self.s_key = key

    def _emit_cvo(self, nd: Node) -> None:
        fn = nd.func
        if isinstance(nd.scalar, Ref):
            self._load_s(nd.scalar)
        src, dst = nd.srcs[0], nd.out  # a binary function's second operand is dst itself
        flags = _CVO_FLAGS.get(nd.flags) or _CVO_FLAGS.setdefault(nd.flags, CvoFlag(nd.flags))
        sync = bool(nd.flags & _SUB_EMAX)
        if CVO[fn].reduction:  # one instruction: a reduction cannot be tiled
            if src.n > 65535:
                raise CompileError(f"reduction over {src.n} elements exceeds the 16-bit CVO length")
            self.instrs.append(isa.Cvo(fn, src.word(), dst.word(), src.n, flags, async_=True))
            if CVO[fn].form is CvoForm.REDUCE_SUM:  # it also loads S
                self.s_key = (id(nd.out.buf), nd.out.off)
            return
        for lo in range(0, src.n, CVO_TILE):
            n = min(CVO_TILE, src.n - lo)
            w0 = lo // ELEMS_PER_WORD
            self.instrs.append(isa.Cvo(fn, src.word() + w0, dst.word() + w0, n, flags, async_=not sync))

    def _memcpy(self, route: tuple[Device, Device], dest: int, src: int, words: int, host_addr: int,
                sync: bool, span_class: Any = None) -> None:
        """MEMCPY in tiles; a copy sized by a span bucket (``span_class``) keys its fmap entry by that
        class, not by its value, so every bucket's program hits and misses the cache alike."""
        for w0 in range(0, words, MEMCPY_MAX_WORDS):
            n = min(MEMCPY_MAX_WORDS, words - w0)
            if route[0] == Device.NPU and route[1] == Device.NPU:
                val, aux = (n, 0, 0), 0
            else:
                val, aux = _host_entry(n, host_addr + w0 * WORD_BYTES)
            key = val  # (a name holds one value in a program: a second value is looked up by value)
            name = ("bucket", span_class, route, w0)
            if span_class is not None and self._named.setdefault(name, val) == val:
                key = name
            fm = self._fmap(key, None if key is val else {key: (val, None, None, None)})
            d = 0 if route[1] == Device.HOST else dest + w0
            s = 0 if route[0] == Device.HOST else src + w0
            self.instrs.append(isa.Memcpy(route[0], route[1], d, s, aux, fm, async_=not sync))

    def _emit_load(self, nd: Node) -> None:
        self._memcpy((Device.HOST, Device.NPU), nd.out.word(), 0, words_of(nd.out.n), nd.host_addr, False,
                     nd.out.root()[0].span_class)

    def _emit_store(self, nd: Node) -> None:
        r = nd.srcs[0]
        self._memcpy((Device.NPU, Device.HOST), 0, r.word(), words_of(r.n), nd.host_addr, True)

    def _emit_copy(self, nd: Node) -> None:
        r = nd.srcs[0]
        if r.n % ELEMS_PER_WORD and r.n != nd.out.n:
            raise CompileError(f"copy of {r.n} elements into {nd.out.n} ({nd.label}: {r.buf.name})")
        cls = nd.out.root()[0].span_class
        self._memcpy((Device.NPU, Device.NPU), nd.out.word(), r.word(), words_of(r.n), 0, False,
                     r.root()[0].span_class if cls is None else cls)


# one emitter per IR node kind (compile/ir.Node.kind); "host" and "mark" are segment boundaries
_EMIT = {"gemv": CodeGen._emit_gemv, "emax_reset": CodeGen._emit_emax_reset, "cvo": CodeGen._emit_cvo,
         "load": CodeGen._emit_load, "store": CodeGen._emit_store, "copy": CodeGen._emit_copy}


def report_extensions(stats: CompileStats) -> dict[str, dict[str, Any]]:
    return {k: {"uses": v, "why": EXTENSION_WHY.get(k, "")} for k, v in sorted(stats.extensions.items())}
