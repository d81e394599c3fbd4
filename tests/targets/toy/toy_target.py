"""A toy accumulator machine, registered from outside the package the way any target is.

Everything npukit needs is in this one file: the hardware description, the ISA as toolkit data, a
functional simulator and the timing adapter onto the shared core. ``NPUKIT_TARGETS=toy_target``
(with this folder on ``sys.path``) makes ``npukit asm|disasm|sim --target toy`` work.

16-bit words, ``op = word[15:12]``: ``halt`` (0), ``ldi imm=`` (1: acc = signed 12-bit imm),
``add addr=`` (2: acc += mem[addr]), ``mul addr=`` (3: acc *= mem[addr]), ``store addr=`` (4:
mem[addr] = acc). The address field is ``mem_log2`` bits wide, derived from the description; the
accumulator wraps at ``acc_bits``.
"""

from __future__ import annotations

from dataclasses import dataclass

from npukit.isa import Field, Format, KeyValueSyntax, Spec, const, listing, text
from npukit.registry import Target
from npukit.sim.timing import Machine, Op, Resource
from npukit.sim.timing import simulate as simulate_timing


@dataclass(frozen=True)
class ToyHw:
    mem_log2: int = 4  # data memory of 2**mem_log2 words
    acc_bits: int = 16
    clock_mhz: float = 100.0
    alu_cycles: int = 1
    mul_cycles: int = 4
    bus_bytes_per_cycle: float = 1.0  # the data bus every memory operand crosses


def _addr(op: str, code: int) -> Format:
    return Format(op, (Field("addr", "mem_log2", lo=0, fmt="hex", doc="data memory word"),
                       const("op", 15, 12, code)))


ISA = Spec("toy", 16, (
    Format("HALT", (const("op", 15, 12, 0),)),
    Format("LDI", (Field("imm", 12, lo=0, signed=True, doc="acc = imm"), const("op", 15, 12, 1))),
    _addr("ADD", 2), _addr("MUL", 3), _addr("STORE", 4),
))
SYNTAX = KeyValueSyntax()


def assemble(source: str, hw: ToyHw) -> list[int]:
    return text.assemble(ISA.bind(hw), SYNTAX, source)


def disassemble(words: list[int], hw: ToyHw) -> list[text.Row]:
    return listing(ISA.bind(hw), SYNTAX, words)


ACC = (1 << 20, (1 << 20) + 1)  # the accumulator as a range for the timing core's hazard checks


def simulate(words: list[int], hw: ToyHw) -> dict:
    """Run to HALT (or the end), then time the executed instructions on `npukit.sim.timing`."""
    spec = ISA.bind(hw)
    mem, acc, ops = [0] * (1 << hw.mem_log2), 0, []
    mask = (1 << hw.acc_bits) - 1
    for i, ins in enumerate(spec.decode_program(words)):
        name = type(ins).__name__.upper()
        if name == "HALT":
            break
        if name == "LDI":
            acc = ins.imm & mask
            ops.append(Op(i, "alu", f"ldi {ins.imm}", hw.alu_cycles, is_async=True, writes=(ACC,)))
            continue
        cell = (ins.addr, ins.addr + 1)
        bus = {"path": ("bus",), "xfer_bytes": hw.acc_bits / 8, "is_async": True}
        if name == "STORE":
            mem[ins.addr] = acc
            ops.append(Op(i, "mem", f"store {ins.addr}", hw.alu_cycles, reads=(ACC,), writes=(cell,), **bus))
        else:
            acc = (acc + mem[ins.addr] if name == "ADD" else acc * mem[ins.addr]) & mask
            engine, cycles = ("alu", hw.alu_cycles) if name == "ADD" else ("mul", hw.mul_cycles)
            ops.append(Op(i, engine, f"{name.lower()} {ins.addr}", cycles, reads=(ACC, cell), writes=(ACC,),
                          **bus))
    machine = Machine(engines=("alu", "mul", "mem"), resources=(Resource("bus", hw.bus_bytes_per_cycle),),
                      clock_hz=hw.clock_mhz * 1e6)
    return {"timing": simulate_timing(machine, ops), "instructions": len(ops),
            "state": {"acc": acc, "mem": mem}}


TARGET = Target(
    name="toy", summary="a toy accumulator machine (tests/targets/toy)",
    hw=f"{__name__}:ToyHw", isa=f"{__name__}:ISA", assemble=f"{__name__}:assemble",
    disassemble=f"{__name__}:disassemble", simulate=f"{__name__}:simulate",
)
