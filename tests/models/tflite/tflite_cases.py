"""Random int8 single-op (and chained) .tflite models built with npukit's writer, for comparison
with LiteRT's reference kernels. Each builder takes a seeded Generator and returns
(model bytes, list of input arrays, description)."""

from __future__ import annotations

import numpy as np

from npukit.models.tflite import ModelBuilder
from npukit.models.tflite import options as O

ACTS = (O.ACT_NONE, O.ACT_RELU, O.ACT_RELU6, O.ACT_RELU_N1_TO_1)


def f32(v: float) -> float:
    return float(np.float32(v))


def log_uniform(rng: np.random.Generator, lo: float, hi: float, size=None):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size))


def zp(rng: np.random.Generator) -> int:
    return int(rng.integers(-128, 128))


def int8(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def _padding_ok(rng, size, k, stride, dil):
    eff = (k - 1) * dil + 1
    if eff > size:
        return O.PAD_SAME
    return int(rng.choice([O.PAD_SAME, O.PAD_VALID]))


def conv2d_case(rng: np.random.Generator):
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(3, 12)), int(rng.integers(3, 12))
    cin, cout = int(rng.choice([1, 2, 3, 5, 7])), int(rng.choice([1, 3, 4, 5, 9]))
    kh, kw = int(rng.choice([1, 2, 3, 5])), int(rng.choice([1, 3]))
    sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    dh, dw = int(rng.choice([1, 1, 2])), int(rng.choice([1, 2]))
    pad = _padding_ok(rng, min(h, w), max(kh, kw), 1, max(dh, dw))
    act = int(rng.choice(ACTS))
    per_channel = bool(rng.integers(0, 2))
    s_in = f32(log_uniform(rng, 0.005, 0.1))
    s_w = log_uniform(rng, 0.002, 0.05, cout if per_channel else 1).astype(np.float32)
    wq = rng.integers(-127, 128, (cout, kh, kw, cin)).astype(np.int8)
    k = kh * kw * cin
    s_out = f32(s_in * float(np.median(s_w)) * np.sqrt(k) * 74 * 73 / 40)
    b = ModelBuilder()
    x = b.tensor("x", (n, h, w, cin), np.int8, s_in, zp(rng))
    wt = b.const("w", wq, scale=s_w, zero_point=0, axis=0)
    bias_scale = (np.float32(s_in) * s_w).astype(np.float32)  # int8 CONV_2D needs a bias in LiteRT
    ins = [x, wt, b.const("b", rng.integers(-30000, 30000, cout).astype(np.int32), scale=bias_scale,
                          zero_point=0)]
    oh = (h + sh - 1) // sh if pad == O.PAD_SAME else (h + sh - ((kh - 1) * dh + 1)) // sh
    ow = (w + sw - 1) // sw if pad == O.PAD_SAME else (w + sw - ((kw - 1) * dw + 1)) // sw
    y = b.tensor("y", (n, oh, ow, cout), np.int8, s_out, zp(rng))
    b.op("CONV_2D", ins, [y], O.Conv2DOptions(pad, sw, sh, act, dw, dh))
    desc = (f"conv {n}x{h}x{w}x{cin}->{cout} k{kh}x{kw} s{sh},{sw} d{dh},{dw} pad{pad} act{act} "
            f"pc{per_channel}")
    return b.build([x], [y]), [int8(rng, (n, h, w, cin))], desc


def depthwise_case(rng: np.random.Generator):
    # maps up to 19×19 so both kernel paths run (batched matmul ≤ 64 outputs or multiplier > 1, tap loop)
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(3, 20)), int(rng.integers(3, 20))
    cin, mult = int(rng.choice([1, 3, 5, 8])), int(rng.choice([1, 1, 2, 3]))
    cout = cin * mult
    kh, kw = int(rng.choice([1, 3, 5])), int(rng.choice([2, 3]))
    sh, sw = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    dh, dw = int(rng.choice([1, 2])), int(rng.choice([1, 1, 2]))
    pad = _padding_ok(rng, min(h, w), max(kh, kw), 1, max(dh, dw))
    act = int(rng.choice(ACTS))
    per_channel = bool(rng.integers(0, 2))
    s_in = f32(log_uniform(rng, 0.005, 0.1))
    s_w = log_uniform(rng, 0.002, 0.05, cout if per_channel else 1).astype(np.float32)
    s_out = f32(s_in * float(np.median(s_w)) * np.sqrt(kh * kw) * 74 * 73 / 40)
    b = ModelBuilder()
    x = b.tensor("x", (n, h, w, cin), np.int8, s_in, zp(rng))
    wt = b.const("w", rng.integers(-127, 128, (1, kh, kw, cout)).astype(np.int8), scale=s_w,
                 zero_point=0, axis=3)
    bias = b.const("b", rng.integers(-20000, 20000, cout).astype(np.int32),
                   scale=(np.float32(s_in) * s_w).astype(np.float32), zero_point=0)
    oh = (h + sh - 1) // sh if pad == O.PAD_SAME else (h + sh - ((kh - 1) * dh + 1)) // sh
    ow = (w + sw - 1) // sw if pad == O.PAD_SAME else (w + sw - ((kw - 1) * dw + 1)) // sw
    y = b.tensor("y", (n, oh, ow, cout), np.int8, s_out, zp(rng))
    b.op("DEPTHWISE_CONV_2D", [x, wt, bias], [y], O.DepthwiseConv2DOptions(pad, sw, sh, mult, act, dw, dh))
    desc = f"dw {n}x{h}x{w}x{cin}*{mult} k{kh}x{kw} s{sh},{sw} d{dh},{dw} pad{pad} act{act} pc{per_channel}"
    return b.build([x], [y]), [int8(rng, (n, h, w, cin))], desc


def fully_connected_case(rng: np.random.Generator):
    batch, k, units = int(rng.integers(1, 5)), int(rng.integers(1, 70)), int(rng.choice([1, 3, 10, 17]))
    per_channel = bool(rng.integers(0, 2))
    act = int(rng.choice(ACTS))
    s_in = f32(log_uniform(rng, 0.005, 0.1))
    s_w = log_uniform(rng, 0.002, 0.05, units if per_channel else 1).astype(np.float32)
    s_out = f32(s_in * float(np.median(s_w)) * np.sqrt(k) * 74 * 73 / 40)
    b = ModelBuilder()
    x = b.tensor("x", (batch, k), np.int8, s_in, zp(rng))
    wt = b.const("w", rng.integers(-127, 128, (units, k)).astype(np.int8), scale=s_w, zero_point=0)
    bias = b.const("b", rng.integers(-20000, 20000, units).astype(np.int32),
                   scale=(np.float32(s_in) * s_w).astype(np.float32), zero_point=0)
    y = b.tensor("y", (batch, units), np.int8, s_out, zp(rng))
    b.op("FULLY_CONNECTED", [x, wt, bias], [y], O.FullyConnectedOptions(act))
    return b.build([x], [y]), [int8(rng, (batch, k))], f"fc {batch}x{k}->{units} act{act} pc{per_channel}"


def binary_case(rng: np.random.Generator, name: str):
    shape = (1, int(rng.integers(1, 6)), int(rng.integers(1, 6)), int(rng.choice([1, 3, 5])))
    other = shape if rng.integers(0, 2) else (1, 1, 1, shape[3])
    s1, s2 = f32(log_uniform(rng, 0.003, 0.2)), f32(log_uniform(rng, 0.003, 0.2))
    if name == "MUL":
        s_out = f32(s1 * s2 * 128 * 128 / 60 * rng.uniform(0.5, 2))
    else:
        s_out = f32((s1 + s2) * rng.uniform(0.5, 1.5))
    act = int(rng.choice(ACTS))
    b = ModelBuilder()
    a = b.tensor("a", shape, np.int8, s1, zp(rng))
    c = b.tensor("c", other, np.int8, s2, zp(rng))
    y = b.tensor("y", shape, np.int8, s_out, zp(rng))
    opts = {"ADD": O.AddOptions, "SUB": O.SubOptions, "MUL": O.MulOptions}[name](act)
    b.op(name, [a, c], [y], opts)
    return b.build([a, c], [y]), [int8(rng, shape), int8(rng, other)], f"{name} {shape}+{other} act{act}"


def pool_case(rng: np.random.Generator, name: str):
    n, h, w, c = 1, int(rng.integers(2, 12)), int(rng.integers(2, 12)), int(rng.choice([1, 3, 4, 7]))
    fh, fw = int(rng.integers(1, min(h, 4) + 1)), int(rng.integers(1, min(w, 4) + 1))
    sh, sw = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    pad = int(rng.choice([O.PAD_SAME, O.PAD_VALID]))
    act = int(rng.choice(ACTS))
    s, z = f32(log_uniform(rng, 0.01, 0.1)), zp(rng)
    oh = (h + sh - 1) // sh if pad == O.PAD_SAME else (h + sh - fh) // sh
    ow = (w + sw - 1) // sw if pad == O.PAD_SAME else (w + sw - fw) // sw
    b = ModelBuilder()
    x = b.tensor("x", (n, h, w, c), np.int8, s, z)
    y = b.tensor("y", (n, oh, ow, c), np.int8, s, z)
    b.op(name, [x], [y], O.Pool2DOptions(pad, sw, sh, fw, fh, act))
    return b.build([x], [y]), [int8(rng, (n, h, w, c))], f"{name} {h}x{w}x{c} f{fh}x{fw} s{sh},{sw} pad{pad}"


def mean_case(rng: np.random.Generator):
    shape = tuple(int(rng.integers(1, hi)) for hi in (3, 9, 9, 6))
    axes = [[1, 2], [2, 1], [3], [1], [0, 3], [-1], [1, 2, 3]][int(rng.integers(0, 7))]
    keep = bool(rng.integers(0, 2))
    s_in = f32(log_uniform(rng, 0.01, 0.1))
    s_out = s_in if rng.integers(0, 3) == 0 else f32(s_in * rng.uniform(0.2, 2.0))
    norm = sorted({a % 4 for a in axes})
    out = tuple((1 if i in norm else d) for i, d in enumerate(shape)) if keep else \
        tuple(d for i, d in enumerate(shape) if i not in norm)
    b = ModelBuilder()
    x = b.tensor("x", shape, np.int8, s_in, zp(rng))
    ax = b.const("axes", np.array(axes, np.int32))
    y = b.tensor("y", out, np.int8, s_out, zp(rng))
    b.op("MEAN", [x, ax], [y], O.ReducerOptions(keep))
    return b.build([x], [y]), [int8(rng, shape)], f"mean {shape} axes{axes} keep{keep}"


def softmax_case(rng: np.random.Generator):
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 60)))
    beta = float(rng.choice([1.0, 1.0, 0.5, 2.0]))
    b = ModelBuilder()
    x = b.tensor("x", shape, np.int8, f32(log_uniform(rng, 0.01, 0.5)), zp(rng))
    y = b.tensor("y", shape, np.int8, 1 / 256, -128)
    b.op("SOFTMAX", [x], [y], O.SoftmaxOptions(beta))
    return b.build([x], [y]), [int8(rng, shape)], f"softmax {shape} beta{beta}"


def unary_case(rng: np.random.Generator, name: str):
    shape = (1, int(rng.integers(1, 20)), 16)  # 16 … 304 elements
    s_in, z_in = f32(log_uniform(rng, 0.005, 0.2)), zp(rng)
    if name == "LOGISTIC":
        s_out, z_out = 1 / 256, -128
    elif name == "TANH":
        s_out, z_out = 1 / 128, 0
    elif name.startswith("RELU"):  # output scale near the input's, so the clamp and rescale both show
        s_out, z_out = f32(s_in * rng.uniform(0.3, 3.0)), zp(rng)
    else:
        s_out, z_out = f32(log_uniform(rng, 0.01, 0.1)), zp(rng)
    b = ModelBuilder()
    x = b.tensor("x", shape, np.int8, s_in, z_in)
    y = b.tensor("y", shape, np.int8, s_out, z_out)
    b.op(name, [x], [y])
    # every int8 code once (when the tensor has room), in random order, plus random fill
    size = int(np.prod(shape))
    data = np.concatenate([rng.permutation(256) - 128, rng.integers(-128, 128, size)])[:size]
    return b.build([x], [y]), [rng.permutation(data).astype(np.int8).reshape(shape)], name


def quantize_case(rng: np.random.Generator):
    shape = (2, 50)
    b = ModelBuilder()
    s_out, z_out = f32(log_uniform(rng, 0.005, 0.1)), zp(rng)
    if rng.integers(0, 2):
        x = b.tensor("x", shape, np.float32)
        data = (rng.normal(size=shape) * 128 * s_out).astype(np.float32)
        data[0, :4] = np.float32([0.5, -0.5, 1.5, -2.5]) * np.float32(s_out)  # ties
        kind = "float"
    else:
        x = b.tensor("x", shape, np.int8, f32(log_uniform(rng, 0.005, 0.1)), zp(rng))
        data = int8(rng, shape)
        kind = "int8"
    y = b.tensor("y", shape, np.int8, s_out, z_out)
    b.op("QUANTIZE", [x], [y])
    return b.build([x], [y]), [data], f"quantize from {kind}"


def dequantize_case(rng: np.random.Generator):
    shape = (4, 64)
    b = ModelBuilder()
    x = b.tensor("x", shape, np.int8, f32(log_uniform(rng, 0.001, 1.0)), zp(rng))
    y = b.tensor("y", shape, np.float32)
    b.op("DEQUANTIZE", [x], [y])
    return b.build([x], [y]), [int8(rng, shape)], "dequantize"


def shape_ops_case(rng: np.random.Generator):
    """PAD → CONCATENATION (with a constant) → RESHAPE → SQUEEZE, one shared quantization."""
    h, w, c = int(rng.integers(1, 6)), int(rng.integers(1, 6)), int(rng.integers(1, 4))
    s, z = f32(log_uniform(rng, 0.01, 0.1)), zp(rng)
    pads = rng.integers(0, 3, (4, 2))
    pads[0] = 0
    ph, pw = h + pads[1].sum(), w + pads[2].sum()
    pc = c + pads[3].sum()
    b = ModelBuilder()
    x = b.tensor("x", (1, h, w, c), np.int8, s, z)
    p = b.const("paddings", pads.astype(np.int32))
    xp = b.tensor("xp", (1, ph, pw, pc), np.int8, s, z)
    b.op("PAD", [x, p], [xp])
    axis = int(rng.integers(1, 4))  # CONCATENATION along H, W or C, with one or two constants
    shape = [1, ph, pw, pc]
    parts, total = [xp], pc if axis == 3 else (ph if axis == 1 else pw)
    for k in range(int(rng.integers(1, 3))):
        extra = list(shape)
        extra[axis] = int(rng.integers(1, 4))
        total += extra[axis]
        const = b.const(f"k{k}", int8(rng, extra), scale=s, zero_point=z)
        parts.insert(int(rng.integers(0, len(parts) + 1)), const)
    shape[axis] = total
    cat = b.tensor("cat", tuple(shape), np.int8, s, z)
    b.op("CONCATENATION", parts, [cat], O.ConcatenationOptions(axis=axis - 4 if rng.integers(0, 2) else axis))
    ph, pw, pc2 = shape[1], shape[2], shape[3]
    size = ph * pw * pc2
    flat = b.tensor("flat", (1, 1, size), np.int8, s, z)
    shp = b.const("shape", np.array([1, 1, size], np.int32))
    b.op("RESHAPE", [cat, shp], [flat], O.ReshapeOptions((1, 1, size)))
    y = b.tensor("y", (size,), np.int8, s, z)
    b.op("SQUEEZE", [flat], [y], O.SqueezeOptions((0, 1)))
    return b.build([x], [y]), [int8(rng, (1, h, w, c))], "pad/concat/reshape/squeeze"


def strided_slice_case(rng: np.random.Generator):
    """STRIDED_SLICE on int8 with begin/end masks, negative indices and strides, shrink and offset;
    then SHAPE of the result PACKed with a constant (int32 shape arithmetic, as real models do)."""
    shape = tuple(int(rng.integers(2, 7)) for _ in range(3))
    begin, end, strides = [], [], []
    bmask = emask = shrink = 0
    offset = bool(rng.integers(0, 4) == 0)
    index = []
    for i, d in enumerate(shape):
        s = int(rng.choice([1, 1, 2, -1, -2])) if not offset else int(rng.choice([1, 2]))
        b, e = int(rng.integers(-d, d)), int(rng.integers(-d - 1, d + 1))
        if offset:  # in bounds: LiteRT sizes the output as ceil(size / stride) without clamping
            b = int(rng.integers(0, d))
            e = int(rng.integers(1, d - b + 1))
        if i == 1 and not offset and rng.integers(0, 3) == 0:
            shrink |= 1 << i
            s, b = 1, int(rng.integers(-d, d))
            index.append(b)
        else:
            bm, em = (bool(rng.integers(0, 4) == 0), bool(rng.integers(0, 4) == 0)) if not offset else (0, 0)
            bmask |= int(bm) << i
            emask |= int(em) << i
            stop = None if em else (b + e if offset else e)
            index.append(slice(None if bm else b, stop, s))
        begin.append(b)
        end.append(e)
        strides.append(s)
    out_shape = np.zeros(shape)[tuple(index)].shape
    if 0 in out_shape:  # TFLite rejects empty outputs; take everything instead
        return strided_slice_case(rng)
    sc, z = f32(log_uniform(rng, 0.01, 0.1)), zp(rng)
    b = ModelBuilder()
    x = b.tensor("x", shape, np.int8, sc, z)
    ins = [x] + [b.const(n, np.array(v, np.int32)) for n, v in (("begin", begin), ("end", end),
                                                                ("strides", strides))]
    y = b.tensor("y", out_shape, np.int8, sc, z)
    b.op("STRIDED_SLICE", ins, [y], O.StridedSliceOptions(bmask, emask, 0, 0, shrink, offset))
    shp = b.tensor("shp", (len(out_shape),), np.int32)
    b.op("SHAPE", [y], [shp])
    packed = b.tensor("packed", (2, len(out_shape)), np.int32)
    b.op("PACK", [shp, b.const("k", np.arange(len(out_shape), dtype=np.int32))], [packed],
         O.PackOptions(2, 0))
    desc = f"strided_slice {shape} b{begin} e{end} s{strides} masks {bmask},{emask},{shrink} off{offset}"
    return b.build([x], [y, packed]), [int8(rng, shape)], desc
