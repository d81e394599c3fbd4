"""FastSimulator against the reference Simulator (the definition): random programs over every
instruction type, both backends, replayed with changed constant-cache values and host writes; the whole
observable state must agree bit for bit (L2, host DDR, constant caches, S, e_max, STATUS, error
interrupt, log, Work records, trace)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npukit.errors import NpukitError
from npukit.targets.pccx import asm
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.fast import kernels
from npukit.targets.pccx.fast.fastsim import FastSimulator
from npukit.targets.pccx.isa import CvoFunc
from npukit.targets.pccx.memory import weight_entry, weight_image
from npukit.targets.pccx.sim import STATUS_DONE, STATUS_ERROR, Simulator

W_BASE = 0x1000_0000
OUT_BASE = 0x3000_0000
L2_SPAN = 0x180  # words the random programs touch
MODES = [("numpy", "int8"), *([("numba", "int8"), ("numba", "packed")] if kernels.HAVE_NUMBA else [])]
CVO_FUNCS = [f.name.lower() for f in CvoFunc]


def _bf16_bits(rng, n, special=0.03):
    v = rng.choice([-1.0, 1.0], n) * (1 + rng.integers(0, 128, n) / 128.0) * np.exp2(rng.integers(-12, 8, n))
    bits = nx.to_bits(v)
    pick = rng.random(n) < special
    bits[pick] = rng.choice([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x8005, 0x7F7F], pick.sum())
    return bits.astype(np.uint16)


def _images(rng):
    """Weight images in host DDR: (fmt, addr, m, k, w_scale)."""
    out = []
    addr = W_BASE
    for fmt in ["int4", "int4", "int4", "int8", "fp16"]:
        m, k = int(rng.integers(1, 40)), int(rng.integers(1, 70))
        if fmt == "int4":
            w = rng.integers(-8, 8, (m, k))
        elif fmt == "int8":
            w = rng.integers(-128, 128, (m, k))
        else:
            w = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-12, 4, (m, k)))).astype(np.float16)
            if rng.random() < 0.2:
                w[0, 0] = np.inf
        s = (rng.standard_normal(m) * np.exp2(rng.integers(-4, 4, m))).astype(np.float32)
        if rng.random() < 0.1:
            s[0] = np.nan
        out.append((fmt, addr, m, k, w, s))
        addr += 0x10_0000
    return out


def _line(rng, images):
    """One random instruction (assembly text) drawing on the prepared images."""
    kind = rng.choice(["gemv", "cvo", "cvo", "cvo", "memset", "memcpy", "sreg", "bad"], p=[
        0.25, 0.2, 0.15, 0.1, 0.1, 0.1, 0.05, 0.05])
    a = lambda: int(rng.integers(0, L2_SPAN))  # noqa: E731
    if kind == "gemv":
        i = int(rng.integers(0, len(images)))
        fmt, addr, m, k, _, _ = images[i]
        slot = int(rng.integers(0, 4))
        f, hi, lo = weight_entry(fmt, addr)
        if rng.random() < 0.1:
            hi += 1  # unmapped weights -> error interrupt
        mm = m if rng.random() > 0.05 else 0
        n = int(rng.choice([0, 1, 1, 2, 3]))
        flags = "|".join(x for x in ("w_scale", "accm", "findemax") if rng.random() < 0.5) or "0"
        op = "gemm" if rng.random() < 0.3 else "gemv"
        return [f"memset cache=fmap slot={slot} a={mm} b={n} c={k}",
                f"memset cache=weight slot={slot + 8} a={f} b={hi} c={lo}",
                f"{op} dest=0x{a():X} src=0x{a():X} flags={flags} size={slot + 8} shape={slot} "
                f"lanes={int(rng.integers(0, 5))}{' async' if rng.random() < 0.3 else ''}"]
    if kind == "cvo":
        fn = CVO_FUNCS[int(rng.integers(0, len(CVO_FUNCS)))]
        n = int(rng.integers(1, 90))
        flags = []
        if fn == "exp" and rng.random() < 0.5:
            flags.append("sub_emax")
        if fn == "scale" and rng.random() < 0.5:
            flags.append("recip_scale")
        if fn not in ("mul", "add", "reduce_max", "load_scalar") and rng.random() < 0.3:
            flags.append("accm")
        dst = a() if rng.random() < 0.8 else None
        return [f"cvo.{fn} src=0x{(s := a()):X} dst=0x{(s if dst is None else dst):X} len={n} "
                f"flags={'|'.join(flags) or '0'}"]
    if kind == "memset":
        return [f"memset cache=fmap slot={int(rng.integers(0, 12))} a={int(rng.integers(0, 60))} "
                f"b={int(rng.integers(0, 3))} c={int(rng.integers(0, 70))}"]
    if kind == "sreg":
        return [f"memset cache=sreg slot={int(rng.integers(0, 2))} a=0x{int(_bf16_bits(rng, 1)[0]):X}"]
    if kind == "memcpy":
        words = int(rng.integers(0, 12))
        route = rng.choice(["h2n", "n2h", "n2n"])
        base = (W_BASE if route == "h2n" and rng.random() < 0.7 else OUT_BASE) // 16
        lines = [f"memset cache=fmap slot=12 a={words} b={base >> 16} c={base & 0xFFFF}"]
        aux = int(rng.integers(0, 64))
        if route == "h2n":
            lines.append(f"memcpy from=host to=npu dest=0x{a():X} aux=0x{aux:X} shape=12")
        elif route == "n2h":
            # sometimes into a weight image (cached codes must be invalidated)
            tgt = (images[0][1] // 16) if rng.random() < 0.5 else base
            lines[0] = f"memset cache=fmap slot=12 a={words} b={tgt >> 16} c={tgt & 0xFFFF}"
            lines.append(f"memcpy from=npu to=host src=0x{a():X} aux=0x{aux % 4:X} shape=12")
        else:
            lines.append(f"memcpy from=npu to=npu dest=0x{a():X} src=0x{a():X} shape=12 async")
        return lines
    return [f".word 0x{int(rng.integers(5, 16)) << 60 | int(rng.integers(0, 1 << 40)):016X}"]


def _setup(sim, rng_seed, images):
    rng = np.random.default_rng(rng_seed)
    sim.write_l2_bits(0, _bf16_bits(rng, (L2_SPAN + 16) * 8))
    for fmt, addr, _m, _k, w, s in images:
        sim.host.write(addr, np.frombuffer(weight_image(w, fmt, s), np.uint8))
    sim.host.map(OUT_BASE, 4096)


def _canon(raw):
    """Bytes as BF16 patterns with every NaN made 0x7FC0: IEEE 754 leaves the sign and payload of a
    NaN produced from two NaN operands to the implementation, and NumPy's own SIMD body and tail loops
    choose differently, so only that bit is not compared (docs/targets/pccx.md, "Performance")."""
    raw = np.asarray(raw).reshape(-1).view(np.uint8)
    u = raw[: raw.size // 2 * 2].view(np.uint16).copy()
    u[((u & 0x7F80) == 0x7F80) & ((u & 0x7F) != 0)] = 0x7FC0
    return np.concatenate([u.view(np.uint8), raw[raw.size // 2 * 2:]])


def _state(sim):
    regions = [(b, _canon(buf)) for b, buf in zip(sim.host._bases, sim.host._bufs, strict=True)]
    return (_canon(sim.l2), sim.cc.copy(), _canon(np.uint16(sim.s_reg)), _canon(np.uint16(sim.e_max)),
            sim.status, sim.pc,
            None if sim.error is None else (sim.error.index, sim.error.word, sim.error.reason),
            list(sim.log), list(sim.trace), regions)


def _assert_same(a, b):
    assert np.array_equal(a[0], b[0]), "L2 differs"
    assert np.array_equal(a[1], b[1]), "constant caches differ"
    assert np.array_equal(a[2], b[2]) and np.array_equal(a[3], b[3]), "S or e_max differs"
    assert a[4:9] == b[4:9]
    assert len(a[9]) == len(b[9])
    for (ba, ra), (bb, rb) in zip(a[9], b[9], strict=True):
        assert ba == bb and np.array_equal(ra, rb), f"host region 0x{ba:X} differs"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.sampled_from(MODES))
def test_random_programs_match_reference(seed, length, mode):
    rng = np.random.default_rng(seed)
    images = _images(rng)
    lines = [ln for _ in range(length) for ln in _line(rng, images)]
    words = asm.assemble("\n".join(x for x in lines if not x.startswith(".word")))
    # keep the invalid raw words where they were drawn
    words, it = [], iter(asm.assemble("\n".join(x for x in lines if not x.startswith(".word"))))
    for x in lines:
        words.append(asm.assemble_line(x) if x.startswith(".word") else next(it))
    ref = Simulator()
    fast = FastSimulator(backend=mode[0], weights=mode[1])
    for sim in (ref, fast):
        _setup(sim, seed, images)
    for rep in range(3):  # replay: same plan, changed constant caches and host bytes
        if rep == 2:
            patch = np.random.default_rng(seed + 1).integers(0, 256, 8, dtype=np.uint8)
            for sim in (ref, fast):
                sim.host.write(images[0][1], patch)  # overwrites cached INT4 codes
                sim.set_cc(0, 1, 3, 1, 5)
        for sim in (ref, fast):
            sim.load_program(words)
        works_ref, works_fast = ref.run(), fast.run()
        assert works_fast == works_ref
        _assert_same(_state(fast), _state(ref))


@pytest.mark.parametrize("mode", MODES)
def test_step_and_max_steps_match_reference(mode):
    rng = np.random.default_rng(5)
    images = _images(rng)
    lines = [ln for _ in range(25) for ln in _line(rng, images) if not ln.startswith(".word")]
    words = asm.assemble("\n".join(lines))
    ref, fast = Simulator(), FastSimulator(backend=mode[0], weights=mode[1])
    for sim in (ref, fast):
        _setup(sim, 5, images)
        sim.load_program(words)
    assert fast.run(max_steps=3) == ref.run(max_steps=3)
    assert fast.step() == ref.step()
    assert fast.run() == ref.run()
    _assert_same(_state(fast), _state(ref))
    assert fast.step() is None and ref.step() is None


@pytest.mark.parametrize("mode", MODES)
def test_error_interrupt_mid_program(mode):
    words = asm.assemble("memset cache=fmap slot=0 a=4 b=1 c=8\n"
                         "cvo.exp src=0 dst=0x10 len=8\n"
                         "gemv dest=0x10 src=0 shape=0 size=0\n"  # weight slot 0 -> host 0: unmapped
                         "cvo.exp src=0 dst=0x20 len=8\n")
    ref, fast = Simulator(), FastSimulator(backend=mode[0], weights=mode[1])
    for sim in (ref, fast):
        sim.write_l2_bits(0, _bf16_bits(np.random.default_rng(1), 64))
        sim.load_program(words)
    assert fast.run() == ref.run()
    assert fast.status & STATUS_ERROR and fast.error.index == 2 and "not mapped" in fast.error.reason
    _assert_same(_state(fast), _state(ref))


def test_empty_program_is_done():
    fast = FastSimulator()
    fast.load_program([])
    assert fast.run() == [] and fast.status == STATUS_DONE


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="fused SFU runs are a numba-backend path")
def test_fused_sfu_run_matches_reference_and_is_used():
    """A run of S-dependent arithmetic, REDUCE_SUM (plain and accm), LOAD_SCALAR and MEMSETs of S and
    e_max, overlapping operands included, executes as one fused block and equals the reference."""
    lines = ["cvo.square src=0x10 dst=0x20 len=40 flags=0",
             "cvo.reduce_sum src=0x20 dst=0x30 len=40 flags=0",
             "cvo.scale src=0x10 dst=0x11 len=37 flags=recip_scale",  # shifted overlap
             "memset cache=sreg slot=0 a=0x0",
             "cvo.scale src=0x40 dst=0x40 len=20 flags=recip_scale",  # S = 0: the ZERO op
             "cvo.reduce_sum src=0x11 dst=0x31 len=33 flags=accm",
             "cvo.load_scalar src=0x12 dst=0x12 len=5 flags=0",
             "cvo.relu_bias src=0x50 dst=0x51 len=30 flags=accm",
             "memset cache=sreg slot=1 a=0x3F80",
             "cvo.mul src=0x60 dst=0x61 len=25 flags=0",
             "cvo.reduce_max src=0x70 dst=0x70 len=9 flags=0"]  # no compiled row: ends the run
    words = asm.assemble("\n".join(lines))
    ref, fast = Simulator(), FastSimulator(backend="numba")
    for sim in (ref, fast):
        _setup(sim, 11, [])
        sim.load_program(words)
    assert fast._groups[0] is not None and fast._groups[0][0] == len(lines) - 1
    for _ in range(2):
        assert fast.run() == ref.run()
        _assert_same(_state(fast), _state(ref))
        for sim in (ref, fast):
            sim.load_program(words)


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="fused SFU runs are a numba-backend path")
def test_fused_run_with_copies_follows_their_descriptors():
    """MEMCPYs inside a fused SFU run — L2 to L2 (one overlapping its source) and from two host regions
    — copy what their shape entry and the host bytes say on every replay: the entry changes between
    runs (the run stops before the copy and the rest runs step by step, then fuses again), host bytes
    are rewritten, and a length past L2 raises the reference's interrupt at the copy, after the steps
    before it ran."""
    end = Simulator().limits.l2_words - 16  # 16 words before the end of L2
    other = OUT_BASE + 0x10_0000  # a second host region
    lines = ["cvo.square src=0x10 dst=0x20 len=40 flags=0",
             "memcpy from=npu to=npu dest=0x22 src=0x20 shape=3 async",  # overlapping
             "memcpy from=host to=npu dest=0x70 aux=0x2 shape=4 async",
             "cvo.scale src=0x22 dst=0x41 len=30 flags=0",
             f"memcpy from=npu to=npu dest=0x{end:X} src=0x20 shape=3 async",
             "memcpy from=host to=npu dest=0x78 aux=0 shape=5 async",
             f"cvo.reduce_sum src=0x{end:X} dst=0x60 len=16 flags=0",
             "cvo.mul src=0x70 dst=0x62 len=12 flags=0"]
    words = asm.assemble("\n".join(lines))
    ref, fast = Simulator(), FastSimulator(backend="numba")
    rng = np.random.default_rng(14)
    for sim in (ref, fast):
        _setup(sim, 13, [])
        sim.host.map(other, 4096)
        sim.set_cc(0, 4, 3, OUT_BASE // 16 >> 16, OUT_BASE // 16 & 0xFFFF)
        sim.set_cc(0, 5, 2, other // 16 >> 16, other // 16 & 0xFFFF)
    for copy_words in (5, 5, 9, 9, 2, 20, 3):  # 20: the second L2 copy runs past the end of L2
        data = _bf16_bits(rng, 2 * 4096 // 2).view(np.uint8)
        for sim in (ref, fast):
            sim.set_cc(0, 3, copy_words, 0, 0)
            sim.host.write(OUT_BASE, data[:4096])
            sim.host.write(other, data[4096:])
            sim.load_program(words)
        assert fast._groups[0] is not None and fast._groups[0][0] == len(lines)  # one fused run
        assert fast.run() == ref.run()
        _assert_same(_state(fast), _state(ref))
        if copy_words == 20:
            assert fast.error is not None and fast.error.index == 4


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="fused SFU runs are a numba-backend path")
def test_copies_whose_entry_changed_are_bound_again_in_their_table(monkeypatch):
    """A fused run's copies bound for one shape entry, run again after the entry took another value outside
    the run (a span bucket's -inf tail copy: the same word, another length in the entry): the call stops at
    the first copy, lowers it and the later copies bound as it was for the entry now and goes on, so the
    table is kept (not made again, no copy run step by step), and the state is the reference's."""
    from npukit.targets.pccx.fast import fastrun

    lines = ["cvo.square src=0x10 dst=0x20 len=40 flags=0",
             "memcpy from=npu to=npu dest=0x30 src=0x20 shape=3 async",
             "cvo.scale src=0x22 dst=0x41 len=30 flags=0",
             "memcpy from=npu to=npu dest=0x50 src=0x20 shape=3 async",
             "cvo.mul src=0x60 dst=0x62 len=12 flags=0",
             "memcpy from=npu to=npu dest=0x70 src=0x21 shape=3 async",
             "cvo.reduce_sum src=0x30 dst=0x80 len=16 flags=0"]
    words = asm.assemble("\n".join(lines))
    ref, fast = Simulator(), FastSimulator(backend="numba")
    rebound, real = [], fastrun._FusedRun._rebound_copy
    monkeypatch.setattr(fastrun._FusedRun, "_rebound_copy",
                        lambda run, t, r: rebound.append(r) or real(run, t, r))
    for sim in (ref, fast):
        _setup(sim, 17, [])
    table, prev = None, 4
    for copy_words in (4, 4, 9, 9, 2):
        for sim in (ref, fast):
            sim.set_cc(0, 3, copy_words, 0, 0)
            sim.load_program(words)
        del rebound[:]
        assert fast.run() == ref.run()
        _assert_same(_state(fast), _state(ref))
        run = fast._groups[0][1].resolve()
        assert fast._groups[0][0] == len(lines) and run.table is not None
        if table is None:
            table, builds = run.table, run.builds
        assert run.table is table and run.builds == builds  # kept: its copies bound again in place
        assert rebound == ([1] if copy_words != prev else [])  # one stop a change, at the first copy
        assert [int(table.tab[i, 5]) & 0xFFFF for i in (1, 3, 5)] == [copy_words] * 3
        prev = copy_words


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 3), st.integers(0, 63), st.integers(0, 2**16 - 1), st.integers(0, 2**16 - 1),
       st.integers(0, 2**16 - 1), st.booleans(), st.integers(0, 2**64 - 1), st.booleans())
def test_span_patched_memset_decodes_as_the_isa_does(cache, slot, a, b, c, async_, flips, values_only):
    # a word patched from a decoded MEMSET (the driver's span descriptors) is that instruction with the
    # new values only where `isa.decode` of the new word says exactly that; every other word (another
    # cache, other bits, an SFU-register MEMSET whose b and c are checked) is decoded by the ISA
    from npukit.targets.pccx import isa
    from npukit.targets.pccx.fast import fastsim

    try:
        was = isa.encode(isa.Memset(isa.DestCache(cache) if cache < 3 else 3, slot, a, b, c, async_))
    except NpukitError:  # (an invalid instruction: a reserved cache, an SFU register with b or c)
        return
    word = was ^ (flips & (fastsim._VALUE_BITS if values_only else (1 << 64) - 1))
    try:
        ref = isa.decode(word)
    except isa.DecodeError:
        ref = None
    got = fastsim._respan(isa.decode(was), was, word)
    assert got is None or got == ref
    if values_only and cache < 2:
        assert got is not None and got == ref and hash(got) == hash(ref)
        # its label from the old one (a token's span patch) is the ISA text of the new instruction
        was_ins = isa.decode(was)
        assert fastsim._respan_label(asm.format_instr(was_ins), was_ins, got) == asm.format_instr(ref)
    sim = FastSimulator()
    sim.load_program([was])
    sim.load_program([word], tag="t", dirty=[0])  # (a first load of the slot: decoded in full)
    sim.load_program([was], tag="t", dirty=[0])
    sim.load_program([word], tag="t", dirty=[0])  # the span patch path
    ref_sim = Simulator()
    ref_sim.load_program([word])
    assert sim.run() == ref_sim.run() and sim.error == ref_sim.error and np.array_equal(sim.cc, ref_sim.cc)
    assert sim.trace[-1:] == ref_sim.trace[-1:]


def test_span_patched_memset_record_is_the_reference_record_at_its_index():
    # a span patch's Work is the old step's with the new label (`FastSimulator._compile`): the reference
    # simulator's record at the same index, label included, for patches in a row at a later index
    from npukit.sim.work import Work
    from npukit.targets.pccx import isa

    def memset(a: int, b: int) -> int:
        return isa.encode(isa.Memset(isa.DestCache.FMAP, 5, a, b, 3, True))

    sim = FastSimulator()
    words = [memset(1, 1), memset(2, 2), memset(3, 4)]
    sim.load_program(words, tag="t", dirty=range(3))
    for a in (7, 8, 65534):
        words[2] = memset(a, a + 1)
        want = _patched_as_the_reference_runs(sim, words, 2)
        ins = isa.decode(words[2])
        assert sim._plan[2].work == want[2] == Work(2, "ctrl", asm.format_instr(ins), is_async=True)


def _patched_as_the_reference_runs(sim: FastSimulator, words: list[int], at: int) -> list:
    """Patch tagged slot "t" of ``sim`` at word ``at`` to ``words`` and run it: it runs and traces as the
    reference simulator does on the same words (whose records are returned)."""
    sim.load_program(words, tag="t", dirty=[at])
    ref = Simulator()
    ref.load_program(words)
    want = ref.run()
    assert sim.run() == want and sim.trace[-1] == ref.trace[-1]
    return want


def test_span_patch_back_to_a_seen_word_takes_the_old_record_not_a_new_label(monkeypatch):
    # a sliding window's ring descriptors cycle, so a patch often brings back a word decoded tokens ago:
    # its record is still the reference's at that index, and it is made from the old step's as for a new
    # word, never formatted anew (~25 µs each; nine a token at hidden 1024 past the 512-token window)
    from npukit.sim.work import Work
    from npukit.targets.pccx import isa
    from npukit.targets.pccx.fast import fastsim

    def memset(a: int, b: int) -> int:
        return isa.encode(isa.Memset(isa.DestCache.WEIGHT, 9, a, b, 0, False))

    sim = FastSimulator()
    words = [memset(1, 1), memset(2, 2), memset(3, 4)]
    sim.load_program(words, tag="t", dirty=range(3))
    for a in (7, 9):  # both words decoded once (new words: the span patch path)
        words[2] = memset(a, a + 1)
        sim.load_program(words, tag="t", dirty=[2])
        sim.run()
    formatted = []
    real = fastsim.format_instr
    monkeypatch.setattr(fastsim, "format_instr", lambda ins: formatted.append(ins) or real(ins))
    for a in (7, 9, 7, 9):  # patched back and forth between words seen before
        words[2] = memset(a, a + 1)
        want = _patched_as_the_reference_runs(sim, words, 2)
        assert sim._plan[2].work == want[2] == Work(2, "ctrl", real(isa.decode(words[2])))
    assert formatted == []
