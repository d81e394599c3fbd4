"""The VTA TFLite delegate: ``npukit tflite run MODEL --target vta [--delegate exact|alkali]``.

`make_delegate` is the factory the target record names (``extra["tflite_delegate"]``). `VtaDelegate`
partitions a model op by op (`lower.supported`), lowers each delegated op to a VTA program once, times
every program on the shared core (data-independent, so once per distinct program: the timing and
counters are cached by the program's encoded instructions and the hardware description) and
reports cycles, utilisation, energy and the exact-mode host/VTA split as tiered figures.

Functional results: the exact delegate's programs compute TFLite's reference arithmetic bit for bit
(`lower`; pinned against LiteRT BUILTIN_REF by the VTA tests, with the instruction-level simulator),
so by default (``functional="compiled"``) an inference runs the host's compiled kernels for the
delegated ops, which give the same bits far faster; ``--set functional=simulate`` executes every
program on the functional simulator instead. The alkali delegate's arithmetic differs from
TFLite's, so it always simulates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from npukit.errors import ConfigError
from npukit.evidence import Ledger, Tier
from npukit.models.tflite.delegates import Plan, op_segments
from npukit.models.tflite.model import Model
from npukit.sim.timing import TimingResult
from npukit.targets.vta.delegate.lower import Lowered, lower_add, lower_gemm, supported
from npukit.targets.vta.hw import VtaHw
from npukit.targets.vta.timing import ledger, time_program

VARIANTS = ("exact", "alkali")


@dataclass
class OpReport:
    index: int
    name: str
    instructions: int
    timing: TimingResult
    ledger: Ledger


@dataclass
class VtaDelegate:
    hw: VtaHw
    variant: str = "exact"
    trace_path: str | None = None
    requant: str = "host"  # exact mode: where TFLite's rescale of CONV_2D/DEPTHWISE_CONV_2D runs
    functional: str = "compiled"  # exact mode: "compiled" host kernels (same bits) or "simulate"
    name: str = "vta"
    lowered: dict[int, Lowered] = field(default_factory=dict)
    reports: list[OpReport] = field(default_factory=list)
    host_reasons: dict[int, str] = field(default_factory=dict)

    def partition(self, model: Model) -> Plan:
        self.lowered.clear()
        self.reports.clear()
        for i, op in enumerate(model.ops):
            why = supported(model, op, self.variant)
            if why is not None:
                self.host_reasons[i] = why
                continue
            if op.name == "ADD":
                low = lower_add(self.hw, model, i, self.variant, requant_on_vta=self.requant == "vta")
            else:
                low = lower_gemm(self.hw, model, i, requant_on_vta=self.requant == "vta")
            self.lowered[i] = low
            res, counters = _timed(self.hw, low)
            self.reports.append(OpReport(i, op.name, len(low.program.instrs), res,
                                         ledger(self.hw, res, counters)))
        runners = {i: low.run for i, low in self.lowered.items()}
        if self.variant == "exact" and self.functional == "compiled":
            from npukit.models.tflite.interpreter import prepare_op

            runners = {i: prepare_op(model, i, compiled=True) for i in self.lowered}

        def run_op(op, ins):
            return runners[_index(model, op)](ins)

        segments = op_segments(model, self.lowered, run_op, label=f"vta-{self.variant}")
        plan = Plan(segments, self.figures())
        if self.trace_path:
            self.write_trace(self.trace_path)
        return plan

    def figures(self) -> Ledger:
        led = Ledger()
        src = f"VTA timing model, preset {self.hw.name} ({self.variant} delegate), programs run back to back"
        tier = Tier.weakest(Tier(self.hw.timing.tier), Tier.DERIVED)
        cycles = sum(r.timing.cycles for r in self.reports)
        led.add("vta_delegated_ops", len(self.reports), "ops", Tier.DERIVED, "delegate partition")
        led.add("vta_instructions", sum(r.instructions for r in self.reports), "insn", Tier.DERIVED,
                "lowered VTA programs")
        led.add("vta_cycles", cycles, "cycles", tier, src)
        led.add("vta_time", cycles / self.hw.clock_hz * 1e6, "us", tier,
                f"{src} at {self.hw.timing.clock_mhz:g} MHz")
        macs = sum(r.ledger["gemm_macs"].value for r in self.reports)
        peak = cycles * self.hw.batch * self.hw.block * self.hw.block
        led.add("vta_gemm_macs", macs, "MAC", Tier.DERIVED, "uop iterations × block² (padded blocks)")
        led.add("vta_gemm_utilisation", 100.0 * macs / peak if peak else 0.0, "%", tier,
                "MACs / (cycles × MACs per cycle)")
        led.add("vta_dram_bytes", sum(r.ledger["dram_bytes"].value for r in self.reports), "B", Tier.DERIVED,
                "LOAD/STORE sizes of the programs")
        energy_tier = Tier.weakest(Tier(self.hw.timing.energy_tier), Tier.DERIVED)
        led.add("vta_energy", sum(r.ledger["energy"].value for r in self.reports), "uJ", energy_tier,
                self.hw.timing.energy_source or "preset energy figures")
        led.add("host_requant_elements", sum(lo.host_requant for lo in self.lowered.values()), "elem",
                Tier.DERIVED, "exact mode: outputs the host rescales after VTA (0 in alkali mode)")
        led.add("vta_export_bytes", sum(lo.export_bytes for lo in self.lowered.values()), "B", Tier.DERIVED,
                "bytes VTA stores for the host (exact: 1-4 byte planes per int32 output)")
        return led

    def write_trace(self, path: str | Path) -> Path:
        """One Perfetto trace of every delegated program, placed back to back on one time axis."""
        import json

        from npukit.sim.trace import to_trace

        ops_tid = 1000  # a track of the TFLite ops themselves, above the modules' tracks
        events: list[dict] = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": ops_tid,
                               "args": {"name": "TFLite ops"}},
                              {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": ops_tid,
                               "args": {"sort_index": 0}}]
        offset_us = 0.0
        for r in self.reports:
            tr = to_trace(r.timing, process=f"VTA {self.hw.name}: {len(self.reports)} delegated ops", pid=1,
                          metadata={"op": r.index, "tier": str(Tier.weakest(Tier(self.hw.timing.tier)))},
                          start_us=offset_us)
            seen = {(e["name"], e.get("tid")) for e in events if e.get("ph") == "M"}
            events += [ev for ev in tr["traceEvents"]
                       if ev.get("ph") != "M" or (ev["name"], ev.get("tid")) not in seen]
            events.append({"ph": "X", "name": f"op {r.index} {r.name}", "pid": 1, "tid": ops_tid,
                           "ts": offset_us, "dur": r.timing.seconds * 1e6, "args": {"op": r.index}})
            offset_us += r.timing.seconds * 1e6
        out = Path(path)
        try:
            out.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))
        except OSError as exc:
            raise ConfigError(f"cannot write trace {path}: {exc.strerror}") from None
        return out


def _index(model: Model, op) -> int:
    return next(i for i, o in enumerate(model.ops) if o is op)


_TIMED: dict[tuple, tuple[TimingResult, object]] = {}  # (hw, image size, encoded program) → timing, counters
_TIMED_MAX = 4096


def _timed(hw: VtaHw, low: Lowered):
    """`time_program` and `_counters` of ``low``, derived once per distinct program: both depend
    only on the instructions, the image size and the hardware description."""
    key = (repr(hw), int(low.program.image.size), tuple(low.program.words))
    hit = _TIMED.get(key)
    if hit is None:
        if len(_TIMED) >= _TIMED_MAX:
            _TIMED.clear()
        hit = _TIMED[key] = (time_program(hw, low.program.instrs), _counters(hw, low))
    return hit


def _counters(hw: VtaHw, low: Lowered):
    """The program's fsim counters without executing it (skip-exec: counts and tokens only)."""
    import numpy as np

    from npukit.targets.vta.sim import Simulator

    sim = Simulator(hw, np.zeros(low.program.image.size, np.uint8), skip_exec=True)
    sim.run(low.program.instrs)
    return sim.counters


def make_delegate(variant: str | None = None, hw: str | None = None,
                  overrides: list[str] | None = None) -> VtaDelegate:
    """The factory `npukit tflite run --target vta` calls with ``--delegate``, ``--hw``, ``--set``.
    Two ``--set`` keys belong to the delegate, not the hardware: ``trace=FILE`` writes the VTA
    programs' Perfetto trace (module timelines); ``requant=host|vta`` picks where exact mode rescales
    convolution outputs (default host: VTA exports int32; vta: the bit-exact ALU sequence of
    `delegate.requant`, wherever the layer's accumulator bound allows); ``functional=compiled|simulate``
    picks how exact mode computes the delegated ops' values (see the module doc)."""
    from npukit import hw as hwmod

    v = variant or "exact"
    if v not in VARIANTS:
        raise ConfigError(f"unknown VTA delegate {v!r} (choose exact or alkali)")
    own, rest = {"trace": None, "requant": "host", "functional": "compiled"}, []
    for o in overrides or []:
        key, _, value = o.partition("=")
        if key.strip() in own:
            own[key.strip()] = value.strip()
        else:
            rest.append(o)
    if own["requant"] not in ("host", "vta"):
        raise ConfigError(f"requant={own['requant']!r}: expected host or vta")
    if own["functional"] not in ("compiled", "simulate"):
        raise ConfigError(f"functional={own['functional']!r}: expected compiled or simulate")
    desc = hwmod.load_hw(hw or "vta-alkali", rest, expect="vta")
    return VtaDelegate(desc, v, own["trace"], own["requant"], functional=own["functional"])
