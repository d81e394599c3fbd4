"""Fused runs of the fast executor's steps: one compiled call (`_nbblock.block`) per run of steps.

`fuse_groups` finds the runs of a plan (`fastsim.FastSimulator`), a `_FusedRun` lowers one into a
table of int64 rows on its first call (the rows each step's ``fuse`` gives: `fastcvo` for CVOs,
`fastmat.fused_row` and `fastrows.int4_row` for GEMVs, `fastsim` for MEMSET and MEMCPY), and a `_Resume`
runs the rest of a run after a step the compiled loop left to the caller. A decode step's layer,
its INT4 projections included, is one such call.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from time import perf_counter

import numpy as np

from npukit.sim.work import Work
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.fast.fastmat import update_emax
from npukit.targets.pccx.fast.fastrows import (
    _BY_ADDRESS,
    _COLS,
    _LARGE,
    _PADS,
    _YIELD,
    TBITS,
    TLUT,
    _lowered,
    int4_row,  # noqa: F401 (its home was here)
)
from npukit.targets.pccx.fast.state import Codes, FastState
from npukit.targets.pccx.fast.twins import PARALLEL as _PARALLEL

_E = 8

def fuse_groups(sim: FastState, plan: list[Callable[[], Work]], old: list | None = None,
                changed: frozenset[int] = frozenset()) -> list[tuple[int, Callable] | None]:
    """Runs of >= 2 consecutive steps marked ``fuse`` (arithmetic CVO, EXP, REDUCE_SUM, LOAD_SCALAR,
    MEMSET, MEMCPY, FP16 GEMV, on the numba backend) as one compiled call each (`_nbblock.block`):
    ``out[i] = (end, run)`` for a run starting at i, and also after each step that may end a run (a
    GEMV whose binding the compiled loop does not cover: `fastmat.fused_row` says False), a `_Resume`
    of the run from there, so that the rest of the run is one call too. The table rows replay exactly
    what the single steps do, in order; a GEMV the loop does not cover is a `_YIELD` row (the call
    returns, the caller runs that step, then resumes the table after it); a row that cannot run (a fault,
    an operand outside its bound region, a copy whose shape entry changed, an ambiguous exp) stops the
    call before it, and the caller runs the rest one by one. ``run()``: the Work records of the steps run.
    ``old``: the groups of the program this one patches, ``changed`` its patched step indices; a run with
    the same bounds keeps its table, with the patched rows replaced (`_FusedRun.patched`). New and patched
    runs are made on their first call (`_Repatch`: a chunk program patches thousands), and a run's
    resumes read its copy of the steps (one per run)."""
    n = len(plan)
    out: list[tuple[int, Callable] | None] = [None] * n
    marks = sorted(changed)  # (a chunk program changes tens of thousands of steps: find a run's by bisection)
    i = 0
    while i < n:
        j = i
        while j < n and getattr(plan[j], "fuse", None) is not None:
            j += 1
        if j - i >= 2:
            prev = old[i] if old is not None else None
            run: _FusedRun | _Repatch
            if prev is not None and prev[0] == j and isinstance(prev[1], _FusedRun | _Repatch):
                lo = bisect_left(marks, i)
                hi = bisect_left(marks, j, lo)
                kept = prev[1].made or prev[1]  # (a run made since: no wrapper from now on)
                run = _Repatch.of(kept, plan[i:j], (marks, lo, hi), i) if lo < hi else kept
            else:
                run = _Repatch(None, plan[i:j], [], i, sim)
            run.private = False  # (held by the groups of more than one program from now on)
            out[i] = (j, run)
            for p in range(i, j - 2):  # (a resume of at least two steps after each step that may end it)
                if getattr(plan[p], "fuse_may_end", False):
                    out[p + 1] = (j, _Resume(run, p + 1 - i))
        i = max(j, i + 1)
    return out


def repatch_groups(plan: list[Callable[[], Work]], groups: list, changed: list[int], in_place: bool = False
                   ) -> list:
    """`fuse_groups` for a program whose ``changed`` steps were recompiled, the runs' bounds kept: each run
    holding a changed step becomes its `patched` copy, made on its first call (`_Repatch`: a chunk program
    re-run at new positions patches thousands of words; patching all at load cost ~50 ms a prompt token).
    ``in_place``: a `private` run already made is patched itself at once (a decode token's few patches)."""
    out = list(groups)
    marks = sorted(changed)
    moved: dict[int, _FusedRun | _Repatch] = {}  # id(run) -> what replaces it (the resumes after it follow)
    for s0 in compress(range(len(groups)), groups):  # the entries that hold a run (the Nones skipped in C)
        end, run = groups[s0]
        if isinstance(run, _Resume):  # (one with no run of its own and the same parent is as good as new)
            parent = moved.get(id(run.parent), run.parent) if moved else run.parent
            if parent is not run.parent or (  # (or a run of its own holding a patched step: one in [s0, end))
                    run.own is not None and bisect_left(marks, end) > bisect_left(marks, s0)):
                out[s0] = (end, _Resume(parent, run.offset))
            continue
        if not isinstance(run, _FusedRun | _Repatch):
            continue
        real = run.made
        lo = bisect_left(marks, s0)
        hi = bisect_left(marks, end, lo)
        new: _FusedRun | _Repatch
        if lo == hi:
            new = run if real is None else real  # (a run made since: no wrapper from now on)
        elif in_place and real is not None and real.private:
            new = real.patched([c - s0 for c in marks[lo:hi]], plan[s0:end], True)
        else:
            new = _Repatch.of(run, plan[s0:end], (marks, lo, hi), s0)
        if new is not run:
            moved[id(run)] = new
            out[s0] = (end, new)
    return out


@dataclass
class _Table:
    """A fused run lowered for `_nbblock.block`: rows, Work records (None: made from ``info`` after
    the call, ``makers``), the host regions the rows read (any number: a row names one by its index
    in column 6, the call gets their addresses, ``hosts``), and whether a longer prefix may follow."""

    tab: np.ndarray
    ins: list
    works: list
    makers: dict[int, Callable[[np.ndarray], Work]]
    regions: list[np.ndarray]  # uint16 views of host regions (held: the call reads them by address)
    info: np.ndarray
    retry: bool
    keep: list = field(default_factory=list)  # what INT4 rows (kinds 10, 11) read by address

    def __post_init__(self) -> None:
        self.hosts = np.array([(h.ctypes.data, h.size) for h in self.regions], np.int64).reshape(-1, 2)
        self.codes = [held[1] for held in self.keep if isinstance(held[1], Codes)]  # kind 11's
        tab, per_row = self.tab, np.zeros(len(self.tab), np.int64)
        # large INT4 rows' weight bytes summed to each row (the twin chooser's unit); none (most): no sum
        at = (at := np.flatnonzero((tab[:, 0] == 10) | (tab[:, 0] == 11)))[tab[at, 5] & _LARGE != 0]
        per_row[at] = tab[at, 7] * np.where(tab[at, 0] == 10, tab[at, 10], tab[at, 8])
        self.large_upto = [0, *np.cumsum(per_row).tolist()] if at.size else [0] * (len(tab) + 1)

    @property
    def stale(self) -> bool:
        """Whether cached codes an INT4 row reads were dropped (a host write over their image)."""
        return not all(map(_VALID, self.codes))  # (asked at each call: no generator frame)

    @property
    def maker_index(self) -> tuple[list[int], list[Callable[[list[int]], Work]], np.ndarray]:
        """The rows with a Work maker (ascending), their makers, the rows as an index array (one gather of
        ``info`` per call): made once per table, forgotten (``_maker_rows``) where ``makers`` is edited."""
        if (got := self.__dict__.get("_maker_rows")) is None:
            rows = sorted(self.makers)
            got = (rows, [self.makers[i] for i in rows], np.array(rows, np.intp))
            self.__dict__["_maker_rows"] = got
        return got

    @property
    def yields(self) -> tuple[list[int], list[list[int]]]:
        """The `_YIELD` rows (ascending), their (shape, size entry) columns: once per ``tab`` array."""
        got = self.__dict__.get("_yields")
        if got is None or got[0] is not self.tab:
            at = np.flatnonzero(self.tab[:, 0] == _YIELD)
            got = self.__dict__["_yields"] = (self.tab, at.tolist(), self.tab[at, 1:3].tolist())
        return got[1], got[2]

    @property
    def items(self) -> list:
        """The trace entries (instruction, Work) of the rows (made once per table)."""
        if (got := self.__dict__.get("_items")) is None:
            got = self.__dict__["_items"] = list(zip(self.ins, self.works, strict=True))
        return got


_VALID = attrgetter("valid")
_ROW_BYTES: dict[tuple, bytes] = {}  # a fixed row (CVO, MEMSET) -> its table row's bytes (`_build`)
_PACK_ROW = struct.Struct(f"={_COLS}q")  # a bound row's bytes (`_FusedRun._build`), zeros after its own


class _CcBefore:
    """The constant caches as a table's MEMSET rows before a row leave ``cc``, for rows asked in ascending
    order: one running copy, each MEMSET row applied once (a chunk program's patch asks at thousands of
    rows: a copy and scan per row cost ~0.1 ms). ``tab`` may change at a row once it has been asked for."""

    def __init__(self, cc: np.ndarray, tab: np.ndarray) -> None:
        self.cc, self.tab, self.at = cc.copy(), tab, 0

    def at_row(self, row: int) -> np.ndarray:
        tab, at = self.tab, self.at
        for r in np.flatnonzero(tab[at:row, 0] == 6) + at:
            self.cc[tab[r, 1], tab[r, 2]] = tab[r, 3:6]
        self.at = row
        return self.cc


def _row_bytes(row: tuple) -> bytes:
    """A fixed row as table bytes (a decode program's ~2 000 hold a few hundred distinct: layers repeat)."""
    if len(_ROW_BYTES) >= 1 << 18:
        _ROW_BYTES.clear()
    return _ROW_BYTES.setdefault(row, _PACK_ROW.pack(*row, *_PADS[len(row)]))


_RETRIES = 4  # builds that may stop at a step not bound yet before that prefix is final


def _held_row(got: tuple, regions: list) -> list | None:
    """A lowered step's row (`_lowered`) for a built table: padded, and the host region it reads (a host
    copy's, an FP16 GEMV's: ``got[2]``) named by its index in the table's ``regions``; None where the
    table does not hold that region (it must be built again)."""
    row = [*got[0], *_PADS[len(got[0])]]
    if row[0] not in _BY_ADDRESS and len(got) > 2:
        j = next((j for j, h in enumerate(regions) if h is got[2]), None)
        if j is None:
            return None
        row[6] = j
    return row


def _memset_entries(tab: np.ndarray, steps: list[Callable[[], Work]], offsets: list[int]
                    ) -> set[tuple[int, int]] | None:
    """The constant-cache entries (cache, slot) the rows at ``offsets`` write, as built (``tab``) and as
    recompiled (``steps``), when every one of them is a MEMSET both ways (a decode token's span
    patches); None otherwise."""
    out: set[tuple[int, int]] = set()
    for o in offsets:
        fuse = steps[o].fuse
        if callable(fuse) or fuse[0][0] != 6 or tab[o, 0] != 6:
            return None
        out.add((int(fuse[0][1]), int(fuse[0][2])))
        out.add((int(tab[o, 1]), int(tab[o, 2])))
    return out


def _yields_reading(t: _Table, after: int, entries: set[tuple[int, int]] | None) -> list[int]:
    """The yield rows of ``t`` past row ``after`` whose lowering reads one of ``entries`` (None: any may
    have changed): a row's shape entry and the two size entries its binding key holds (`_lowered`). A yield
    none of whose entries a patch rewrote lowers to the same row again (asked each token: `_Table.yields`)."""
    rows, cols = t.yields
    lo = bisect_right(rows, after)
    if entries is None:
        return rows[lo:]
    return [y for y, (shp, siz) in zip(rows[lo:], cols[lo:], strict=True)
            if (0, shp) in entries or (1, siz) in entries or (1, siz + 1) in entries]


class _FusedRun:
    """One run of fusable steps as a callable (`fuse_groups`): lowered lazily on its first call."""

    def __init__(self, sim: FastState, steps: list[Callable[[], Work]], table: _Table | None = None) -> None:
        self.sim, self.steps, self.table = sim, steps, table
        self.dead = False  # fewer than two leading rows can ever be fused: the caller runs the steps
        self.builds = 0
        self.private = False  # held by one program slot's groups only (`patched` may edit it in place)

    @property
    def made(self) -> _FusedRun:
        return self  # (as `_Repatch.made`: this run exists)

    def resolve(self) -> _FusedRun:
        return self  # (as `_Repatch.resolve`)

    def patched(self, offsets: list[int], steps: list[Callable[[], Work]], in_place: bool = False
                ) -> _FusedRun:
        """A copy for a program whose steps at ``offsets`` were recompiled (same run bounds): a built table
        keeps its other rows and takes the recompiled steps' rows (a copy's or a GEMV's from the constant
        caches as the rows before it leave them, as `_build` does); it is built anew when a recompiled row
        is not available or reads a host region the table does not hold. With ``in_place``, a `private`
        run whose new rows hold no INT4 GEMV is itself patched (a decode token's span patches)."""
        t = self.table
        new = _FusedRun(self.sim, steps)
        new.builds, new.dead, new.private = self.builds, self.dead, True
        if t is None:
            new.dead = self.dead and not any(callable(steps[o].fuse) for o in offsets)
            return new
        done = len(t.works)
        if any(o >= done and callable(steps[o].fuse) for o in offsets):
            new.dead = False
            return new  # the prefix may now run further: build it again
        # the patched rows, and the yields after the first (a MEMSET patched before a GEMV's yield may
        # give it a binding the loop covers: lowered again, with the entries the rows before leave)
        own = [x for x in offsets if x < done]
        touched = _memset_entries(t.tab, steps, own)
        later = _yields_reading(t, min(offsets, default=done), touched)
        if in_place and self.private and touched is not None and not later:
            return self._memsets_in_place(own, steps)
        tab, ins, works, makers, keep = t.tab.copy(), list(t.ins), list(t.works), dict(t.makers), list(t.keep)
        rows, before = [], _CcBefore(self.sim.cc, tab)
        for o in sorted({*own, *later}):
            st = steps[o]
            got = _lowered(st, before.at_row(o) if callable(st.fuse) else None)
            if got is None:
                return new
            row = _held_row(got, t.regions)
            if row is None:
                return new
            if row[0] in _BY_ADDRESS:
                keep.append(got[4])
            makers.pop(o, None)
            if len(got) > 3 and got[3] is not None:
                makers[o] = got[3]
            tab[o], ins[o], works[o] = row, st.fuse_ins, got[1]
            in_place = in_place and row[0] not in _BY_ADDRESS  # (those change what the table holds)
            rows.append(o)
        if in_place and self.private:
            t.tab, t.ins, t.works, t.makers = tab, ins, works, makers
            t.__dict__.pop("_maker_rows", None)
            items = t.__dict__.get("_items")
            for o in rows if items is not None else ():
                items[o] = (ins[o], works[o])
            self.steps = steps
            return self
        new.table = _Table(tab, ins, works, makers, t.regions, np.zeros_like(t.info), t.retry, keep)
        return new

    def _memsets_in_place(self, offsets: list[int], steps: list[Callable[[], Work]]) -> _FusedRun:
        """`patched` in place where every patched row is a MEMSET and no yield reads what they write (a
        decode token's span descriptors): those rows, instructions and Works rewritten in this run's own
        table (what `patched` copies and then installs here, without the copies)."""
        t = self.table
        assert t is not None
        items = t.__dict__.get("_items")
        for o in offsets:
            row, work = steps[o].fuse
            t.tab[o] = (*row, *_PADS[len(row)])
            if t.makers.pop(o, None) is not None:  # (a MEMSET row has no maker: the index stands)
                t.__dict__.pop("_maker_rows", None)
            t.ins[o], t.works[o] = steps[o].fuse_ins, work
            if items is not None:
                items[o] = (t.ins[o], work)
        self.steps = steps
        return self

    def _build(self, cc: np.ndarray | None = None) -> _Table | None:
        """The table, the copy and GEMV rows bound for the constant caches ``cc`` (default: the device's now)
        as the run's own MEMSETs leave them (each checks its entries when it runs); the fixed rows (CVO,
        MEMSET: a step's own ``fuse``) are joined from their bytes, made once per row (`_row_bytes`)."""
        self.builds += 1
        steps, got_row, pack = self.steps, _ROW_BYTES.get, _PACK_ROW.pack
        cc = (self.sim.cc if cc is None else cc).copy()  # as the run leaves them before each step
        n, retry, makers, regions, keep, blob, works = len(steps), False, {}, [], [], [], []
        for o, step in enumerate(steps):
            f = step.fuse
            if not callable(f):  # a fixed row: its bytes, and an entry's MEMSET applied for the rows after
                if f[0][0] == 6:
                    cc[f[0][1], f[0][2]] = f[0][3:6]
                blob.append(got_row(f[0]) or _row_bytes(f[0]))
                works.append(f[1])
                continue
            if (got := _lowered(step, cc)) is None:
                n, retry = o, self.builds < _RETRIES
                break
            row = got[0]
            if row[0] in _BY_ADDRESS:  # an INT4 GEMV reads its image by address: the table keeps it
                keep.append(got[4])
            elif len(got) > 2:  # a host region the row reads, by identity (its index in column 6)
                j = next((j for j, h in enumerate(regions) if h is got[2]), len(regions))
                if j == len(regions):
                    regions.append(got[2])
                row = (*row[:6], j, *row[7:])
            if len(got) > 3 and got[3] is not None:
                makers[o] = got[3]
            blob.append(pack(*row, *_PADS[len(row)]))
            works.append(got[1])
        if n < 2:
            self.dead = not retry
            return None
        tab = np.frombuffer(bytearray(b"".join(blob)), np.int64).reshape(n, _COLS)
        ins = [st.fuse_ins for st in steps[:n]]
        return _Table(tab, ins, works, makers, regions, np.zeros((n, 3), np.int64), retry, keep)

    def _run(self, t: _Table, start: int) -> int:
        """One compiled call of the table from row ``start``; where the rows hold large INT4 GEMVs, on
        the twin the executor's chooser picks for this run (timed as a whole: their bytes dominate it)."""
        sim = self.sim
        args = (t.tab, start, sim.flat, sim.cc, sim._regs, t.hosts, sim._qbuf, t.info, kx.LUT32, kx.LUT64,
                TLUT, TBITS)
        twins, upto = sim.twins, t.large_upto
        if upto[-1] == upto[start] or twins.single:
            return sim._k["cvo_block"](*args, 0)
        site = (len(upto) - start, upto[-1] - upto[start])  # the same run from any table of this layout
        twin = twins.pick(site)
        t0 = perf_counter()
        r = sim._k["cvo_block"](*args, int(twin == _PARALLEL))
        end = len(upto) - 1 if r == -1 else -2 - r  # (a run cut short by a rebind: its cost unknown)
        if r < 0 and upto[end] > upto[start]:
            twins.record(twin, perf_counter() - t0, upto[end] - upto[start], site)
        return r

    def __call__(self) -> list[Work]:
        if self.dead:
            return []
        t = self.table
        if t is None or (t.codes and t.stale):
            t = self.table = self._build()
            if t is None:
                return []
        return self.resume(t, 0)

    def resume(self, t: _Table, start: int) -> list[Work]:
        """Run the table ``t`` (this run's, valid) from row ``start``: the Work records of the steps run."""
        sim = self.sim
        r = self._run(t, start)
        rows = len(t.works)
        while 0 <= r < rows and self._rebound_copy(t, r):
            r = self._run(t, r)  # (the rows before it ran: on from the copy, bound anew)
        done = rows if r == -1 else (-2 - r if r < 0 else (r - rows + 1 if r >= rows else r))
        if 0 <= r < rows or t.retry:
            self.table = None  # a binding or copy changed (or a longer prefix may fuse): rebuild next time
        works, items = t.works[start:done], t.items[start:done]
        if t.makers:  # the Work of a GEMV row, from the shape it ran with
            made, makers, at = t.maker_index
            lo = bisect_left(made, start)
            hi = bisect_left(made, done, lo)
            ins = t.ins
            for i, make, info in zip(made[lo:hi], makers[lo:hi], t.info[at[lo:hi]].tolist(), strict=True):
                works[i - start] = w = make(info)
                items[i - start] = (ins[i], w)
        if r >= rows:  # the last row ran, its e_max update is the reference reduction's
            i = r - rows
            m, d0 = int(t.info[i, 0]), int(t.tab[i, 4]) * _E
            update_emax(sim, [sim.flat[d0: d0 + m]])
        sim.trace.extend(items)
        return works

    def _rebound_copy(self, t: _Table, r: int) -> bool:
        """Whether row ``r``, a copy the call stopped at, was lowered again (in place) for the shape entry
        the constant caches hold now, as the rows before it left them: a program whose bucket-keyed
        entry changed value while the copy's word did not (`codegen.CodeGen._memcpy`), or a shared table
        run by a program that set that entry otherwise. Its row checks the entry as any row does, so a
        table shared by two such programs stays exact whichever ran it last."""
        tab = t.tab
        if tab[r, 0] not in (4, 5):
            return False
        was = tab[r].copy()
        if not self._relower_copy(t, r):
            return False  # (it stopped for another reason: the single step runs it)
        # the later copies bound as it was read the same entry (one per token and head in a chunk
        # program): lowered for it now too, not stopped at one by one (each still checks it)
        later = tab[r + 1:]
        for k in (np.flatnonzero((later[:, 0] == was[0]) & (later[:, 1] == was[1]) & (later[:, 5] == was[5]))
                  + r + 1).tolist():
            self._relower_copy(t, k)
        return True

    def _relower_copy(self, t: _Table, r: int) -> bool:
        """Row ``r`` (a copy) lowered for the constant caches now, in place: whether it changed."""
        got = _lowered(self.steps[r], self.sim.cc)
        row = None if got is None else _held_row(got, t.regions)
        if row is None or row == t.tab[r].tolist():
            return False
        t.tab[r], t.works[r] = row, got[1]
        items = t.__dict__.get("_items")
        if items is not None:
            items[r] = (t.ins[r], got[1])
        return True


class _Resume:
    """The rest of a fused run from step ``offset`` on (`fuse_groups`: after a step that may end the run):
    the run's own table resumed there when it holds that row (one compiled call, no table of its own),
    else a run of those steps (the run's copy of them from ``offset``) lowered on its first call (the
    table stopped before it, e.g. at a changed binding). ``parent``: the run's `_FusedRun` or `_Repatch`."""

    dead = False
    builds = 0

    def __init__(self, parent: _FusedRun | _Repatch, offset: int) -> None:
        self.parent, self.offset = parent, offset
        self.own: _FusedRun | None = None

    @property
    def table(self) -> _Table | None:
        """The run's table where it holds row ``offset`` (what a call resumes), else None."""
        t = self.parent.resolve().table
        return t if t is not None and self.offset < len(t.works) else None

    def _build(self, cc: np.ndarray | None = None) -> None:
        return None  # (lowering ahead: the run's own table serves)

    def __call__(self) -> list[Work]:
        p = self.parent.resolve()
        t = p.table
        if t is not None and self.offset < len(t.works) and not (t.codes and t.stale):
            return p.resume(t, self.offset)
        if self.own is None:
            self.own = _FusedRun(p.sim, p.steps[self.offset:])
        return self.own()


class _Repatch:
    """A fused run made on its first call (`fuse_groups`, `repatch_groups`): new (``base`` None), or
    the `_FusedRun.patched` copy of ``base``. It holds the run it patches, the steps of the program
    now, and the patched step indices (absolute, as ranges ``marks[lo:hi]`` of sorted lists) gathered
    over every patch since that run was made. Patching a run at once with the offsets of several
    patches gives the table that patching it patch by patch gives: a step outside the newest patch
    is the same in every program since, and a recompiled row is lowered for the entries the rows
    before it leave, whenever it is (its own check at run time keeps the call exact either way).
    Reading or writing the run's state makes it (`resolve`); ``private`` is the made run's."""

    def __init__(self, base: _FusedRun | None, steps: list[Callable[[], Work]],
                 ranges: list[tuple[list[int], int, int]], s0: int, sim: FastState) -> None:
        self.base, self._steps, self.ranges, self.s0, self.sim = base, steps, ranges, s0, sim
        self.made: _FusedRun | None = None
        self._private = True  # (a patched copy is its slot's own; `fuse_groups` says otherwise)

    @classmethod
    def of(cls, run: _FusedRun | _Repatch, steps: list[Callable[[], Work]],
           marks: tuple[list[int], int, int], s0: int) -> _Repatch:
        """``run`` (made or not) patched at ``marks`` for the program whose run steps are ``steps``."""
        if isinstance(run, _Repatch) and run.made is None:
            return cls(run.base, steps, [*run.ranges, marks], s0, run.sim)
        real = run.resolve()
        real.private = False  # (its table is this copy's base now: never patched in place again)
        return cls(real, steps, [marks], s0, real.sim)

    def resolve(self) -> _FusedRun:
        real = self.made
        if real is None:
            if self.base is None:
                real = _FusedRun(self.sim, self._steps)
            else:
                offsets = sorted({c - self.s0 for m, lo, hi in self.ranges for c in m[lo:hi]})
                real = self.base.patched(offsets, self._steps)
            real.private = self._private
            self.made = real
            self.base = self._steps = self.ranges = None  # type: ignore[assignment]  (no longer needed)
        return real

    def __call__(self) -> list[Work]:
        return self.resolve()()

    @property
    def private(self) -> bool:
        return self._private if self.made is None else self.made.private

    @private.setter
    def private(self, value: bool) -> None:
        if self.made is None:
            self._private = value
        else:
            self.made.private = value

    # what callers read and write of a run (`ahead.build_tables`), on the run made
    def _build(self, cc: np.ndarray | None = None) -> _Table | None:
        return self.resolve()._build(cc)

    def resume(self, t: _Table, start: int) -> list[Work]:
        return self.resolve().resume(t, start)

    @property
    def steps(self) -> list[Callable[[], Work]]:
        return self.resolve().steps

    @property
    def table(self) -> _Table | None:
        return self.resolve().table

    @table.setter
    def table(self, value: _Table | None) -> None:
        self.resolve().table = value

    @property
    def dead(self) -> bool:
        return self.resolve().dead

    @property
    def builds(self) -> int:
        return self.resolve().builds

    @builds.setter
    def builds(self, value: int) -> None:
        self.resolve().builds = value
