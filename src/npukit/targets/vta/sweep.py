"""VTA in `npukit sweep --level sim`: a .tflite model through the delegate on each VTA configuration.

Compile = the delegate's partition and lowering (one VTA program per delegated op) and each program's
skip-exec counters; it depends on the log2 shapes and buffer sizes but not on ``timing.*``, so clock,
DRAM and queue-depth sweeps share it. Time = every program on the token-queue timing model
(`npukit.targets.vta.timing`), back to back, as the delegate reports them.

Roofline of the same point: the programs' GEMM MACs at ``batch × block²`` MACs per cycle, or their
LOAD/STORE bytes at ``dram_bytes_per_cycle``, whichever is longer (both at the preset's clock).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from npukit.errors import ConfigError, ModelError
from npukit.evidence import Tier
from npukit.perf.simsweep import SimResult, accumulate, roofline
from npukit.targets.vta.delegate import VARIANTS, _counters
from npukit.targets.vta.delegate.lower import lower_add, lower_gemm, supported
from npukit.targets.vta.hw import Timing, VtaHw
from npukit.targets.vta.isa import ISA
from npukit.targets.vta.timing import ledger, time_program


@dataclass(frozen=True)
class TfliteWorkload:
    name: str
    data: bytes  # the .tflite file: what the object store ships


@dataclass
class VtaProgram:
    hw: VtaHw  # the shapes it was built for (what encodes and decodes it)
    ops: list[tuple[str, list, Any]]  # (op name, instructions, fsim counters) per delegated op

    def __getstate__(self) -> dict[str, Any]:
        """Pickled as machine code: the instruction classes are made at run time by the ISA spec."""
        spec = ISA.bind(self.hw)
        return {"hw": self.hw, "ops": [(n, spec.encode_program(ins), c) for n, ins, c in self.ops]}

    def __setstate__(self, state: dict[str, Any]) -> None:
        spec = ISA.bind(state["hw"])
        self.hw = state["hw"]
        self.ops = [(n, spec.decode_program(words), c) for n, words, c in state["ops"]]


class VtaSweep:
    target = "vta"
    engines = ("load", "compute", "store")
    workload_axes: ClassVar[dict[str, Any]] = {"variant": "exact", "requant": "host"}

    def load_workload(self, spec: str) -> TfliteWorkload:
        from npukit.models.tflite import zoo

        path = zoo.resolve(spec)
        try:
            return TfliteWorkload(spec, Path(path).read_bytes())
        except OSError as exc:
            raise ModelError(f"--model {spec}: cannot read {path}: {exc.strerror}") from None

    def workload_digest(self, workload: TfliteWorkload) -> str:
        return hashlib.sha256(workload.data).hexdigest()[:16]

    def program_key(self, hw: VtaHw, params: dict[str, Any]) -> Any:
        shape = dataclasses.replace(hw, name="", description="", timing=Timing())
        return [repr(shape), params["variant"], params["requant"]]

    def compile(self, workload: TfliteWorkload, hw: VtaHw, params: dict[str, Any]) -> VtaProgram:
        from npukit.models.tflite import read_model

        variant, requant = params["variant"], params["requant"]
        if variant not in VARIANTS or requant not in ("host", "vta"):
            raise ConfigError(f"vta: variant exact|alkali, requant host|vta: got {variant}, {requant}")
        model = read_model(workload.data)
        ops = []
        for i, op in enumerate(model.ops):
            if supported(model, op, variant) is not None:
                continue
            if op.name == "ADD":
                low = lower_add(hw, model, i, variant, requant_on_vta=requant == "vta")
            else:
                low = lower_gemm(hw, model, i, requant_on_vta=requant == "vta")
            ops.append((op.name, low.program.instrs, _counters(hw, low)))
        if not ops:
            raise ConfigError(f"vta: no op of {workload.name} can run on VTA ({variant} delegate)")
        return VtaProgram(hw, ops)

    def time(self, program: VtaProgram, hw: VtaHw, params: dict[str, Any]) -> SimResult:
        t = hw.timing
        results = [time_program(hw, instrs) for _, instrs, _ in program.ops]
        leds = [ledger(hw, r, c) for r, (_, _, c) in zip(results, program.ops, strict=True)]
        cycles, busy, stalls = accumulate(results)
        macs = sum(led["gemm_macs"].value for led in leds)
        dram = sum(led["dram_bytes"].value for led in leds)
        energy_uj = sum(led["energy"].value for led in leds)
        tier = Tier.weakest(Tier(t.tier), Tier.DERIVED)
        roof_s, bound = roofline(macs, hw.batch * hw.block * hw.block * hw.clock_hz, dram,
                                 t.dram_bytes_per_cycle * hw.clock_hz)
        return SimResult(cycles, cycles / hw.clock_hz, tier, energy_uj * 1e-6,
                         Tier.weakest(Tier(t.energy_tier), Tier.DERIVED), busy, stalls, macs, dram,
                         roof_s, bound, tier,
                         f"VTA token-queue timing, preset {hw.name}, {len(results)} programs back to back")


ADAPTER = VtaSweep()
