"""`npukit.targets.pccx.switch`: what a span-bucket switch's build ahead has left, and when the timing
rows of the Work records it built are made (oracle: counts by hand over small word lists)."""

from __future__ import annotations

from types import SimpleNamespace

from npukit.targets.pccx import switch
from npukit.targets.pccx.switch import AheadBuild


def _program(*segments: list[int]) -> SimpleNamespace:
    return SimpleNamespace(segments=[SimpleNamespace(words=list(s)) for s in segments])


def test_build_counts_the_words_that_differ_per_segment():
    running = _program([1, 2, 3, 4], [5, 6, 7], [8])
    new = _program([1, 9, 3, 9], [5, 6], [8], [10, 11])  # 2 changed; a new length; same; a new segment
    b = AheadBuild.of("k", new, running, "r")
    assert b.todo == [2, 2, 0, 2] and b.done == [False] * 4 and not b.finished and b.base == "r"
    assert AheadBuild.of("k", new, None).todo == [4, 2, 1, 2]  # nothing running: every word
    # one slice per token when the build starts with a token left per slice (first = 1: stride 1), an
    # even share of what is left, the tables of each unfinished segment counted as SWITCH_TAIL steps
    left = 6 + 4 * switch.SWITCH_TAIL
    assert b.budget(4) == -(-left // 4) and b.budget(0) == left


def test_slices_fall_on_tokens_evenly_apart_and_share_what_is_left(monkeypatch):
    monkeypatch.setattr(switch, "SWITCH_SLICES", 4)
    b = AheadBuild.of("k", _program([1, 2, 3]), _program([9, 9, 9]), calls=10)  # 3 steps, 10 tokens left
    assert (b.first, b.stride) == (10, 3)  # ceil(10 / 4): slices 10, 7, 4 and 1 tokens before the switch
    assert [c for c in range(10, 0, -1) if b.slice_now(c)] == [10, 7, 4, 1]
    assert [b.slices_left(c) for c in (10, 9, 8, 7, 5, 4, 2, 1, 0)] == [4, 3, 3, 3, 2, 2, 1, 1, 1]
    left = 3 + switch.SWITCH_TAIL
    assert b.budget(10) == -(-left // 4) and b.budget(4) == -(-left // 2) and b.budget(1) == left
    b = AheadBuild.of("k", _program([1]), None, calls=13)
    assert b.stride == 4 and [c for c in range(13, 0, -1) if b.slice_now(c)] == [13, 9, 5, 1]
    b = AheadBuild.of("k", _program([1]), None, calls=14)  # 14, 10, 6, 2; and the last token if unfinished
    assert [c for c in range(14, 0, -1) if b.slice_now(c)] == [14, 10, 6, 2, 1]


def test_timing_rows_are_made_in_batches_and_before_the_switch(monkeypatch):
    monkeypatch.setattr(switch, "REMEMBER_BATCH", 3)
    b = AheadBuild.of("k", _program([1, 2]), _program([3, 4]))
    assert not b.remember_now(10)  # nothing pending
    b.pending.extend(["w1", "w2"])
    assert not b.remember_now(10)  # under a batch, calls left
    assert b.remember_now(1)  # the last call before the switch
    b.pending.append("w3")
    assert b.remember_now(10)  # a full batch
    b.pending[:] = ["w4"]
    b.done[0] = True
    assert b.finished and b.remember_now(10)  # the build is complete
