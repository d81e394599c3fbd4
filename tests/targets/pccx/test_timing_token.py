"""The driver's per-run timing (`TokenTimer`: cached columns, compiled loop, lazy schedule) against the
readable timing model on the same Works (`timing_state.Sim` on `to_ops`, the model's definition):
every run's cycles and the full schedule of runs whose Works changed between tokens (attention spans
grow, a span bucket changes, prefill chunks), bit for bit."""

from __future__ import annotations

import json
import operator

import pytest

from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.sim import timing_fast
from npukit.sim.timing_state import Sim
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.gemma3n_quant import Int4Store
from npukit.targets.pccx.timing import _OpRecord, machine, to_ops

pytestmark = pytest.mark.skipif(not timing_fast.enabled(), reason="numba is a core dependency")

SL, FU = "sliding_attention", "full_attention"
CFG = dict(
    model_type="gemma3n_text", vocab_size=96, vocab_size_per_layer_input=96, hidden_size=32,
    hidden_size_per_layer_input=8, intermediate_size=[64, 64, 64], num_hidden_layers=3, num_attention_heads=2,
    num_key_value_heads=1, head_dim=16, laurel_rank=8, num_kv_shared_layers=1, sliding_window=6,
    layer_types=[SL, FU, SL], activation_sparsity_pattern=[0.95, 0, 0], max_position_embeddings=128,
    altup_num_inputs=2, final_logit_softcapping=30.0)


def dump(r) -> str:
    return json.dumps({**r.to_json(), "fetches": [f.to_json() for f in r.fetches],
                       "usage": [(t, list(u.items())) for t, u in r.usage],
                       "levels": [(t, list(v.items())) for t, v in r.levels],
                       "stall_order": [list(o.stalls) for o in r.ops]})


@pytest.mark.parametrize("lean", [True, False])  # lean (the default): times only, a result made afresh
def test_token_timer_equals_the_readable_model_run_after_run(lean):
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("int8").start()
    drv.timer.lean = lean
    m = machine(drv.hw)
    drv.prefill([2, 3, 5, 7])
    runs, raw = [list(drv.last_works)], []
    tok = 11
    for _ in range(12):  # spans grow past the sliding window; the full-attention bucket changes
        drv.step(tok)
        runs.append(list(drv.last_works))
        raw.append(drv._last_works)  # the Work objects the timer saw (last_works renumbers copies)
        tok = (tok * 7 + 3) % 96
    assert len(drv.records) == len(runs)
    for i, (rec, works) in enumerate(zip(drv.records, runs, strict=True)):
        want = Sim(m, to_ops(drv.hw, works, _OpRecord, renumber=True)).run()
        assert rec.cycles == want.cycles, f"run {i}"
        if i in (0, 1, 6, 12):
            assert dump(rec.timing) == dump(want), f"run {i}"
    changed = sum(a is not b for a, b in zip(raw[-1], raw[-2], strict=True))
    assert 0 < changed < len(raw[-1]) // 4  # the cache was exercised: some rows patched, most kept


def test_a_full_row_cache_starts_over_between_batches_not_inside_one(monkeypatch):
    """A prompt whose Works outgrow the row cache (a 512-token prefill did) still times exactly: the
    cache is cleared before a batch, never part-way through the rows that batch looks up next."""
    from npukit.targets.pccx import timing_token

    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("int8").start()
    drv.prefill([2, 3])
    monkeypatch.setattr(timing_token, "_MAX_ROWS", len(drv.last_works) + 5)
    for tok in (4, 9, 4):
        drv.step(tok)
        want = Sim(machine(drv.hw), to_ops(drv.hw, drv.last_works, _OpRecord, renumber=True)).run()
        assert drv.records[-1].cycles == want.cycles
        assert len(drv.timer._rows_by_id) <= 2 * (len(drv.last_works) + 5)


def test_switched_off_the_timer_uses_the_readable_loop(monkeypatch):
    monkeypatch.setenv("NPUKIT_TIMING", "python")
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("int8").start()
    assert drv.timer.plan is None
    drv.prefill([2, 3])
    drv.step(4)
    want = Sim(machine(drv.hw), to_ops(drv.hw, drv.last_works, _OpRecord, renumber=True)).run()
    assert drv.records[-1].cycles == want.cycles


@pytest.mark.slow  # (about 6 s: the driver, then the plain reference on three programs)
def test_prefill_and_decode_programs_are_the_reference_model():
    """The Gemma 3n prefill chunk and decode tokens before and after the sliding window fills (the span
    buckets change): the driver's schedules (compiled loop) are what the plain reference model
    (`npukit.sim.timing_ref`) returns for the same ops, every figure and trace event by repr."""
    from npukit.sim.timing_ref import simulate_reference
    from npukit.sim.trace import to_trace

    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("int8").start()
    m = machine(drv.hw)
    drv.prefill([2, 3, 5, 7])
    runs = [list(drv.last_works)]
    for tok in (11, 13, 17, 19, 23):
        drv.step(tok)
        runs.append(list(drv.last_works))
    for i in (0, 1, 4):
        ops = to_ops(drv.hw, runs[i], _OpRecord, renumber=True)
        want = simulate_reference(m, ops)
        got = drv.records[i].timing
        assert dump(got) == dump(want), f"run {i}"
        assert json.dumps(to_trace(got)) == json.dumps(to_trace(want)), f"run {i}"
        assert want.fetches and any(o.fifo_from is not None for o in ops)  # streams and FIFOs at work


def test_the_timing_thread_gives_the_in_line_schedules():
    """Schedules computed on the timing thread beside the next run (the default) are the in-line ones,
    and a record keeps its cycles once its schedule is dropped (the backend drops old schedules)."""
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    runs = {}
    for background in (True, False):
        drv = PccxDriver(executor="fast").open().load(store).kv_init("int8").start()
        drv.timer.background, drv.timer.lean = background, False  # (the schedules from the thread's run)
        drv.prefill([2, 3, 5])
        for tok in (4, 9, 4, 11, 13):
            drv.step(tok)
        assert (drv.timer._thread is not None) == background
        runs[background] = [(r.cycles, r.timed.background_s > 0) for r in drv.records[-2:]]
        runs[background].append(dump(drv.records[-1].timing))
        for r in drv.records[:-1]:
            r.timed = None
        assert all(r.cycles > 0 for r in drv.records)
        drv.close()
    assert [c for c, _ in runs[True][:2]] == [c for c, _ in runs[False][:2]]
    assert runs[True][2] == runs[False][2]
    assert all(b for _, b in runs[True][:2]) and not any(b for _, b in runs[False][:2])


def test_the_rows_are_patched_on_the_timing_thread_beside_remember(monkeypatch):
    """A run's rows are patched on the timing thread (`TokenTimer._timed`), not on the caller's, and a
    `remember` of other Works meanwhile (a program built ahead) shares the row caches under the timer's
    lock: every record's cycles are still the readable model's, the thread's seconds are counted."""
    import threading

    from npukit.targets.pccx import timing_token

    where, pauses = [], []
    real = timing_token.TokenTimer._patch

    def patch(self, prog, works, pause):
        where.append(threading.current_thread() is threading.main_thread())
        pauses.append(pause is timing_token._pause)  # (beside the executor's thread: it pauses for it)
        return real(self, prog, works, pause)

    monkeypatch.setattr(timing_token.TokenTimer, "_patch", patch)
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("int8").start()
    drv.timer.background = True
    m = machine(drv.hw)
    drv.prefill([2, 3, 5])
    runs = []
    for tok in (4, 9, 4, 11, 13, 6, 8):
        drv.step(tok)
        runs.append(list(drv.last_works))
        drv.timer.remember(runs[0])  # (Works seen before: their rows looked up while a run may be patched)
    drv.timer.settle()
    assert where and not any(where) and all(pauses)
    for rec, works in zip(drv.records[-len(runs):], runs, strict=True):
        assert rec.cycles == Sim(m, to_ops(drv.hw, works, _OpRecord, renumber=True)).run().cycles
        assert rec.timed.background_cpu_s > 0
    drv.close()


def test_decode_runs_resumed_from_a_kept_state_are_the_readable_model_across_a_bucket(monkeypatch):
    """Default timer (lean, in line): decode runs keep the loop's state at their first
    changed row and later runs of the same program resume from it (`timing_job.Job`). Over a window
    whose span buckets change, every record's cycles are `simulate_works`'s (the readable path), and
    some runs did resume."""
    from npukit.sim import timing_job, timing_nb
    from npukit.targets.pccx.timing import simulate_works

    resumed = []
    real = timing_job.Job.refresh

    def refresh(self, first=0):
        real(self, first)
        resumed.append(bool(self.args[9][timing_nb.IV_RESUME]))

    monkeypatch.setattr(timing_job.Job, "refresh", refresh)
    monkeypatch.setattr(timing_job, "MIN_PAUSE", 8)  # (the test model's decode program is short)
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("int8").start()
    drv.prefill([2, 3, 5, 7])
    runs, programs, tok = [], set(), 11
    for _ in range(14):  # spans grow past the sliding window; the full-attention bucket changes
        drv.step(tok)
        runs.append(list(drv.last_works))
        programs.add(drv._current.key)
        tok = (tok * 7 + 3) % 96
    drv.timer.settle()
    for i, (rec, works) in enumerate(zip(drv.records[-len(runs):], runs, strict=True)):
        assert rec.cycles == simulate_works(drv.hw, works, renumber=True).cycles, f"decode run {i}"
    assert len(programs) > 1 and any(resumed) and not all(resumed)  # a bucket changed; resumed runs
    drv.close()


def test_the_rows_patched_in_line_do_not_pause(monkeypatch):
    """In line (``background=False``) no thread of the timer's waits for the GIL: the patch never
    sleeps (`time.sleep(0)` costs a timer-slack wait), and the cycles are the readable model's."""
    from npukit.targets.pccx import timing_token

    sleeps = []
    monkeypatch.setattr(timing_token.time, "sleep", lambda s: sleeps.append(s))
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("int8").start()
    assert not drv.timer.background  # (the default)
    m = machine(drv.hw)
    drv.prefill([2, 3, 5])
    for tok in (4, 9, 4, 11):
        drv.step(tok)
        assert drv.records[-1].cycles == Sim(m, to_ops(drv.hw, drv.last_works, _OpRecord,
                                                         renumber=True)).run().cycles
    assert not sleeps and drv.timer._thread is None
    drv.timer.background = True  # (the same timer on its thread: it pauses)
    drv.step(5)
    drv.step(6)
    drv.timer.settle()
    assert sleeps
    drv.close()


class _Reads:
    """A Work seen through a recorder: every field `to_ops` reads lands in ``seen``."""

    def __init__(self, work, seen: set) -> None:
        self._work, self._seen = work, seen

    def __getattr__(self, name):
        self._seen.add(name)
        return getattr(self._work, name)


def test_to_ops_reads_only_the_fields_the_row_cache_keys_on():
    """`TokenTimer` caches a row by the values of `KEY_FIELDS` (`_content`): exact only while `to_ops`
    reads no other field but `UNKEYED` ones. Every engine's branch (a driver's token and a Work of each
    kind, an SFU op on the FIFO of an async GEMV among them) is read through a recorder."""
    from dataclasses import fields

    from npukit.sim.work import Work
    from npukit.targets.pccx.timing_token import KEY_FIELDS, UNKEYED

    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("int8").start()
    drv.prefill([2, 3])
    drv.step(4)
    kinds = [Work(0, "gemv", "g", macs=640, weight_bytes=320, ddr_read_bytes=8, lanes=2, is_async=True,
                  writes=((0, 64),), sfu_elems=32),
             Work(1, "sfu", "s", sfu_elems=64, onchip_read_bytes=128, reads=((0, 64),), writes=((64, 128),)),
             Work(2, "gemm", "m", macs=4096, weight_bytes=512, ddr_write_bytes=64, reads=((64, 128),)),
             Work(3, "dma", "d", ddr_read_bytes=256, writes=((200, 300),)),
             Work(4, "dma", "c", onchip_read_bytes=64, onchip_write_bytes=64, reads=((0, 8),)),
             Work(5, "ctrl", "z", is_async=True)]
    seen: set[str] = set()
    ops = to_ops(drv.hw, [_Reads(w, seen) for w in [*drv.last_works, *kinds]], _OpRecord)
    assert ops[-5].fifo_from is not None  # the FIFO branch ran
    assert {o.engine for o in ops} == {"gemv", "gemm", "sfu", "dma", "ctrl"}
    assert seen <= set(KEY_FIELDS) | set(UNKEYED), f"to_ops reads {seen - set(KEY_FIELDS) - set(UNKEYED)}"
    assert set(KEY_FIELDS) <= seen  # (and the key holds nothing to_ops ignores)
    assert set(KEY_FIELDS) | set(UNKEYED) <= {f.name for f in fields(Work)}


def test_span_grown_works_take_their_numbers_without_new_store_rows():
    """FP16 KV: the attention's products are new Work records each token (their spans grow) with the
    ranges of the record they replace; the timer writes only their numbers (no store rows: on the real
    model a hundred a token) and every run still times as the readable model."""
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=5))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("fp16").start()
    m = machine(drv.hw)
    drv.prefill([2, 3, 5])
    tok, sizes, new = 11, [], 0
    for i in range(8):
        before = list(drv._last_works)
        drv.step(tok)
        if i:  # (the first decode token runs another program than the prompt's)
            new += sum(a is not b for a, b in zip(drv._last_works, before, strict=True))
        sizes.append(drv.timer._store.n)
        want = Sim(m, to_ops(drv.hw, drv.last_works, _OpRecord, renumber=True)).run()
        assert drv.records[-1].cycles == want.cycles
        tok = (tok * 5 + 1) % 96
    assert new > 40 and sizes[-1] - sizes[0] < new // 4  # (ranges that moved still take store rows)


def test_a_full_content_table_starts_over_and_times_exactly(monkeypatch):
    """The rows kept by content (`TokenTimer._heads`) start over when their table is full, mid-run and
    with a batch larger than the table: every run still times as the readable model does."""
    from npukit.targets.pccx import timing_token

    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("int8").start()
    monkeypatch.setattr(timing_token, "_MAX_ROWS", 3)  # (the Work rows too: both caches start over)
    first_of, over = timing_token._first_of, []

    def counted(keys, works, known):  # a call with nothing known: the table started over
        over.append(len(known) > 0 and all(i is None for i in known) and len(set(keys)) > 3)
        return first_of(keys, works, known)

    monkeypatch.setattr(timing_token, "_first_of", counted)
    drv.prefill([2, 3])
    for tok in (4, 9, 4):
        drv.step(tok)
        want = Sim(machine(drv.hw), to_ops(drv.hw, drv.last_works, _OpRecord, renumber=True)).run()
        assert drv.records[-1].cycles == want.cycles
        assert len(drv.timer._by_content) == drv.timer._table_n
    assert sum(over) >= 3  # it started over, with batches of more contents than the table holds


def test_remembered_works_take_one_store_row_each_however_often_handed():
    """`remember` (a program built ahead hands a CVO's Work once as compiled and again in its fused
    table): one store row per distinct Work object, and a run holding them times as the readable model."""
    import dataclasses

    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("int8").start()
    drv.prefill([2, 3])
    fresh = [dataclasses.replace(w) for w in drv._last_works[:12]]  # new objects: no rows yet
    before = drv.timer._store.n
    drv.timer.remember(fresh + fresh[::-1] + fresh[:5])
    assert drv.timer._store.n - before == len(fresh)
    assert all(drv.timer._rows_by_id[id(w)][0] is w for w in fresh)
    drv.step(4)
    want = Sim(machine(drv.hw), to_ops(drv.hw, drv.last_works, _OpRecord, renumber=True)).run()
    assert drv.records[-1].cycles == want.cycles


def test_one_compiled_pass_links_and_derives_for_every_run_of_a_decode():
    """The FIFO links and the job's tables are one compiled function (`_link_derive`, `Job.derive_pass`):
    its tables' half over no op (`NO_DERIVE`) has the layouts of a job's own arrays and its link half's
    columns the layouts stated here, so the prompt's run and every decode run, patched or new, call one
    overload of it, and `Job.refresh` links the patched rows itself (no separate link call); each
    record's cycles are the readable model's."""
    from npukit.sim import timing_job
    from npukit.targets.pccx import timing_token as tt
    from npukit.targets.pccx.timing import simulate_works

    calls = {"link": 0}
    real_link = tt._link
    # kind, isasync, rd, nrd, wr, nwr, sfu_elems, fifo, fifo_elems
    no_link = tt._empty(tt._I1, tt._B1, tt._I3, tt._I1, tt._I3, tt._I1, tt._I1, tt._I1, tt._F1)
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("int8").start()
    drv.prefill([2, 3, 5, 7])
    tt._link = lambda prog: calls.__setitem__("link", calls["link"] + 1) or real_link(prog)
    try:
        runs, tok = [], 11
        for _ in range(10):  # spans grow past the sliding window; the full-attention bucket changes
            drv.step(tok)
            runs.append(list(drv.last_works))
            tok = (tok * 7 + 3) % 96
    finally:
        tt._link = real_link
    drv.timer.settle()
    progs = [p for p in drv.timer._programs.values() if p.job is not None and p.job._paths >= 0]
    assert progs and calls["link"] == len({len(w) for w in runs})  # (refreshed; a new program's first run)
    for prog in progs:
        job = prog.job
        fn, prefix = job.derive_pass
        assert fn is tt._link_derive and all(map(operator.is_, prefix, tt._link_args(prog)))
        args = job._derive_args(job._narrow, job._rows, job._lens)
        assert timing_job._layout(args) == timing_job._layout(tt.NO_DERIVE)
        assert timing_job._layout(tt._link_args(prog)) == timing_job._layout(no_link)
    assert len(tt._link_derive.overloads) == 1
    for i, (rec, works) in enumerate(zip(drv.records[-len(runs):], runs, strict=True)):
        assert rec.cycles == simulate_works(drv.hw, works, renumber=True).cycles, f"decode run {i}"
    drv.close()


@pytest.mark.parametrize("lean", [True, False])
def test_runs_of_mostly_new_works_take_their_rows_from_the_works(monkeypatch, lean):
    """`BULK_ROWS` lowered so that the small model's programs take the bulk paths (a 512-token prompt's
    chunks do at the default): a new program whose Works are mostly unseen is built from them
    (`_direct`), a run whose Works are mostly new is patched from them (`_patch_bulk`), once with the
    store's ranges wider than the columns (the columns made again), and every run times as the readable
    model does, its full schedule too."""
    from npukit.targets.pccx import timing_token as tt

    monkeypatch.setattr(tt, "BULK_ROWS", 8)
    calls = {"_direct": 0, "_patch_bulk": 0}
    for name in calls:
        real = getattr(tt.TokenTimer, name)

        def counted(self, *args, _real=real, _name=name):
            calls[_name] += 1
            return _real(self, *args)

        monkeypatch.setattr(tt.TokenTimer, name, counted)
    store = Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=7))
    drv = PccxDriver(executor="fast").open().load(store).kv_init("fp16").start()
    drv.timer.lean = lean
    m = machine(drv.hw)
    drv.prefill([2, 3, 5, 7])
    chunk = list(drv.last_works)  # the prompt program's Works: new copies make its next run mostly new
    widest = max(max(len(w.reads) for w in chunk), max(len(w.writes) for w in chunk))
    drv.timer._store.widen(widest + 1, widest + 1)  # (the columns' widths are behind the store's now)
    import dataclasses

    moved = chunk[1:] + chunk[:1]  # (the third run: each op takes the next one's ranges, new hazards)
    for again in (1, 2, 3):
        copies = [dataclasses.replace(w, **({} if again < 3 else {"reads": v.reads, "writes": v.writes}))
                  for w, v in zip(chunk, moved, strict=True)]
        run = drv.timer.time(copies)
        want = Sim(m, to_ops(drv.hw, copies, _OpRecord, renumber=True)).run()
        assert run.cycles == want.cycles, f"prompt program again, {again}"
        if not lean:
            assert dump(run.result()) == dump(want)
    tok = 11
    for i in range(10):  # spans grow past the sliding window; the full-attention bucket changes
        drv.step(tok)
        want = Sim(m, to_ops(drv.hw, drv.last_works, _OpRecord, renumber=True)).run()
        assert drv.records[-1].cycles == want.cycles, f"decode run {i}"
        if not lean and i in (0, 5, 9):
            assert dump(drv.records[-1].timing) == dump(want), f"decode run {i}"
        tok = (tok * 7 + 3) % 96
    assert calls["_direct"] >= 3 and calls["_patch_bulk"] >= 2
