"""The ``int8-conv`` kernel family (`kernels/_nb_gemm`): each build (the fast one this CPU takes and
the portable twin) against the readable reference kernels, the living definition, on random
convolutions whose shapes reach every branch (channels not a multiple of 4 padded in the canvas,
1×1 convolutions read in place with a tail tile, channel counts around the 16-lane vectors,
stride, dilation, padding, batches along N, random zero points); a sample of them against LiteRT
BUILTIN_REF itself; and the vectorised requantization against `npukit.formats.fixedpoint`."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest
import tflite_cases as cases
from _litert_models import run_ref

from npukit.formats import fixedpoint as fp
from npukit.models.tflite import Interpreter, ModelBuilder
from npukit.models.tflite import options as O
from npukit.models.tflite.kernels import _nb_gemm

BUILDS = sorted({"portable", _nb_gemm.probe()[0]})


def conv_case(rng: np.random.Generator):
    """A random int8 CONV_2D shaped like real models' layers (wider than `tflite_cases.conv2d_case`)."""
    n, h, w = int(rng.integers(1, 4)), int(rng.integers(1, 14)), int(rng.integers(1, 14))
    cin, cout = int(rng.choice([1, 2, 3, 4, 7, 8, 16, 20])), int(rng.choice([5, 16, 17, 32, 40, 64]))
    kh, kw = int(rng.choice([1, 1, 3, 5])), int(rng.choice([1, 1, 3, 4]))
    sh, sw = int(rng.choice([1, 1, 2, 3])), int(rng.choice([1, 1, 2]))
    dh, dw = int(rng.choice([1, 1, 2])), int(rng.choice([1, 1, 2]))
    pad = cases._padding_ok(rng, min(h, w), max(kh, kw), 1, max(dh, dw))
    per_channel = bool(rng.integers(0, 2))
    s_in = cases.f32(cases.log_uniform(rng, 0.005, 0.1))
    s_w = cases.log_uniform(rng, 0.002, 0.05, cout if per_channel else 1).astype(np.float32)
    wq = rng.integers(-127, 128, (cout, kh, kw, cin)).astype(np.int8)
    k = kh * kw * cin
    # output scales from saturating to much finer than the accumulator: left and right shifts
    s_out = cases.f32(s_in * float(np.median(s_w)) * np.sqrt(k) * cases.log_uniform(rng, 0.2, 60))
    b = ModelBuilder()
    x = b.tensor("x", (n, h, w, cin), np.int8, s_in, cases.zp(rng))
    bias = b.const("b", rng.integers(-30000, 30000, cout).astype(np.int32),
                   scale=(np.float32(s_in) * s_w).astype(np.float32), zero_point=0)
    ins = [x, b.const("w", wq, scale=s_w, zero_point=0, axis=0), bias]
    oh = (h + sh - 1) // sh if pad == O.PAD_SAME else (h + sh - ((kh - 1) * dh + 1)) // sh
    ow = (w + sw - 1) // sw if pad == O.PAD_SAME else (w + sw - ((kw - 1) * dw + 1)) // sw
    y = b.tensor("y", (n, oh, ow, cout), np.int8, s_out, cases.zp(rng))
    b.op("CONV_2D", ins, [y], O.Conv2DOptions(pad, sw, sh, int(rng.choice(cases.ACTS)), dw, dh))
    desc = f"conv {n}x{h}x{w}x{cin}->{cout} k{kh}x{kw} s{sh},{sw} d{dh},{dw} pad{pad} pc{per_channel}"
    return b.build([x], [y]), [cases.int8(rng, (n, h, w, cin))], desc


@pytest.fixture(params=BUILDS)
def build(request, monkeypatch):
    """Plan CONV_2D for one build of the family (its weight packing and its kernel)."""
    monkeypatch.setattr(_nb_gemm, "chosen_path", lambda: request.param)
    return request.param


@pytest.mark.slow  # compiles both builds on a fresh cache (~20 s each on a loaded 2-core machine)
def test_each_build_equals_the_reference_kernels(build):
    shapes = set()
    for seed in range(60):
        model, inputs, desc = conv_case(np.random.default_rng(1000 + seed))
        fast = Interpreter(model).run(inputs)
        slow = Interpreter(model, compiled=False).run(inputs)
        got, want = next(iter(fast.values())), next(iter(slow.values()))
        assert np.array_equal(got, want), f"{build} seed {seed}: {desc}: {(got != want).sum()} differ"
        shapes.add(desc.split()[1])
    assert len(shapes) > 40  # the seeds really vary the geometry


@pytest.mark.parametrize("seed", [7, 21, 33])
def test_each_build_equals_litert_builtin_ref(build, seed):
    model, inputs, desc = conv_case(np.random.default_rng(seed))
    got = next(iter(Interpreter(model).run(inputs).values()))
    want = run_ref(model, *inputs)
    assert np.array_equal(got, want), f"{build}: {desc}"
    assert np.unique(want).size > 3


def test_pointwise_conv_reads_the_input_in_place_and_its_tail():
    """1×1 stride-1 convolutions take the no-canvas path; 3·5·7 = 105 pixels leave a 1-row tail."""
    canvas, c4, taps, runs, run_len = _nb_gemm.canvas_plan(5, 7, 16, 1, 1, 5, 7, (1, 1), (1, 1), (0, 0))
    assert (canvas, c4, list(taps), runs.size, run_len) == ((0, 0), 16, [0], 0, 0)
    rng = np.random.default_rng(5)
    for _ in range(20):
        model, inputs, desc = conv_case(rng)
        if "k1x1 s1,1" in desc and desc.split("x")[3].split("-")[0] in ("4", "8", "12", "16", "20"):
            a = Interpreter(model).run(inputs)
            b = Interpreter(model, compiled=False).run(inputs)
            assert all(np.array_equal(a[k], b[k]) for k in a), desc


@nb.njit
def _requantize_rows(tile, rows, width, params, zp_out, lo, hi, dst):
    for i in range(rows):
        _nb_gemm._epilogue(tile, i, 0, width, params, zp_out, lo, hi, dst, i * width)


@pytest.mark.parametrize("width", [16, 32, 21])  # vector lanes only, and vector + scalar tail
def test_epilogue_equals_multiply_by_quantized_multiplier(width):
    rng = np.random.default_rng(width)
    rows = _nb_gemm.MR
    for trial in range(50):
        acc = rng.integers(-2**31, 2**31, (rows, _nb_gemm.TILE_W))
        acc[0, :8] = [-2**31, 2**31 - 1, 0, -1, 1, -2**30, 2**30, 12345]
        bias = rng.integers(-2**31, 2**31, width) if trial % 3 else rng.integers(-1000, 1000, width)
        mult = rng.integers(2**30, 2**31, width)
        shift = rng.integers(-31, 8, width) if trial % 2 else rng.integers(-12, 1, width)
        params = _nb_gemm.requant_params(bias, mult, np.maximum(shift, 0), np.maximum(-shift, 0))
        zp_out, lo, hi = int(rng.integers(-128, 128)), -128, 127
        dst = np.zeros(rows * width, np.int8)
        _requantize_rows(acc.astype(np.int32).ravel(), rows, width, params, zp_out, lo, hi, dst)
        total = ((acc[:, :width] + bias + 2**31) & 0xFFFFFFFF) - 2**31  # int32 accumulator + bias
        scaled = fp.multiply_by_quantized_multiplier(total, mult, shift).astype(np.int64)
        want = np.clip(scaled + zp_out, lo, hi)
        assert np.array_equal(dst.reshape(rows, width), want), trial


def test_vnni_trial_and_family_are_registered():
    from npukit.sim import cpu

    assert "int8-conv" in cpu.describe("npukit.models.tflite.kernels._nb_gemm")
    path, reason = _nb_gemm.probe()
    assert path in ("portable", "avx512-vnni") and reason


@pytest.mark.slow  # compiles every compiled TFLite kernel on a fresh cache
def test_warm_up_model_reaches_every_compiled_kernel_and_is_exact():
    """``npukit doctor --warm`` runs `warmup.warm_model`: it must use every op with a compiled
    kernel, and its output must be LiteRT BUILTIN_REF's (a wrong warm-up model warms nothing)."""
    from npukit.models.tflite import read_model, warmup
    from npukit.models.tflite.kernels.compiled import COMPILED_KERNELS

    model = warmup.warm_model()
    assert {op.name for op in read_model(model).ops} >= set(COMPILED_KERNELS)
    x = np.random.default_rng(1).normal(size=(1, 8, 8, 3)).astype(np.float32)
    got = warmup.warm()
    assert np.array_equal(got, run_ref(model, x))
    assert got.dtype == np.float32 and np.unique(got).size >= 3  # not a saturated, constant output
