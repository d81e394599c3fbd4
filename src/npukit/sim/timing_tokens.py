"""Dependency-token queues and engine pools for the timing event loop (see `npukit.sim.timing`).

Both are optional: a machine without ``queues`` never reads an op's ``pop``/``push`` and a machine
without an `EnginePool` never dispatches, so the loop pays one local flag test where they would act.

* **Tokens.** A head pops its ``pop`` queues in order before it starts (each pop takes a token the
  moment one is there; the head waits on the first empty queue) and pushes its ``push`` queues in
  order once its work and tail are done (waiting on the first full queue). A token pushed at ``t`` can
  be popped at ``t``; the settle phase runs another pass whenever a token moved.
* **Command queues.** With ``command_depth`` the issuer also stops while the next op's own command
  queue (its engine's, or its pool's) holds that many issued ops. An op leaves it when its engine
  takes it as the head (VTA's modules read an instruction, then wait for its tokens).
* **Pools.** An op naming a pool waits, in program order among that pool's ops, until it is issued
  and some core of the pool is free — it has no unfinished op of its own queued — and then joins the
  lowest-numbered free core's queue ahead of that core's later (not yet issued) pinned ops.
"""

from __future__ import annotations

from npukit.sim.timing_types import EnginePool, Machine, Op, TimingError, TokenDeadlock, TokenOp, TokenWait

_INF = float("inf")


def expand_engines(machine: Machine) -> tuple[tuple[str, ...], dict[str, tuple[int, ...]]]:
    """(every engine queue's name, {pool name: its cores' ordinals}); raises on a bad declaration."""
    cores: list[str] = []
    pools: dict[str, tuple[int, ...]] = {}
    for e in machine.engines:
        if isinstance(e, str):
            cores.append(e)
        elif isinstance(e, EnginePool):
            if not (isinstance(e.count, int) and e.count >= 1):
                raise TimingError(f"engine pool {e.name!r} needs a core count >= 1, not {e.count!r}")
            pools[e.name] = tuple(range(len(cores), len(cores) + e.count))
            cores.extend(e.cores)
        else:
            raise TimingError(f"machine engine {e!r} is neither a name nor an EnginePool")
    seen = [*cores, *pools]
    if len(set(seen)) != len(seen):
        dup = next(x for x in seen if seen.count(x) > 1)
        raise TimingError(f"engine name {dup!r} is declared twice (pool cores are named <pool>.<i>)")
    return tuple(cores), pools


def check_tokens(machine: Machine, ops: list[Op]) -> None:
    """Queue declarations are sane, and token ops only run on a machine that has queues."""
    names = [q.name for q in machine.queues]
    if len(set(names)) != len(names):
        raise TimingError("token queue names must be distinct")
    for q in machine.queues:
        if not (isinstance(q.capacity, int) and q.capacity >= 1 and isinstance(q.initial, int)
                and 0 <= q.initial <= q.capacity):
            raise TimingError(f"token queue {q.name!r}: need capacity >= 1 and 0 <= initial <= capacity")
    depth = machine.command_depth
    if depth is not None and not (isinstance(depth, int) and depth >= 1):
        raise TimingError(f"command_depth must be a positive integer, not {depth!r}")
    if not machine.queues and any(issubclass(c, TokenOp) for c in set(map(type, ops))):
        for o in ops:
            if getattr(o, "pop", ()) or getattr(o, "push", ()):
                raise TimingError(f"op {o.index} pops or pushes tokens; the machine declares no token queues")


class Tokens:
    """Mixed into `npukit.sim.timing_state.Sim`: token handshakes, command queues, pool dispatch."""

    __slots__ = ()

    def _token_tables(self) -> None:
        """Per op: the queue ordinals it pops and pushes; per queue: tokens held and capacity."""
        machine, ops = self.m, self.ops
        self.gated = gated = bool(machine.queues)
        self.pops = self.pushes = None
        self.moved = False
        if not gated:
            return
        qix = {q.name: i for i, q in enumerate(machine.queues)}

        def ordinals(o: Op, what: str) -> tuple[int, ...]:
            names = getattr(o, what, ())
            try:  # (one queue named as a bare string: that queue)
                return tuple(qix[q] for q in ((names,) if isinstance(names, str) else names))
            except KeyError as exc:
                raise TimingError(f"op {o.index} {what}s unknown token queue {exc.args[0]!r}") from None

        self.pops = [ordinals(o, "pop") for o in ops]
        self.pushes = [ordinals(o, "push") for o in ops]
        self.tok_cap = [q.capacity for q in machine.queues]
        self.pop_why = [f"pop_{q.name}" for q in machine.queues]
        self.push_why = [f"push_{q.name}" for q in machine.queues]

    def _token_state(self) -> None:
        n = self.n
        self.tokens = [q.initial for q in self.m.queues]
        self.pop_ptr, self.push_ptr = [0] * n, [0] * n  # pops / pushes done so far, per op
        self.pushing: dict[int, None] = {}  # heads whose work is done, waiting on a full queue
        self.pending = [0] * (len(self.queue) + len(self.pools))  # issued, not started, per command queue

    def _take(self, p: int) -> bool:
        """Pop what ``p`` can of its queues, in order; True once every pop is done."""
        want, i, tokens = self.pops[p], self.pop_ptr[p], self.tokens
        while i < len(want) and tokens[want[i]] > 0:
            tokens[want[i]] -= 1
            i += 1
            self.moved = True
        self.pop_ptr[p] = i
        return i == len(want)

    def _give(self, p: int) -> bool:
        """Push what ``p`` can to its queues, in order; True once every push is done."""
        out, i, tokens, cap = self.pushes[p], self.push_ptr[p], self.tokens, self.tok_cap
        while i < len(out) and tokens[out[i]] < cap[out[i]]:
            tokens[out[i]] += 1
            i += 1
            self.moved = True
        self.push_ptr[p] = i
        if i < len(out):
            self.pushing[p] = None
            return False
        self.pushing.pop(p, None)
        return True

    def _token_why(self, p: int) -> str:
        """The stall name of a head waiting on a token (``pop_<queue>`` / ``push_<queue>``)."""
        if p in self.pushing:
            return self.push_why[self.pushes[p][self.push_ptr[p]]]
        if self.pop_ptr[p] < len(self.pops[p]):
            return self.pop_why[self.pops[p][self.pop_ptr[p]]]
        return "issue"

    def _token_deadlock(self, t: float) -> TokenDeadlock | None:
        """Every live head stuck on a token, as a `TokenDeadlock` (None: no head waits on a token)."""
        waits = []
        queues, ops, k = self.m.queues, self.ops, self.k
        for e in self.live:
            p = self.cur[e]
            if p >= k:
                continue
            if p in self.pushing:
                action, qi = "push", self.pushes[p][self.push_ptr[p]]
            elif self.start[p] == _INF and self.pop_ptr[p] < len(self.pops[p]):
                action, qi = "pop", self.pops[p][self.pop_ptr[p]]
            else:
                continue
            q = queues[qi]
            waits.append(TokenWait(ops[p].index, ops[p].label, self.cores[e], action, q.name,
                                   self.tokens[qi], q.capacity))
        return TokenDeadlock(t, waits) if waits else None

    # --- pools -----------------------------------------------------------------------------------
    def _dispatch(self) -> bool:
        """Hand issued pool ops, in program order per pool, to free cores (lowest index first)."""
        k, cur, queue, head, eng = self.k, self.cur, self.queue, self.head, self.eng
        moved = False
        for pi, lst in enumerate(self.pool_ops):
            j = self.pool_next[pi]
            while j < len(lst) and lst[j] < k:
                for e in self.pool_cores[pi]:
                    if cur[e] < 0 or cur[e] >= k:  # nothing issued left in its own queue
                        break
                else:
                    break
                p = lst[j]
                queue[e].insert(head[e], p)
                if self.cdepth:  # it leaves the pool's command queue as the core's head
                    self.pending[self.cq[p]] -= 1
                revive = cur[e] < 0
                cur[e], eng[p] = p, e
                self.dep_why[p], self.wait_why[p] = f"dep_{self.cores[e]}", f"wait_{self.cores[e]}"
                if revive:
                    self.live = [c for c in range(len(cur)) if cur[c] >= 0]
                    self.dead[:] = [c for c in self.dead if c != e]
                j += 1
                moved = True
            self.pool_next[pi] = j
        return moved
