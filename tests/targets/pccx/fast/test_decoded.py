"""A prefill chunk program's decoded words on disk (`npukit.targets.pccx.fast.decoded`): a process
that has seen the checkpoint decodes none of the chunk's words again, and runs it to the same
logits and cycles as the run that decoded them (the oracle: the driver without the entry, every
word through the ISA decoder); an entry that does not fit its program changes nothing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from npukit.models.gemma3n import Gemma3nConfig, Gemma3nWeights, synthetic_weights
from npukit.models.safetensors import open_checkpoint
from npukit.targets.pccx import asm, isa
from npukit.targets.pccx.compile.progcache import ProgramCache
from npukit.targets.pccx.driver import PccxDriver, Variant
from npukit.targets.pccx.fast import decoded, fastsim
from npukit.targets.pccx.gemma3n_quant.cache import load_store

from .tiny_gemma3n import CFG

save_file = pytest.importorskip("safetensors.numpy").save_file
PROMPT = [3, 9, 1]  # one GEMM chunk of 3 tokens (inside the sliding window of 4)


@pytest.fixture
def ckpt(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUKIT_INT4_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NPUKIT_PROGRAM_CACHE", raising=False)
    w = synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7)
    path = tmp_path / "model.safetensors"
    save_file({"model." + n: np.ascontiguousarray(w.get(n), np.float32) for n in w.shapes}, str(path))
    return path


@pytest.fixture
def decodes(monkeypatch):
    """Counts the words the fast executor sends through the ISA decoder."""
    count = [0]
    real = fastsim.decode

    def counted(*args, **kw):
        count[0] += 1
        return real(*args, **kw)

    monkeypatch.setattr(fastsim, "decode", counted)
    return count


def _prefill(path):
    store, _ = load_store(Gemma3nWeights(Gemma3nConfig.from_hf(CFG), open_checkpoint(path), str(path)))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("fp16", 64).start()
    logits = drv.prefill(PROMPT)
    assert [r.tokens for r in drv.records] == [len(PROMPT)]  # one chunk program
    return logits.view(np.uint32), [r.cycles for r in drv.records], drv


def test_a_seen_chunk_program_decodes_nothing_and_runs_identically(ckpt, decodes):
    bits, cycles, drv = _prefill(ckpt)
    first = decodes[0]
    (key,) = [k for k in drv.variants if k[0] == "prefill"]
    assert first > 100 and drv.programs.writes >= 2  # the program, and its decoded words
    asm._TEXT.clear()  # (a fresh process's memos)
    bits2, cycles2, drv2 = _prefill(ckpt)
    assert decodes[0] == first, "a seen chunk program must not decode its words again"
    assert np.array_equal(bits2, bits) and cycles2 == cycles and all(c > 0 for c in cycles)
    compiled = drv2.programs.get(key, Variant)  # the words as compiled (before any span patch)
    words = [seg.words for seg in compiled.program.segments]
    entry = drv2.programs.get(decoded.entry_name(key, words), decoded.DecodedWords)
    assert entry is not None and len(entry.words) > 100
    for w, ins, text in zip(entry.words.tolist(), entry.instrs, entry.texts, strict=True):
        assert ins == isa.decode(w, "extended", drv2.dev.limits)
        assert text == asm.SYNTAX.format(asm._TEXT_SPEC, ins)  # the label, not from the memo


def test_an_entry_that_does_not_fit_is_ignored(ckpt, decodes, monkeypatch):
    bits, cycles, _ = _prefill(ckpt)
    first = decodes[0]
    # a torn entry (fewer labels than words) seeds nothing: every word is decoded again
    real_init = PccxDriver.__init__

    def with_torn_entries(self, *args, **kw):
        real_init(self, *args, **kw)
        get = self.programs.get

        def torn(name, kind):
            got = get(name, kind)
            if isinstance(got, decoded.DecodedWords):
                got.texts = got.texts[:-1]
            return got

        self.programs.get = torn

    monkeypatch.setattr(PccxDriver, "__init__", with_torn_entries)
    bits2, cycles2, _ = _prefill(ckpt)
    assert decodes[0] == 2 * first
    assert np.array_equal(bits2, bits) and cycles2 == cycles


def test_seed_fills_the_memos_within_their_bounds(monkeypatch):
    root = Path(__file__).resolve().parents[4]
    words = sorted(set(asm.assemble((root / "examples" / "pccx" / "softmax.s").read_text())))
    instrs = [isa.decode(w) for w in words]
    entry = decoded.DecodedWords(np.array(words, np.uint64), instrs, [asm.format_instr(i) for i in instrs])
    dev = SimpleNamespace(_decoded={})
    assert decoded.seed(dev, entry) == len(words) > 3
    assert dev._decoded == dict(zip(words, instrs, strict=True))
    monkeypatch.setattr(decoded, "_MAX_MEMO", 3)  # a memo near its bound takes only what fits
    small = SimpleNamespace(_decoded={})
    assert decoded.seed(small, entry) == 3 and len(small._decoded) == 3
    assert all(small._decoded[w] == isa.decode(w) for w in small._decoded)


def test_nothing_is_collected_without_a_program_cache(ckpt, monkeypatch):
    monkeypatch.setenv("NPUKIT_PROGRAM_CACHE", "off")
    collected = [0]
    real = decoded.collect

    def counted(*args):
        collected[0] += 1
        return real(*args)

    monkeypatch.setattr(decoded, "collect", counted)
    _, cycles, drv = _prefill(ckpt)
    assert collected[0] == 0 and drv.programs.writes == 0 and all(c > 0 for c in cycles)


def _decode(path, steps):
    """A process's run: the prompt, then ``steps`` decode tokens (greedy); logits bits and cycles."""
    bits, _, drv = _prefill(path)
    tok, out = int(np.argmax(bits.view(np.float32))), [bits]
    for _ in range(steps):
        logits = drv.step(tok)
        out.append(logits.view(np.uint32))
        tok = int(np.argmax(logits))
    return out, [r.cycles for r in drv.records], drv


def test_a_seen_decode_program_built_ahead_decodes_none_of_its_words(ckpt, monkeypatch):
    """Span buckets 16 and 32 (the switch at span 17): the first process compiles both decode programs
    and stores their decoded words beside them; the second builds the bucket-32 program ahead
    (`prepare_program`) without decoding a word; with those entries gone, a third decodes them
    again while building ahead (and stores them). All three run to the same logits and cycles, the
    first one's every word through the ISA decoder."""
    building = [False]
    ahead_words: list[int] = []  # the words decoded while a program is built ahead
    real, prepare = fastsim.decode, fastsim.FastSimulator.prepare_program

    def counted(word, *args, **kw):
        if building[0]:
            ahead_words.append(int(word))
        return real(word, *args, **kw)

    def building_ahead(self, *args, **kw):
        building[0] = True
        try:
            return prepare(self, *args, **kw)
        finally:
            building[0] = False

    monkeypatch.setattr(fastsim, "decode", counted)
    monkeypatch.setattr(fastsim.FastSimulator, "prepare_program", building_ahead)
    runs: list[tuple] = []
    for i in range(3):
        if i == 2:  # the decode programs' entries removed
            drv = runs[-1][2]
            keys = sorted(k for k in drv.variants if k[0] != "prefill")
            for k, base in zip(keys, (None, keys[0]), strict=True):
                drv.programs._path(decoded.variant_name(k, base))[0].unlink()
        asm._TEXT.clear()  # (a fresh process's memos)
        start = len(ahead_words)
        bits, cycles, drv = _decode(ckpt, 20)
        runs.append((bits, cycles, drv, len(ahead_words) - start))
        keys = sorted(k for k in drv.variants if k[0] != "prefill")
        assert len(keys) == 2  # span buckets 16 and 32
        # bucket 16's words, and bucket 32's less bucket 16's (decoded before it, in every process)
        for k, base in zip(keys, (None, keys[0]), strict=True):
            entry = drv.programs.get(decoded.variant_name(k, base), decoded.DecodedWords)
            # (bucket 32 less bucket 16: the words that name a span buffer, tens at this size)
            assert entry is not None and len(entry.words) > (100 if base is None else 10)
            if base is not None:  # (bucket 16's span words are patched per token since)
                prev = drv.variants[base].program
                shared = set(entry.words.tolist()) & {w for s in prev.segments for w in s.words}
                assert len(shared) <= len(prev.patches)
            for w, ins, text in zip(entry.words.tolist(), entry.instrs, entry.texts, strict=True):
                assert ins == isa.decode(w, "extended", drv.dev.limits)
                assert text == asm.SYNTAX.format(asm._TEXT_SPEC, ins)
    (bits0, cycles0, _, _), (bits1, cycles1, drv1, ahead1), (bits2, cycles2, drv2, ahead2) = runs
    for bits in (bits1, bits2):
        assert all(np.array_equal(a, b) for a, b in zip(bits, bits0, strict=True))
    assert cycles1 == cycles0 and cycles2 == cycles0 and all(c > 0 for c in cycles0)
    assert ahead1 == 0 and drv1.programs.writes == 0  # seeded from disk: nothing decoded, nothing stored
    assert ahead2 > 10 and drv2.programs.writes == 2


def test_a_later_chunk_program_stores_only_the_words_the_one_before_it_lacks(ckpt, decodes, monkeypatch):
    """A prompt whose chunks run two programs (the second at a longer span bucket): the second one's
    entry holds only its words the first program lacks (named by both programs' words), and a fresh
    process seeded from both decodes nothing and runs to the same logits and cycles."""
    prompt = [int(t) for t in np.random.default_rng(3).integers(3, 60, 40)]
    puts: list[tuple] = []
    real_put = ProgramCache.put

    def recorded(self, name, value):
        if isinstance(value, decoded.DecodedWords):
            puts.append((name, value))
        return real_put(self, name, value)

    monkeypatch.setattr(ProgramCache, "put", recorded)

    cfg = Gemma3nConfig.from_hf({**CFG, "sliding_window": 64})  # (chunks of 6 up to position 40)

    def run():
        store, _ = load_store(Gemma3nWeights(cfg, open_checkpoint(ckpt), str(ckpt)))
        drv = PccxDriver(executor="fast", prefill_chunk=6).open().load(store).kv_init("fp16", 64).start()
        return drv.prefill(prompt).view(np.uint32), [r.cycles for r in drv.records], drv

    bits, cycles, drv = run()
    programs = [k for k in drv.variants if k[0] == "prefill"]
    assert len(programs) >= 2 and len(puts) == len(programs)
    (first_name, first), (later_name, later) = puts[0], puts[1]
    assert len(first_name) == 4 and len(later_name) == 5  # the later one names the program before it
    assert len(first.words) > len(later.words) > 0
    a, b = (drv.variants[k] for k in programs[:2])
    words_b = {int(w) for seg in b.program.segments for w in seg.words}
    assert 0 < len(later.words) < len(words_b) // 2  # most of its words were the first program's
    assert not set(later.words.tolist()) & {int(w) for seg in a.program.segments for w in seg.words}
    first_decodes = decodes[0]
    asm._TEXT.clear()  # (a fresh process's memos)
    bits2, cycles2, _ = run()
    assert decodes[0] == first_decodes, "a seen prompt's chunk programs must not decode their words again"
    assert np.array_equal(bits2, bits) and cycles2 == cycles and len(puts) == len(programs)
