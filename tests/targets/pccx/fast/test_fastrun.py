"""A decode token as few compiled calls (`fastrun`): every plain INT4 projection, the large ones
included, and the sparse layers' K-major W_down (kind 14) are rows of compiled runs; a GEMV the
compiled loop does not cover would be a yield row, run as a single step between two calls of the same
table; logits and Work records stay the reference simulator's (the definition)."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.fast import fastrun
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.gemma3n_quant import Int4Store

from .tiny_gemma3n import CFG, assert_fast_follows_reference

pytestmark = pytest.mark.skipif(not kx.HAVE_NUMBA, reason="compiled runs are a numba-backend path")


@pytest.mark.parametrize("large_from", [64, 1 << 40])
def test_decode_gemvs_run_in_compiled_calls_the_kmajor_ones_included(monkeypatch, large_from):
    monkeypatch.setattr(kx, "PARALLEL_MIN_MACS", large_from)  # 64: every matrix here counts as large
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    ref = PccxDriver(timing=False).open().load(store).kv_init("fp16", 64).start()
    fast = PccxDriver(executor="fast", timing=False).open().load(store).kv_init("fp16", 64).start()
    assert_fast_follows_reference(ref, fast, [3, 9, 1], steps=2)  # (the runs' tables are built by now)
    compiled, yields = [], []
    real = fastrun._FusedRun.resume

    def resume(self, t, start):
        works = real(self, t, start)
        compiled.extend(works)
        end = start + len(works)
        if end < len(t.works) and t.tab[end, 0] == fastrun._YIELD:
            yields.append(end)
        return works

    monkeypatch.setattr(fastrun._FusedRun, "resume", resume)
    tok = int(np.argmax(ref.step(5)))
    fast.step(5)
    for _ in range(3):
        compiled.clear()
        yields.clear()
        a, b = ref.step(tok), fast.step(tok)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert fast.last_works == ref.last_works
        in_calls = {id(w) for w in compiled}
        single = [w for w in fast._last_works if w.engine == "gemv" and id(w) not in in_calls]
        assert single == [] and yields == []  # no GEMV ran as a single step,
        assert any("kmajor" in w.label for w in compiled)  # the K-major sparse W_down in the calls
        tok = int(np.argmax(a))
    runs = [g[1].made for slot in fast.dev._tagged.values() for g in slot.groups
            if g is not None and isinstance(g[1], fastrun._FusedRun | fastrun._Repatch)]
    tables = [r.table for r in runs if r is not None and r.table is not None]  # (runs made: called or ahead)
    large = [int(np.sum((t.tab[:, 0] == 10) & (t.tab[:, 5] & 4 != 0))) for t in tables]
    assert (sum(large) > 0) == (large_from == 64)  # large projections are rows flagged for the twins
    assert fast.dev.fallbacks == 0


def _lowered_one_by_one(run, cc):
    """A run's table as lowered step by step (the definition `_FusedRun._build` gathers in bulk): each
    step's row for the entries the MEMSET rows before it leave, the table ending before a step that
    cannot be bound now, a row reading a host region naming it by its index in the table's list (column
    6); (rows, instructions, Work records, the rows with a Work maker, the regions)."""
    cc, rows, ins, works, makers, regions = cc.copy(), [], [], [], [], []
    for st in run.steps:
        got = fastrun._lowered(st, cc)
        if got is None:
            break
        row = [*got[0], *(0,) * (fastrun._COLS - len(got[0]))]
        if row[0] not in fastrun._BY_ADDRESS and len(got) > 2:
            if not any(h is got[2] for h in regions):
                regions.append(got[2])
            row[6] = next(j for j, h in enumerate(regions) if h is got[2])
        if row[0] == 6:
            cc[row[1], row[2]] = row[3:6]
        if len(got) > 3 and got[3] is not None:
            makers.append(len(rows))
        rows.append(row)
        ins.append(st.fuse_ins)
        works.append(got[1])
    return rows, ins, works, makers, regions


def test_tables_gathered_in_bulk_equal_the_rows_lowered_one_by_one():
    """Every fused run of a prefill chunk and of the decode programs (buckets 16 and 32), lowered for
    the device's entries now and for other entries, gives the rows, instructions, Work records and host
    regions that lowering its steps one by one gives."""
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    fast = PccxDriver(executor="fast", timing=False).open().load(store).kv_init("fp16", 64).start()
    tok = int(np.argmax(fast.prefill([3, 9, 1, 4])))
    for _ in range(14):  # positions 4..17: the programs of buckets 16 and 32 run
        tok = int(np.argmax(fast.step(tok)))
    sim, checked = fast.dev, 0
    other = sim.cc.copy()
    other[0] = (other[0] + 1) % 7  # entries the copies and GEMVs were not bound for: they stop or yield
    for slot in sim._tagged.values():
        for g in slot.groups:
            if g is None or not isinstance(g[1], fastrun._FusedRun | fastrun._Repatch):
                continue
            for cc in (sim.cc, other):
                run = g[1].resolve()
                builds = run.builds
                table = run._build(cc)
                run.builds = builds
                rows, ins, works, makers, regions = _lowered_one_by_one(run, cc)
                if table is None:
                    assert len(rows) < 2
                    continue
                assert np.array_equal(table.tab, np.array(rows, np.int64).reshape(-1, fastrun._COLS))
                assert [id(h) for h in table.regions] == [id(h) for h in regions]
                assert all(a is b for a, b in zip(table.ins, ins, strict=True))
                assert all(a is b or a == b for a, b in zip(table.works, works, strict=True))
                assert sorted(table.makers) == makers
                assert table.large_upto == _large_upto_row_by_row(table.tab)
                checked += len(rows)
    assert checked > 1000


def _large_upto_row_by_row(tab: np.ndarray) -> list[int]:
    """The weight bytes a table's large INT4 rows (kinds 10, 11 flagged `_LARGE`) stream, summed up to each
    row: m x bytes per row (column 10) for kind 10, m x k (int8 codes) for kind 11 (`_Table.large_upto`)."""
    upto = [0]
    for row in tab.tolist():
        large = row[0] in (10, 11) and row[5] & fastrun._LARGE
        upto.append(upto[-1] + (row[7] * (row[10] if row[0] == 10 else row[8]) if large else 0))
    return upto


def test_large_rows_summed_as_row_by_row():
    # `_Table.large_upto` (the twin chooser's byte counts) on mixed rows, large and small, both INT4 kinds
    rng = np.random.default_rng(5)
    tab = np.zeros((300, fastrun._COLS), np.int64)
    tab[:, 0] = rng.choice([0, 4, 10, 11, fastrun._YIELD], 300)
    tab[:, 5] = rng.integers(0, 8, 300)
    tab[:, 7:11] = rng.integers(1, 1 << 20, (300, 4))
    t = fastrun._Table(tab, [None] * 300, [None] * 300, {}, [], np.zeros((300, 3), np.int64), False)
    assert t.large_upto == _large_upto_row_by_row(tab)
    assert t.large_upto[-1] > 0 and len(set(t.large_upto)) < 300  # (large rows and others both drawn)
    # and where no row is large (most decode tables: INT4 rows under the flag, or none at all), all zeros
    for kinds in ([0, 4, 10, 11], [0, 4, 6]):
        tab[:, 0] = rng.choice(kinds, 300)
        tab[:, 5] &= ~fastrun._LARGE
        t = fastrun._Table(tab, [None] * 300, [None] * 300, {}, [], np.zeros((300, 3), np.int64), False)
        assert t.large_upto == _large_upto_row_by_row(tab) == [0] * 301
        assert all(type(v) is int for v in t.large_upto)


def test_yields_reading_follows_the_table_rows():
    # the yield rows a patch must lower again, from the rows kept with the table, are the ones a scan
    # of its rows gives (past ``after``; reading a rewritten entry, or all of them), also after a MEMSET
    # row is rewritten in place and after the table's rows are replaced (a patch that re-lowers rows)
    rng = np.random.default_rng(3)

    def table(rows: int) -> fastrun._Table:
        tab = np.zeros((rows, fastrun._COLS), np.int64)
        tab[:, 0] = rng.choice([1, 6, fastrun._YIELD], rows)
        tab[:, 1:3] = rng.integers(0, 6, (rows, 2))
        return fastrun._Table(tab, [None] * rows, [None] * rows, {}, [], np.zeros((rows, 3), np.int64), False)

    def scan(tab: np.ndarray, after: int, entries: set | None) -> list[int]:
        return [r for r in range(len(tab)) if tab[r, 0] == fastrun._YIELD and r > after and (
            entries is None or {(0, tab[r, 1]), (1, tab[r, 2]), (1, tab[r, 2] + 1)} & entries)]

    t = table(60)
    for step in range(40):
        if step == 20:
            t.tab = table(60).tab  # (new rows: what the table keeps is made again)
        memsets = np.flatnonzero(t.tab[:, 0] == 6)
        t.tab[rng.choice(memsets), 1:6] = rng.integers(0, 6, 5)  # (in place: a MEMSET row only)
        after = int(rng.integers(-1, 60))
        for entries in (None, {(0, int(rng.integers(6))), (1, int(rng.integers(6)))}):
            got = fastrun._yields_reading(t, after, entries)
            assert got == scan(t.tab, after, entries)
    assert scan(t.tab, -1, None)  # (the tables do hold yields)


def test_int4_rows_read_the_host_views_and_fp16_rows_share_their_site_maker(monkeypatch):
    """A compiled INT4 row's image and scale addresses (kinds 10 and 14: columns 6 and 9) are the data
    addresses of the views `host.view` hands out for its key's image (the definition: ``ctypes.data``);
    the FP16 rows (kinds 7, 9) a GEMV step lowers hand out one Work maker per step (made once per site)."""
    from npukit.targets.pccx.fast.faststeps import MatStep
    from npukit.targets.pccx.memory import WORD_BYTES

    monkeypatch.setattr(kx, "PARALLEL_MIN_MACS", 64)  # every matrix here large: read in place (kind 10)
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    fast = PccxDriver(executor="fast", timing=False).open().load(store).kv_init("fp16", 64).start()
    tok = int(np.argmax(fast.prefill([3, 9, 1, 4])))
    for _ in range(3):
        tok = int(np.argmax(fast.step(tok)))
    sim, kinds = fast.dev, {}
    for slot in sim._tagged.values():
        for g in slot.groups:
            if g is None or not isinstance(g[1], fastrun._FusedRun | fastrun._Repatch):
                continue
            run = g[1].resolve()
            builds = run.builds
            table = run._build(sim.cc)
            run.builds = builds
            if table is None:
                continue
            before = fastrun._CcBefore(sim.cc, table.tab)  # (the entries as the rows before a row leave them)
            for o, row in enumerate(table.tab.tolist()):
                kinds[row[0]] = kinds.get(row[0], 0) + 1
                if row[0] in (10, 14):
                    rows, rb, step = (row[7] if row[0] == 10 else row[8]), row[10], run.steps[o]
                    addr = ((row[15] << 16) | row[16]) * WORD_BYTES
                    assert row[6] == sim.host.view(addr, rows * rb).ctypes.data
                    at = addr + rows * rb + (-(rows * rb)) % WORD_BYTES
                    assert row[9] == (sim.host.view(at, 4 * row[7]).ctypes.data if step.site.w_scale else 0)
                elif row[0] in (7, 9):
                    step = run.steps[o]
                    assert isinstance(step, MatStep) and table.makers[o] is step.fuse(before.at_row(o))[3]
    assert kinds.get(10, 0) + kinds.get(14, 0) > 10 and kinds.get(7, 0) + kinds.get(9, 0) > 2
