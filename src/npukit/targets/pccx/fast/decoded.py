"""A program's decoded instructions kept on disk beside the compiled programs.

Planning a new chunk program in a fresh process decodes and validates its ~70 000 distinct words
and labels each for its Work record (~30 µs a word, ~2 s of a 36-token chunk's planning). Both are
pure functions of the word (the ISA profile and limits fixed by the key), so the driver stores them
once per program (`run_prefill`, through the driver's `ProgramCache`) and a later process seeds
the executor's decode memo and the label memo from the entry instead of decoding anew. A prompt's later
chunk program (the next span bucket's, the last chunk's shorter one) stores only the words the chunk
program planned before it in that process lacks, ~7 500 of its ~35 000 at hidden 1024: a 512-token
prompt's first run loaded five entries in 380-430 ms, now 110-125 (with the garbage collector paused
while an entry loads, `ProgramCache.get`). A decode
step's span-bucket program is kept the same way (`variant_name`, `seed_variant`, `store_variant`),
less the words of the program running before it (the previous bucket's): 300-600 of its ~1 300
distinct words are new at each switch into its bucket (the on-chip layout moves with the span), and
building it ahead decoded and labelled them.

Key: the program cache's own (checkpoint, compiler, hardware, profile, KV ring), the chunk
program's name, SHA-256 of its words (and of the words of the program planned before it, for a later
chunk's entry) and `VERSION` (the source of the decoder and the label format). Only valid words are
stored; a word the entry lacks (a span patch of a later chunk) is decoded as before, so a stale or
partial entry changes nothing but the time.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

import npukit
from npukit.targets.pccx import asm

# what a word's decoded instruction and its label depend on (relative to the npukit package)
_SOURCES = ("targets/pccx/isa.py", "isa/spec.py", "isa/text.py", "targets/pccx/asm.py",
            "targets/pccx/fast/decoded.py")
_MAX_MEMO = 1 << 18  # the memos' own bounds (`fastsim._MAX_DECODED`, `asm.format_instr`)
T = TypeVar("T")


@functools.cache
def version() -> str:
    """SHA-256 of the decoder's and the label format's source, once per process."""
    pkg = Path(npukit.__file__).parent
    h = hashlib.sha256()
    for rel in _SOURCES:
        h.update(rel.encode() + b"\0" + (pkg / rel).read_bytes())
    return h.hexdigest()[:32]


@dataclass
class DecodedWords:
    """Distinct valid words of a program, their decoded instructions and labels (same order)."""

    words: np.ndarray  # uint64
    instrs: list
    texts: list[str]


def words_hash(segments: Iterable[Sequence[int]]) -> str:
    """SHA-256 over a program's segments' words (its content key)."""
    h = hashlib.sha256()
    for words in segments:
        h.update(np.asarray(words, dtype=np.uint64).tobytes() + b"\xff")
    return h.hexdigest()[:32]


def entry_name(name: tuple, segments: Iterable[Sequence[int]]) -> tuple:
    """The program cache name of a program's decoded words."""
    return ("decoded", version(), name, words_hash(segments))


def variant_name(key: tuple, base: tuple | None = None) -> tuple:
    """The program cache name of decode program ``key``'s decoded words that program ``base`` (the
    one running before it: the previous span bucket's) does not hold; ``base`` None: all of them. Not
    named by the words: a program's span words are patched in place per token, and an entry maps
    words to their decoding, which holds for any program."""
    return ("decoded", version(), "decode-variant", base, key)


def seed_variant(programs: Any, dev: Any, key: tuple, base: tuple | None = None) -> bool:
    """Seed ``dev``'s memos from the stored entry `variant_name(key, base)`; whether there was one
    (`ProgramCache.get`: none when the driver's programs are not cached)."""
    entry = programs.get(variant_name(key, base), DecodedWords)
    if entry is None:
        return False
    seed(dev, entry)
    return True


def store_variant(programs: Any, dev: Any, key: tuple, segments: Iterable[Sequence[int]],
                  base: tuple | None = None, skip: Iterable[Sequence[int]] = ()) -> None:
    """Store what ``dev`` decoded for decode program ``key``'s words (its plan built), but the words of
    program ``base`` (its segments ``skip``: decoded, or seeded, when that one was built)."""
    got = collect(dev, segments, skip)
    if got is not None and len(got.words):
        programs.put(variant_name(key, base), got)


def collect(dev: Any, segments: Iterable[Sequence[int]], skip: Iterable[Sequence[int]] = ()
            ) -> DecodedWords | None:
    """What ``dev`` (a `FastSimulator` that has run the program) decoded for its words, less those of
    the segments ``skip``; None for another executor."""
    memo = getattr(dev, "_decoded", None)
    if memo is None:
        return None
    words, instrs, texts = [], [], []
    for w in sorted({int(x) for seg in segments for x in seg} - {int(x) for seg in skip for x in seg}):
        ins = memo.get(w)
        if ins is None or isinstance(ins, Exception):
            continue
        words.append(w)
        instrs.append(ins)
        texts.append(asm.format_instr(ins))
    return DecodedWords(np.array(words, dtype=np.uint64), instrs, texts)


def run_prefill(programs: Any, dev: Any, v: Any, base: Any, run: Callable[[], T]) -> T:
    """``run()``, the first run of prefill program ``v`` in this process, with ``dev``'s memos seeded
    from its stored entry, or its entry stored after it: what the run decoded of ``v``'s words that
    prefill program ``base`` (the one planned before it in this process; None: none) lacks. ``base``
    ran here, so its words are in the memos already (a prompt's chunk at the next span bucket shares
    most of its words). Named by ``v``'s words as compiled (before this run's span patches) and
    ``base``'s as they are now, so an entry made after another history is never taken for this one."""
    segments = [seg.words for seg in v.program.segments]
    skip = [seg.words for seg in base.program.segments] if base is not None and base is not v else []
    name = entry_name(v.key, segments) + ((words_hash(skip),) if skip else ())
    entry = programs.get(name, DecodedWords)
    if entry is not None:
        seed(dev, entry)
    out = run()
    if entry is None:
        got = collect(dev, segments, skip)
        if got is not None:
            programs.put(name, got)
    return out


def seed(dev: Any, entry: DecodedWords) -> int:
    """Fill ``dev``'s decode memo and the label memo from ``entry`` (within their bounds); the words
    added."""
    memo = getattr(dev, "_decoded", None)
    if memo is None or len(entry.instrs) != len(entry.words) or len(entry.texts) != len(entry.words):
        return 0
    labels, words = asm._TEXT, entry.words.tolist()
    if len(memo) + len(words) <= _MAX_MEMO and len(labels) + len(words) <= _MAX_MEMO:
        before = len(memo)  # room for all: two bulk updates (equal words decode to equal instructions)
        memo.update(zip(words, entry.instrs, strict=True))
        labels.update(zip(entry.instrs, entry.texts, strict=True))
        return len(memo) - before
    added = 0
    for w, ins, text in zip(words, entry.instrs, entry.texts, strict=True):
        if len(memo) >= _MAX_MEMO:
            break
        if w not in memo:
            memo[w] = ins
            added += 1
        if len(labels) < _MAX_MEMO:
            labels.setdefault(ins, text)
    return added
