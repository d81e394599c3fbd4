"""Gemma 3n compiled onto pccx: bit-exact against the W4A8 reference, program structure, allocator.

The independent reference is `Gemma3nW4A8` run with `PccxOps` (numerics in Python, no program):
the compiled program runs on the simulator from a host DDR image and must give the same logits,
bit for bit, token after token (sliding windows wrapping, KV sharing, sparse layers, both RoPE
thetas). Structure checks compare against the reference's own `RecordingOps` op trace.
"""

from __future__ import annotations

import numpy as np
import pytest

from npukit.hw import load_hw
from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx import isa
from npukit.targets.pccx.compile.codegen import CodeGen
from npukit.targets.pccx.compile.ir import Buf, Node, Ref
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.gemma3n_quant import Gemma3nW4A8, Int4Store, RecordingOps

SL, FU = "sliding_attention", "full_attention"
CFG = dict(
    model_type="gemma3n_text", vocab_size=96, vocab_size_per_layer_input=80, hidden_size=32,
    hidden_size_per_layer_input=8, intermediate_size=[64, 48, 64, 48], num_hidden_layers=4,
    num_attention_heads=2, num_key_value_heads=1, head_dim=16, laurel_rank=8, num_kv_shared_layers=1,
    sliding_window=3, layer_types=[SL, FU, SL, SL], activation_sparsity_pattern=[0.95, 0.9, 0, 0],
    max_position_embeddings=64, final_logit_softcapping=30.0,
)
TOKENS = [5, 17, 2, 90, 33, 7]  # > sliding window: the mirrored ring wraps


@pytest.fixture(scope="module")
def store():
    return Int4Store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=3))


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


@pytest.mark.parametrize("kv", ["fp16", "int8", "int4"])
def test_decode_is_bit_identical_to_the_quant_reference(store, kv):
    ref = Gemma3nW4A8(store, kv=kv)
    drv = PccxDriver(timing=False).open().load(store).kv_init(kv).start()
    for t in TOKENS:
        want, got = ref.step(t), drv.step(t)
        assert np.array_equal(_bits(want), _bits(got)), f"position {ref.pos - 1}"
    assert len(drv.variants) == 1  # lowered and compiled once; spans patched per token
    assert drv.variants[next(iter(drv.variants))].program.patches


def test_program_structure_follows_the_reference_op_trace(store):
    rec = RecordingOps()
    ref = Gemma3nW4A8(store, kv="int8", ops=rec)
    drv = PccxDriver().open().load(store).kv_init("int8").start()
    for t in TOKENS[:4]:
        ref.step(t)
        drv.step(t)
    last = rec.trace[-len(rec.trace) // 4:]  # one token's ops (every token has the same count)
    names = [n for n, _, _ in last]
    st = drv.last_stats
    assert st.counts["gemv"] == names.count("gemv")  # no matrix here needs tiling
    assert st.counts["cvo.exp"] == names.count("cvo_exp")
    assert st.counts["cvo.gelu"] == names.count("cvo_gelu")
    assert st.counts["cvo.tanh"] == names.count("cvo_tanh")
    # every EXP is a softmax after a findemax GEMV: one e_max reset each
    assert st.extensions["memset.sreg_emax"] == names.count("findemax")
    cfg = store.config
    sparse = sum(cfg.sparsity_multiplier(i) is not None for i in range(cfg.num_hidden_layers))
    assert st.extensions["weight.kmajor"] == names.count("findemax") + sparse  # V per head + sparse W_down
    assert st.extensions["weight.act_scale"] == names.count("findemax")  # int8 V scales, one per head
    assert 0 < st.l2_peak_words < load_hw("pccx-v002-kv260").l2.words
    r = drv.records[-1]
    assert r.cycles and r.cycles > 0 and r.instructions == sum(st.counts.values())
    rep = drv.compile_report()
    assert rep["extensions"]["cvo.tanh"]["why"] and rep["host_ddr"]["weights_bytes"] > 0


def test_small_constant_cache_is_replanned_and_stays_exact(store):
    hw = load_hw("pccx-v002-kv260", ["constant_cache.entries_log2=4"])
    ref = Gemma3nW4A8(store, kv="fp16")
    drv = PccxDriver(hw, timing=False).open().load(store).kv_init("fp16").start()
    for t in TOKENS[:3]:
        assert np.array_equal(_bits(ref.step(t)), _bits(drv.step(t)))
    big = PccxDriver(timing=False).open().load(store).kv_init("fp16").start()
    for t in TOKENS[:3]:
        big.step(t)
    assert sum(drv.last_stats.memsets.values()) > sum(big.last_stats.memsets.values())


def test_every_word_decodes_within_the_isa_limits(store):
    drv = PccxDriver(timing=False).open().load(store).kv_init("int4").start()
    from npukit.targets.pccx.compile.lower import lower_step

    drv.step(3)
    ops = lower_step(drv.model, 4)
    segs, _ = CodeGen(drv.hw).compile(ops.nodes)
    assert len(segs) == 1 + len(drv.store.config.kv_producers)  # one host KV write per producer layer
    for seg in segs:
        for w in seg.words:
            ins = isa.decode(w, "extended", drv.hw)
            if ins.op == isa.Op.CVO:
                assert 1 <= ins.length <= 65535


def test_allocator_never_overlaps_live_buffers():
    rng = np.random.default_rng(0)
    nodes, bufs = [], []
    for i in range(200):
        b = Buf(int(rng.integers(1, 300)), f"b{i}")
        srcs = tuple(Ref(x, 0, x.n) for x in rng.choice(bufs[-20:], size=min(2, len(bufs)), replace=False)) \
            if bufs else ()
        nodes.append(Node("copy", out=Ref(b, 0, b.n), srcs=srcs))
        bufs.append(b)
    gen = CodeGen(load_hw("pccx-v002-kv260"))
    peak = gen._allocate(nodes)
    live: dict[int, tuple[int, int]] = {}
    last = {}
    for i, nd in enumerate(nodes):
        for r in (nd.out, *nd.srcs):
            last[id(r.buf)] = i
    for i, nd in enumerate(nodes):
        b = nd.out.buf
        span = (b.addr, b.addr + -(-b.n // 8))
        for k, (a, e) in live.items():
            if last[k] >= i:
                assert span[1] <= a or e <= span[0]
        live[id(b)] = span
    assert peak <= max(e for _, e in live.values())


def _compiled_at(drv: PccxDriver, n: int):
    """The decode program for a query at length ``n`` (its span buckets), with its traced buffers."""
    from npukit.targets.pccx.compile.steps import compile_model

    spans = drv.spans(n)
    drv.model.reset()
    drv.model.cache.bucket = dict(drv._bucket_key(spans))
    run = compile_model(drv.model, drv.hw, drv.profile, spans=spans)
    roots = {}
    for nd in run["lower"].nodes:
        for r in ([nd.out] if nd.out is not None else []) + list(nd.srcs):
            b = r.root()[0]
            roots[b.name] = b
    return run.value, roots, run["lower"].host_inputs


def test_span_buckets_change_only_the_words_that_name_a_span_buffer(store):
    """Two span buckets' decode programs: every buffer whose size is not the bucket's keeps its L2
    address, every host input but the bucket-sized one its staging address, every segment its length,
    so a bucket switch recompiles only the attention words (the executor's cost at a switch)."""
    drv = PccxDriver(timing=False).open().load(store).kv_init("fp16").start()
    (p16, b16, h16), (p32, b32, h32) = _compiled_at(drv, 9), _compiled_at(drv, 17)
    assert drv._bucket_key(drv.spans(9)) != drv._bucket_key(drv.spans(17))
    assert b16.keys() == b32.keys()
    moved = [name for name, b in b16.items() if b.span_class is None and b.addr != b32[name].addr]
    assert not moved
    sized = [name for name, b in b16.items() if b.span_class is not None and b.n != b32[name].n]
    assert sized  # (the scores, their softmax, the -inf tail: the bucket's length)
    assert [len(s.words) for s in p16.segments] == [len(s.words) for s in p32.segments]
    staged = [(a == b, x.size == y.size) for (a, x), (b, y) in zip(h16, h32, strict=True)]
    assert (False, False) in staged and all(same or not size for same, size in staged)  # (the -inf tails)
    differ = [(j, i) for j, (s, t) in enumerate(zip(p16.segments, p32.segments, strict=True))
              for i, (a, b) in enumerate(zip(s.words, t.words, strict=True)) if a != b]
    words = sum(len(s.words) for s in p16.segments)
    assert 0 < len(differ) < words // 4
    ops = {isa.decode(p32.segments[j].words[i], "extended", drv.hw).op for j, i in differ}
    assert ops <= {isa.Op.MEMSET, isa.Op.MEMCPY, isa.Op.CVO, isa.Op.GEMV}


def test_bucket_sized_constants_are_staged_from_the_top_down(store):
    from npukit.targets.pccx.compile.image import STAGING_BASE, STAGING_BYTES
    from npukit.targets.pccx.compile.ir import CapacityError
    from npukit.targets.pccx.compile.lower import LoweringOps

    drv = PccxDriver(timing=False).open().load(store).kv_init("fp16").start()
    ops = LoweringOps(drv.model.ops.image, drv.model.ops.ring)
    end = STAGING_BASE + STAGING_BYTES
    assert ops.stage(100) == STAGING_BASE and ops.stage(60, top=True) == end - 64  # (whole words)
    assert ops.stage(8) == STAGING_BASE + 112 and ops.stage(16, top=True) == end - 80
    assert ops.staged_bytes(end - 64) == 60
    with pytest.raises(CapacityError, match="staging area"):  # the two ends may not cross
        ops.stage(STAGING_BYTES - 200, top=True)


def test_a_span_class_names_one_copy_shape_and_a_second_is_looked_up_by_value():
    """Copies sized by a window class's bucket share one constant-cache name; a copy of that class with
    another length (none in Gemma 3n today) must not reuse that entry: each MEMCPY's shape entry, as the
    program's MEMSETs leave it, holds its own word count."""
    tail8 = Buf(64, "tail8", bucket_class=0)
    tail16 = Buf(128, "tail16", bucket_class=0)
    a, b, c = Buf(64, "scores a", dyn=0), Buf(128, "scores b", dyn=0), Buf(64, "scores c", dyn=0)
    nodes = [Node("load", out=Ref(tail8, 0, 64), host_addr=0x100000),
             Node("load", out=Ref(tail16, 0, 128), host_addr=0x100400),
             Node("copy", out=Ref(a, 0, 64), srcs=(Ref(tail8, 0, 64),)),
             Node("copy", out=Ref(b, 0, 128), srcs=(Ref(tail16, 0, 128),)),
             Node("copy", out=Ref(c, 0, 64), srcs=(Ref(tail8, 0, 64),)),
             Node("copy", out=Ref(Buf(64, "out"), 0, 64), srcs=(Ref(a, 0, 64),)),
             Node("copy", out=Ref(Buf(128, "out2"), 0, 128), srcs=(Ref(b, 0, 128),)),
             Node("copy", out=Ref(Buf(64, "out3"), 0, 64), srcs=(Ref(c, 0, 64),))]
    hw = load_hw("pccx-v002-kv260")
    segs, _ = CodeGen(hw).compile(nodes)
    fmap: dict[int, tuple] = {}
    copied = []
    for w in segs[0].words:
        ins = isa.decode(w, "extended", hw)
        if ins.op == isa.Op.MEMSET and ins.dest_cache == isa.DestCache.FMAP:
            fmap[ins.dest_addr] = (ins.a_value, ins.b_value, ins.c_value)
        elif ins.op == isa.Op.MEMCPY and ins.from_device == ins.to_device:
            copied.append(fmap[ins.shape_ptr_addr][0])
    assert copied == [8, 16, 8, 8, 16, 8]


class _NaiveCache:
    """The constant cache's plan, stated plainly: a hit is the single slot holding the value; a miss takes
    the least recently touched single slot (never touched first, in slot order)."""

    def __init__(self, entries: int) -> None:
        self.single, self.held, self.used, self.t = list(range(entries)), {}, {}, 0

    def get(self, val):
        for s in self.single:
            if self.held.get(s) == val:
                self.t += 1
                self.used[s] = self.t
                return s, False
        s = min(self.single, key=lambda x: self.used.get(x, -1))
        self.held[s] = val
        self.t += 1
        self.used[s] = self.t
        return s, True


def test_constant_cache_plan_is_the_plain_lru():
    from npukit.targets.pccx.compile.codegen import _CCache

    rng = np.random.default_rng(9)
    for entries in (1, 2, 5, 16):
        fast, naive = _CCache(entries), _NaiveCache(entries)
        for v in rng.integers(0, 3 * entries, 4000).tolist():
            val = (v, 1, 0) if v % 3 else ("bucket", v, 0)  # (symbolic names as values too)
            assert fast.get(val) == naive.get(val)
