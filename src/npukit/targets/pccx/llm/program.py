"""One W4A8 matrix product of the LLM policy as a pccx v002 program: assembly text plus the host DDR
images it reads, run on the functional simulator and timed (`run_product`).

For a `GroupedMatrix` W [M, K] with groups of G = 32 inputs, BF16 x [K] at L2 word ``x_word`` and the
result y [M] at ``y_word``, the program is, per slice of at most `MAX_ROWS` rows:

* per group g: MEMSET the weight slot to that group's image (INT4/INT8 codes [rows, 32] and the rows'
  FP32 scales), then ``gemv`` on the group's 4 activation words with ``w_scale`` (and ``accm`` after
  the first) into y;
* with offsets: first, once, one ``cvo.reduce_sum`` per group into its own L2 word of the sums area;
  then per slice one FP16 ``gemv`` with ``accm`` of the offset image [rows, 8·G] (each offset followed
  by 7 zeros: the other elements of the sum's word) on those words.

Every instruction is pccx v002 (no extension bits). `grouped_product_program` is the same product as
one grouped GEMV per slice (the extended profile's ``W_GROUPED`` layout, `npukit.targets.pccx.grouped`),
which the ``pccx`` target runs. `grouped_gemm` is the same arithmetic vectorised; tests check the
simulator's result bit for bit against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npukit.errors import ConfigError, NpukitError
from npukit.targets.pccx.asm import assemble
from npukit.targets.pccx.grouped import GROUP, grouped_image
from npukit.targets.pccx.isa import ELEMS_PER_WORD
from npukit.targets.pccx.llm.w4a8 import GroupedMatrix
from npukit.targets.pccx.memory import W_GROUP_OFFSETS, W_GROUPED, WORD_BYTES, weight_entry, weight_image
from npukit.targets.pccx.sim import Simulator
from npukit.targets.pccx.timing import simulate_works

MAX_ROWS = 65528  # the fmap slot's 16-bit M, rounded down to whole result words
HOST_BASE = 0x1000_0000


@dataclass
class ProductProgram:
    source: str  # assembly text
    images: list[tuple[int, bytes]] = field(default_factory=list)  # (host byte address, image)
    instructions: int = 0


def _align(n: int) -> int:
    return -(-n // WORD_BYTES) * WORD_BYTES


def product_program(w: GroupedMatrix, x_word: int, y_word: int, sums_word: int,
                    host_base: int = HOST_BASE) -> ProductProgram:
    """The pccx program computing y = W x (see the module docstring) and its host images, placed from
    host byte ``host_base`` on (16-byte aligned)."""
    m, k = w.codes.shape
    g = w.group
    if g % ELEMS_PER_WORD or k % g:
        raise ConfigError(f"group {g} must be whole L2 words and divide K = {k}")
    lines: list[str] = []
    images: list[tuple[int, bytes]] = []
    addr = _align(host_base)

    def place(image: bytes) -> int:
        nonlocal addr
        at, addr = addr, addr + _align(len(image))
        images.append((at, image))
        return at

    words_per_group = g // ELEMS_PER_WORD
    n_groups = k // g
    if w.offset is not None:
        lines += [f"cvo.reduce_sum src=0x{x_word + j * words_per_group:X} dst=0x{sums_word + j:X} len={g}"
                  for j in range(n_groups)]
    for r0 in range(0, m, MAX_ROWS):
        rows = min(MAX_ROWS, m - r0)
        dest = y_word + r0 // ELEMS_PER_WORD
        lines.append(f"memset cache=fmap slot=0 a={rows} b=1 c={g}")
        for j in range(n_groups):
            at = place(weight_image(w.codes[r0:r0 + rows, j * g:(j + 1) * g], w.fmt,
                                          w.scale[r0:r0 + rows, j]))
            a, b, c = weight_entry(w.fmt, at)
            flags = "w_scale|accm" if j else "w_scale"
            lines += [f"memset cache=weight slot=1 a={a} b={b} c={c}",
                      f"gemv dest=0x{dest:X} src=0x{x_word + j * words_per_group:X} flags={flags} "
                      "size=1 shape=0"]
        if w.offset is not None:
            padded = np.zeros((rows, n_groups * ELEMS_PER_WORD), np.float16)
            padded[:, ::ELEMS_PER_WORD] = w.offset[r0:r0 + rows]
            at = place(weight_image(padded, "fp16"))
            a, b, c = weight_entry("fp16", at)
            lines += [f"memset cache=fmap slot=2 a={rows} b=1 c={padded.shape[1]}",
                      f"memset cache=weight slot=3 a={a} b={b} c={c}",
                      f"gemv dest=0x{dest:X} src=0x{sums_word:X} flags=accm size=3 shape=2"]
    return ProductProgram("\n".join(lines), images, len(lines))


def grouped_product_program(w: GroupedMatrix, x_word: int, y_word: int, host_base: int = HOST_BASE
                            ) -> ProductProgram:
    """y = W x as grouped GEMVs (extended profile, `npukit.targets.pccx.grouped`): per slice of at most
    `MAX_ROWS` rows one MEMSET of each slot and one GEMV that runs every group (and the offsets), with
    the arithmetic of `product_program`'s per-group sequence."""
    m, k = w.codes.shape
    if w.group != GROUP or k % GROUP:
        raise ConfigError(f"grouped GEMV needs groups of {GROUP} dividing K, got {w.group} and K = {k}")
    lines: list[str] = []
    images: list[tuple[int, bytes]] = []
    addr = _align(host_base)
    ext = W_GROUPED | (W_GROUP_OFFSETS if w.offset is not None else 0)
    for r0 in range(0, m, MAX_ROWS):
        rows = min(MAX_ROWS, m - r0)
        image = grouped_image(w.codes[r0:r0 + rows], w.fmt, w.scale[r0:r0 + rows],
                              None if w.offset is None else w.offset[r0:r0 + rows])
        images.append((addr, image))
        a, b, c = weight_entry(w.fmt, addr, ext)
        addr += _align(len(image))
        lines += [f"memset cache=fmap slot=0 a={rows} b=1 c={k}",
                  f"memset cache=weight slot=1 a={a} b={b} c={c}",
                  f"gemv dest=0x{y_word + r0 // ELEMS_PER_WORD:X} src=0x{x_word:X} flags=w_scale "
                  "size=1 shape=0"]
    return ProductProgram("\n".join(lines), images, len(lines))


def run_product(w: GroupedMatrix, x: np.ndarray, hw: Any = None) -> tuple[np.ndarray, Any]:
    """Assemble the product's program, run it on the functional simulator with x (BF16 [K]) in L2,
    time it on the pccx timing model: (y as float32 [M], `TimingResult`)."""
    m, k = w.codes.shape
    x_word = 0
    sums_word = -(-k // ELEMS_PER_WORD)
    y_word = sums_word + k // w.group
    prog = product_program(w, x_word, y_word, sums_word)
    sim = Simulator(hw, "strict")
    for at, image in prog.images:
        sim.host.write(at, np.frombuffer(image, np.uint8))
    sim.write_l2(x_word, np.asarray(x, np.float32))
    sim.load_program(assemble(prog.source, "strict", sim.hw))
    works = sim.run()
    if sim.error is not None:
        raise NpukitError(str(sim.error))
    return sim.read_l2(y_word, m), simulate_works(sim.hw, works)
