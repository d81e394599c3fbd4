"""Phase "solve rates" of the timing event loop: each running op's progress rate between two events.

Transfers share the bandwidth resources max-min fairly (water-filling, memoised on its exact inputs);
an op then runs at min(its engine rate, its share / its bytes), no faster than its prefetched bytes
arrive, and FIFO-coupled producer/consumer pairs follow each other. Stream caps depend on the rates
(a full buffer fetches only as fast as it is drained), so the rates are a fixed point, found by
iterating until the stream caps repeat.
"""

from __future__ import annotations

from collections.abc import Sequence

from npukit.sim.timing_types import BYTES_EPS, FRACTION_EPS, waterfill


def stream_bytes_drawn(rs: list[int], si: int, frac: list[float], sbr: list[float], sidx: list[int]):
    """Bytes the running stream ops ``rs`` have drawn from stream ``si`` so far: the sum() the model
    defines (0 for none; one term alone, never -0.0, is exactly that term: sum() is skipped for it)."""
    if len(rs) == 1:
        p = rs[0]
        return frac[p] * sbr[p] if sidx[p] == si else 0
    return sum(frac[p] * sbr[p] for p in rs if sidx[p] == si) if rs else 0


def stream_draw_rate(rs: list[int], si: int, rate: dict[int, float], sbr: list[float], sidx: list[int]):
    """Bytes per cycle the running stream ops ``rs`` draw from stream ``si`` at ``rate`` (summed as
    `stream_bytes_drawn` sums)."""
    if len(rs) == 1:
        p = rs[0]
        return rate.get(p, 0.0) * sbr[p] if sidx[p] == si else 0
    return sum(rate.get(p, 0.0) * sbr[p] for p in rs if sidx[p] == si)


class Rates:
    """Mixed into `npukit.sim.timing_state.Sim`: the rate solver (reads the Sim's tables and state)."""

    __slots__ = ()

    def _fill(self, key: tuple, xops: Sequence[int], scap: list[tuple[int, float]]) -> list[float]:
        """Water-fill the transfers of ``xops`` and the stream flows ``scap``; memoised under ``key``."""
        streams = self.m.streams
        caps = [self.xcap[p] for p in xops] + [c for _, c in scap]
        paths = [self.ops[p].path for p in xops] + [streams[si].path for si, _ in scap]
        got = self.wf_memo[key] = waterfill(caps, paths, self.capacity) if caps else []
        return got

    def _share_rates(self, running: list[int], got: list[float], rate: dict[int, float],
                     why: dict[int, str]) -> None:
        """Each running op's rate from its water-filled share (``got``, in order of the running ops that
        transfer): min(cap, share / bytes) as min() picks, "bandwidth" where the share binds."""
        cap, xfer, xlow = self.cap, self.xfer, self.xlow
        i = 0
        for p in running:
            c = cap[p]
            if xfer[p] > 0:
                g = got[i]
                i += 1
                r = g / xfer[p]
                rate[p] = r if r < c else c
                why[p] = "bandwidth" if g < xlow[p] else ""
            else:
                rate[p], why[p] = c, ""

    def _rates(self, t: float, running: list[int], links: list[tuple[int, int]], lvl: list[float],
               tg: list[int | None], start: list[float], frac: list[float], fetched: list[float]):
        """Progress rates (op → fraction/cycle), their limiting reasons, and each stream's inflow."""
        xfer, sidx, sbr, s_bpc, s_capb = self.xfer, self.sidx, self.sbr, self.s_bpc, self.s_capb
        nstr = len(s_bpc)
        scap = [(si, s_bpc[si]) for si in range(nstr) if tg[si] is not None]
        rs = [p for p in running if sidx[p] >= 0]
        chain = links + links[::-1]  # forward then backward along chains
        xops = [p for p in running if xfer[p] > 0]
        nx = len(xops)
        xk = tuple([self.xkey[p] for p in xops])
        wants = [p for p in running if sbr[p] > 0 and sidx[p] >= 0]
        memo, wait_why, full = self.wf_memo, self.wait_why, self.full
        rate: dict[int, float] = {}
        why: dict[int, str] = {}
        share = [0.0] * nstr
        for _ in range(12):
            # max-min fair shares: a function of the transfers' caps and paths and the stream caps
            key = (xk, tuple(scap))
            got = memo.get(key)
            if got is None:
                got = self._fill(key, xops, scap)
            share = [0.0] * nstr
            for j in range(len(scap)):
                share[scap[j][0]] = got[nx + j]
            new_rate, new_why = {}, {}
            self._share_rates(running, got, new_rate, new_why)
            for p in wants:  # weights must have arrived
                sb = sbr[p]
                avail = fetched[p] - frac[p] * sb
                if avail <= BYTES_EPS and fetched[p] < sb - BYTES_EPS:
                    si = sidx[p]
                    inflow = share[si] if tg[si] == p else 0.0
                    lim = inflow / sb
                    if lim < new_rate[p]:
                        new_rate[p], new_why[p] = lim, self.snames[si]
            for pr, c in chain:
                gap = frac[pr] - frac[c]
                rc = new_rate.get(c, 0.0)
                rp = new_rate.get(pr, 0.0)
                if gap <= FRACTION_EPS and c in new_rate and rp < rc:  # FIFO empty: consumer follows
                    new_rate[c], new_why[c] = rp, wait_why[pr]
                # FIFO full (only once the consumer runs): the producer waits
                if gap >= full[c] - FRACTION_EPS and pr in new_rate and rc < rp and start[c] <= t:
                    new_rate[pr], new_why[pr] = rc, wait_why[c]
            new_scap = []
            for si in range(nstr):
                if tg[si] is None:
                    continue
                c = s_bpc[si]
                if lvl[si] >= s_capb[si] - BYTES_EPS:
                    c = stream_draw_rate(rs, si, new_rate, sbr, sidx)
                new_scap.append((si, c))
            # the rates are a function of the stream caps: equal caps, and the next round repeats this one
            stable = new_scap == scap
            rate, why, scap = new_rate, new_why, new_scap
            if stable:
                break
        return rate, why, share
