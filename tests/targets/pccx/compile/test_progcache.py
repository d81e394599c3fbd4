"""The compiled-program cache: a checkpoint seen before runs programs loaded from disk, not compiled.

Oracle: the same driver run with every program freshly lowered and compiled (the first run, or the
cache switched off). A loaded program must give the same logits bit for bit and the same simulated
cycles per run; a changed hardware description, compiler source or entry must compile again.
"""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from npukit.models.gemma3n import Gemma3nConfig, Gemma3nWeights, synthetic_weights
from npukit.models.safetensors import open_checkpoint
from npukit.targets.pccx.compile import progcache
from npukit.targets.pccx.compile.codegen import CodeGen
from npukit.targets.pccx.compile.ir import CapacityError
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.gemma3n_quant import Int4Store
from npukit.targets.pccx.gemma3n_quant.cache import load_store
from npukit.targets.pccx.hw import PccxHw

save_file = pytest.importorskip("safetensors.numpy").save_file

SL, FU = "sliding_attention", "full_attention"
CFG = dict(
    model_type="gemma3n_text", vocab_size=64, vocab_size_per_layer_input=64, hidden_size=16,
    hidden_size_per_layer_input=8, intermediate_size=[32, 32], num_hidden_layers=2, num_attention_heads=1,
    num_key_value_heads=1, head_dim=16, laurel_rank=4, num_kv_shared_layers=0, sliding_window=4,
    layer_types=[SL, FU], activation_sparsity_pattern=[0.95, 0], max_position_embeddings=64,
    altup_num_inputs=2, final_logit_softcapping=30.0,
)
PROMPT = [5, 17, 2, 30]  # one GEMM chunk, up to the sliding window
DECODE = [4, 6, 21, 28, 55, 1, 2, 3, 9, 10, 11, 12, 13]  # positions 4..16: span buckets 16 and 32
EXECUTOR = "fast"


@pytest.fixture
def ckpt(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUKIT_INT4_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NPUKIT_PROGRAM_CACHE", raising=False)
    w = synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=5)
    path = tmp_path / "model.safetensors"
    save_file({"model." + n: np.ascontiguousarray(w.get(n), np.float32) for n in w.shapes}, str(path))
    return path


@pytest.fixture
def compiles(monkeypatch):
    """Counts `CodeGen.compile` calls (every program and every prefill-limit measurement)."""
    count = [0]
    real = CodeGen.compile

    def counted(self, nodes):
        count[0] += 1
        return real(self, nodes)

    monkeypatch.setattr(CodeGen, "compile", counted)
    return count


def _run(path, hw: PccxHw | None = None, store: Int4Store | None = None):
    if store is None:
        cfg = Gemma3nConfig.from_hf(CFG)
        store, _ = load_store(Gemma3nWeights(cfg, open_checkpoint(path), str(path)))
    drv = PccxDriver(hw, executor=EXECUTOR).open().load(store).kv_init("int8").start()
    logits = [drv.prefill(PROMPT)] + [drv.step(t) for t in DECODE]
    bits = np.stack([np.asarray(x, np.float32).view(np.uint32) for x in logits])
    runs = [(r.position, r.tokens, r.instructions, r.cycles) for r in drv.records]
    return bits, runs, drv


def _entries(path):
    return sorted((path.parent / "cache" / "programs").glob("*.pkl"))


def test_second_driver_loads_the_programs_and_runs_them_identically(ckpt, compiles):
    bits, runs, drv = _run(ckpt)
    compiled = compiles[0]
    keys = {k[0] if k[0] == "prefill" else "decode" for k in drv.variants}
    assert compiled >= 5 and keys == {"prefill", "decode"} and drv.programs.writes == len(_entries(ckpt))
    assert {dict(k)[0] for k in drv.variants if k[0] != "prefill"} == {16, 32}  # full attention
    assert all(p.stat().st_size < 256 << 10 for p in _entries(ckpt))  # programs only, no weights
    bits2, runs2, drv2 = _run(ckpt)
    assert compiles[0] == compiled, "a checkpoint seen before must not compile again"
    assert drv2.programs.hits == len(_entries(ckpt)) and drv2.programs.writes == 0
    assert np.array_equal(bits2, bits) and runs2 == runs
    assert all(c is not None and c > 0 for *_, c in runs2)
    assert drv2.prefill_limit() == drv.prefill_limit()


def test_changed_hardware_or_compiler_compiles_again(ckpt, compiles, monkeypatch):
    bits, runs, _ = _run(ckpt)
    first = compiles[0]
    hw = PccxHw()
    hw.clocks = dataclasses.replace(hw.clocks, core_mhz=hw.clocks.core_mhz / 2)  # the same programs
    bits2, runs2, _ = _run(ckpt, hw)
    assert compiles[0] == 2 * first, "a changed hardware description must not reuse programs"
    assert np.array_equal(bits2, bits) and [r[:3] for r in runs2] == [r[:3] for r in runs]
    assert [r[3] for r in runs2] != [r[3] for r in runs]  # half the clock: other cycle counts
    monkeypatch.setattr(progcache, "fingerprint", lambda: "another compiler")
    bits3, runs3, _ = _run(ckpt)
    assert compiles[0] == 3 * first and np.array_equal(bits3, bits) and runs3 == runs


def test_unreadable_or_foreign_entries_are_rebuilt(ckpt, compiles):
    bits, runs, _ = _run(ckpt)
    first = compiles[0]
    entries = _entries(ckpt)
    for i, p in enumerate(entries):
        blob = p.read_bytes()
        header = blob[:blob.index(b"\n", len(progcache.MAGIC)) + 1]
        if i % 3 == 0:
            p.write_bytes(blob[:len(blob) // 2])  # torn
        elif i % 3 == 1:  # a valid header over a pickle naming a global outside the allowed ones
            p.write_bytes(header + pickle.dumps(print))
        else:
            p.write_bytes(b"not a cache entry")
    bits2, runs2, drv2 = _run(ckpt)
    assert compiles[0] == 2 * first and np.array_equal(bits2, bits) and runs2 == runs
    assert drv2.programs.writes == len(entries)
    _run(ckpt)
    assert compiles[0] == 2 * first  # the rebuilt entries serve the next run


def test_no_cache_without_files_or_when_switched_off(ckpt, compiles, monkeypatch):
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=5))  # in memory: no key
    bits, runs, drv = _run(None, store=store)
    first = compiles[0]
    assert store.content_key is None and drv.programs.writes == 0 and not _entries(ckpt)
    monkeypatch.setenv("NPUKIT_PROGRAM_CACHE", "off")
    for _ in range(2):
        bits2, runs2, drv2 = _run(ckpt)
        assert drv2.programs.writes == drv2.programs.hits == 0
    assert compiles[0] == 3 * first and not _entries(ckpt)
    assert np.array_equal(bits2, bits) and runs2 == runs  # the file's weights are the synthetic ones


def test_a_chunk_that_did_not_fit_is_remembered(ckpt):
    *_, drv = _run(ckpt)
    name = ("prefill", 9999, ())
    with pytest.raises(CapacityError), drv.programs.remember_unfit(name):
        raise CapacityError("L2 peak 2 words over")
    with pytest.raises(CapacityError, match="2 words over"):
        drv.programs.get(name, object)


def test_a_live_driver_keys_its_entries_by_what_it_is_now(ckpt, monkeypatch):
    """The key prefix is remembered between lookups (`ProgramCache._where`), never past a change: a
    driver's hardware edited in place, its environment or compiler changed, keys as a new driver would."""
    *_, drv = _run(ckpt)
    name = ("prefill", 4, ())

    def fresh():  # the key a driver that never looked up before computes
        return progcache.ProgramCache(drv)._path(name)

    before = drv.programs._path(name)
    assert before == fresh() and drv.programs._path(name) == before
    drv.hw.clocks = dataclasses.replace(drv.hw.clocks, core_mhz=drv.hw.clocks.core_mhz / 2)
    halved = drv.programs._path(name)
    assert halved != before and halved == fresh()
    monkeypatch.setattr(progcache, "fingerprint", lambda: "another compiler")
    assert drv.programs._path(name) not in (before, halved) and drv.programs._path(name) == fresh()
    monkeypatch.setenv("NPUKIT_PROGRAM_CACHE", str(ckpt.parent / "elsewhere"))
    assert drv.programs._path(name)[0].parent == ckpt.parent / "elsewhere"
    monkeypatch.setenv("NPUKIT_PROGRAM_CACHE", "off")
    assert drv.programs._path(name) is None and not drv.programs.active
