"""The next span bucket's program built ahead over the decode steps before the switch
(`npukit.targets.pccx.fast.ahead`, `PccxDriver._prepare_ahead`): the reference Simulator (the
definition) gives the same logits, KV ring and Work records at every token, the timing model the same
cycles as a driver that builds the program at the switch, and the switch really found its slot made
(whole, or finished there when the slices ran out)."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx import driver as drvmod
from npukit.targets.pccx import switch
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.fast import ahead, fastrun, faststeps
from npukit.targets.pccx.fast.fastmat import bind_mat
from npukit.targets.pccx.gemma3n_quant import Int4Store

from .test_fastrun import _lowered_one_by_one
from .tiny_gemma3n import CFG

PROMPT = [3, 9, 1, 4, 7, 2, 8, 5, 6, 11, 10, 12, 13]  # positions 0..12; decode spans 14..21


def _drivers(kv: str) -> tuple[PccxDriver, PccxDriver, PccxDriver]:
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=11))
    ref = PccxDriver(timing=False).open().load(store).kv_init(kv, 64).start()
    cold = PccxDriver(executor="fast").open().load(store).kv_init(kv, 64).start()
    warm = PccxDriver(executor="fast").open().load(store).kv_init(kv, 64).start()
    return ref, cold, warm


def _portable_columns(tab: np.ndarray) -> np.ndarray:
    """A fused run's table without the host-memory addresses of INT4 rows (kinds 10, 11 and 14: the
    image or codes at column 6, the scales at 9), which differ between two simulators holding equal
    weights."""
    out = tab.copy()
    int4 = np.isin(out[:, 0], (10, 11, 14))
    out[int4, 6] = 0
    out[int4, 9] = 0
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kv,slice_steps", [("fp16", 4096), ("int4", 8)])
def test_switch_built_ahead_matches_reference_and_cycles(kv, slice_steps, monkeypatch):
    monkeypatch.setattr(drvmod, "SWITCH_SLICE", slice_steps)
    binds: dict[int, int] = {}  # GEMV/GEMM operand bindings made, per simulator

    def counted(sim, *args):
        binds[id(sim)] = binds.get(id(sim), 0) + 1
        return bind_mat(sim, *args)

    monkeypatch.setattr(faststeps, "bind_mat", counted)  # (the binder the steps call when they run)
    lowered: list[int] = []  # fused-run tables lowered by `warm`'s runs when called (not ahead)
    build = fastrun._FusedRun._build

    def lowering(run, cc=None):
        if cc is None and run.sim is warm.dev:
            lowered.append(warm.position)
        return build(run, cc)

    monkeypatch.setattr(fastrun._FusedRun, "_build", lowering)
    ref, cold, warm = _drivers(kv)
    first_calls: dict[str, int] = {}  # `warm`'s kernels: the position of each one's first call

    def recorded(name, kernel):
        def call(*args):
            first_calls.setdefault(name, warm.position)
            return kernel(*args)

        return call

    warm.dev._k = {name: recorded(name, kernel) for name, kernel in warm.dev._k.items()}
    a, c = ref.prefill(PROMPT), cold.prefill(PROMPT)
    tok = int(np.argmax(a))
    for _ in range(8):  # `cold` compiles the bucket-32 program at its switch (span 17)
        c = cold.step(tok)
        tok = int(np.argmax(c))
    # `warm` knows the compiled programs, as a process that reads them from the disk cache does
    warm.variants.update(cold.variants)
    cold.reset()
    cold.records.clear()
    warm.prefill(PROMPT), cold.prefill(PROMPT)
    tok, seen_ready = int(np.argmax(a)), False
    made: list[tuple[bool, int]] = []  # (a switch?, GEMV bindings `warm` made in the step)
    for _ in range(8):
        pos = warm.position
        big = warm._bucket_key(warm.spans(pos + 1)) != warm._bucket_key(warm.spans(pos))
        if big:  # the step that crosses into bucket 32: its slots exist or are part-built
            new = warm._bucket_key(warm.spans(pos + 1))
            seen_ready = new in {t[0] for t in (*warm.dev._tagged, *warm.dev._preparing)}
            if slice_steps > 1000:  # built whole ahead, and the timing rows of its fixed records made
                slots = [s for t, s in warm.dev._tagged.items() if t[0] == new]
                assert slots and not any(t[0] == new for t in warm.dev._preparing)
                fixed = [st.work for s in slots for st in s.plan if hasattr(st, "work")]
                assert fixed and all(id(w) in warm.timer._rows_by_id for w in fixed)
                runs = [g[1] for s in slots for g in s.groups if g is not None]
                assert sum(r.table is not None for r in runs) > len(runs) // 2  # lowered ahead
        before, lowered_before = binds.get(id(warm.dev), 0), len(lowered)
        a, b = ref.step(tok), warm.step(tok)
        c = cold.step(tok)
        made.append((big, binds.get(id(warm.dev), 0) - before))
        if slice_steps > 1000 and (big or (len(made) > 1 and made[-2][0])):
            # the switch and the token after it lower no table: the patched copies were lowered ahead
            assert len(lowered) == lowered_before, (pos, lowered)
            # nor call a kernel for the first time (numba would load it from its cache then)
            assert pos not in first_calls.values(), (pos, first_calls)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert np.array_equal(b.view(np.uint32), c.view(np.uint32))
        r = ref.ring
        ring = (r.base, r.end - r.base)
        assert np.array_equal(warm.dev.host.read(*ring), ref.dev.host.read(*ring))
        assert warm.last_works == ref.last_works
        assert warm.records[-1].cycles == cold.records[-1].cycles
        tok = int(np.argmax(a))
    assert seen_ready  # the switch found the program built (or being built) ahead
    if slice_steps > 1000:  # its GEMVs were bound ahead: the switch binds no more than the step after
        at = next(i for i, (big, _) in enumerate(made) if big)
        assert made[at][1] <= made[at + 1][1]
    # the fused runs' tables lowered ahead are the ones `cold` lowered at their first call
    same = 0
    for tag, slot in warm.dev._tagged.items():
        other = cold.dev._tagged.get(tag)
        for g, h in zip(slot.groups, other.groups if other else [], strict=False):
            if g is not None and h is not None and g[1].table is not None and h[1].table is not None:
                assert np.array_equal(_portable_columns(g[1].table.tab), _portable_columns(h[1].table.tab))
                same += 1
    assert same
    assert not warm.dev._preparing  # and nothing is left half-made
    assert warm.dev.fallbacks == 0


def test_prepare_in_slices_counts_steps_and_keeps_a_ready_slot():
    from npukit.targets.pccx import asm
    from npukit.targets.pccx.fast.fastsim import FastSimulator
    from npukit.targets.pccx.isa import DestCache

    def memset(slot: int, a: int) -> int:
        return asm.assemble(f"memset cache=fmap slot={slot} a={a} b=2 c=3")[0]

    sim = FastSimulator()
    words = [memset(i, 1) for i in range(10)]
    assert [sim.prepare_program(words, "t", None, 4) for _ in range(3)] == [4, 4, 2]
    assert sim.prepare_program(words, "t", None, 4) == 0  # ready: nothing more to build
    moved = list(words)
    moved[7] = memset(7, 5)
    assert sim.prepare_program(moved, "u", "t") == 1  # only the differing word is compiled
    sim.load_program(moved, tag="u", dirty=[])
    assert len(sim.run()) == 10
    fmap = int(DestCache.FMAP)
    assert tuple(int(v) for v in sim.cc[fmap, 7]) == (5, 2, 3)
    assert tuple(int(v) for v in sim.cc[fmap, 6]) == (1, 2, 3)


def test_next_switch_is_the_first_position_in_another_bucket():
    """`_next_switch` (memoised) names the first position within SWITCH_LOOKAHEAD whose span bucket
    differs from the next token's, as the spans say directly, in any order of positions."""
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=11))
    drv = PccxDriver(timing=False).open().load(store).kv_init("fp16", 64)
    last = store.config.max_position_embeddings - 1

    def direct(p: int):
        key = drv._bucket_key(drv.spans(p + 1))
        for q in range(p + 1, min(p + drv_lookahead, last) + 1):
            if drv._bucket_key(drv.spans(q + 1)) != key:
                return q, drv._bucket_key(drv.spans(q + 1))
        return None

    drv_lookahead = drvmod.SWITCH_LOOKAHEAD
    order = [*range(0, 80), *range(5, 40, 3), 70, 3, 64, 63, 31, 32]
    found = 0
    for p in order:
        drv._pos = p
        got = drv._next_switch()
        assert got == direct(p), p
        found += got is not None
    assert found > 40  # (switches at 8, 16, 32, 64 and the sliding window's edge)


@pytest.mark.slow
def test_switch_work_is_spread_over_the_tokens_before_it(monkeypatch):
    """From the switch before it, the next bucket's program is built in a few slices (`SWITCH_SLICES`) on
    tokens evenly apart before the switch, none more than the `slice_cap` steps of the tokens it stands
    for, and the switching token finds every segment's slot complete."""
    _, cold, drv = _drivers("fp16")
    tok = int(np.argmax(cold.prefill([3, 9, 1, 4])))
    for _ in range(13):  # positions 4..16: the switch to bucket 32 at 16 (its program lowered there)
        tok = int(np.argmax(cold.step(tok)))
    drv.variants.update(cold.variants)  # as a process that reads the compiled programs from disk
    calls: dict[int, int] = {}  # position -> plan steps built after that token
    prepare = drv.dev.prepare_program

    def counted(words, tag, base=None, limit=None, works=None):
        made = prepare(words, tag, base, limit, works)
        calls[drv.position] = calls.get(drv.position, 0) + made
        return made

    tok = int(np.argmax(drv.prefill([3, 9, 1, 4])))
    first = drv._key_at(4)  # the first decode token's program: built whole by that token, before it runs
    segs = range(len(drv.variants[first].program.segments))
    assert not any((first, j) in drv.dev._tagged for j in segs)  # (a run decoding nothing pays nothing)
    monkeypatch.setattr(drv.dev, "prepare_program", counted)
    # (this model's buckets differ in ~80 words: slices of a few steps, so that the build is spread)
    monkeypatch.setattr(drvmod, "SWITCH_SLICE", 8)
    made = drv.dev._tagged.copy
    seen = []
    real_run = drv.dev.run

    def run():  # the first decode run finds every segment of its program built
        if not seen:
            seen.append(all((first, j) in made() for j in segs))
        return real_run()

    monkeypatch.setattr(drv.dev, "run", run)
    for _ in range(12):  # positions 4..15, each building its share of bucket 32's program after it
        tok = int(np.argmax(drv.step(tok)))
    assert seen == [True] and calls.pop(4) > 0  # (position 4: that build; the shares come after it)
    key = drv._key_at(16)
    assert key != drv._key_at(15)
    building = [p for p in range(6, 17) if calls.get(p)]
    assert len(building) >= 2, calls
    # the slices fall on tokens `stride` apart from the build's first, at most SWITCH_SLICES of them
    build = drv._ahead
    assert build.key == key and build.stride == -(-build.first // switch.SWITCH_SLICES)
    assert all(build.slice_now(16 - p) for p in calls) and len(calls) <= switch.SWITCH_SLICES, calls
    # a share is at most the cap for the tokens its slice stands for (fused tables counted as steps
    # may top it up once per segment: `prepare` lowers them in the call that finishes its steps)
    tables = switch.SWITCH_TAIL
    assert all(n <= drvmod.slice_cap(16 - p) * build.stride + tables for p, n in calls.items()), calls
    segments = len(drv.variants[key].program.segments)
    assert all((key, j) in drv.dev._tagged for j in range(segments))  # complete before the switch
    assert not any(t[0] == key for t in drv.dev._preparing)
    drv.step(tok)  # the switching token
    assert drv.records[-1].cycles > 0


@pytest.mark.slow
def test_tables_built_ahead_across_buckets_equal_the_rows_lowered_one_by_one(monkeypatch):
    """Every fused-run table built ahead (buckets 32 and 64, for the constant caches predicted at its
    start) equals its steps lowered one by one for those entries, and the decode through both switches
    gives the logits and cycles of a driver that builds each program at its switch."""
    _, cold, warm = _drivers("fp16")
    build = fastrun._FusedRun._build
    checked: dict[tuple, int] = {}  # span bucket -> table rows checked

    def compared(run, cc=None):
        table = build(run, cc)
        if cc is not None and table is not None and run.sim is warm.dev:
            rows, ins, works, makers, regions = _lowered_one_by_one(run, cc)
            assert np.array_equal(table.tab, np.array(rows, np.int64))
            assert all(a is b for a, b in zip(table.ins, ins, strict=True))
            assert all(a is b or a == b for a, b in zip(table.works, works, strict=True))
            assert sorted(table.makers) == makers
            assert [id(h) for h in table.regions] == [id(h) for h in regions]
            key = warm._next_switch()
            bucket = key[1] if key else None
            checked[bucket] = checked.get(bucket, 0) + len(rows)
        return table

    tok = int(np.argmax(cold.prefill([3, 9, 1, 4])))
    logits = []
    for _ in range(36):  # positions 4..39: `cold` compiles buckets 32 and 64 at their switches
        logits.append(cold.step(tok))
        tok = int(np.argmax(logits[-1]))
    cycles = [r.cycles for r in cold.records[-36:]]
    warm.variants.update(cold.variants)  # as a process that reads the compiled programs from disk
    monkeypatch.setattr(fastrun._FusedRun, "_build", compared)
    tok = int(np.argmax(warm.prefill([3, 9, 1, 4])))
    for i in range(36):
        got = warm.step(tok)
        assert np.array_equal(got.view(np.uint32), logits[i].view(np.uint32)), i
        assert warm.records[-1].cycles == cycles[i], i
        tok = int(np.argmax(got))
    assert {warm._key_at(16), warm._key_at(32)} <= {k for k, n in checked.items() if n}, checked
    assert warm.dev.fallbacks == 0


def test_build_tables_binds_no_gemv_a_table_row_runs(monkeypatch):
    """`build_tables` binds ahead only the GEMV steps that run one by one (a yield's, or outside the tables
    it lowers): none that an FP16 row (kinds 7, 9) or an INT4 row (10, 11, 14) of a table it lowers runs
    in the compiled loop (the decode's logits and cycles with tables built ahead: the tests above)."""
    _, _, drv = _drivers("fp16")
    tok = int(np.argmax(drv.prefill([3, 9, 1, 4])))
    for _ in range(14):  # positions 4..17: buckets 16 and 32 built
        tok = int(np.argmax(drv.step(tok)))
    sim, bound, prebind = drv.dev, [], faststeps.prebind_mat

    def recorded(sim, site, *args):
        bound.append(site)
        return prebind(sim, site, *args)

    monkeypatch.setattr(faststeps, "prebind_mat", recorded)
    covered: list = []  # the sites of the GEMV steps the rows of the tables lowered below run
    for slot in sim._tagged.values():
        runs = [g[1].resolve() for g in slot.groups
                if g is not None and not isinstance(g[1], fastrun._Resume)]
        for run in runs:
            run.table, run.dead = None, False
        ahead.build_tables(sim, slot.plan, slot.groups)
        for run in runs:
            kinds = [] if run.table is None else run.table.tab[:, 0].tolist()
            covered += [(k, st.site)
                        for k, st in zip(kinds, run.steps, strict=False) if k in (7, 9, 10, 11, 14)]
    kinds = {k for k, _ in covered}
    assert kinds & {7, 9} and kinds & {10, 11, 14} and bound  # (FP16 and INT4 rows; yields' steps bound)
    assert not {id(s) for s in bound} & {id(s) for _, s in covered}
