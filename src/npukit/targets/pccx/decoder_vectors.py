"""Golden vectors of the pccx instruction decoder for RTL tests: 64-bit words in, the opcode and the
error interrupt out (``err`` = 1 exactly when `npukit.targets.pccx.isa.decode` rejects the word).

Each case is one (profile, limits) setting with its words: valid encodings of every opcode with
random in-range fields, the same with fields pushed past the limits and reserved bits set, single-bit
flips of valid words, and undefined opcodes. Written in the unit-vector format ``npukit cosim``
reads (unit ``decoder``; `npukit.cosim.vectors`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from npukit.cosim.vectors import FORMAT, Field, unit_entry, write_case
from npukit.errors import DecodeError
from npukit.targets.pccx import isa

FIELDS = {
    "profile": Field("in", 1, False, "", "0 = strict (v002 exactly), 1 = extended (npukit's additions)"),
    "l2_words": Field("in", 18, False, "", "L2 size in 128-bit words (addresses must stay below)"),
    "cc_entries": Field("in", 7, False, "", "constant-cache entries (slots must stay below)"),
    "lanes": Field("in", 5, False, "", "GEMV cores (parallel_lane may not exceed)"),
    "word": Field("in", 64, False, "[n]", "instruction words"),
    "opcode": Field("out", 4, False, "[n]", "word[63:60]"),
    "err": Field("out", 1, False, "[n]", "the error interrupt: 1 when the word does not decode"),
}

# (label, profile, limits): the KV260 preset's limits in both profiles, and small ones that put the
# range checks inside the fields' widths
SETTINGS = (("strict, KV260 limits", "strict", isa.Limits()),
            ("extended, KV260 limits", "extended", isa.Limits()),
            ("extended, small limits", "extended", isa.Limits(l2_words=3000, cc_entries=40, lanes=2)))


def _field_value(f: Any, lim: isa.Limits, rng: np.random.Generator, wild: bool) -> int:
    """A value for one field: mostly in range, past the limits when ``wild``."""
    full = int(rng.integers(0, 1 << f.width))
    if f.reserved:
        return full if wild and rng.random() < 0.5 else 0
    if f.kind == "l2":
        top = lim.l2_words + (lim.l2_words // 8 if wild else 0)
        return min(int(rng.integers(0, top)), (1 << f.width) - 1) if rng.random() < 0.9 else 0
    if f.kind == "slot":
        return min(int(rng.integers(0, lim.cc_entries + (8 if wild else 0))), (1 << f.width) - 1)
    if f.kind == "lanes":
        return int(rng.integers(0, lim.lanes + (3 if wild else 1)))
    if f.kind == "flags":
        return full & ~0b111 if not wild and rng.random() < 0.9 else full  # [2:0] reserved ([1:0] CVO)
    if f.name == "length":
        return int(rng.integers(0 if wild else 1, 64 if rng.random() < 0.8 else 1 << 16))
    if f.name == "async_" and f.tags:
        return full if wild or rng.random() < 0.2 else 0
    if f.kind == "device" and not wild:  # NPU <-> host or L2 to L2, the routes that exist
        return 0
    return full


def random_words(lim: isa.Limits, n: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    words = []
    for i in range(n):
        op = isa.Op(int(rng.integers(0, 5)))
        wild = i % 4 == 3
        w = int(op) << 60
        for f in isa.SPEC[op]:
            w |= (_field_value(f, lim, rng, wild) & f.mask) << f.lo
        if i % 5 == 4:  # one flipped bit
            w ^= 1 << int(rng.integers(0, 64))
        if i % 23 == 22:  # an opcode v002 does not define
            w = (w & ((1 << 60) - 1)) | int(rng.integers(5, 16)) << 60
        words.append(w)
    return words


def decoder_cases(words_per_case: int, seed: int = 0) -> list[dict[str, Any]]:
    cases = []
    for k, (label, profile, lim) in enumerate(SETTINGS):
        words = random_words(lim, words_per_case, seed + k)
        err = []
        for w in words:
            try:
                isa.decode(w, profile, lim)
                err.append(0)
            except DecodeError:
                err.append(1)
        cases.append({"label": label, "profile": int(profile == "extended"), "l2_words": lim.l2_words,
                      "cc_entries": lim.cc_entries, "lanes": lim.lanes,
                      "word": np.array(words, dtype=object), "opcode": np.array([w >> 60 for w in words]),
                      "err": np.array(err), "cycles": None})
    return cases


def export(out: Path, words_per_case: int = 512, seed: int = 0) -> dict[str, Any]:
    """Write ``decoder/<NNNN>_<field>.hex`` and ``manifest.json`` (unit ``decoder``)."""
    (out / "decoder").mkdir(parents=True, exist_ok=True)
    cases = decoder_cases(words_per_case, seed)
    rows = [write_case(out, "decoder", n, c, FIELDS) for n, c in enumerate(cases)]
    manifest = {"format": FORMAT, "target": "pccx", "isa": "pccx v002 (isa.py)", "seed": seed,
                "hex": "$readmemh, one element per line, two's complement at the field's bits",
                "units": {"decoder": unit_entry(FIELDS, "combinational: no cycle model", rows)}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
