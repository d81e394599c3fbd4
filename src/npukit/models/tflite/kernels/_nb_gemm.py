"""The int8 convolution kernel family ``int8-conv``: CONV_2D (any window, stride, dilation, padding)
as one fused numba kernel per build — im2col of a few output pixels at a time into an L1-sized
buffer, an int8 GEMM against weights packed once at plan time, and the requantization in the
epilogue — so no full-size column matrix or int32 accumulator array exists.

Builds (`npukit.sim.cpu` chooses before compiling; each is a separate compiled function):

* ``avx512-vnni``: ``vpdpbusd`` multiplies 64 *unsigned* activation bytes by 64 *signed* weight
  bytes into 16 int32 lanes (4 products per lane, no saturation). The activation code ``x`` is
  flipped to ``u = x ^ 0x80 = x + 128`` on the fly, so ``Σ (x − zp)·w = Σ u·w − (zp + 128)·Σ w``:
  the column-sum correction is folded into the bias at plan time. Exact in int32: every lane sum
  is at most 255·128·K < 2^31 for K ≤ 65,536 (larger K keeps the float32 BLAS path).
* ``portable``: the same packed layout and the same sums in plain loops (LLVM vectorises them for
  whatever the target has); bit-identical by construction, tested against the readable kernels.

Padding taps hold the input zero point, which is what skipping them adds (``x − zp = 0``); the
K axis is padded to a multiple of 4 with zero weights. Weights are packed in blocks of 16 output
channels: ``pack[j, q, l, b] = w[16j + l, 4q + b]`` (64 bytes per K quad, one zmm).

The requantization is TFLite's ``MultiplyByQuantizedMultiplier`` (per channel, the floor form
`common.Requantizer` proves equal to gemmlowp's) written without branches so it vectorises:
``x = int32(acc << left)``, ``h = (x·m + 2^30) >> 31``, then round-half-away division by
``2^right``.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from npukit.sim import compile_report, cpu

compile_report.install()  # first-run compiles are announced, never silent

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy"}
MR = 8  # output pixels per micro-tile (8 rows × 2 vectors = 16 accumulators: enough to hide latency)
LANES = 16  # int32 lanes of one vpdpbusd
TILE_W = 2 * LANES  # int32 columns of the accumulator tile
MAX_K = 65536  # exactness bound of the int32 lane sums (module docstring)
_I32X16 = ir.VectorType(ir.IntType(32), 16)


def _make_dot(mr: int, nv: int):
    """Intrinsic ``dot(a, a_stride, b, b_stride, quads, out)``: out[i·32 + 16v + l] (int32) +=
    Σ over ``quads`` of the 4 activation bytes at ``a + i·a_stride + 4q`` (flipped to unsigned)
    times the 4 weight bytes of lane l at ``b + v·b_stride + 64q``; mr rows × nv vectors."""

    @intrinsic
    def dot(typingctx, a_addr, a_stride, b_addr, b_stride, quads, out_addr):
        sig = types.void(types.intp, types.intp, types.intp, types.intp, types.intp, types.intp)

        def codegen(context, builder, signature, args):
            a, sa, b, sb, n, out = args
            i32 = ir.IntType(32)
            dpbusd = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(_I32X16, [_I32X16, _I32X16, _I32X16]),
                "llvm.x86.avx512.vpdpbusd.512")
            vec_p, i32_p = _I32X16.as_pointer(), i32.as_pointer()
            slots = [builder.inttoptr(builder.add(out, ir.Constant(out.type, 4 * (i * TILE_W + v * LANES))),
                                      vec_p) for i in range(mr) for v in range(nv)]
            accs = [cgutils.alloca_once_value(builder, builder.load(slot, align=1)) for slot in slots]
            flip = ir.Constant(i32, 0x80808080 - 2**32)
            splat_mask = ir.Constant(ir.VectorType(i32, 16), [0] * 16)
            rows = [builder.add(a, builder.mul(sa, ir.Constant(sa.type, i))) for i in range(mr)]
            cols = [builder.add(b, builder.mul(sb, ir.Constant(sb.type, v))) for v in range(nv)]
            with cgutils.for_range(builder, n) as loop:
                q = loop.index
                boff = builder.mul(q, ir.Constant(n.type, 64))
                aoff = builder.mul(q, ir.Constant(n.type, 4))
                bv = [builder.load(builder.inttoptr(builder.add(c, boff), vec_p), align=1) for c in cols]
                for i in range(mr):
                    word = builder.load(builder.inttoptr(builder.add(rows[i], aoff), i32_p), align=1)
                    one = builder.insert_element(ir.Constant(_I32X16, None), builder.xor(word, flip),
                                                 ir.Constant(i32, 0))
                    splat = builder.shuffle_vector(one, ir.Constant(_I32X16, None), splat_mask)
                    for v in range(nv):
                        acc = accs[i * nv + v]
                        builder.store(builder.call(dpbusd, [builder.load(acc), splat, bv[v]]), acc)
            for acc, slot in zip(accs, slots, strict=True):
                builder.store(builder.load(acc), slot, align=1)
            return context.get_dummy_value()

        return sig, codegen

    return dot


_dot_1v = _make_dot(MR, 1)
_dot_2v = _make_dot(MR, 2)


@nb.njit(inline="always")
def _tile_vnni(a, a_off, a_stride, b, b_off, b_stride, quads, nv, tile):
    """tile (MR × 16·nv int32) += the products of one K range, by vpdpbusd."""
    pa = a.ctypes.data + a_off
    pb = b.ctypes.data + b_off
    if nv == 2:
        _dot_2v(pa, a_stride, pb, b_stride, quads, tile.ctypes.data)
    else:
        _dot_1v(pa, a_stride, pb, b_stride, quads, tile.ctypes.data)


def _make_fdot(nv: int):
    """Intrinsic ``fdot(a, a_stride, b, b_stride, quads, out)``, the portable twin of `_make_dot`:
    out[i·32 + 16v + l] (int32) += Σ over 4·quads K steps of ``(a byte ^ 0x80)`` times the float32
    weight of lane l (``b + v·b_stride + 64k``), in float32 multiply-adds, two rows at a time. Exact:
    every product is an integer of magnitude ≤ 255·128 and float32 adds integers exactly below 2^24,
    so at most `FLOAT_QUADS` quads per call (512·255·128 < 2^24), converted to int32 at the end.
    Plain LLVM vector IR: LLVM lowers it for any CPU (8 or 16 float lanes per instruction)."""

    @intrinsic
    def fdot(typingctx, a_addr, a_stride, b_addr, b_stride, quads, out_addr):
        sig = types.void(types.intp, types.intp, types.intp, types.intp, types.intp, types.intp)

        def codegen(context, builder, signature, args):
            a, sa, b, sb, n, out = args
            f32, i32 = ir.FloatType(), ir.IntType(32)
            vf, vec_p = ir.VectorType(f32, 16), _I32X16.as_pointer()
            zero = ir.Constant(vf, None)
            for group in range(0, MR, 2):
                accs = [cgutils.alloca_once_value(builder, zero) for _ in range(2 * nv)]
                with cgutils.for_range(builder, builder.mul(n, ir.Constant(n.type, 4))) as loop:
                    k = loop.index
                    koff = builder.mul(k, ir.Constant(n.type, 64))
                    cols = [builder.add(b, builder.mul(sb, ir.Constant(sb.type, v))) for v in range(nv)]
                    ws = [builder.load(builder.inttoptr(builder.add(c, koff), vf.as_pointer()), align=1)
                          for c in cols]
                    for r in range(2):
                        row = builder.add(a, builder.mul(sa, ir.Constant(sa.type, group + r)))
                        byte = builder.load(builder.inttoptr(builder.add(row, k), ir.IntType(8).as_pointer()))
                        u = builder.uitofp(builder.zext(builder.xor(byte, ir.Constant(ir.IntType(8), 0x80)),
                                                        i32), f32)
                        one = builder.insert_element(zero, u, ir.Constant(i32, 0))
                        splat = builder.shuffle_vector(one, zero, ir.Constant(_I32X16, [0] * 16))
                        for v in range(nv):
                            acc = accs[r * nv + v]
                            builder.store(builder.fadd(builder.load(acc), builder.fmul(splat, ws[v])), acc)
                for r in range(2):
                    for v in range(nv):
                        slot = builder.inttoptr(builder.add(out, ir.Constant(
                            out.type, 4 * ((group + r) * TILE_W + v * LANES))), vec_p)
                        sums = builder.fptosi(builder.load(accs[r * nv + v]), _I32X16)
                        builder.store(builder.add(builder.load(slot, align=1), sums), slot, align=1)
            return context.get_dummy_value()

        return sig, codegen

    return fdot


FLOAT_QUADS = 128  # K quads per float32 pass of the portable build (its exactness bound)
_fdot_1v = _make_fdot(1)
_fdot_2v = _make_fdot(2)


@nb.njit(inline="always")
def _tile_portable(a, a_off, a_stride, b, b_off, b_stride, quads, nv, tile):
    """The same sums as `_tile_vnni` from float32 weights (`pack_weights` for the portable build),
    K split into exact float32 passes."""
    for q0 in range(0, quads, FLOAT_QUADS):
        qn = min(FLOAT_QUADS, quads - q0)
        pa = a.ctypes.data + a_off + 4 * q0
        pb = b.ctypes.data + b_off + 4 * 64 * q0
        if nv == 2:
            _fdot_2v(pa, a_stride, pb, b_stride, qn, tile.ctypes.data)
        else:
            _fdot_1v(pa, a_stride, pb, b_stride, qn, tile.ctypes.data)


# the names `conv_kernel` and `_block_row` use; each build binds its own (see `build`)
_tile = _tile_portable
WEIGHT_BYTES = 4  # bytes per packed weight: 1 (int8, VNNI) or 4 (float32, portable)


def pack_weights(w: np.ndarray, path: str | None = None) -> np.ndarray:
    """(N, K) int8 weights → the packed layout of ``path``'s build (default: this CPU's), flat;
    channels and K padded with zero weights. VNNI: blocks of 16 channels × K quads × 16 lanes × 4
    bytes (int8). Portable: blocks of 16 channels × K × 16 lanes, float32."""
    n, k = w.shape
    npad, kpad = -(-n // LANES) * LANES, -(-k // 4) * 4
    full = np.zeros((npad, kpad), np.int8)
    full[:n, :k] = w
    if (path or chosen_path()) != FAMILY.fast:
        blocks = full.reshape(npad // LANES, LANES, kpad).transpose(0, 2, 1)
        return np.ascontiguousarray(blocks, np.float32).ravel()
    blocks = full.reshape(npad // LANES, LANES, kpad // 4, 4).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(blocks).ravel()


@intrinsic
def _copy_bytes(typingctx, dst_addr, src_addr, count):
    """dst[0:count] = src[0:count] for a few bytes (an im2col run): a bare IR loop, no call, four
    bytes a step (unaligned int32 moves) and the last count % 4 one by one."""
    sig = types.void(types.intp, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        dst, src, n = args
        byte_p, word_p = ir.IntType(8).as_pointer(), ir.IntType(32).as_pointer()
        words = builder.lshr(n, ir.Constant(n.type, 2))
        with cgutils.for_range(builder, words) as loop:
            off = builder.shl(loop.index, ir.Constant(n.type, 2))
            value = builder.load(builder.inttoptr(builder.add(src, off), word_p), align=1)
            builder.store(value, builder.inttoptr(builder.add(dst, off), word_p), align=1)
        done = builder.shl(words, ir.Constant(n.type, 2))
        with cgutils.for_range(builder, builder.sub(n, done)) as loop:
            off = builder.add(done, loop.index)
            value = builder.load(builder.inttoptr(builder.add(src, off), byte_p))
            builder.store(value, builder.inttoptr(builder.add(dst, off), byte_p))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _fill_bytes(typingctx, dst_addr, value, count):
    """dst[0:count] = value (one byte): LLVM's generic memset, where numba's ``a[:] = v`` on int8
    loops element by element (~1 ns a byte)."""
    sig = types.void(types.intp, types.int64, types.intp)

    def codegen(context, builder, signature, args):
        dst, value, n = args
        byte = builder.trunc(value, ir.IntType(8))
        cgutils.memset(builder, builder.inttoptr(dst, ir.IntType(8).as_pointer()), n, byte)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _copy_row(typingctx, dst_addr, src_addr, count):
    """dst[0:count] = src[0:count] for a whole image row: LLVM's generic memcpy (the byte loop of
    `_copy_bytes` is not vectorised; a memcpy call pays off past a few dozen bytes)."""
    sig = types.void(types.intp, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        dst, src, n = args
        byte_p = ir.IntType(8).as_pointer()
        cgutils.raw_memcpy(builder, builder.inttoptr(dst, byte_p), builder.inttoptr(src, byte_p), n, 1)
        return context.get_dummy_value()

    return sig, codegen


def splat_ir(builder, value):
    """An int64 scalar as 16 int32 lanes."""
    zero = ir.Constant(_I32X16, None)
    one = builder.insert_element(zero, builder.trunc(value, ir.IntType(32)), ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(one, zero, ir.Constant(_I32X16, [0] * 16))


def params_ir(builder, params, row_bytes, first: int):
    """Rows first .. first + 5 of a requantization parameter block (see `requant_params`)."""
    def row(r):
        addr = builder.add(params, builder.mul(row_bytes, ir.Constant(row_bytes.type, first + r)))
        return builder.load(builder.inttoptr(addr, _I32X16.as_pointer()), align=1)

    return [row(r) for r in range(6)]


def mbqm_ir(builder, acc, rows):
    """16 lanes of ``MultiplyByQuantizedMultiplier(acc + bias)`` (rows: bias, multiplier, left and
    right shift, remainder mask, half mask): int32 lanes except the doubling high multiply
    (int32 × int32 → int64); the rounding division by 2^right is gemmlowp's remainder-and-
    threshold form, which cannot overflow."""
    bias, mult, left, right, mask, half = rows
    v32, v64 = _I32X16, ir.VectorType(ir.IntType(64), 16)
    x = builder.shl(builder.add(acc, bias), left)  # int32 wrap-around, as C's x * (1 << left)
    prod = builder.mul(builder.sext(x, v64), builder.sext(mult, v64))
    h = builder.ashr(builder.add(prod, ir.Constant(v64, [1 << 30] * 16)), ir.Constant(v64, [31] * 16))
    h = builder.trunc(h, v32)
    negative = builder.zext(builder.icmp_signed("<", h, ir.Constant(v32, None)), v32)
    up = builder.icmp_signed(">", builder.and_(h, mask), builder.add(half, negative))
    return builder.add(builder.ashr(h, right), builder.zext(up, v32))


def store_int8_ir(builder, v, zp, lo, hi, dst):
    """``clamp(v + zp, lo, hi)`` stored as 16 int8 at ``dst``."""
    v = builder.add(v, splat_ir(builder, zp))
    lo_v, hi_v = splat_ir(builder, lo), splat_ir(builder, hi)
    v = builder.select(builder.icmp_signed("<", v, lo_v), lo_v, v)
    v = builder.select(builder.icmp_signed(">", v, hi_v), hi_v, v)
    out_t = ir.VectorType(ir.IntType(8), 16)
    builder.store(builder.trunc(v, out_t), builder.inttoptr(dst, out_t.as_pointer()), align=1)


@intrinsic
def _requant16(typingctx, tile_addr, params_addr, row_bytes, zp_out, lo, hi, dst_addr):
    """16 channels of one tile row requantized into 16 int8 at ``dst`` (params: six int32 rows
    ``row_bytes`` apart, `requant_params`). Plain LLVM vector IR (no target intrinsic), so every
    build may use it."""
    sig = types.void(types.intp, types.intp, types.intp, types.int64, types.int64, types.int64, types.intp)

    def codegen(context, builder, signature, args):
        tile, par, rb, zp, lo_, hi_, dst = args
        acc = builder.load(builder.inttoptr(tile, _I32X16.as_pointer()), align=1)
        store_int8_ir(builder, mbqm_ir(builder, acc, params_ir(builder, par, rb, 0)), zp, lo_, hi_, dst)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(inline="always")
def _epilogue(tile, i, j0, width, params, zp_out, lo, hi, dst, dst_off):
    """Requantize row i of the tile (channels j0 .. j0 + width) into dst[dst_off:] (int8)."""
    o = 0
    t0 = tile.ctypes.data + 4 * i * TILE_W
    while o + LANES <= width:
        _requant16(t0 + 4 * o, params.ctypes.data + 4 * (j0 + o), 4 * params.shape[1], zp_out, lo, hi,
                   dst.ctypes.data + dst_off + o)
        o += LANES
    for o in range(width - width % LANES, width):  # a channel count not a multiple of 16: the last few
        c = j0 + o
        x = np.int64(np.int32(np.int32(tile[i * TILE_W + o] + params[0, c]) << params[2, c]))
        h = (x * np.int64(params[1, c]) + (1 << 30)) >> 31
        up = 1 if (h & params[4, c]) > params[5, c] + (1 if h < 0 else 0) else 0
        v = (h >> params[3, c]) + up + zp_out
        dst[dst_off + o] = lo if v < lo else hi if v > hi else v


def requant_params(bias, mult, left, right) -> np.ndarray:
    """The six int32 rows `_requant16` reads, channels padded to a multiple of 16. The bias is kept
    modulo 2^32: the requantization wraps ``(acc + bias) << left`` to int32 anyway."""
    n = bias.shape[0]
    out = np.zeros((6, -(-n // LANES) * LANES), np.int32)
    right = np.asarray(right, np.int64)
    mask = (np.int64(1) << right) - 1
    wrapped = ((np.asarray(bias, np.int64) + 2**31) & 0xFFFFFFFF) - 2**31
    for r, row in enumerate((wrapped, mult, left, right, mask, mask >> 1)):
        out[r, :n] = row
    return out


@nb.njit(inline="always")
def _canvas(x, n, zp_in, wp, c4, pt, pl, canvas):
    """Image n of x into canvas (HP·WP·C4 int8, flat) with the input zero point at padding taps
    and in the channels past C (those bytes meet zero weights)."""
    _, h, wd, cin = x.shape
    _fill_bytes(canvas.ctypes.data, zp_in, canvas.size)
    xf = x.reshape(-1)
    run = wd * cin
    for y in range(h):
        base = ((y + pt) * wp + pl) * c4
        src = (n * h + y) * run
        if c4 == cin:  # numba's slice assignment costs ~1 ns a byte
            _copy_row(canvas.ctypes.data + base, xf.ctypes.data + src, run)
            continue
        for xx in range(wd):
            for c in range(cin):
                canvas[base + xx * c4 + c] = xf[src + xx * cin + c]


def _block_row(a, a_base, a_stride, wpack, taps, tap_step, row_step, quads, b_stride, cout, params,
               zp_out, lo, hi, rows, tile, dst, dst_off):
    """Up to MR output pixels: for every 16/32-channel block, the taps' products accumulated into
    the tile (tap t reads ``a_base + a_off[t]``), then requantized into dst."""
    blocks = (cout + LANES - 1) // LANES
    j = 0
    while j < blocks:
        nv = 2 if blocks - j >= 2 else 1
        _fill_bytes(tile.ctypes.data, 0, 4 * tile.size)  # numba's tile[:] = 0 loops per element
        for t in range(taps.shape[0]):
            b_off = j * b_stride + t * tap_step
            _tile(a, a_base + taps[t], a_stride, wpack, b_off, b_stride, quads, nv, tile)
        width = min(nv * LANES, cout - j * LANES)
        for i in range(rows):
            _epilogue(tile, i, j * LANES, width, params, zp_out, lo, hi, dst,
                      dst_off + i * row_step + j * LANES)
        j += nv


CONV_META = ("kpad", "cout", "zp_in", "oh", "ow", "sh", "sw", "pt", "pl", "hp", "wp", "c4", "run_len",
             "zp_out", "lo", "hi")  # the int64 ``meta`` of `conv_kernel`, in order


def conv_kernel(x, wpack, meta, taps, runs, params, out):
    """CONV_2D int8: x (N,H,W,C); out (N,OH,OW,cout) int8, from a zero-point-padded canvas of the
    input whose channels are padded to C4. C4 % 4 == 0 (``run_len`` 0): an implicit GEMM — ``taps``
    holds each window tap's byte offset in the canvas, and MR pixels of one output row are MR rows
    ``stride·C4`` bytes apart, so nothing is copied (a 1×1, stride-1 unpadded convolution, canvas
    (0, 0), reads x itself). Otherwise (first layers, C = 1 or 2): each pixel's window is copied as
    ``runs`` (canvas byte offsets) of ``run_len`` contiguous bytes into an im2col tile of MR rows,
    K padded to ``kpad``. The scalars come as one int64 array (`CONV_META`): a call with a few
    arrays costs numba's dispatcher about half what twenty scalars and tuples do."""
    kpad, cout, zp_in, oh, ow, sh, sw, pt, pl, hp, wp, c4, run_len, zp_out, lo, hi = (
        meta[0], meta[1], meta[2], meta[3], meta[4], meta[5], meta[6], meta[7], meta[8], meta[9], meta[10],
        meta[11], meta[12], meta[13], meta[14], meta[15])
    nbatch, _, _, cin = x.shape
    b_stride = kpad * LANES * WEIGHT_BYTES  # bytes per block of 16 output channels
    tap_step = (c4 // 4) * 64 * WEIGHT_BYTES  # bytes per window tap in a block
    tile = np.zeros(MR * TILE_W + 16, np.int32)
    of = out.reshape(-1)
    quads = c4 // 4
    if hp == 0:  # the input rows are the GEMM's A
        xf = x.reshape(-1)
        total = nbatch * oh * ow
        full = total - total % MR
        for r0 in range(0, full, MR):
            _block_row(xf, r0 * cin, cin, wpack, taps, 0, cout, quads, b_stride, cout, params, zp_out, lo, hi,
                       MR, tile, of, r0 * cout)
        if full < total:  # the last rows, copied so that the tile reads nothing past the input
            abuf = np.zeros(MR * cin + 64, np.int8)
            _copy_bytes(abuf.ctypes.data, xf.ctypes.data + full * cin, (total - full) * cin)
            _block_row(abuf, 0, cin, wpack, taps, 0, cout, quads, b_stride, cout, params, zp_out, lo, hi,
                       total - full, tile, of, full * cout)
        return
    canvas = np.empty(hp * wp * c4 + 64, np.int8)
    abuf = np.zeros(MR * kpad + 64, np.int8)  # K padding stays 0 (it meets zero weights)
    one_tap = np.zeros(1, np.int64)
    for n in range(nbatch):
        _canvas(x, n, zp_in, wp, c4, pt, pl, canvas)
        for oy in range(oh):
            for ox0 in range(0, ow, MR):
                base = (oy * sh * wp + ox0 * sw) * c4
                rows = min(MR, ow - ox0)
                first = ((n * oh + oy) * ow + ox0) * cout
                if run_len == 0:
                    _block_row(canvas, base, sw * c4, wpack, taps, tap_step, cout, quads, b_stride, cout,
                               params, zp_out, lo, hi, rows, tile, of, first)
                    continue
                pc, pa = canvas.ctypes.data, abuf.ctypes.data
                for i in range(rows):
                    for r in range(runs.shape[0]):
                        _copy_bytes(pa + i * kpad + r * run_len, pc + base + i * sw * c4 + runs[r], run_len)
                _block_row(abuf, 0, kpad, wpack, one_tap, 0, cout, kpad // 4, b_stride, cout,
                           params, zp_out, lo, hi, rows, tile, of, first)


def canvas_plan(h: int, w: int, cin: int, kh: int, kw: int, oh: int, ow: int, stride, dilation, pad
                ) -> tuple[tuple[int, int], int, np.ndarray, np.ndarray, int]:
    """(canvas rows and columns, canvas channels C4, tap offsets, run offsets, run length) for
    `conv_kernel`. Three channels are padded to four (a third more work beats copying windows);
    one or two channels are copied as im2col runs. The canvas
    is wide enough for the padding, the last window and the tail tile's rows read past the last
    output pixel; (0, 0) for a 1×1, stride-1 unpadded convolution with C % 4 == 0, which reads the
    input directly. Offsets are bytes in the canvas, row-major over the window."""
    (sh, sw), (dh, dw), (pt, pl) = stride, dilation, pad
    none = np.zeros(0, np.int64)
    if kh == kw == 1 and (sh, sw) == (1, 1) and (pt, pl) == (0, 0) and (oh, ow) == (h, w) and cin % 4 == 0:
        return (0, 0), cin, np.zeros(1, np.int64), none, 0
    hp = max(h + pt, (oh - 1) * sh + (kh - 1) * dh + 1)
    wp = max(w + pl, (ow - 1) * sw + (kw - 1) * dw + 1) + MR * sw
    c4 = cin + 1 if cin % 4 == 3 else cin
    taps = np.array([(ky * dh * wp + kx * dw) * c4 for ky in range(kh) for kx in range(kw)], np.int64)
    if c4 % 4 == 0:
        return (hp, wp), c4, taps, none, 0
    if dw == 1:  # a window row is one contiguous run of KW·C bytes
        return (hp, wp), c4, none, np.array([ky * dh * wp * cin for ky in range(kh)], np.int64), kw * cin
    return (hp, wp), c4, none, taps, cin


def _trial_ok() -> bool:
    """The VNNI build's trial: one packed tile against NumPy's integer product."""
    rng = np.random.default_rng(11)
    kpad, cout = 40, 32
    a = rng.integers(-128, 128, MR * kpad + 64).astype(np.int8)
    w = rng.integers(-128, 128, (cout, kpad)).astype(np.int8)
    tile = np.zeros(MR * TILE_W + 16, np.int32)
    run = cpu.njit_variant(_trial_kernel, "_trial_tile_vnni", _OPTS)
    run(a, pack_weights(w, FAMILY.fast), kpad, tile)
    want = (a[:MR * kpad].reshape(MR, kpad).astype(np.int64) + 128) @ w.T.astype(np.int64)
    return bool(np.array_equal(tile[:MR * TILE_W].reshape(MR, TILE_W), want))


FAMILY = cpu.register(cpu.Family(
    name="int8-conv", fast="avx512-vnni", intrinsics=("vpdpbusd",),
    trial="npukit.models.tflite.kernels._nb_gemm:_trial_ok",
    doc="TFLite int8 CONV_2D: fused im2col + GEMM + requantization"))


def probe() -> tuple[str, str]:
    """(path, reason): the build `npukit.sim.cpu.choose` picks for this family here."""
    chosen = cpu.choose(FAMILY)
    return chosen.path, chosen.reason


_BUILDS: dict[str, object] = {}


def chosen_path() -> str:
    """The build this CPU and compile target take (`probe`); plan steps pack weights for it."""
    return probe()[0]


def build(path: str | None = None):
    """The compiled CONV_2D kernel of ``path`` (default: the one chosen for this CPU and target)."""
    path = path or chosen_path()
    if path not in _BUILDS:
        name = path.replace("-", "_")
        fast = path == FAMILY.fast
        block = cpu.njit_variant(_block_row, f"block_row_{name}", {"inline": "always"},
                                 _tile=_tile_vnni if fast else _tile_portable)
        _BUILDS[path] = cpu.njit_variant(conv_kernel, f"conv_kernel_{name}", _OPTS, _block_row=block,
                                         WEIGHT_BYTES=1 if fast else 4)
    return _BUILDS[path]


def _trial_kernel(a, wpack, kpad, tile):
    _tile_vnni(a, 0, kpad, wpack, 0, kpad * LANES, kpad // 4, 2, tile)
