"""The pccx target end to end: KV ring eviction against the reference, and `npukit generate --target pccx`.

Oracles: the W4A8 reference (`--target quant`, `QuantKVCache.set_ring` for the same sink + window
policy) and, for the ring geometry, a plain Python list of the positions a capped ring keeps.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from npukit.cli.main import main
from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.gemma3n_quant import Gemma3nW4A8, Int4Store
from npukit.targets.pccx.kv_ring import KVRing, ring_size
from npukit.targets.pccx.memory import HostDDR

sys.path.insert(0, str(Path(__file__).parents[2] / "models"))

SL, FU = "sliding_attention", "full_attention"
RING_CFG = dict(
    model_type="gemma3n_text", vocab_size=64, vocab_size_per_layer_input=64, hidden_size=16,
    hidden_size_per_layer_input=8, intermediate_size=[32, 32], num_hidden_layers=2, num_attention_heads=1,
    num_key_value_heads=1, head_dim=16, laurel_rank=8, num_kv_shared_layers=0, sliding_window=4,
    layer_types=[SL, FU], activation_sparsity_pattern=[0.95, 0], max_position_embeddings=512,
    altup_num_inputs=2, final_logit_softcapping=30.0,
)


def test_ring_rows_follow_sink_and_window_policy():
    cfg = Gemma3nConfig.from_hf(RING_CFG)
    ring = KVRing(cfg, "int8", HostDDR(), 0x1000_0000, max_tokens=10, sink=3)
    kept: list[int | None] = [None] * 10  # position held by each row
    for pos in range(40):
        (row,) = ring.rows_of(1, pos)
        kept[row] = pos
        want = list(range(min(pos + 1, 3))) + list(range(max(3, pos + 1 - 7), pos + 1))
        assert sorted(p for p in kept if p is not None) == want
        assert ring.span(1, pos + 1) == (0, min(pos + 1, 10))
        lo, n = ring.span(0, pos + 1)  # sliding layer: mirrored rows, window in position order
        assert n == min(pos + 1, 4)
        assert [(lo + j) % 4 for j in range(n)] == [p % 4 for p in range(pos + 1 - n, pos + 1)]
    assert ring_size(None, 4, 60) == (64, 4)


@pytest.mark.slow
@pytest.mark.parametrize("kv", ["int4"])
def test_300_tokens_wrap_the_ring_and_match_the_reference(kv):
    cfg = Gemma3nConfig.from_hf(RING_CFG)
    store = Int4Store(synthetic_weights(cfg, seed=5))
    ref = Gemma3nW4A8(store, kv=kv)
    ref.cache.set_ring(64, 4, (1,))
    drv = PccxDriver(timing=False).open().load(store).kv_init(kv, 64, 4).start()
    rng = np.random.default_rng(1)
    tok = 2
    for pos in range(300):
        want, got = ref.step(tok), drv.step(tok)
        assert np.array_equal(want.view(np.uint32), got.view(np.uint32)), f"position {pos}"
        tok = int(np.argmax(want)) if rng.random() < 0.5 else int(rng.integers(0, cfg.vocab_size))
    assert ref.cache.length[1] == 300 and ref.cache.layers[1]["k"].shape[1] == 64


def _gen(capsys, *argv):
    rc = main(["generate", *map(str, argv)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.hf
@pytest.mark.slow
def test_generate_pccx_equals_quant_with_trace_and_tiered_stats(capsys, tmp_path):
    from gemma3n_tiny import cached_dir

    d = cached_dir(0)
    common = ["--prompt-ids", "5,7,9", "--max-new-tokens", 4, "--ignore-eos", "--json", "--logits",
              "--kv", "int8", "--kv-max-tokens", 5, "--kv-sink", 1]
    rc, out_q, err = _gen(capsys, d, "--target", "quant", *common)
    assert rc == 0, err
    trace = tmp_path / "t.json"
    rc, out_p, err = _gen(capsys, d, "--target", "pccx", "--trace", trace, "--set", "ddr.bandwidth_gbps=15",
                          *common)
    assert rc == 0, err
    q, p = json.loads(out_q), json.loads(out_p)
    assert p["tokens"] == q["tokens"]
    assert np.array_equal(np.array(p["logits"], np.float32), np.array(q["logits"], np.float32))
    b = p["stats"]["backend"]
    figs = b["figures"]
    assert figs["projected_tok_per_s"]["tier"] == "derived"
    assert "pccx-v002-kv260" in figs["cycles_per_token"]["source"]
    assert "ddr.bandwidth_gbps=15" in figs["cycles_per_token"]["source"]
    assert b["kv_ring"] == {"max_tokens": 5, "sink": 1} and b["bottleneck"]
    assert b["compile"]["per_token"]["instructions"]["gemv"] > 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)


def test_ring_options_on_a_target_without_them_are_one_line_errors(capsys):
    rc = main(["generate", "gemma3n-e2b", "--target", "golden", "--kv-max-tokens", "8",
               "--max-new-tokens", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "kv-max-tokens" in err and err.count("\n") == 1


def test_trace_is_written_once_and_covers_the_last_8_runs(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from npukit.runtime.generate import generate
    from npukit.targets.pccx.backend import Gemma3nPccx

    cfg = Gemma3nConfig.from_hf(RING_CFG)
    trace = tmp_path / "t.json"
    be = Gemma3nPccx(SimpleNamespace(weights=synthetic_weights(cfg, seed=3)), trace=str(trace))
    writes = []
    real_write, real_open = Path.write_text, Path.open

    def counted(self, *a, **k):
        writes.append(self)
        return real_write(self, *a, **k)

    def opened(self, mode="r", *a, **k):
        if "w" in mode or "a" in mode:
            writes.append(self)
        return real_open(self, mode, *a, **k)

    monkeypatch.setattr(Path, "write_text", counted)
    monkeypatch.setattr(Path, "open", opened)
    res = generate(be, [2, 3], 19)  # 1 prompt chunk + 18 decode tokens = 19 program runs
    assert writes == [trace]  # once, at the end; never rewritten per token
    pids = {e["pid"] for e in json.loads(trace.read_text())["traceEvents"]}
    # each run is one process, numbered by its first position + 1: the last 8 runs are positions 12..19
    assert pids == set(range(13, 21)) and len(res.tokens) == 19
    assert sum(r.timed is not None for r in be.drv.records) <= 9  # older schedules are dropped
    assert len(be.stats()["simulated_cycles_per_token"]) == 18  # every token's cycles stay reported


def test_timing_in_worker_processes_equals_timing_in_line():
    """The pool's schedules are the in-line timing model's, bit for bit (cycles of every run, ends of
    every op of the last run): the oracle is `simulate_works` run in this process."""
    from npukit.targets.pccx.timing import simulate_works

    cfg = Gemma3nConfig.from_hf(RING_CFG)
    store = Int4Store(synthetic_weights(cfg, seed=4))
    drv = PccxDriver(timing="pool", executor="fast").open().load(store).kv_init("int8").start()
    inline = []
    try:
        drv.prefill([2, 3])
        inline.append(simulate_works(drv.hw, drv.last_works))
        for t in range(4):
            drv.step(t + 5)
            inline.append(simulate_works(drv.hw, drv.last_works))
        drv.sync()
    finally:
        drv.close()
    assert [r.cycles for r in drv.records] == [t.cycles for t in inline]
    assert [o.end for o in drv.records[-1].timing.ops] == [o.end for o in inline[-1].ops]


_CYCLES_CHILD = """
import gc, json
from collections import Counter
import numpy as np
from npukit.models import embedded
from npukit.models.loading import load_model
from npukit.targets.pccx.backend import Gemma3nPccx

model = load_model(embedded.default_model_dir())
for last in (False, False, True):
    b = Gemma3nPccx(model)
    assert b.acyclic_steps
    b.reset()
    tok = int(np.argmax(b.prefill([2, 651, 7, 9])))
    tok = int(np.argmax(b.step(tok)))  # the decode program's first token
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL if last else 0)
    for _ in range(6):  # positions 5..10, the switch to span bucket 16 at 8
        tok = int(np.argmax(b.step(tok)))
    found = gc.collect()
    kinds = Counter(type(o).__name__ for o in gc.garbage).most_common(8)
    gc.set_debug(0)
    gc.garbage.clear()
    gc.enable()
    b.close()
print(json.dumps([found, kinds]))
"""


@pytest.mark.slow
def test_decode_steps_leave_no_reference_cycles():
    """The backend says its steps leave no reference cycles (`acyclic_steps`: the generation loop then
    freezes what each step keeps instead of rescanning it); with the collector off, a collection after
    decode steps, a span-bucket switch among them, finds nothing unreachable. In a fresh process (a
    test worker's other tests leave threads and finalizers that make garbage of their own), after two
    backends ran the same steps, as a process's first run does: what a process makes once (numba
    compiling or loading a kernel on its first use leaves cyclic objects) is not a step's."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _CYCLES_CHILD], capture_output=True, text=True, timeout=500)
    assert out.returncode == 0, out.stderr[-2000:]
    found, kinds = json.loads(out.stdout.strip().splitlines()[-1])
    assert found == 0, kinds


def test_executor_trace_keeps_the_last_run_only():
    """A generation's instruction trace is bounded: after each backend call it holds that call's
    program run, the same (instruction, Work) entries as the tail of an unbounded trace (a bare driver
    running the same tokens), so memory does not grow by ~2 600 entries a token."""
    from types import SimpleNamespace

    from npukit.targets.pccx.backend import Gemma3nPccx

    cfg = Gemma3nConfig.from_hf(RING_CFG)
    weights = synthetic_weights(cfg, seed=3)
    be = Gemma3nPccx(SimpleNamespace(weights=weights))
    bare = PccxDriver(executor="fast", timing=False).open().load(Int4Store(weights)).kv_init("fp16").start()
    be.reset()
    tok = int(np.argmax(be.prefill([2, 3])))
    bare.prefill([2, 3])
    for _ in range(6):
        be.step(tok)
        bare.step(tok)
        trace = be.drv.dev.trace
        assert len(trace) == be.drv.records[-1].instructions > 0
        assert trace == bare.dev.trace[-len(trace):]
    assert len(bare.dev.trace) > 6 * len(trace)  # (the unbounded one kept every run)
    be.close()


@pytest.mark.parametrize("new_tokens", [1, 4])
def test_stats_figures_equal_the_full_schedules(new_tokens, monkeypatch):
    """The end-of-run figures (utilisation, weight stall, bottleneck) read the last run's engines
    alone (`TimedRun.engines`: the compiled loop again, in full, on the timer's columns) instead of its
    whole schedule; for a 1-token run that run is the prompt's chunk. They equal the figures made the
    old way, from the full `TimingResult` (`simulate_works` on the run's Work records), and a run
    whose columns a later run of its length has since rewritten falls back to that full schedule."""
    from types import SimpleNamespace

    from npukit.runtime.generate import generate
    from npukit.targets.pccx.backend import Gemma3nPccx
    from npukit.targets.pccx.timing import simulate_works
    from npukit.targets.pccx.timing_token import TimedRun

    weights = synthetic_weights(Gemma3nConfig.from_hf(RING_CFG), seed=6)

    def run() -> tuple[Gemma3nPccx, dict, list]:
        be = Gemma3nPccx(SimpleNamespace(weights=weights))
        works, real_step = [], be.step

        def step(tok):
            out = real_step(tok)
            works.append(list(be.drv.last_works))
            return out

        be.step = step
        generate(be, [2, 3, 4], new_tokens)
        return be, be.stats(), works

    be, stats, works = run()
    assert be.drv.records[-1].timed._result is None  # (the figures did not need the full schedule)
    with monkeypatch.context() as m:  # the old way: every figure from the full schedule
        m.setattr(TimedRun, "engines", lambda self: self.result().engines)
        old_be, old, _ = run()
    drop = ("setup_seconds", "compile")  # (wall-clock seconds)
    assert {k: v for k, v in stats.items() if k not in drop} == \
        {k: v for k, v in old.items() if k not in drop}
    last = simulate_works(be.drv.hw, be.drv.last_works, renumber=True)
    util = {k: v["value"] for k, v in stats["figures"].items() if k.startswith("util_")}
    assert util == {f"util_{n}": e.busy / last.cycles for n, e in last.engines.items()} and len(util) > 1
    assert be.drv.records[-1].phase == ("prefill" if new_tokens == 1 else "decode")
    for r, w in zip(be.drv.records[1:-1], works[:-1], strict=True):  # columns since rewritten: fallback
        assert r.timed.engines() == simulate_works(be.drv.hw, w, renumber=True).engines
    be.close()
    old_be.close()
