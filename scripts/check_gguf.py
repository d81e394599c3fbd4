"""Check a real GGUF file against the independent references: every tensor decoded by npukit against
gguf-py's ``GGUFReader`` + ``gguf.quants.dequantize`` (float32 bit patterns compared), and the
tokenizer built from its metadata against transformers' GGUF tokenizer on a text.

    .venv/bin/python scripts/check_gguf.py FILE.gguf [--text /usr/share/common-licenses/GPL-3]
                                         [--chars 20000] [--no-tokenizer]

Prints one Markdown row per ggml type (tensors, weights, identical, seconds for npukit / gguf-py)
and the token comparison; exits 1 if anything differs. Needs the ``gguf`` package (and transformers
for the tokenizer part).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np


def compare_tensors(path: Path) -> dict[str, list[float]]:
    """Per type name: [tensors, weights, identical tensors, npukit seconds, gguf-py seconds]."""
    import gguf

    from npukit.models.gguf import GGUFFile

    ours, ref = GGUFFile(path), gguf.GGUFReader(str(path))
    rows: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0, 0.0, 0.0])
    for t in ref.tensors:
        shape = tuple(reversed([int(d) for d in t.shape]))
        t0 = time.perf_counter()
        got = ours.float32(t.name)
        t1 = time.perf_counter()
        with np.errstate(all="ignore"):
            expect = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32).reshape(shape)
        t2 = time.perf_counter()
        row = rows[t.tensor_type.name]
        same = got.shape == expect.shape and np.array_equal(got.view(np.uint32), expect.view(np.uint32))
        row[0] += 1
        row[1] += got.size
        row[2] += int(same)
        row[3] += t1 - t0
        row[4] += t2 - t1
        if not same:
            print(f"DIFFERS: {t.name} ({t.tensor_type.name}, shape {shape})", file=sys.stderr)
    return dict(rows)


def compare_tokens(path: Path, text: str) -> tuple[int, int]:
    """(tokens, positions where npukit's id differs from transformers'; length mismatch counts)."""
    from transformers import AutoTokenizer

    from npukit.models.gguf import GGUFFile, tokenizer_from_gguf

    tok, _info = tokenizer_from_gguf(GGUFFile(path).meta)
    ids = tok.encode(text).ids
    hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)(text)["input_ids"]
    diff = sum(a != b for a, b in zip(ids, hf, strict=False)) + abs(len(ids) - len(hf))
    return len(ids), diff


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--text", type=Path, default=Path("/usr/share/common-licenses/GPL-3"))
    ap.add_argument("--chars", type=int, default=20000)
    ap.add_argument("--no-tokenizer", action="store_true")
    args = ap.parse_args()
    bad = 0
    print("| ggml type | tensors | weights | bit-identical | npukit s | gguf-py s |")
    print("|---|---|---|---|---|---|")
    for name, (n, w, same, ts, tr) in sorted(compare_tensors(args.file).items()):
        print(f"| {name} | {n} | {w:,} | {same}/{n} | {ts:.2f} | {tr:.2f} |")
        bad += int(n - same)
    if not args.no_tokenizer:
        n_tok, diff = compare_tokens(args.file, args.text.read_text()[:args.chars])
        print(f"\ntokenizer: {n_tok} tokens of {args.text}, {diff} differ from transformers")
        bad += diff
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
