"""The verifier's memory rules: loads, stores and helper memory arguments against their regions.

Regions: ``stack`` (512 bytes below each frame's r10; bytes must be written before they are read),
``input`` (``[0, LEN)`` with ``LEN`` the ABI's length register: an access is accepted only when its
end is proven at or below ``LEN``), ``output`` (the Alkali output buffer, ``output_size`` bytes) and
ELF data sections (their size; read-only ones refuse stores).
"""

from __future__ import annotations

from typing import Any

from npukit.targets.ebpf import absval as V
from npukit.targets.ebpf import isa
from npukit.targets.ebpf.absstate import UNINIT, Pointer, State, Value
from npukit.targets.ebpf.absval import Scalar
from npukit.targets.ebpf.isa import Insn
from npukit.targets.ebpf.memory import FRAME_SIZE


def check_access(az: Any, st: State, pc: int, reg: int, off: int, size: int, kind: str,
                 value: Value | None) -> Value:
    """Check a ``size``-byte ``kind`` (load/store) at ``reg + off``; return the loaded value."""
    base = az.read(st, reg, pc)
    where = f"{kind} of {size} bytes at r{reg}{off:+d}"
    if not isinstance(base, Pointer):
        hint = ""
        if az.opts.abi == "alkali" and not az.opts.output_size and base.const == 0:
            hint = " (the Alkali ABI passes r2 = 0 when there is no output buffer: give the output size)"
        az.error(pc, f"{where}: r{reg} holds a scalar ({base.describe()}), not a pointer{hint}")
        return V.unknown(size * 8)
    az.regions.setdefault(pc, set()).add(base.region)
    if base.region == "stack":
        return _stack(az, st, pc, base, off, size, kind, value, where)
    problem = _span_problem(az, st, base, off, size, None)
    if problem:
        az.error(pc, f"{where}: {problem}")
    if base.region in az.sections:
        section = az.sections[base.region]
        if kind == "store" and not section.writable:
            az.error(pc, f"{where}: section {section.name} is read-only")
        start = None if base.off.const is None else base.off.const + off
        if kind == "load" and not section.writable and start is not None and not problem:
            return V.const(int.from_bytes(section.data[start : start + size], "little"))
    return V.unknown(size * 8)


def _region_size(az: Any, region: str) -> int:
    if region == "output":
        return az.opts.output_size
    return len(az.sections[region].data)


def _span_problem(az: Any, st: State, p: Pointer, off: int, size: int, size_reg: Scalar | None) -> str:
    """Why ``[p + off, p + off + size)`` may leave a non-stack region ('' when it provably does not).
    ``size_reg`` (a helper's size argument) replaces ``size`` when given."""
    o = p.off
    top = size if size_reg is None else size_reg.umax
    if o.umax > V.S64_MAX or o.umin + off < 0:
        where = f"pointer offset {o.describe()}, displacement {off}"
        return f"the offset into {p.region} may be negative ({where})"
    if p.region != "input":
        limit = _region_size(az, p.region)
        if o.umax + off + top > limit:
            return (f"may pass the end of {p.region}, {limit} bytes (pointer offset {o.describe()}, "
                    f"displacement {off}, {top} bytes)")
        return ""
    k = st.effective_le(o)
    if size_reg is None:
        proven = k is not None and k >= off + size
    else:
        proven = (
            (size_reg.len_off is not None and o.umax + off + size_reg.len_off <= 0)
            or (size_reg.len_le is not None and o.umax + off <= size_reg.len_le)
            or (k is not None and k >= off + top)
        )
    if proven:
        return ""
    length = f"r{az.len_reg}"
    return (f"not proven to end within the input length {length} (pointer offset {o.describe()}, "
            f"displacement {off}, {top} bytes)")


def _stack(az: Any, st: State, pc: int, base: Pointer, off: int, size: int, kind: str, value: Value | None,
           where: str) -> Value:
    if base.frame >= len(st.frames):
        az.error(pc, f"{where}: the pointer is into a stack frame that has returned")
        return V.unknown(size * 8)
    frame = st.frames[base.frame]
    lo, hi = base.off.smin + off, base.off.smax + off + size
    if lo < -FRAME_SIZE or hi > 0:
        az.error(pc, f"{where}: stack offset [{lo}, {hi}) is outside the {FRAME_SIZE}-byte frame")
        return V.unknown(size * 8)
    fixed = base.off.const is not None
    span = ((1 << (hi - lo)) - 1) << (lo + FRAME_SIZE)
    if kind == "load":
        if frame.init & span != span:
            first = next(i for i in range(lo, hi) if not frame.init >> (i + FRAME_SIZE) & 1)
            az.error(pc, f"{where}: reads stack byte fp{first:+d}, which is not initialised")
            return V.unknown(size * 8)
        if fixed and size == 8 and lo in frame.slots:
            return frame.slots[lo]
        return V.unknown(size * 8)
    for slot in [s for s in frame.slots if s < hi and s + 8 > lo]:
        del frame.slots[slot]
    if fixed:
        frame.init |= span
        if size == 8 and lo % 8 == 0 and value is not None and value is not UNINIT:
            frame.slots[lo] = value
    return V.unknown(size * 8)


def _helper_memory(az: Any, st: State, pc: int, name: str, reg: int, kind: str) -> None:
    mode, size_arg = kind.split(":")
    size_reg = int(size_arg)
    size = az.scalar(st, size_reg, pc, f"helper {name} size argument")
    p = az.read(st, reg, pc)
    what = f"helper {name}: argument r{reg}"
    if not isinstance(p, Pointer):
        if size.umax:
            az.error(pc, f"{what} is a scalar ({p.describe()}), not a pointer to r{size_reg} bytes")
        return
    if p.region != "stack":
        problem = _span_problem(az, st, p, 0, 0, size)
        if problem:
            az.error(pc, f"{what} cannot hold r{size_reg} = {size.describe()} bytes: {problem}")
        if p.region in az.sections and "w" in mode and not az.sections[p.region].writable:
            az.error(pc, f"{what} points into read-only section {p.region}")
        return
    lo, hi = p.off.smin, p.off.smax + size.umax
    if lo < -FRAME_SIZE or hi > 0 or p.frame >= len(st.frames):
        az.error(pc, f"{what}: stack [{lo}, {hi}) for r{size_reg} = {size.describe()} bytes leaves the frame")
        return
    frame = st.frames[p.frame]
    span = ((1 << (hi - lo)) - 1) << (lo + FRAME_SIZE) if hi > lo else 0
    if "r" in mode and frame.init & span != span:
        az.error(pc, f"{what}: the helper reads stack bytes [{lo}, {hi}) that are not all initialised")
    if "w" in mode:
        for slot in [s for s in frame.slots if s < hi and s + 8 > lo]:
            del frame.slots[slot]
        if p.off.const is not None and size.umin:
            frame.init |= ((1 << size.umin) - 1) << (lo + FRAME_SIZE)


def helper_call(az: Any, st: State, insn: Insn, pc: int) -> None:
    """Check a helper call's arguments against its signature; r0 becomes unknown, r1-r5 unreadable."""
    index: int | None = insn.imm
    if insn.opcode == isa.OP_CALLX:
        target = az.scalar(st, insn.dst, pc, "callx target")
        index = target.const
        if index is None:
            az.error(pc, f"callx target r{insn.dst} ({target.describe()}) is not a known helper index")
    helper = az.helpers.get(index) if az.helpers is not None and index is not None else None
    if helper is None and index is not None and az.helpers is not None:
        az.error(pc, f"r{insn.dst} = {index} is not a registered helper")
    if helper is not None and helper.args is not None:
        for reg, kind in enumerate(helper.args, start=1):
            if st.top.regs[reg] is UNINIT:
                az.error(pc, f"helper {helper.name}: argument r{reg} is not initialised")
                continue
            if kind == "cstr":
                p = st.top.regs[reg]
                if not isinstance(p, Pointer):
                    az.error(pc, f"helper {helper.name}: argument r{reg} must point to a string")
                else:
                    check_access(az, st, pc, reg, 0, 1, "load", None)
            elif kind.startswith("mem_"):
                _helper_memory(az, st, pc, helper.name, reg, kind)
    regs = st.top.regs
    regs[0] = az.fresh(st, pc, Scalar())
    for r in range(1, 6):
        regs[r] = UNINIT
