"""Random instruction streams for the robustness tests: valid opcodes with mostly-valid fields.

Each slot picks a valid opcode, fills its fields the way RFC 9669 allows (jump targets inside the
stream, helper indices 1-3, byte-swap widths, atomic kinds), then with a small probability corrupts one
field or the whole slot, so both the runtime paths and the load-time rejections get exercised.
"""

from __future__ import annotations

import random
import struct

from npukit.targets.ebpf import isa

VALID_OPCODES = sorted({op for op, _, _ in isa.opcode_table()} | {0xD4, 0xDC, 0xD7})
_IMMS = (0, 1, -1, 2, 7, 8, 31, 32, 63, 64, 0x7FFFFFFF, -0x80000000, 255, -255)
_ATOMICS = (0x00, 0x01, 0x40, 0x41, 0x50, 0x51, 0xA0, 0xA1, 0xE1, 0xF1)
_MEM_OFFS = (0, 1, 2, 4, 8, -1, -4, -8, -16, -64, -512, 60, 64, 100)


def _fields(rng: random.Random, op: int, pc: int, length: int) -> tuple[int, int, int, int]:
    cls, code, x = op & 7, op >> 4, op & isa.SRC_X
    dst, src = rng.randrange(10), rng.choice((1, 1, 2, 10, rng.randrange(11)))
    imm = rng.choice(_IMMS) if rng.random() < 0.7 else rng.randrange(-(1 << 31), 1 << 31)
    off = 0
    if cls in (isa.ALU, isa.ALU64):
        if code == 0xD:
            return dst, 0, 0, rng.choice((16, 32, 64))
        if code == 0x8:
            return dst, 0, 0, 0
        if code in (0x3, 0x9):
            off = rng.choice((0, 1))
        if code == 0xB and x:
            off = rng.choice((0, 0, 8, 16, 32 if cls == isa.ALU64 else 8))
        return (dst, src, off, 0) if x else (dst, 0, off, imm)
    if cls in (isa.JMP, isa.JMP32):
        target = rng.randrange(-1, length + 1) - pc - 1
        if op == isa.OP_EXIT:
            return 0, 0, 0, 0
        if op == isa.OP_CALL:
            return (0, 1, 0, target) if rng.random() < 0.3 else (0, 0, 0, rng.choice((1, 1, 2, 3, 9)))
        if op == isa.OP_CALLX:
            return rng.randrange(10), 0, 0, 0
        if op == isa.OP_JA32:
            return 0, 0, 0, target
        if op == isa.OP_JA:
            return 0, 0, target, 0
        return (dst, src, target, 0) if x else (dst, 0, target, imm)
    if op == isa.LDDW:
        return dst, 0, 0, imm
    off = rng.choice(_MEM_OFFS)
    if cls == isa.LDX:
        return dst, src, off, 0
    if cls == isa.ST:
        return rng.choice((1, 10, 2)), 0, off, imm
    if op & 0xE0 == isa.MODE_ATOMIC:
        return rng.choice((1, 10)), rng.randrange(10), off, rng.choice(_ATOMICS)
    return rng.choice((1, 10, 2)), src, off, 0


def stream(rng: random.Random, length: int) -> bytes:
    """About ``length`` slots ending in exit."""
    out = bytearray()
    pc = 0
    while pc < length:
        if rng.random() < 0.02:
            out += rng.randbytes(8)
            pc += 1
            continue
        op = rng.choice(VALID_OPCODES)
        dst, src, off, imm = _fields(rng, op, pc, length)
        if rng.random() < 0.03:  # corrupt one field
            dst, src, off = rng.randrange(16), rng.randrange(16), rng.randrange(-99, 99)
        out += struct.pack("<BBhi", op, dst | src << 4, off, imm if op != isa.LDDW else 0)
        pc += 1
        if op == isa.LDDW:
            out += struct.pack("<BBhi", 0, 0, 0, rng.randrange(-(1 << 31), 1 << 31))
            out[-16 + 4 : -8] = struct.pack("<i", imm)
            pc += 1
    out += struct.pack("<BBhi", isa.OP_EXIT, 0, 0, 0)
    return bytes(out)


_LOADS = (("ldxb", 1), ("ldxh", 2), ("ldxw", 4), ("ldxdw", 8))
_ALU = ("add", "sub", "mul", "div", "mod", "or", "and", "xor", "lsh", "rsh", "arsh", "mov")
_SCRATCH = (0, 3, 4, 5)


def _statement(rng: random.Random, n: int) -> list[str]:
    """One random statement of a firmware-shaped program (labels numbered by ``n``)."""
    kind = rng.randrange(8)
    if kind == 2 and rng.random() >= 0.3:
        kind = 0
    x, y = rng.choice(_SCRATCH), rng.choice(_SCRATCH)
    name, size = rng.choice(_LOADS)
    off = rng.choice((0, 1, 2, 4, 7, 8, 12, 15, 16, 31))
    if kind == 0:
        op = rng.choice(_ALU) + rng.choice(("", "32"))
        src = f"%r{y}" if rng.random() < 0.5 else str(rng.choice((0, 1, 3, 8, 63, -1, 255)))
        return [f"{op} %r{x}, {src}"]
    if kind == 1:  # a load guarded by a length test, sometimes off by one or with the wrong compare
        need = off + size - rng.choice((0, 0, 0, 1))
        jump = rng.choice(("jlt", "jlt", "jle", "jgt"))
        return [f"{jump} %r2, {need}, s{n}", f"{name} %r{x}, [%r1+{off}]", f"s{n}:"]
    if kind == 2:  # an unguarded load
        return [f"{name} %r{x}, [%r1+{off}]"]
    if kind == 3:  # stack store then maybe a load of a neighbouring slot
        slot = rng.choice((8, 16, 24, 32, 64, 512, 520))
        out = [f"stxdw [%r10-{slot}], %r{y}"]
        if rng.random() < 0.7:
            out.append(f"{name} %r{x}, [%r10-{rng.choice((8, 16, 24, 32, 40))}]")
        return out
    if kind == 4:  # a byte loop bounded by the length (or by length + 1)
        bound = "%r2" if rng.random() < 0.8 else "%r9"
        step = rng.choice((1, 1, 2, 4))
        return [
            "mov %r9, %r2", "add %r9, 1", "mov %r6, 0", f"l{n}:", f"jge %r6, {bound}, e{n}",
            "mov %r7, %r1", "add %r7, %r6", f"ldxb %r8, [%r7+{rng.choice((0, 0, 1))}]", "add %r0, %r8",
            f"add %r6, {step}", f"ja l{n}", f"e{n}:",
        ]
    if kind == 5:  # a masked index into the input
        mask = rng.choice((3, 7, 15))
        return [f"mov %r7, %r{y}", f"and %r7, {mask}", f"jlt %r2, {mask + 1 + rng.choice((0, 0, -1))}, s{n}",
                "mov %r8, %r1", "add %r8, %r7", f"ldxb %r{x}, [%r8]", f"s{n}:"]
    if kind == 6:  # memfrob(input, size), the size checked against the length or not
        size = rng.choice((0, 4, 16))
        guard = [f"jlt %r2, {size}, s{n}"] if rng.random() < 0.8 else []
        return [*guard, "mov %r7, %r1", "mov %r8, %r2", f"mov %r2, {size}", "call 1", "mov %r1, %r7",
                "mov %r2, %r8", "mov %r3, 1", "mov %r4, 2", "mov %r5, 3", f"s{n}:"]
    return [f"jeq %r{x}, %r{y}, s{n}", f"mov %r{x}, {rng.randrange(-9, 99)}", f"s{n}:"]


def structured(rng: random.Random, statements: int = 6) -> str:
    """Assembler text of a firmware-shaped program for the uBPF ABI (r1 input, r2 length): loads
    guarded and unguarded, stack spills, bounded loops, masked indices; about half are safe."""
    lines = ["mov %r0, 0", "mov %r3, 1", "mov %r4, 2", "mov %r5, 3", "mov %r6, %r1"]
    for n in range(statements):
        lines += _statement(rng, n)
    return "\n".join([*lines, "exit"]) + "\n"
