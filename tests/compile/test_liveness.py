"""`npukit.compile.liveness` against a brute-force statement of its contract: every buffer sits at
the lowest address where it overlaps no buffer still live when it is born (buffers whose last use
is the node before are free again), inside [lo, hi)."""

from hypothesis import given
from hypothesis import strategies as st

from npukit.compile import liveness
from npukit.compile.liveness import Lifetime, NoRoom, first_fit, fit_around, lifetimes


def _lowest_fit(need: int, busy: list[tuple[int, int]], lo: int, hi: int) -> int | None:
    for a in range(lo, hi - need + 1):
        if all(a + need <= s or e <= a for s, e in busy):
            return a
    return None


def _brute(spans: list[Lifetime], size, lo: int, hi: int) -> tuple[dict[int, int], int] | tuple[int, int]:
    placed: dict[int, int] = {}
    peak = lo
    for i in range(max((s.last for s in spans), default=-1) + 1):
        for j, s in enumerate(spans):
            if s.first != i:
                continue
            busy = [(placed[k], placed[k] + size(spans[k].item)) for k in placed if spans[k].last >= i]
            a = _lowest_fit(size(s.item), busy, lo, hi)
            if a is None:
                return j, i
            placed[j] = a
            peak = max(peak, a + size(s.item))
    return placed, peak


@st.composite
def _spans(draw):
    n = draw(st.integers(0, 12))
    out = []
    for k in range(n):
        first = draw(st.integers(0, 10))
        out.append(Lifetime(("buf", k, draw(st.integers(1, 9))), first, first + draw(st.integers(0, 6))))
    return sorted(out, key=lambda s: s.first)  # first-appearance order, as `lifetimes` returns


def _size(item) -> int:
    return item[2]


@given(_spans(), st.integers(0, 3), st.integers(8, 40))
def test_first_fit_is_the_lowest_free_address_at_birth(spans, lo, room):
    hi = lo + room
    want = _brute(spans, _size, lo, hi)
    if isinstance(want[0], dict):
        addrs, peak = first_fit(spans, _size, lo, hi)
        assert addrs == want[0] and peak == want[1]
        for j, s in enumerate(spans):  # simultaneously live buffers never share an address
            for k, t in enumerate(spans[:j]):
                if s.first <= t.last and t.first <= s.last:
                    a, b = addrs[j], addrs[k]
                    assert a + _size(s.item) <= b or b + _size(t.item) <= a
    else:
        j, node = want
        try:
            first_fit(spans, _size, lo, hi)
        except NoRoom as exc:
            assert exc.item is spans[j].item and exc.node == node
        else:
            raise AssertionError("a buffer that fits nowhere was placed")


def _overlap(s: Lifetime, t: Lifetime) -> bool:
    return s.first <= t.last and t.first <= s.last


@given(_spans(), _spans(), st.integers(0, 3), st.integers(8, 60))
def test_fit_around_places_each_at_the_lowest_address_clear_of_every_buffer_live_with_it(
        fixed, more, lo, room):
    hi = lo + room
    try:
        at, _ = first_fit(fixed, _size, lo, hi)
    except NoRoom:
        return
    placed = [(s, at[j]) for j, s in enumerate(fixed)]
    busy = list(placed)  # brute force: in birth order, the lowest address clear of every overlapping one
    want: dict[int, int] | None = {}
    for j in sorted(range(len(more)), key=lambda j: more[j].first):
        s = more[j]
        a = _lowest_fit(_size(s.item), [(b, b + _size(t.item)) for t, b in busy if _overlap(s, t)], lo, hi)
        if a is None:
            want = None
            break
        want[j] = a
        busy.append((s, a))
    if want is None:
        try:
            fit_around(more, _size, placed, lo, hi)
        except NoRoom:
            return
        raise AssertionError("a buffer that fits nowhere was placed")
    addrs, peak = fit_around(more, _size, placed, lo, hi)
    assert addrs == want
    every_, liveness.PRUNE_EVERY = liveness.PRUNE_EVERY, 1  # the dead dropped before every birth
    try:
        assert fit_around(more, _size, placed, lo, hi) == (addrs, peak)
    finally:
        liveness.PRUNE_EVERY = every_
    every = placed + [(s, addrs[j]) for j, s in enumerate(more)]
    assert peak == max([lo] + [a + _size(s.item) for s, a in every])
    for k, (s, a) in enumerate(every):  # simultaneously live buffers never share an address
        for t, b in every[:k]:
            if _overlap(s, t):
                assert a + _size(s.item) <= b or b + _size(t.item) <= a


def test_lifetimes_span_first_to_last_mention_in_first_appearance_order():
    a, b, c = object(), object(), object()
    got = lifetimes([[a], [b, a], [c], [b], []])
    assert [(s.item, s.first, s.last) for s in got] == [(a, 0, 1), (b, 1, 3), (c, 2, 2)]
