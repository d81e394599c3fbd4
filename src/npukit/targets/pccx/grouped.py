"""The grouped GEMV, an extended-profile weight layout (``W_GROUPED``, optionally ``W_GROUP_OFFSETS``):
one GEMV instruction that does what pccx v002 spells as one GEMV per group of `GROUP` inputs.

v002's ``w_scale`` gives each weight row one FP32 scale, so a matrix quantised in groups of 32 inputs
(every GGUF type; `npukit.targets.pccx.llm.w4a8`) is ``K / 32`` GEMVs, each after a MEMSET of its weight
slot, and with affine groups also ``K / 32`` CVO ``reduce_sum`` and one FP16 GEMV of the offsets: ~3 600
instructions per Gemma 3 270M token. With ``W_GROUPED`` the weight image carries a scale per (row, group)
and the instruction runs that whole sequence itself, with the sequence's arithmetic exactly
(`grouped_reference` is it, written as the per-group `numerics` calls it replaces):

1. per group g, in order: the group's BF16 activations are quantised to INT8 with their own exponent,
   the integer dot with the row's codes is scaled by ``scale[m, g]`` and ``2^(e_g - 6)`` in float32,
   added to the running value (to ``dest`` for the first group when ``accm`` is set) and rounded to
   BF16 — the per-group GEMV's epilogue;
2. with ``W_GROUP_OFFSETS``: the group sums ``s_g`` (serial float32 from +0.0, BF16, as REDUCE_SUM),
   quantised together to INT8 with one exponent, times the FP16 offsets ``o[m, g]`` in exact fixed
   point, added once more and rounded (the FP16 GEMV with ``accm`` of the v002 sequence).

Image (host DDR, 16-byte aligned parts): the rows' codes as a v002 image (INT4 packed or INT8), then
at the next 16 bytes the FP32 scales [M, K/32] row-major, then (offsets) at the next 16 bytes the FP16
offsets [M, K/32] row-major. The instruction needs the ``w_scale`` flag; INT4/INT8 only; K a multiple
of 32; no other layout bit. Cycles (docs/targets/pccx.md, "Grouped GEMV"): a GEMV core's 32-input
reduction tree already yields one (row, 32-input) partial per cycle, and v002's own per-group GEMVs
run one epilogue per partial at that rate, so the MACs take ``ceil(macs / rate)`` as before, with the
offset MACs ``M · K/32`` added and the group sums counted as ``K`` SFU elements before them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npukit.sim.work import Work
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import format_instr
from npukit.targets.pccx.isa import ELEMS_PER_WORD, GemvFlag, Instr, words_of
from npukit.targets.pccx.memory import (
    FORMATS,
    W_FMT_MASK,
    W_GROUP_OFFSETS,
    W_GROUPED,
    W_OFFSET_MASK,
    WORD_BYTES,
    DeviceFault,
    row_bytes,
)

GROUP = 32  # inputs per scale: the GGUF block size and 4 L2 words
F32 = np.float32


def _align(n: int) -> int:
    return -(-n // WORD_BYTES) * WORD_BYTES


def layout(m: int, k: int, fmt: str, offsets: bool) -> tuple[int, int, int]:
    """Byte offsets of the scale table and the offset table in the image, and the image's size."""
    s_at = _align(m * row_bytes(fmt, k))
    o_at = _align(s_at + 4 * m * (k // GROUP))
    return s_at, o_at, o_at + (2 * m * (k // GROUP) if offsets else 0)


def grouped_image(codes: np.ndarray, fmt: str, scales: np.ndarray, offsets: np.ndarray | None = None
                  ) -> bytes:
    """The host image of a grouped weight: codes [M, K], FP32 scales and FP16 offsets [M, K/32]."""
    m, k = codes.shape
    if k % GROUP or scales.shape != (m, k // GROUP) or fmt not in ("int4", "int8"):
        raise DeviceFault(f"grouped image: {fmt} codes {codes.shape} and scales {scales.shape} do not fit "
                          f"groups of {GROUP}")
    s_at, o_at, size = layout(m, k, fmt, offsets is not None)
    out = bytearray(size)
    body = nx.pack_int4(codes).tobytes() if fmt == "int4" else np.asarray(codes, np.int8).tobytes()
    out[:len(body)] = body
    table = np.ascontiguousarray(scales, "<f4").tobytes()
    out[s_at:s_at + len(table)] = table
    if offsets is not None:
        off = np.ascontiguousarray(offsets, "<f2").tobytes()
        out[o_at:o_at + len(off)] = off
    return bytes(out)


def grouped_reference(w: np.ndarray, x: np.ndarray, scales: np.ndarray, offsets: np.ndarray | None,
                      dest: np.ndarray | None, fmt: str) -> np.ndarray:
    """The per-group instruction sequence's result, as its `numerics` calls: codes w [M, K], BF16 x [K],
    scales [M, K/32], FP16 offsets [M, K/32] or None, dest [M] (``accm``) or None -> BF16 [M]."""
    out = dest
    for j, lo in enumerate(range(0, w.shape[1], GROUP)):
        out = nx.gemv(w[:, lo:lo + GROUP], x[lo:lo + GROUP], scales[:, j], out, fmt)
    if offsets is not None:
        # v002: each REDUCE_SUM fills element 0 of its own word (the others 0, adding exactly nothing)
        sums = np.array([nx.reduce_sum(x[lo:lo + GROUP]) for lo in range(0, len(x), GROUP)], F32)
        out = nx.gemv(np.asarray(offsets, np.float16), sums, None, out, "fp16")
    return out


def check(a: int, ins: Instr, k: int) -> str:
    """The weight format of a grouped GEMV, or DeviceFault (the error interrupt) for what it does not take."""
    if a & ~(W_FMT_MASK | W_GROUPED | W_GROUP_OFFSETS | W_OFFSET_MASK):
        raise DeviceFault(f"grouped weights take no other layout bit (a=0x{a:X})")
    fmt = FORMATS.get(a & W_FMT_MASK)
    if fmt not in ("int4", "int8"):
        raise DeviceFault(f"grouped weights must be int4 or int8, not {fmt}")
    if not ins.flags & GemvFlag.W_SCALE:
        raise DeviceFault("a grouped GEMV needs the w_scale flag (its scale table)")
    if k % GROUP:
        raise DeviceFault(f"grouped GEMV: K = {k} is not a multiple of {GROUP}")
    return fmt


def grouped_work(idx: int, ins: Instr, m: int, n: int, k: int, fmt: str, offsets: bool, asm: str) -> Work:
    """The Work record of a grouped GEMV/GEMM (the fast executor builds the same one)."""
    groups = k // GROUP
    accm = bool(ins.flags & GemvFlag.ACCM)
    kw, mw = words_of(k), words_of(m)
    src = (ins.src_addr, ins.src_addr + n * kw)
    dst = (ins.dest_reg, ins.dest_reg + n * mw)
    wbytes = m * row_bytes(fmt, k) + 4 * m * groups + (2 * m * groups if offsets else 0)
    label = (f"{asm}  ; M={m} N={n} K={k} {fmt} grouped/{GROUP}{' offsets' if offsets else ''}"
             f" ksplit={nx.k_splits(GROUP)}")
    return Work(idx, ins.op.name.lower(), label, macs=n * m * (k + (groups if offsets else 0)),
                sfu_elems=n * k if offsets else 0, weight_bytes=wbytes,
                onchip_read_bytes=(n * kw + (n * mw if accm else 0)) * WORD_BYTES,
                onchip_write_bytes=n * mw * WORD_BYTES, is_async=bool(ins.async_),
                reads=(src, dst) if accm else (src,), writes=(dst,), lanes=ins.parallel_lane)


def run_grouped(sim: Any, idx: int, ins: Instr, a: int, addr: int, m: int, n: int, k: int) -> Work:
    """The readable simulator's execution (`npukit.targets.pccx.sim.Simulator`): reads the image, runs
    `grouped_reference` per activation vector, writes the results."""
    fmt = check(a, ins, k)
    offsets = bool(a & W_GROUP_OFFSETS)
    s_at, o_at, _ = layout(m, k, fmt, offsets)
    rb, groups = row_bytes(fmt, k), k // GROUP
    raw = sim.host.read(addr, m * rb).reshape(m, rb)
    w = nx.unpack_int4(raw, k) if fmt == "int4" else raw.view(np.int8)
    scales = sim.host.read(addr + s_at, 4 * m * groups).view("<f4").astype(F32).reshape(m, groups)
    off = (sim.host.read(addr + o_at, 2 * m * groups).view("<f2").astype(np.float16).reshape(m, groups)
           if offsets else None)
    kw, mw = words_of(k), words_of(m)
    sim._range(ins.src_addr, n * kw * ELEMS_PER_WORD, "activation")
    sim._range(ins.dest_reg, n * mw * ELEMS_PER_WORD, "result")
    accm = bool(ins.flags & GemvFlag.ACCM)
    outs = []
    for j in range(n):
        x = nx.from_bits(sim._get(ins.src_addr + j * kw, k))
        d = nx.from_bits(sim._get(ins.dest_reg + j * mw, m)) if accm else None
        outs.append(grouped_reference(w, x, scales, off, d, fmt))
    for j, o in enumerate(outs):
        sim._put(ins.dest_reg + j * mw, nx.to_bits(o))
    if ins.flags & GemvFlag.FINDEMAX:
        sim.e_max = nx.to_bits(nx.findemax(sim.emax, np.concatenate(outs)))[()]
    return grouped_work(idx, ins, m, n, k, fmt, offsets, format_instr(ins))

