"""Timing adapter: a compiled plan's tasks as ops on the shared timing core (`npukit.sim.timing`).

Machine: per core ``c`` a compute engine ``npu{c}`` (CNA + vector unit, one task at a time), a DMA-in
and a DMA-out engine (``dma{c}.in`` / ``dma{c}.out``) sharing the core's DMA port (``port{c}``), all
ports crossing the shared DDR (``dma.ddr_total_gbps``). Weights stream from DRAM at ``dma.dram_gbps``
(1 GB/s, measured); activation tensors that fit the L3 (``dma.l3_bytes``) move at the L3-snoop rate
``dma.l3_gbps`` (3 GB/s, measured), larger ones (the FFN's 4x-wide intermediate, fp32 partial sums
of big outputs) at the DRAM rate.

Per task: DMA-in (weights, features, fp32 partial sums) into one of two CBUF slots → compute →
DMA-out from one of two output slots; the slots alternate, so the next task's loads overlap this
task's compute (double buffering) and the hazards the core tracks on address ranges enforce it.
Tensors live at DRAM ranges; a consumer's DMA-in reads its producers' ranges (RAW across cores).
A submission (shard) starts with the driver's submit cost on the core's DMA-in queue, after the
previous submission on that core has finished computing (one job per core at a time).

Schedules over a batch of inputs: ``single`` (every shard on core 0), ``round-robin`` (the seed:
shard i on core i mod 3, one input after another), ``pipeline`` (contiguous shard stages on the three
cores, inputs flowing through), ``data-parallel`` (input b on core b mod 3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from npukit.evidence import Ledger, Tier
from npukit.sim.timing import Machine, Op, Resource, TimingResult, simulate
from npukit.targets.rk3588.compile import SCHEDULES, Plan
from npukit.targets.rk3588.compile.shard import Shard
from npukit.targets.rk3588.tasks import F16, F32, Task, tasks


@dataclass
class ShardTiming:
    input: int
    shard: int
    core: int
    start: float
    end: float
    dma_cycles: float
    compute_cycles: float
    tasks: int

    def to_json(self) -> dict[str, Any]:
        return vars(self)


@dataclass
class TimingReport:
    schedule: str
    batch: int
    result: TimingResult
    shards: list[ShardTiming]
    cores: int
    clock_hz: float
    ops: int
    notes: list[str] = field(default_factory=list)

    @property
    def cycles(self) -> float:
        return self.result.cycles

    @property
    def latency_ms(self) -> float:
        """Makespan of the batch."""
        return self.result.cycles / self.clock_hz * 1e3

    @property
    def per_input_ms(self) -> float:
        return self.latency_ms / self.batch

    def core_busy(self) -> dict[str, dict[str, float]]:
        out = {}
        for c in range(self.cores):
            comp = self.result.engines.get(f"npu{c}")
            din = self.result.engines.get(f"dma{c}.in")
            out[f"core{c}"] = {"compute_busy": comp.busy if comp else 0.0,
                               "dma_in_busy": din.busy if din else 0.0,
                               "idle": self.result.cycles - (comp.busy if comp else 0.0)}
        return out

    def ledger(self) -> Ledger:
        src = ("npukit timing core on the rk3588 preset (tiles, DMA, submit and task overheads; "
               "projected: not measured on silicon)")
        led = Ledger()
        led.add("cycles", self.cycles, "cycles", Tier.PROJECTED, src)
        led.add("latency_ms", self.latency_ms, "ms", Tier.PROJECTED, src)
        led.add("per_input_ms", self.per_input_ms, "ms", Tier.PROJECTED, src + f"; batch {self.batch}")
        for c, v in self.core_busy().items():
            led.add(f"{c}_utilization", v["compute_busy"] / max(self.cycles, 1), "", Tier.PROJECTED, src)
        return led

    def to_json(self) -> dict[str, Any]:
        return {"schedule": self.schedule, "batch": self.batch, "cycles": self.cycles,
                "latency_ms": self.latency_ms, "per_input_ms": self.per_input_ms, "ops": self.ops,
                "cores": self.core_busy(), "shards": [s.to_json() for s in self.shards],
                "figures": self.ledger().to_json()["figures"], "notes": self.notes}


def assign(plan: Plan, schedule: str, batch: int) -> list[tuple[int, int, int]]:
    """(input, shard, core) in program order for ``schedule``."""
    if schedule not in SCHEDULES:
        raise ValueError(schedule)
    n, cores = len(plan.shards), plan.hw.n_cores
    if schedule == "single":
        return [(b, i, 0) for b in range(batch) for i in range(n)]
    if schedule == "round-robin":
        return [(b, i, i % cores) for b in range(batch) for i in range(n)]
    if schedule == "data-parallel":
        return [(b, i, b % cores) for b in range(batch) for i in range(n)]
    stage = _stages(plan, cores)
    pairs = [(b, i) for b in range(batch) for i in range(n)]
    order = sorted(pairs, key=lambda bi: (bi[0] + stage[bi[1]], bi))
    return [(b, i, stage[i]) for b, i in order]


def _stages(plan: Plan, cores: int) -> list[int]:
    """Contiguous shard ranges of about equal estimated work, one per core."""
    from npukit.targets.rk3588.compile.tile import estimate_cycles

    g = plan.graph
    cost = {n.name: estimate_cycles(n, g, plan.hw, n.tiling) / max(1, _task_count(plan, n.name))
            for n in g.nodes}
    work = [sum(cost[it.node] * (it.stop - it.start) for it in s.items) for s in plan.shards]
    total, acc, out = sum(work), 0.0, []
    for w in work:
        out.append(min(cores - 1, int(acc / total * cores)) if total else 0)
        acc += w
    return out


def _task_count(plan: Plan, node: str) -> int:
    return sum(it.stop - it.start for s in plan.shards for it in s.items if it.node == node)


class _Builder:
    """Ops per (input, shard) with estimated times, merged into one program order (see `build`)."""

    def __init__(self, plan: Plan, group: int) -> None:
        self.plan, self.hw, self.g = plan, plan.hw, plan.graph
        self.group = group
        self.addr: dict[Any, int] = {}  # unit address per tensor / partial tile / slot / job token
        self.slot = [0] * self.hw.n_cores
        self.task_cache = {n.name: list(tasks(n, self.g, n.tiling, self.hw)) for n in self.g.nodes}
        self.alias = {n.output: n.inputs[0] for n in self.g.nodes if n.op == "barrier"}
        self.dma_bpc = self.hw.dma_bytes_per_cycle()

    def act_rate(self, shape: tuple[int, ...], itemsize: int) -> float:
        """DMA bytes/cycle for an activation tensor: the L3-snoop rate if it fits the L3, else DRAM."""
        fits = math.prod(shape) * itemsize <= self.hw.dma.l3_bytes.value
        return self.hw.l3_bytes_per_cycle() if fits else self.dma_bpc

    def unit(self, key: Any) -> tuple[int, int]:
        """A one-unit address range per named thing: ranges only order ops, sizes do not matter."""
        if key not in self.addr:
            self.addr[key] = len(self.addr)
        a = self.addr[key]
        return (a, a + 1)

    def tensor(self, b: int, name: str) -> tuple[int, int]:
        while name in self.alias:
            name = self.alias[name]
        return self.unit(("t", b, name))

    def compute_cycles(self, t: Task) -> float:
        core = self.hw.core
        macs = t.macs
        if t.kind == "cna":
            (m0, m1), (n0, n1), (k0, k1) = t.sl
            macs = (_pad(m1 - m0, core.m_align) * _pad(n1 - n0, core.weight_group_out)
                    * _pad(k1 - k0, core.weight_group_in))
        dtype = self.g.node(t.node).attrs.get("dtype", "fp16") if t.kind == "cna" else "fp16"
        return macs / self.hw.macs_per_cycle(dtype) + t.vec_elems / core.vector_elems_per_cycle.value

    def shard_ops(self, b: int, si: int, shard: Shard, c: int) -> tuple[list[dict[str, Any]], float]:
        """The op descriptions of one shard on core ``c`` and its estimated cycles."""
        hw = self.hw
        job = self.unit(("job", c))
        submit = hw.driver.submit_overhead_us.value * 1e-6 * hw.clock_hz
        ops = [dict(engine=f"dma{c}.in", label=f"submit shard {si} (input {b})", cycles=submit, reads=(job,),
                    args={"shard": si, "input": b, "kind": "submit"})]
        est = submit
        for item in shard.items:
            node = self.g.node(item.node)
            ts = self.task_cache[item.node][item.start:item.stop]
            reads_in = tuple(self.tensor(b, i) for i in node.inputs)
            out_rng = self.tensor(b, node.output)
            for g0, g1 in _chunks(len(ts), self.group):
                est += self._chunk(ops, b, si, c, node.name, ts[g0:g1], reads_in, out_rng)
        last = max(i for i, o in enumerate(ops) if o["args"]["kind"] in ("compute", "submit"))
        ops[last]["writes"] = (*ops[last].get("writes", ()), job)  # the job ends after its last compute
        return ops, est

    def _chunk(self, ops: list[dict[str, Any]], b: int, si: int, c: int, name: str, chunk: list[Task],
               reads_in: tuple, out_rng: tuple) -> float:
        hw = self.hw
        s = self.slot[c] = self.slot[c] ^ 1
        cb, ob = self.unit(("cb", c, s)), self.unit(("ob", c, s))
        din = sum(t.dma_in for t in chunk)
        dout = sum(t.dma_out for t in chunk)
        w = sum(t.dma_w for t in chunk)
        node = self.g.node(name)
        in_rate = self.act_rate(max((self.g.shape(i) for i in node.inputs), key=math.prod), F16)
        out_rate = self.act_rate(node.shape, F32 if any(not t.last for t in chunk) else F16)
        in_cycles = w / self.dma_bpc + (din - w) / in_rate
        out_cycles = dout / out_rate
        part_in = tuple(self.unit(("p", b, name, t.sl[0][0], t.sl[1][0])) for t in chunk
                        if t.kind == "cna" and t.sl[2][0] > 0)
        part_out = tuple(self.unit(("p", b, name, t.sl[0][0], t.sl[1][0])) for t in chunk
                         if t.kind == "cna" and not t.last)
        args = {"shard": si, "input": b, "node": name, "tasks": len(chunk)}
        label = f"{name} x{len(chunk)}" if len(chunk) > 1 else name
        setup = hw.dma.setup_cycles.value
        if din:
            ops.append(dict(engine=f"dma{c}.in", label=f"load {label}", cycles=in_cycles,
                            latency=setup, path=("ddr", f"port{c}"), xfer_bytes=din,
                            reads=reads_in + part_in, writes=(cb,),
                            args={**args, "bytes": din, "kind": "dma"}))
        cyc = sum(self.compute_cycles(t) for t in chunk) + len(chunk) * hw.core.task_overhead_cycles.value
        ops.append(dict(engine=f"npu{c}", label=label, cycles=cyc, reads=(cb,), writes=(ob,),
                        args={**args, "macs": sum(t.macs for t in chunk), "kind": "compute"}))
        if dout:
            final = (out_rng,) if any(t.last for t in chunk) else ()
            ops.append(dict(engine=f"dma{c}.out", label=f"store {label}", cycles=out_cycles,
                            latency=setup, path=("ddr", f"port{c}"), xfer_bytes=dout, reads=(ob,),
                            writes=final + part_out, args={**args, "bytes": dout, "kind": "dma"}))
        return max(cyc, in_cycles + out_cycles + setup)


def _chunks(n: int, group: int) -> list[tuple[int, int]]:
    """Task ranges of one op: sizes 1, 2, 4, ... up to ``group``, then ``group`` — a ramp, so the
    op's first loads overlap compute as they would task by task (a dependency on the previous op
    stalls only a small first chunk) while long ops still become few timing ops."""
    out, at, size = [], 0, 1
    while at < n:
        out.append((at, min(n, at + size)))
        at += size
        size = min(group, size * 2)
    return out


def _pad(v: int, a: int) -> int:
    return -(-v // a) * a


def build(plan: Plan, order: list[tuple[int, int, int]], group: int) -> list[Op]:
    """All shards' ops in one program order that respects every dependency.

    Each shard gets an estimated start by list scheduling (after its core's previous shard and after
    the shard producing its input); its ops are keyed by estimated time within that span, and the merge
    by key interleaves the cores' streams the way they would run — so a small issue window suffices
    and a consumer always follows its producer in program order.
    """
    bld = _Builder(plan, group)
    core_free = [0.0] * plan.hw.n_cores
    done: dict[tuple[int, int], float] = {}
    keyed: list[tuple[float, int, dict[str, Any]]] = []
    for b, si, c in order:
        ops, est = bld.shard_ops(b, si, plan.shards[si], c)
        start = max(core_free[c], done.get((b, si - 1), 0.0))
        done[(b, si)] = core_free[c] = start + est
        for j, o in enumerate(ops):
            keyed.append((start + est * j / len(ops), len(keyed), o))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [Op(i, is_async=True, **o) for i, (_, _, o) in enumerate(keyed)]


def _part(part: tuple[int, int], t: Task) -> tuple[int, int]:
    """The DRAM range of one output tile's fp32 partial sums (K passes of the same tile share it)."""
    at = part[0] + t.sl[0][0] * 65536 + t.sl[1][0]
    return (at, at + 1)


def _with(op: Op, **kw: Any) -> Op:
    from dataclasses import replace

    return replace(op, **kw)


def machine(plan: Plan, window: int | None = None) -> Machine:
    hw = plan.hw
    engines = tuple(e for c in range(hw.n_cores) for e in (f"npu{c}", f"dma{c}.in", f"dma{c}.out"))
    res = (Resource("ddr", hw.dma.ddr_total_gbps.value * 1e9 / hw.clock_hz),
           *(Resource(f"port{c}", hw.l3_bytes_per_cycle()) for c in range(hw.n_cores)))
    return Machine(engines, res, clock_hz=hw.clock_hz, issue_window=window)


def simulate_plan(plan: Plan, schedule: str | None = None, batch: int = 1, max_ops: int = 20000,
                  window: int = 96) -> TimingReport:
    """Schedule ``batch`` inputs of ``plan`` on the cores. Tasks of one op are grouped into chunks when
    the op count would exceed ``max_ops`` (the report says so); ``window`` is the command-queue depth
    (issued ops waiting to start)."""
    schedule = schedule or plan.options.schedule
    order = assign(plan, schedule, batch)
    group = max(1, math.ceil(3 * plan.tasks * batch / max_ops))
    ops = build(plan, order, group)
    result = simulate(machine(plan, window), ops)
    report = TimingReport(schedule, batch, result, _shard_timings(result, plan, order), plan.hw.n_cores,
                          plan.hw.clock_hz, len(ops))
    if group > 1:
        report.notes.append(f"tasks of one op timed in groups of {group} (op budget {max_ops})")
    return report


def _shard_timings(result: TimingResult, plan: Plan, order: list[tuple[int, int, int]]) -> list[ShardTiming]:
    spans: dict[tuple[int, int], ShardTiming] = {}
    for b, si, c in order:
        spans[(b, si)] = ShardTiming(b, si, c, math.inf, 0.0, 0.0, 0.0, plan.shards[si].tasks)
    for o in result.ops:
        st = spans[(o.args["input"], o.args["shard"])]
        st.start, st.end = min(st.start, o.start), max(st.end, o.end)
        if o.args.get("kind") == "dma":
            st.dma_cycles += o.busy
        elif o.args.get("kind") == "compute":
            st.compute_cycles += o.busy
    return [spans[(b, si)] for b, si, _ in order]
