"""Lowering: run the W4A8 reference with an ops object that records a value graph instead of computing.

`Gemma3nW4A8` is written as one ``ops`` call per future instruction. `LoweringOps` answers each call
with a stand-in array (zeros of the right shape, never computed) that it has registered as a
symbolic L2 buffer, and appends a `Node`. Arrays come back as arguments, often as views (a head
of Q, one element of the AltUp coefficients): a view is resolved by its data pointer to (buffer,
element offset). The reference's control flow does not depend on values, so the graph is the
reference's exact op sequence; host-side work (embedding and PLE row lookups, RoPE rows) runs
for real and becomes staged host inputs. The program therefore computes what the reference
computes by construction; the simulator checks the addressing, tiling and encoding.

A prefill chunk (GEMMs over T tokens) is lowered by `npukit.targets.pccx.compile.lower_prefill` on the
same machinery: `SymbolicKVCache.append_batch` (the chunk's K/V rows) and per-token span keys.

Helpers swapped into the traced model: `TraceStore` (matrix codes are never unpacked; the row
scales identify the weight tile), `SymbolicKVCache` (the KV ring: appends become a staging copy and
a host step, reads become ring operands).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.compile.host_values import bf16_scalar, host_bits
from npukit.targets.pccx.compile.image import STAGING_BASE, STAGING_BYTES, DeviceImage, align
from npukit.targets.pccx.compile.ir import Buf, CapacityError, CompileError, Node, Ref, Weight
from npukit.targets.pccx.cvo import CVO, Lowering
from npukit.targets.pccx.gemma3n_quant.model import Gemma3nW4A8
from npukit.targets.pccx.gemma3n_quant.store import Int4Store
from npukit.targets.pccx.isa import ELEMS_PER_WORD, CvoFlag, CvoFunc
from npukit.targets.pccx.memory import W_ACT_SCALE, W_KMAJOR, W_SPLIT_SCALES

F32 = np.float32


class SymArray(np.ndarray):
    """Stand-in values: an integer index yields a one-element *view*, so it keeps its address."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int | np.integer) and self.ndim == 1:
            k = int(key) + (self.shape[0] if key < 0 else 0)
            return super().__getitem__(slice(k, k + 1))
        return super().__getitem__(key)


@dataclass(frozen=True)
class KVOperand:
    layer: int
    head: int
    kind: str  # "k" | "v" | "ks" | "vs"
    row0: int
    count: int
    transposed: bool = False
    slot: int | None = None  # prefill: the chunk's token index (its span is patched separately)

    @property
    def T(self) -> KVOperand:
        return dataclasses.replace(self, transposed=not self.transposed)

    def span_key(self, wk: int) -> int | tuple[int, int]:
        """Key of the span patched into this operand's descriptors: the window class (decode) or
        (window class, token index in the chunk) (prefill)."""
        return wk if self.slot is None else (wk, self.slot)


@dataclass(frozen=True)
class KVPending:
    ref: Ref  # the stacked [kv_heads, head_dim] BF16 block


@dataclass(frozen=True)
class HostStep:
    """Between program segments the driver runs this: quantize the staged K/V into the ring."""

    kind: str
    layer: int
    pos: int
    k_addr: int
    v_addr: int
    n: int  # elements per block
    items: tuple[tuple[int, int, int], ...] = ()  # prefill: (token index in chunk, K addr, V addr) each


class _MatProxy:
    def __init__(self, m) -> None:
        self._m, self.shape, self.scale = m, m.shape, m.scale

    def codes(self, rows: slice | None = None) -> np.ndarray:
        n = self.shape[0] if rows is None else len(range(*rows.indices(self.shape[0])))
        return np.empty((n, self.shape[1]), np.int8)  # never read: the row scales name the tile

    def dequant_rows(self, idx: np.ndarray) -> np.ndarray:
        return self._m.dequant_rows(idx)


class TraceStore:
    def __init__(self, store: Int4Store) -> None:
        self._s, self.config, self.origin = store, store.config, store.origin

    def mat(self, name: str) -> _MatProxy:
        return _MatProxy(self._s.mat(name))

    def vec(self, name: str) -> np.ndarray:
        return self._s.vec(name)


def window_key(ring: Any, layer: int) -> int:
    """Attention-span class of a layer: its sliding window, or 0 for full attention (capped ring)."""
    return ring.layers[layer].window or 0


def span_bucket(count: int, limit: int) -> int:
    """Allocated length of an attention span of ``count`` rows (``limit``: the most it can reach):
    the next power of two from 16, at most ``limit``. One compiled program serves a whole bucket."""
    return min(max(16, 1 << (max(count, 1) - 1).bit_length()), limit)


class SymbolicKVCache:
    """The KV ring as seen by the lowering: reads are operands of the span bucket length (``bucket``:
    window key -> rows allocated); which rows and how many are filled in per token by the driver."""

    def __init__(self, ops: LoweringOps, ring: Any) -> None:
        self.ops, self.ring = ops, ring
        self.length: dict[int, int] = {}
        self.bucket: dict[int, int] = {}
        self._staging: dict[tuple[int, str], int] = {}  # (token index, k|v) -> staging address
        self._staging_ops: LoweringOps | None = None  # the program those addresses were staged in

    def reset(self) -> None:
        self.length.clear()

    def _store(self, slot: int, kind: str, r: Ref) -> int:
        """The K or V block on its way to the host. The program stops at the host step that consumes
        it, so every layer reuses the same staging block per (token index, kind). The addresses belong
        to one program: in the next lowering the same address may hold one of its host inputs (RoPE
        rows, embeddings), which a K/V store there would overwrite before a later layer loads it."""
        if self._staging_ops is not self.ops:
            self._staging, self._staging_ops = {}, self.ops
        key = (slot, kind)
        addr = self._staging.get(key)
        if addr is None or self.ops.staged_bytes(addr) < 2 * r.n:
            addr = self._staging[key] = self.ops.stage(2 * r.n)
        return self.ops.store(r, addr)

    def append(self, layer: int, k: tuple, v: tuple) -> None:
        pos = self.length.get(layer, 0)
        ka, va = self._store(0, "k", k[0].ref), self._store(0, "v", v[0].ref)
        self.ops.nodes.append(Node("host", host=HostStep("kv_write", layer, pos, ka, va, k[0].ref.n),
                                   label=f"kv_write layer {layer} pos {pos}"))
        self.length[layer] = pos + 1

    def append_batch(self, layer: int, entries: list[tuple]) -> None:
        """A prefill chunk's T K/V blocks: T pairs of stores, then one host step writing T ring rows."""
        pos = self.length.get(layer, 0)
        items = tuple((t, self._store(t, "k", k[0].ref), self._store(t, "v", v[0].ref))
                      for t, (k, v) in enumerate(entries))
        n = entries[0][0][0].ref.n
        self.ops.nodes.append(Node("host", host=HostStep("kv_write", layer, pos, items[0][1], items[0][2], n,
                                                         items),
                                   label=f"kv_write layer {layer} pos {pos}+{len(items)}"))
        self.length[layer] = pos + len(items)

    def attend(self, layer: int, head: int, window: int | None, length: int | None = None) -> tuple:
        """``length`` (prefill, lowered from position 0): the query is token ``length - 1`` of the chunk;
        its span gets its own patched descriptors."""
        wk = window_key(self.ring, layer)
        n = self.length[layer] if length is None else int(length)
        row0, count = 0, self.bucket.get(wk) or self.ring.span(layer, n)[1]
        quant = self.ring.fmt != "fp16"
        slot = None if length is None else n - 1
        mk = lambda kind: KVOperand(layer, head, kind, row0, count, slot=slot)  # noqa: E731
        return mk("k"), mk("ks") if quant else None, mk("v"), mk("vs") if quant else None


# what the reference does with the span's scores: EXP(sub_emax), REDUCE_SUM, SCALE(÷sum). Over the
# bucket: exp(-inf - e_max) = +0, the serial sum adds +0 (unchanged), 0 / sum = 0, and the V GEMV's
# K (the span's rows) never reads the tail, so every value equals the reference's over the span.
_SPAN_FUNCS = frozenset(f for f, spec in CVO.items() if spec.span_safe)


def _ptr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


class LoweringOps:
    """The `PccxOps` interface, recording `Node`s over symbolic buffers (see module doc)."""

    def __init__(self, image: DeviceImage, ring: Any) -> None:
        self.image, self.ring = image, ring
        self.nodes: list[Node] = []
        self._index: list[tuple[int, int, Buf]] = []  # (start ptr, end ptr, buf), sorted
        self._starts: list[int] = []  # the start ptrs of ``_index`` (bisected without a key function)
        self._keep: list[np.ndarray] = []
        self._prescaled: dict[int, tuple[Ref, KVOperand]] = {}
        self._vec_ptrs = {_ptr(v): name for name, v in image.store.vecs.items()}
        self._vec_bufs: dict[str, Buf] = {}
        self._consts: dict[tuple[float, int, Any], Buf] = {}
        self.host_inputs: list[tuple[int, np.ndarray]] = []
        self.recipes: list[tuple[int, tuple]] = []  # (staging address, host recipe) of per-token inputs
        self._tags: dict[int, tuple] = {}
        self.outputs: list[tuple[int, int]] = []
        self._staging = STAGING_BASE
        self._staging_top = STAGING_BASE + STAGING_BYTES  # bucket-sized constants, staged downwards
        self._staged: dict[int, int] = {}
        self._recipe_addr: dict[tuple, int] = {}  # a host input already staged (RoPE rows: once per type)
        self._batches: dict[int, tuple[Ref, int, int]] = {}  # GEMM operands: ptr -> (ref, rows, row stride)
        self._n = 0

    # ---- buffers -----------------------------------------------------------------------------
    def _new(self, shape: tuple[int, ...] | int, name: str) -> tuple[np.ndarray, Buf]:
        shape = (shape,) if isinstance(shape, int) else shape
        self._n += 1
        buf = Buf(int(math.prod(shape)), f"{name}#{self._n}")
        arr = np.zeros(shape, F32).view(SymArray)
        self._register(arr, buf)
        return arr, buf

    def _register(self, arr: np.ndarray, buf: Buf) -> None:
        """Index ``arr``'s bytes as ``buf`` (`_lookup`), in start order (after equal starts)."""
        p = _ptr(arr)
        i = bisect.bisect_right(self._starts, p)
        self._starts.insert(i, p)
        self._index.insert(i, (p, p + arr.nbytes, buf))
        self._keep.append(arr)

    def _lookup(self, a: np.ndarray) -> Ref | None:
        p = _ptr(a)
        i = bisect.bisect_right(self._starts, p) - 1
        if i >= 0:
            s, e, buf = self._index[i]
            if p < e:
                if a.size > 1 and not a.flags.c_contiguous:
                    raise CompileError(f"operand view of {buf.name} is not contiguous")
                return Ref(buf, (p - s) // 4, int(a.size))
        return None

    def stage(self, nbytes: int, top: bool = False) -> int:
        """A host staging address for ``nbytes``: from the bottom up, or with ``top`` from the top down."""
        if top:
            addr = self._staging_top = self._staging_top - align(nbytes)
        else:
            addr = self._staging
            self._staging = align(addr + nbytes)
        if self._staging > self._staging_top:
            raise CapacityError(f"per-token host staging area ({STAGING_BYTES >> 20} MiB) is full")
        self._staged[addr] = nbytes
        return addr

    def staged_bytes(self, addr: int) -> int:
        return self._staged.get(addr, 0)

    def _host_input(self, bits: np.ndarray, name: str, shared: bool = False, addr: int | None = None,
                    top: bool = False) -> Buf:
        bits = np.asarray(bits, np.uint16).ravel()
        if addr is None:
            addr = self.stage(2 * bits.size, top)
            self.host_inputs.append((addr, bits))
        self._n += 1
        buf = Buf(bits.size, f"{name}#{self._n}", shared=shared)
        self.nodes.append(Node("load", out=Ref(buf, 0, bits.size), host_addr=addr, label=name))
        return buf

    def const_vec(self, value: float, n: int = 1, span_class: Any = None) -> Ref:
        """A constant vector from the host; ``span_class``: its length is that window class's span bucket
        (one per class, staged from the top down: other host inputs keep their addresses in every bucket)."""
        v = float(bf16_scalar(value))
        key = (v, n, span_class)
        if key not in self._consts:
            self._consts[key] = self._host_input(np.full(n, nx.to_bits(v)[()], np.uint16), f"const {v:g}",
                                                 shared=True, top=span_class is not None)
            self._consts[key].bucket_class = span_class
        return Ref(self._consts[key], 0, n)

    def ref(self, a: Any, n: int | None = None) -> Ref:
        """Resolve an argument to an L2 operand (a constant becomes a broadcast constant vector)."""
        if isinstance(a, np.ndarray) and a.dtype != object:
            r = self._lookup(a)
            if r is not None:
                return r
            name = self._vec_ptrs.get(_ptr(a))
            if name is not None and a.size == self.image.store.vecs[name].size:
                return self._vector(name)
            if a.size != 1:
                raise CompileError(f"operand of shape {a.shape} is not a value of this program")
        if isinstance(a, np.ndarray | np.generic | float | int):
            return self.const_vec(float(np.asarray(a, np.float64).ravel()[0]), n or 1)
        raise CompileError(f"cannot lower an operand of type {type(a).__name__}")

    def _vector(self, name: str) -> Ref:
        buf = self._vec_bufs.get(name)
        if buf is None:
            addr, n = self.image.vectors[name]
            self._n += 1
            buf = self._vec_bufs[name] = Buf(n, f"{name}#{self._n}", shared=True)
            self.nodes.append(Node("load", out=Ref(buf, 0, n), host_addr=addr, label=name))
        return Ref(buf, 0, buf.n)

    def _scalar(self, s: Any) -> Ref:
        if isinstance(s, np.ndarray) and s.dtype != object and self._lookup(s) is not None:
            r = self._lookup(s)
            if r.n != 1:
                raise CompileError("a scalar operand must be one element")
            return r
        return self.const_vec(float(np.asarray(s, np.float64).ravel()[0]), 1)

    def store(self, r: Ref, addr: int | None = None) -> int:
        addr = self.stage(2 * r.n) if addr is None else addr
        self.nodes.append(Node("store", srcs=(r,), host_addr=addr, label="to host"))
        return addr

    def mark(self, label: str) -> None:
        self.nodes.append(Node("mark", label=label))

    # ---- device ops --------------------------------------------------------------------------
    def _cvo(self, func: CvoFunc, x: Any, dst: Any = None, scalar: Any = None, flags: int = 0,
             out_n: int | None = None) -> np.ndarray:
        xr = self.ref(x)
        srcs = (xr,)
        if dst is not None:
            srcs += (self.ref(dst),)
            flags |= CvoFlag.ACCM
        n = xr.n if out_n is None else out_n
        arr, buf = self._new(n, func.name.lower())
        sc = None if scalar is None else self._scalar(scalar)
        nd = Node("cvo", out=Ref(buf, 0, n), srcs=srcs, func=func, flags=int(flags), scalar=sc)
        dyn = xr.buf.root()[0].dyn
        if dyn is not None:  # softmax over the span bucket (its -inf tail contributes exact zeros)
            if dst is not None or xr.off or xr.n != xr.buf.n or func not in _SPAN_FUNCS:
                raise CompileError("an attention-span vector is used in a way the bucket cannot carry")
            if out_n is None:
                buf.dyn = dyn
        self.nodes.append(nd)
        return arr

    def _binary(self, func: CvoFunc, x: Any, y: Any) -> np.ndarray:
        if isinstance(y, KVOperand):
            if func != CvoFunc.MUL or y.kind != "vs":
                raise CompileError("only the V-scale product may take a KV operand")
            xr = self.ref(x)
            arr, _ = self._new(xr.n, "prescaled")
            self._prescaled[_ptr(arr)] = (xr, y)
            return arr
        xa = isinstance(x, np.ndarray) and x.size > 1
        ya = isinstance(y, np.ndarray) and y.size > 1
        n = max(np.size(x), np.size(y)) if (xa or ya) else 1
        if xa != ya and n > 1:  # vector (op) one runtime element: the element goes through S
            vec, sc = (x, y) if xa else (y, x)
            sref = self._lookup(sc) if isinstance(sc, np.ndarray) else None
            if sref is not None:
                if func == CvoFunc.MUL:  # x · s = SCALE(x) with S = s
                    return self._cvo(CvoFunc.SCALE, vec, scalar=sc)
                # x + s = SCALE(ones) accumulated onto x: bf16(x + 1 · s), one rounding
                vr = self.ref(vec)
                arr, buf = self._new(n, "add_s")
                self.nodes.append(Node("cvo", out=Ref(buf, 0, n), srcs=(self.const_vec(1.0, n), vr),
                                       func=CvoFunc.SCALE, flags=int(CvoFlag.ACCM), scalar=sref))
                return arr
        xr, yr = self.ref(x, n), self.ref(y, n)
        arr, buf = self._new(n, func.name.lower())
        self.nodes.append(Node("cvo", out=Ref(buf, 0, n), srcs=(xr, yr), func=func))
        return arr

    def gemv(self, w: Any, x: Any, w_scale: Any = None, dest: Any = None, fmt: str = "int4") -> np.ndarray:
        if dest is not None:
            raise CompileError("GEMV accumulation is not used by the reference")
        if isinstance(w, np.ndarray) and w.dtype == object:
            w = w.ravel()[0]
        if isinstance(w, KVOperand):
            return self._gemv_kv(w, x, w_scale, fmt)
        if w_scale is None:
            raise CompileError("a weight GEMV needs its row scales (they name the weight tile)")
        xr = self.ref(x)
        name, lo = self.image.matrix_of_scales(w_scale)
        hi = lo + int(np.size(w_scale))
        arr, buf = self._new(hi - lo, name)
        for t in self.image.tiles_for(name, lo, hi):
            wt = _tile_weight(t)
            out = Ref(buf, t.lo - lo, wt.m)
            self.nodes.append(Node("gemv", out=out, srcs=(xr,), weight=wt, label=wt.name))
        return arr

    def _gemv_kv(self, w: KVOperand, x: Any, w_scale: Any, fmt: str) -> np.ndarray:
        ring, d = self.ring, self.ring.dim
        lr = ring.layers[w.layer]
        wk = w.span_key(window_key(ring, w.layer))
        if w.kind == "k" and not w.transposed:
            blk = lr.k[w.head]
            quant = w_scale is not None
            wt = Weight(blk.codes + w.row0 * ring.rb, fmt, w.count, d, W_SPLIT_SCALES if quant else 0,
                        blk.scales + 4 * w.row0 if quant else None, quant, f"K l{w.layer} h{w.head}",
                        ("k", wk, blk.codes, ring.rb, blk.scales if quant else None))
            xr = self.ref(x)
            n = w.count
        elif w.kind == "v" and w.transposed:
            blk = lr.v[w.head]
            pre = self._prescaled.pop(_ptr(x), None) if isinstance(x, np.ndarray) else None
            ext, sa = W_KMAJOR, None
            if pre is not None:
                xr, vs = pre
                ext |= W_ACT_SCALE
                sa = blk.scales + 4 * vs.row0
            else:
                xr = self.ref(x)
            wt = Weight(blk.codes + w.row0 * ring.rb, fmt, d, w.count, ext, sa, False,
                        f"V l{w.layer} h{w.head}", ("v", wk, blk.codes, ring.rb, blk.scales if sa else None))
            if xr.buf.root()[0].dyn != wk or xr.off or xr.n != w.count:
                raise CompileError("V GEMV: the probabilities are not the span's softmax")
            n = d
        else:
            raise CompileError(f"unsupported KV GEMV operand {w.kind} (transposed={w.transposed})")
        arr, buf = self._new(n, wt.name)
        if w.kind == "k":  # scores over the bucket: rows past the token's span stay -inf (exp -> 0)
            buf.dyn = wk
            tail = self.const_vec(-np.inf, n, span_class=wk[0] if isinstance(wk, tuple) else wk)
            self.nodes.append(Node("copy", out=Ref(buf, 0, n), srcs=(tail,), label="span tail -inf"))
        self.nodes.append(Node("gemv", out=Ref(buf, 0, n), srcs=(xr,), weight=wt, label=wt.name))
        return arr

    def findemax(self, e_max: Any, dest: Any) -> str:
        r = self.ref(dest)
        root = r.root()[0]
        for i in range(len(self.nodes) - 1, -1, -1):
            nd = self.nodes[i]
            if nd.kind == "gemv" and nd.out.root()[0] is root:
                if not np.isneginf(float(e_max)):
                    raise CompileError("findemax must start from -inf (a fresh softmax)")
                nd.findemax = True
                self.nodes.insert(i, Node("emax_reset", label="e_max = -inf"))
                return "e_max"
        raise CompileError("findemax on a value no GEMV produced")

    def reduce_sum(self, x: Any, dst: Any = None) -> np.ndarray:
        return self._cvo(CvoFunc.REDUCE_SUM, x, dst, out_n=1)

    def cvo_exp(self, x: Any, e_max: Any = None, dst: Any = None) -> np.ndarray:
        return self._cvo(CvoFunc.EXP, x, dst, flags=CvoFlag.SUB_EMAX if e_max is not None else 0)

    def cvo_scale(self, x: Any, scalar: Any, recip: bool = False, dst: Any = None) -> np.ndarray:
        return self._cvo(CvoFunc.SCALE, x, dst, scalar, CvoFlag.RECIP_SCALE if recip else 0)

    def cvo_relu_bias(self, x: Any, c: Any, dst: Any = None) -> np.ndarray:
        return self._cvo(CvoFunc.RELU_BIAS, x, dst, c)

    def cvo_mul(self, x: Any, y: Any) -> np.ndarray:
        return self._binary(CvoFunc.MUL, x, y)

    def cvo_add(self, x: Any, y: Any) -> np.ndarray:
        return self._binary(CvoFunc.ADD, x, y)

    def kv_quantize(self, x: Any, fmt: str) -> tuple[KVPending, None]:
        return KVPending(self.ref(x)), None

    @staticmethod
    def const(x: float) -> np.float32:
        return F32(bf16_scalar(x))

    def swap_halves(self, x: Any) -> np.ndarray:
        xr = self.ref(x)
        h = xr.n // 2
        arr, buf = self._new(xr.n, "swap")
        for src_off, dst_off in ((h, 0), (0, h)):
            self.nodes.append(Node("copy", out=Ref(buf, dst_off, h), srcs=(Ref(xr.buf, xr.off + src_off, h),),
                                   label="swap halves"))
        return arr

    def concat(self, parts: list[Any]) -> np.ndarray:
        refs = [self.ref(p) for p in parts]
        total = sum(r.n for r in refs)
        arr, buf = self._new(total, "concat")
        self._place(buf, refs)
        return arr

    def stack(self, parts: list[Any]) -> np.ndarray:
        refs = [self.ref(p) for p in parts]
        arr, buf = self._new(sum(r.n for r in refs), "stack")
        self._place(buf, refs)
        return arr.reshape(len(refs), -1)

    def _place(self, buf: Buf, refs: list[Ref]) -> None:
        off = 0
        for r in refs:
            whole = r.off == 0 and r.n == r.buf.n and r.buf.parent is None and not r.buf.shared
            if whole and off % ELEMS_PER_WORD == 0:
                r.buf.alias(buf, off)
            else:
                self.nodes.append(Node("copy", out=Ref(buf, off, r.n), srcs=(r,), label="concat part"))
            off += r.n

    def tag(self, x: np.ndarray, recipe: tuple) -> None:
        """Mark a host array as the per-token input ``recipe`` (re-evaluated by the driver per token)."""
        self._tags[_ptr(x)] = recipe
        self._keep.append(x)

    def host_to_l2(self, x: np.ndarray) -> np.ndarray:
        recipe = self._tags.get(_ptr(x)) if isinstance(x, np.ndarray) else None
        v = np.asarray(x, F32)
        addr = self._recipe_addr.get(recipe) if recipe is not None else None
        if recipe is not None and addr is None:
            self._recipe_addr[recipe] = self._staging
            self.recipes.append((self._staging, recipe))
        buf = self._host_input(host_bits(v), "host", addr=addr)
        arr = nx.bf16(v).view(SymArray).copy()
        self._register(arr, buf)
        return arr

    def l2_to_host(self, x: Any) -> np.ndarray:
        r = self.ref(x)
        self.outputs.append((self.store(r), r.n))
        return np.zeros(r.n, F32)


def _unary(func: CvoFunc):
    def op(self: LoweringOps, x: Any, dst: Any = None) -> np.ndarray:
        return self._cvo(func, x, dst)

    op.__name__ = f"cvo_{func.name.lower()}"
    return op


for _f, _spec in CVO.items():  # the CVO table's plain unary functions: one generated method each
    if _spec.lowering is Lowering.UNARY:
        setattr(LoweringOps, _spec.op_name, _unary(_f))


def _tile_weight(t: Any) -> Weight:
    return Weight(t.addr, "int4", t.hi - t.lo, t.k, W_KMAJOR if t.kmajor else 0, None, True,
                  f"{t.name}[{t.lo}:{t.hi}]")


def trace_model(store: Int4Store, kv: str, image: DeviceImage, ring: Any) -> tuple[Gemma3nW4A8, LoweringOps]:
    """A reference model instance wired for lowering; call `lower_step` per program variant."""
    ops = LoweringOps(image, ring)
    model = Gemma3nW4A8(TraceStore(store), kv=kv, ops=ops)  # type: ignore[arg-type]
    model.cache = SymbolicKVCache(ops, ring)  # type: ignore[assignment]
    layer = model._layer

    def tagged(name: str, fn: Any) -> Any:
        def host(*args: Any) -> Any:
            out = fn(*args)
            o = model.ops
            if isinstance(o, LoweringOps):
                if name == "rope":  # (layer type, position)
                    for j, r in enumerate(out):
                        o.tag(r, ("rope", args[0], j, int(args[1])))
                else:  # (token): the token's index in the lowered chunk
                    o.tag(out, (name, int(args[0])))
            return out

        return host

    model.host_embed = tagged("embed", model.host_embed)  # type: ignore[method-assign]
    model.host_ple = tagged("ple", model.host_ple)  # type: ignore[method-assign]
    model.host_rope = tagged("rope", model.host_rope)  # type: ignore[method-assign]

    def marked(i: int, xs: list, pli: np.ndarray) -> list:
        out = layer(i, xs, pli)
        model.ops.mark(f"layer {i}")
        return out

    model._layer = marked  # type: ignore[method-assign]
    return model, ops


def lower_step(model: Gemma3nW4A8, token: int) -> LoweringOps:
    """Trace one decode step at the model's next position into a fresh `LoweringOps` (attention spans
    at the lengths in ``model.cache.bucket``, else the exact ones)."""
    old: LoweringOps = model.ops  # type: ignore[assignment]
    ops = LoweringOps(old.image, old.ring)
    model.ops = ops
    model.cache.ops = ops  # type: ignore[attr-defined]
    model.step(token)
    return ops
