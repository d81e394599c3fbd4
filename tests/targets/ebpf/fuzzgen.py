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
