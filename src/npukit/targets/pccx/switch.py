"""The next span bucket's decode program built ahead of the switch (`PccxDriver._prepare_ahead`).

The driver runs another compiled program when the attention span enters a new power-of-two bucket.
The two programs share the instruction sequence but not the on-chip layout: the L2 allocator places
the span-sized buffers first-fit, so every buffer after them moves, and 37-73 % of the words differ
(addresses, not only the span fields; measured at hidden 1024: 973-1 924 of 2 625 words per switch,
segment 0 alone unchanged). Those steps are compiled, their fused runs lowered and their Work
records' timing rows made over the tokens before the switch, an even share per token (`AheadBuild`);
the switches due within the lookahead of the prompt's end are built whole with the prompt instead
(`build_with_prompt`).
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


@dataclass
class AheadBuild:
    """The next span bucket's program under construction: per segment, the steps still to compile
    (estimated from the words that differ from the running program) and whether its slot is complete."""

    key: tuple
    todo: list[int]
    done: list[bool]
    base: tuple | None = None  # the running program's key
    pending: list = field(default_factory=list)  # Work records built whose timing rows are not made yet

    @classmethod
    def of(cls, key: tuple, program: Any, running: Any | None, base: tuple | None = None) -> AheadBuild:
        """The build of ``program`` (a compiled `Program`) diffed against the running one (key ``base``)."""
        todo = []
        for j, seg in enumerate(program.segments):
            old = running.segments[j].words if running is not None and j < len(running.segments) else None
            same_shape = old is not None and len(old) == len(seg.words)
            todo.append(sum(a != b for a, b in zip(seg.words, old, strict=True)) if same_shape
                        else len(seg.words))
        return cls(key, todo, [False] * len(todo), base)

    @property
    def finished(self) -> bool:
        return all(self.done)

    def remember_now(self, calls: int) -> bool:
        """Whether the timing rows of the ``pending`` records are made now: a full batch, the build
        finished, or the last call before the switch (``calls`` left)."""
        return bool(self.pending) and (len(self.pending) >= REMEMBER_BATCH or self.finished or calls <= 1)

    def budget(self, calls: int) -> int:
        """This call's share, in plan steps, of what is left over ``calls`` calls before the switch."""
        left = sum(self.todo) + SWITCH_TAIL * self.done.count(False)
        return max(1, -(-left // max(1, calls)))


def build_with_prompt(drv: Any, lookahead: int) -> None:
    """At the end of the prompt, build whole the program of each switch within ``lookahead`` tokens of
    the next decode token (`PccxDriver._prepare_ahead` with ``whole``), each diffed against the one
    before it, so the decode tokens before them build nothing. Stops at a program not compiled yet
    (in memory or on disk): its switching token lowers it, as before. The driver's position is
    stepped to each switch (`_next_switch` reads it) and restored."""
    pos = drv._pos
    try:
        while (nxt := drv._next_switch()) is not None and nxt[0] <= pos + lookahead:
            drv._prepare_ahead(whole=True)
            build = drv._ahead
            if build is None or build.key != nxt[1] or not build.finished:
                return
            drv._pos = nxt[0]
    finally:
        drv._pos = pos

