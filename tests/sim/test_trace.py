import itertools
import json
from collections import defaultdict

import pytest

from npukit.sim.timing import Machine, Op, Resource, Stream, simulate
from npukit.sim.trace import to_trace, write_trace

M = Machine(engines=("mac", "vec", "dma"), resources=(Resource("ddr", 10.0),),
            streams=(Stream("w", ("ddr",), 400.0),), clock_hz=250e6)
OPS = [
    Op(0, "dma", "load x", xfer_bytes=200, path=("ddr",), latency=4, is_async=True, writes=((0, 2),),
       args={"bytes": 200}),
    Op(1, "mac", "gemv a", cycles=80, latency=2, stream="w", stream_bytes=1200, reads=((0, 2),),
       writes=((2, 4),), is_async=True, args={"macs": 2400, "bytes": 1200}),
    Op(2, "vec", "exp", cycles=30, fifo_from=1, fifo_depth=4, fifo_elems=32, reads=((2, 4),),
       writes=((4, 6),), is_async=True),
    Op(3, "mac", "gemv b", cycles=300, stream="w", stream_bytes=600, reads=((4, 6),), is_async=True),
    Op(4, "dma", "store", xfer_bytes=100, path=("ddr",), reads=((4, 6),)),
]


def check_schema(trace):
    """Independent checks of the trace-event format Perfetto's JSON importer accepts."""
    assert set(trace) >= {"traceEvents"}
    names = {}
    spans = defaultdict(list)
    for e in trace["traceEvents"]:
        assert e["ph"] in {"M", "X", "C"}
        assert isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "M":
            assert e["name"] in {"process_name", "thread_name", "thread_sort_index"}
            if e["name"] == "thread_name":
                names[e["tid"]] = e["args"]["name"]
            continue
        assert isinstance(e["ts"], int | float) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], int | float) and e["dur"] >= 0
            assert isinstance(e["tid"], int) and isinstance(e["args"], dict)
            spans[e["tid"]].append((e["ts"], e["dur"]))
        else:
            assert all(isinstance(v, int | float) for v in e["args"].values())
    for tid, s in spans.items():
        assert tid in names  # every X track is named
        starts = [ts for ts, _ in s]
        assert starts == sorted(starts), f"track {names[tid]} not monotonic"
        for (a, da), (b, _) in itertools.pairwise(s):
            assert a + da <= b + 1e-6, f"overlap on {names[tid]}"
    return names, spans


def test_trace_schema_tracks_and_units(tmp_path):
    r = simulate(M, OPS)
    trace = to_trace(r, process="toy", metadata={"hw": "toy"})
    names, _ = check_schema(trace)
    assert set(names.values()) == {"mac", "vec", "dma", "w fetch"}
    x = {e["args"]["index"]: e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] != "stream"}
    for o in r.ops:  # µs at 250 MHz: 4 ns per cycle
        assert x[o.index]["ts"] == pytest.approx(o.start * 0.004)
        assert x[o.index]["dur"] == pytest.approx((o.end - o.start) * 0.004)
        assert x[o.index]["name"] == o.label
    assert x[1]["args"]["macs"] == 2400 and x[1]["args"]["bytes"] == 1200
    assert x[4]["args"]["stalls"]  # the sync store waits on the vec op
    counters = {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"}
    assert counters == {"ddr GB/s", "w buffer bytes"}
    peak = max(e["args"]["GB/s"] for e in trace["traceEvents"] if e["name"] == "ddr GB/s")
    assert peak == pytest.approx(10 * 250e6 / 1e9)  # 10 B/cycle at 250 MHz
    p = write_trace(r, tmp_path / "t.json")
    assert json.loads(p.read_text())["traceEvents"]


def test_encode_each_splits_across_a_child_and_keeps_order():
    import os

    from npukit.sim.trace import encode_each

    items = list(range(7))
    assert encode_each(items, lambda x: f"<{x}>".encode()) == [f"<{x}>".encode() for x in items]
    parent = os.getpid()

    def only_here(x: int) -> bytes:  # fails in a forked child: the parent encodes that half itself
        if os.getpid() != parent:
            raise RuntimeError("child")
        return bytes([x])

    assert encode_each(items, only_here) == [bytes([x]) for x in items]
    assert encode_each([], only_here) == [] and encode_each([3], only_here) == [b"\x03"]
