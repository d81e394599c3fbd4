"""Per-token replay on the fast executor against the reference Simulator (the definition): the span
descriptors change every token (attention GEMVs rebind, only the patched words are re-checked), the
full-attention span crosses a bucket (a new program variant), the sliding window fills and then moves
through the ring. Logits, KV ring bytes and Work records must be the reference's, and a Work record
that did not change between two tokens must be the very same object (the timing model caches by
identity)."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.gemma3n_quant import Int4Store

from .tiny_gemma3n import CFG


def _ring_bytes(drv: PccxDriver) -> np.ndarray:
    r = drv.ring
    return drv.dev.host.read(r.base, r.end - r.base).copy()


@pytest.mark.slow
@pytest.mark.parametrize("kv", ["fp16", "int4"])
def test_tokens_across_a_bucket_match_reference(kv):
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    ref = PccxDriver(timing=False).open().load(store).kv_init(kv, 64).start()
    fast = PccxDriver(executor="fast", timing=False).open().load(store).kv_init(kv, 64).start()
    prompt = [3, 9, 1, 4, 7, 2, 8, 5, 6, 11, 10, 12, 13]  # positions 0..12; decode spans 14..21
    a, b = ref.prefill(prompt), fast.prefill(prompt)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    tok, prev, variants = int(np.argmax(a)), None, set()
    for _ in range(8):  # the full-attention span goes 14 -> 21: bucket 16 -> 32 at span 17
        a, b = ref.step(tok), fast.step(tok)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert np.array_equal(_ring_bytes(fast), _ring_bytes(ref))
        assert fast.last_works == ref.last_works
        works = list(fast._last_works)  # as the executor returned them (the timing model's input)
        key = fast._current.key
        if prev is not None and prev[0] == key:  # same program: unchanged records are the same objects
            same = [i for i, (w, p) in enumerate(zip(works, prev[1], strict=True)) if w == p]
            assert len(same) > len(works) // 2
            assert all(works[i] is prev[1][i] for i in same)
            changed = [w for w, p in zip(works, prev[1], strict=True) if w != p]
            assert any(w.engine == "gemv" for w in changed)  # the attention GEMVs did rebind
        prev = (key, works)
        variants.add(key)
        tok = int(np.argmax(a))
    assert len(variants) == 2  # the bucket change compiled and switched to a second program
    assert fast.dev.fallbacks == 0


def test_span_work_records_are_plain_work_dataclasses():
    """The per-token GEMV records filled without the dataclass __init__ equal, hash and repr like ones
    built by it, and stay frozen."""
    import dataclasses

    from npukit.sim import work
    from npukit.sim.work import Work
    from npukit.targets.pccx import asm
    from npukit.targets.pccx.fast import fastmat
    from npukit.targets.pccx.isa import decode

    assert work.PLAIN_WORK  # the fast fill is in use (Work is the dataclass it expects)
    ins = decode(asm.assemble("gemv dest=0x100 src=0x20 shape=3 size=4 flags=findemax|accm lanes=2 async")[0],
                 "extended")
    w = fastmat._mat_work(fastmat.mat_site(7, ins), 40, 1, 128, "fp16")
    kw, mw = 128 // 8, 40 // 8
    want = Work(7, "gemv", w.label, macs=40 * 128, weight_bytes=40 * 256,
                onchip_read_bytes=(kw + mw) * 16, onchip_write_bytes=mw * 16, is_async=True,
                reads=((0x20, 0x20 + kw), (0x100, 0x100 + mw)), writes=((0x100, 0x100 + mw),), lanes=2)
    assert w == want and hash(w) == hash(want) and repr(w) == repr(want)
    assert dataclasses.astuple(w) == dataclasses.astuple(want)
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.macs = 1  # type: ignore[misc]


@pytest.mark.parametrize("kmajor", [False, True])
@pytest.mark.parametrize("flags", ["", "flags=findemax|accm lanes=2 async"])
def test_fp16_work_maker_gives_the_reference_work_records(kmajor, flags):
    # the Work maker of a fused FP16 GEMV row (a span-grown attention product: a new Work each token)
    # makes what the single step's `_mat_work` / `_kmajor_work` make (every field, equality, hash),
    # and hands back the very same object for a shape it made before (the timing model's row cache)
    import dataclasses

    from npukit.sim.work import Work
    from npukit.targets.pccx import asm
    from npukit.targets.pccx.fast import fastmat
    from npukit.targets.pccx.isa import decode

    ins = decode(asm.assemble(f"gemv dest=0x100 src=0x20 shape=3 size=4 {flags}")[0], "extended")
    make = fastmat._fp16_works(fastmat.mat_site(7, ins), kmajor)
    ref_site = fastmat.mat_site(7, ins)
    seen, made = {}, []
    for m, k, live in [(256, 5, 5), (256, 6, 3), (256, 6, 3), (40, 9000, 17), (256, 7, 0), (8, 16, 16),
                       (256, 5, 5)]:
        got = make([m, k, live])
        want = (fastmat._kmajor_work(ref_site, m, 1, k, "fp16", live, False) if kmajor
                else fastmat._mat_work(ref_site, m, 1, k, "fp16"))
        assert got == want and hash(got) == hash(want) and repr(got) == repr(want)
        assert dataclasses.astuple(got) == dataclasses.astuple(want) and type(got) is Work
        assert got is seen.setdefault((m, k, live) if kmajor else (m, k), got)
        made.append((got, dataclasses.astuple(want)))
    # records of one shape share no fields dict: a later record of that shape left the earlier ones as made
    assert all(dataclasses.astuple(got) == want for got, want in made)
    assert len({id(vars(got)) for got, _ in made}) == len({id(got) for got, _ in made})
