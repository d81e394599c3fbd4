"""pccx timing adapter vs rooflines computed here from the preset's spec numbers (refs §3)."""

import pytest

from npukit import hw
from npukit.sim.trace import to_trace
from npukit.sim.work import Work
from npukit.targets.pccx.timing import simulate_works, to_ops

PRESET = "pccx-v002-kv260"
CORE_HZ = 400e6  # preset clocks.core_mhz
AXI_HZ = 250e6


def spec(overrides=()):
    h = hw.load_hw(PRESET, list(overrides))
    # the preset's raw numbers, combined here without the hw class's derived properties
    ddr = h.ddr.bandwidth_gbps * 1e9
    hp = (1 << h.hp_ports.count_log2) * (1 << h.hp_ports.width_log2) / 8 * AXI_HZ
    return h, min(ddr, hp), ddr


def gemv_work(i, m, k, lanes=0, is_async=True, dst=0, src=1 << 16, engine="gemv", n=1):
    wbytes = m * k // 2 + 4 * m  # INT4 pairs + one FP32 scale per row
    return Work(index=i, engine=engine, label=f"{engine} {m}x{k}", macs=m * k * n, weight_bytes=wbytes,
                onchip_read_bytes=2 * k * n, onchip_write_bytes=2 * m * n, is_async=is_async, lanes=lanes,
                reads=((src, src + k * n // 8),), writes=((dst, dst + m * n // 8),))


def roofline_s(macs, wbytes, macs_per_s, bytes_per_s):
    return max(macs / macs_per_s, wbytes / bytes_per_s)


SHAPES = [(2048, 2048), (16384, 2048), (2048, 16384), (512, 4096), (256, 256)]


@pytest.mark.parametrize("lanes", [4, 2, 1])
@pytest.mark.parametrize(("m", "k"), SHAPES)
def test_gemv_within_5pct_of_roofline(m, k, lanes):
    h, wbw, _ = spec()
    peak = lanes * 32 * CORE_HZ  # 32 MAC/clk per GEMV core
    w = gemv_work(0, m, k, lanes=lanes)
    expect = roofline_s(w.macs, w.weight_bytes, peak, wbw)
    r = simulate_works(h, [w])
    assert r.seconds == pytest.approx(expect, rel=0.05)
    assert r.seconds >= expect * (1 - 1e-9)  # never beats the roofline
    memory_bound = w.weight_bytes / wbw > w.macs / peak
    # at 10 GB/s the stream feeds < 20 GMAC/s (2 MAC/B less scales): 2-4 lanes memory-bound, 1 lane not
    assert memory_bound == (lanes >= 2)
    stalls = r.engines["gemv"].stalls
    assert (stalls.get("weights", 0) > 0.1 * r.cycles) == memory_bound


@pytest.mark.parametrize("bw", [6.0, 12.8, 19.2])
def test_gemv_tracks_ddr_override(bw):
    h, wbw, _ = spec([f"ddr.bandwidth_gbps={bw}"])
    assert wbw == min(bw * 1e9, 16e9)  # 4 HP ports x 16 B x 250 MHz cap the stream at 16 GB/s
    w = gemv_work(0, 4096, 4096)
    r = simulate_works(h, [w])
    assert r.seconds == pytest.approx(roofline_s(w.macs, w.weight_bytes, 51.2e9, wbw), rel=0.05)


@pytest.mark.parametrize("n", [1, 4, 64])
def test_gemm_both_sides_of_ridge(n):
    # GEMM reuses each weight for n activation columns: intensity 2n MAC/B vs ridge 819.2e9/10e9 = 82
    h, wbw, _ = spec()
    w = gemv_work(0, 2048, 2048, engine="gemm", n=n)
    expect = roofline_s(w.macs, w.weight_bytes, 32 * 32 * 2 * CORE_HZ, wbw)
    r = simulate_works(h, [w])
    assert r.seconds == pytest.approx(expect, rel=0.05)


def test_back_to_back_gemvs_prefetch_and_trace_overlap():
    h, wbw, _ = spec()
    works = [gemv_work(i, 2048, 2048, dst=i * 512, src=1 << 16) for i in range(4)]
    r = simulate_works(h, works)
    expect = sum(roofline_s(w.macs, w.weight_bytes, 51.2e9, wbw) for w in works)
    assert r.seconds == pytest.approx(expect, rel=0.05)
    trace = to_trace(r)
    tid = {e["args"]["name"]: e["tid"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    spans = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            spans.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    gemv, fetch = spans[tid["gemv"]], spans[tid["weights fetch"]]
    assert len(gemv) == 4 and len(fetch) == 4
    overlap = sum(max(0.0, min(a1, b1) - max(a0, b0)) for a0, a1 in gemv for b0, b1 in fetch)
    total = sum(b - a for a, b in gemv)
    assert overlap > 0.9 * total  # weight streaming runs under compute, not before it


def test_sync_gemv_blocks_prefetch_of_the_next():
    h, wbw, _ = spec()
    first = dict(m=1024, k=4096, lanes=1, dst=0)  # compute-bound: the stream finishes early
    a = [gemv_work(0, **first), gemv_work(1, 4096, 4096, dst=4096)]
    s = [gemv_work(0, **first, is_async=False), gemv_work(1, 4096, 4096, dst=4096)]
    ta, ts = simulate_works(h, a).seconds, simulate_works(h, s).seconds
    t1 = 1024 * 4096 / 12.8e9
    t2 = a[1].weight_bytes / wbw
    assert ts == pytest.approx(t1 + t2, rel=1e-3)  # sync: the second GEMV's fetch starts at t1
    # async: the second GEMV's first 256 KB (the whole weight buffer) arrive under the first's tail
    assert ts - ta == pytest.approx(4 * 64 * 1024 / wbw, rel=0.01)


def test_memcpy_memset_and_contention():
    h, _, _ = spec()
    acp = 16 * AXI_HZ  # one 128-bit ACP port: 4 GB/s, below DDR's 10
    nbytes = 1 << 20
    cp = Work(index=0, engine="dma", label="memcpy", ddr_read_bytes=nbytes, is_async=False,
              writes=((0, nbytes // 16),))
    r = simulate_works(h, [cp])
    setup = 64 / CORE_HZ
    assert r.seconds == pytest.approx(setup + nbytes / acp, rel=1e-6)
    ms = Work(index=0, engine="ctrl", label="memset")
    assert simulate_works(h, [ms]).cycles == 1
    # an async MEMCPY next to a streaming GEMV: fair shares of DDR are 5 + 5 GB/s, and the ACP (4)
    # leaves its unused 1 GB/s to the weights -> weights 6 GB/s while the copy runs
    g = gemv_work(0, 4096, 4096)
    cp2 = Work(index=1, engine="dma", label="memcpy", ddr_read_bytes=nbytes, is_async=True,
               writes=((100_000, 100_000 + nbytes // 16),))
    r = simulate_works(h, [g, cp2])
    t_copy = setup + nbytes / acp
    fetched_during = 6e9 * (t_copy - setup) + 10e9 * setup
    expect = t_copy + (g.weight_bytes - fetched_during) / 10e9
    assert r.ops[1].end / CORE_HZ == pytest.approx(t_copy, rel=1e-6)
    assert r.seconds == pytest.approx(expect, rel=1e-3)


def test_cvo_rides_the_direct_fifo():
    h, wbw, _ = spec()
    g = gemv_work(0, 2048, 2048, dst=0)
    cvo = Work(index=1, engine="sfu", label="exp", sfu_elems=2048, is_async=True,
               reads=((0, 256),), writes=((512, 768),))
    ops = to_ops(h, [g, cvo])
    assert ops[1].fifo_from == 0
    r = simulate_works(h, [g, cvo])
    t_gemv = roofline_s(g.macs, g.weight_bytes, 51.2e9, wbw)
    assert r.ops[1].start < r.ops[0].end  # starts under the GEMV
    assert r.seconds == pytest.approx(t_gemv, rel=0.01)  # SFU time hidden
    # both drains run after the GEMV's last MAC: 5-stage reduction tree, 20-stage SFU pipeline
    assert r.ops[1].end - r.ops[0].end == pytest.approx(20 - 5)
    sync = [gemv_work(0, 2048, 2048, dst=0, is_async=False), cvo]
    r = simulate_works(h, sync)
    assert r.ops[1].start >= r.ops[0].end  # no FIFO: the CVO reads L2 after the GEMV
    assert r.seconds == pytest.approx(t_gemv + (2048 + 20) / CORE_HZ, rel=0.01)


def test_fast_gemv_waits_for_the_sfu():
    # K = 32: a GEMV row every 32/128 cycle -> 4 rows/cycle into a 1 element/cycle SFU
    h, _, _ = spec()
    g = Work(index=0, engine="gemv", label="g", macs=65536 * 32, is_async=True, reads=((9000, 9004),),
             writes=((0, 8192),))
    cvo = Work(index=1, engine="sfu", label="exp", sfu_elems=65535, is_async=True, reads=((0, 8192),),
               writes=((10000, 18192),))
    r = simulate_works(h, [g, cvo])
    assert r.engines["gemv"].stalls.get("wait_sfu", 0) > 0
    assert r.cycles == pytest.approx(65535 + 20, rel=0.01)


def decode_like_works(layers=3):
    """Per layer: a DMA in, three async GEMVs each followed by a CVO on its output (the direct FIFO),
    an L2 copy, a memset, and a sync GEMV that blocks the issuer (one writes its result to DDR)."""
    ws = []

    def add(**kw):
        ws.append(Work(index=len(ws), **kw))

    for layer in range(layers):
        base = layer * 4096
        add(engine="dma", label="memcpy in", ddr_read_bytes=4096, onchip_write_bytes=4096, is_async=True,
            writes=((base, base + 256),))
        for j, (m, k) in enumerate([(512, 512), (1024, 512), (512, 1024)]):
            src, dst = base + 256 * j, base + 1024 + 256 * j
            add(engine="gemv", label=f"gemv {m}x{k}", macs=m * k, weight_bytes=m * k // 2 + 4 * m,
                onchip_read_bytes=2 * k, onchip_write_bytes=2 * m, is_async=True, lanes=(0, 2, 4)[j],
                reads=((src, src + k // 8),), writes=((dst, dst + m // 8),))
            add(engine="sfu", label="cvo", sfu_elems=m, onchip_read_bytes=2 * m, onchip_write_bytes=2 * m,
                is_async=j != 1, reads=((dst, dst + m // 8),), writes=((dst + 128, dst + 128 + m // 8),))
        add(engine="dma", label="l2 copy", onchip_read_bytes=2048, onchip_write_bytes=2048, is_async=True,
            reads=((base + 1024, base + 1280),), writes=((base + 2048, base + 2304),))
        add(engine="ctrl", label="memset", writes=((base + 3000, base + 3008),))
        add(engine="gemv", label="gemv sync", macs=256 * 2048, weight_bytes=256 * 1024 + 1024,
            onchip_read_bytes=4096, onchip_write_bytes=512, ddr_write_bytes=512 if layer == 1 else 0,
            reads=((base + 2048, base + 2304),), writes=((base + 3500, base + 3532),))
    return ws


def test_pinned_decode_like_schedule():
    """Pinned from the pre-optimisation implementation at commit 4afa6c5 (adapter + per-event
    re-scan timing core) on `decode_like_works()` with the kv260 preset: exact floats."""
    h = hw.load_hw(PRESET, [])
    r = simulate_works(h, decode_like_works())
    assert r.cycles == 111840.81809045226
    assert len(r.usage) == 49
    e = r.engines
    assert (e["gemv"].busy, e["gemv"].idle) == (55356.0, 0.0)
    assert e["gemv"].stalls == {"dep_dma": 1420.8000000000002, "weights": 55019.018090452264, "sync": 45.0}
    assert (e["sfu"].busy, e["sfu"].idle) == (6324.0, 10516.72)
    assert e["sfu"].stalls == {"wait_gemv": 73913.75999999998, "sync": 21086.33809045226}
    assert (e["dma"].busy, e["ctrl"].busy, e["gemm"].idle) == (1996.8000000000002, 3.0, 111840.81809045226)
    assert [(o.start, o.end, o.stalls) for o in r.ops[1:4]] == [
        (473.6, 5493.639999999999, {"dep_dma": 473.6, "weights": 2967.04}),
        (0.0, 5508.639999999999, {"wait_gemv": 4976.639999999999}),
        (5493.639999999999, 16143.239999999998, {"weights": 2452.5999999999995})]
    assert [(o.start, o.end) for o in r.ops if o.label == "gemv sync"] == [
        (26730.92, 37262.64), (63993.55999999999, 74578.17809045225),
        (101309.09809045226, 111840.81809045226)]


def test_pinned_decode_like_schedule_is_the_reference_model():
    """The pinned program above: `simulate` returns what the plain reference model states, by repr."""
    import json

    from npukit.sim.timing_ref import simulate_reference
    from npukit.sim.trace import to_trace
    from npukit.targets.pccx.timing import machine

    h = hw.load_hw(PRESET, [])
    ops = to_ops(h, decode_like_works())
    want, got = simulate_reference(machine(h), ops), simulate_works(h, decode_like_works())
    assert want.cycles == 111840.81809045226
    assert json.dumps(got.to_json()) == json.dumps(want.to_json())
    assert [f.to_json() for f in got.fetches] == [f.to_json() for f in want.fetches]
    assert got.levels == want.levels and got.usage == want.usage
    assert json.dumps(to_trace(got)) == json.dumps(to_trace(want))
