"""The next span bucket's decode program built ahead of the switch (`PccxDriver._prepare_ahead`).

The driver runs another compiled program when the attention span enters a new power-of-two bucket.
The two programs share the instruction sequence and the on-chip layout: the span-sized buffers are
placed around the others (`codegen.CodeGen._allocate`), their copies' constant-cache entries are named
by window class and the bucket-sized constants staged apart, so only the words that name a span buffer
differ (hidden 1024: 178-282 of 2 629 words per switch; with the plain first-fit layout, before
2026-11-29, every buffer after the span's moved and 973-1 561 of ~2 625 differed). Those steps are
compiled, their fused runs lowered and their Work records' timing rows made over the tokens before
the switch, in `SWITCH_SLICES` even shares on tokens evenly apart (`AheadBuild`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# a segment's last slice also lowers its fused runs' tables (3-13 ms at hidden 1024), counted as
# SWITCH_TAIL plan steps in the shares
SWITCH_TAIL = 256
# the Work records whose timing rows are made together: each `TokenTimer.remember` call has its own
# cost (~0.2 ms CPU at hidden 1024), so a switch's ~2 000 records in 4 calls rather than one per token
# (measured: 5.3 vs 8.3 ms CPU per switch)
REMEMBER_BATCH = 512
# the slices a build is made in, on tokens evenly apart from its first (the token after the disk read):
# each slice starts with caches cold after the decode step's compiled blocks, so one slice per token cost
# more than a few large ones (hidden 1024, the builds of buckets 32, 64 and 128 over positions 4-65,
# main-thread CPU, medians of 3 interleaved runs: 164 ms in up to 32 slices each, 133 ms in 4)
SWITCH_SLICES = 4


@dataclass
class AheadBuild:
    """The next span bucket's program under construction: per segment, the steps still to compile
    (estimated from the words that differ from the running program) and whether its slot is complete."""

    key: tuple
    todo: list[int]
    done: list[bool]
    base: tuple | None = None  # the running program's key
    pending: list = field(default_factory=list)  # Work records built whose timing rows are not made yet
    first: int = 0  # the calls left before the switch at the build's first slice
    stride: int = 1  # the tokens from one slice to the next

    @classmethod
    def of(cls, key: tuple, program: Any, running: Any | None, base: tuple | None = None,
           calls: int = 1) -> AheadBuild:
        """The build of ``program`` (a compiled `Program`) diffed against the running one (key ``base``),
        its first slice made now, ``calls`` tokens before the switch."""
        todo = []
        for j, seg in enumerate(program.segments):
            old = running.segments[j].words if running is not None and j < len(running.segments) else None
            same_shape = old is not None and len(old) == len(seg.words)
            todo.append(sum(a != b for a, b in zip(seg.words, old, strict=True)) if same_shape
                        else len(seg.words))
        calls = max(1, calls)
        return cls(key, todo, [False] * len(todo), base, first=calls,
                   stride=max(1, -(-calls // max(1, SWITCH_SLICES))))

    @property
    def finished(self) -> bool:
        return all(self.done)

    def slice_now(self, calls: int) -> bool:
        """Whether the token ``calls`` tokens before the switch builds a slice: one every ``stride``
        tokens from the first, and the last token before the switch if the build is not complete."""
        return (self.first - calls) % self.stride == 0 or calls <= 1

    def slices_left(self, calls: int) -> int:
        """The slices from the one at ``calls`` tokens before the switch (or the next one) to the switch."""
        at = calls - (calls - self.first) % self.stride  # the calls left at that slice
        return max(1, -(-at // self.stride))

    def remember_now(self, calls: int) -> bool:
        """Whether the timing rows of the ``pending`` records are made now: a full batch, the build
        finished, or the last call before the switch (``calls`` left)."""
        return bool(self.pending) and (len(self.pending) >= REMEMBER_BATCH or self.finished or calls <= 1)

    def budget(self, calls: int) -> int:
        """This slice's share, in plan steps, of what is left over the slices left ``calls`` tokens
        before the switch."""
        left = sum(self.todo) + SWITCH_TAIL * self.done.count(False)
        return max(1, -(-left // self.slices_left(max(1, calls))))
