"""The pccx v002 ISA as one spec: field table -> instruction classes, encoder, decoder, validation.

A word is 64 bits, ``opcode = word[63:60]``; the bit positions of every field are those of pccx's
``isa_pkg.sv`` (pccxai/pccx-v002 @110cdae0). Two profiles:

* ``strict`` — exactly v002: 5 opcodes, 8 CVO functions, MEMSET caches 0/1, ``async`` only in MEMCPY
  and CVO (elsewhere those bits are reserved and must be 0).
* ``extended`` — npukit's documented additions in reserved encodings: ``async`` in bit 0 of GEMV,
  GEMM and MEMSET, CVO functions 0x8-0xF, MEMSET ``dest_cache = 2`` (SFU registers).

The field table is data on the shared toolkit (`npukit.isa`): `ISA` is the spec, bound per (profile,
hardware limits) by `bound`. `decode` validates (the hardware's error interrupt): a failing word raises
`DecodeError` with the word and a one-line reason. `assemble`/`disassemble` and the docs table live in
``asm.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Any, ClassVar, NamedTuple

from npukit.errors import DecodeError
from npukit.isa.spec import AsmError, BoundField, BoundSpec, Field, Format, Spec, bits, const
from npukit.targets.pccx.cvo import CVO, STRICT_CVO, CvoForm, CvoFunc

PROFILES = ("strict", "extended")
L2_WORDS_DEFAULT = 114_688  # 0x1C000, KV260 preset
CC_ENTRIES_DEFAULT = 64
LANES_DEFAULT = 4
ELEMS_PER_WORD = 8  # BF16 per 128-bit L2 word


class Op(IntEnum):
    GEMV = 0x0
    GEMM = 0x1
    MEMCPY = 0x2
    MEMSET = 0x3
    CVO = 0x4


class GemvFlag(IntFlag):
    """The 6-bit GEMV/GEMM ``flags`` field; bits [2:0] are reserved."""

    W_SCALE = 0b001000
    ACCM = 0b010000
    FINDEMAX = 0b100000


class CvoFlag(IntFlag):
    """The 5-bit CVO ``flags`` field; bits [1:0] are reserved."""

    ACCM = 0b00100
    RECIP_SCALE = 0b01000
    SUB_EMAX = 0b10000


class Device(IntEnum):
    NPU = 0
    HOST = 1


class DestCache(IntEnum):
    FMAP = 0  # data_to_fmap_shape
    WEIGHT = 1  # data_to_weight_shape
    SREG = 2  # extended: SFU registers (0 = scalar S, 1 = e_max)


# the CVO family's facts, read from its table (npukit.targets.pccx.cvo.CVO)
REDUCTIONS = frozenset(f for f, spec in CVO.items() if spec.reduction)
BINARY = frozenset(f for f, spec in CVO.items() if spec.arity == 2)  # dst <- src (op) dst
NO_ACCM = frozenset(f for f, spec in CVO.items() if not spec.accumulate)
SREG_SCALAR, SREG_EMAX = 0, 1


def _f(name, hi, lo, kind, asm, doc, ext=False, **kw) -> Field:
    return bits(name, hi, lo, kind=kind, asm=asm, doc=doc, tags=_EXT if ext else frozenset(),
                reserved=kind == "reserved", fmt="hex" if kind in ("l2", "aux") else "dec", **kw)


_EXT = frozenset({"ext"})  # only in the extended profile (reserved in strict)
_ASYNC = {"enum": bool}


def _mat(flag: type) -> tuple[Field, ...]:
    return (
        _f("dest_reg", 59, 43, "l2", "dest", "L2 word address of the result"),
        _f("src_addr", 42, 26, "l2", "src", "L2 word address of the activation"),
        _f("flags", 25, 20, "flags", "flags", "[5] findemax, [4] accm, [3] w_scale, [2:0] reserved",
           enum=flag, strict_enum=False),
        _f("size_ptr_addr", 19, 14, "slot", "size", "weight-shape cache slot: (format, host hi, host lo)"),
        _f("shape_ptr_addr", 13, 8, "slot", "shape", "fmap-shape cache slot: (M, N, K)"),
        _f("parallel_lane", 7, 3, "lanes", "lanes", "active GEMV cores, a count; 0 = all"),
        _f("reserved", 2, 1, "reserved", "", "must be 0"),
        _f("async_", 0, 0, "async", "async", "fire-and-forget (strict: reserved)", ext=True, **_ASYNC),
    )


_FIELDS: dict[Op, tuple[Field, ...]] = {
    Op.GEMV: _mat(GemvFlag),
    Op.GEMM: _mat(GemvFlag),
    Op.MEMCPY: (
        _f("from_device", 59, 59, "device", "from", "0 = NPU (L2), 1 = host", enum=Device),
        _f("to_device", 58, 58, "device", "to", "0 = NPU (L2), 1 = host", enum=Device),
        _f("dest_addr", 57, 41, "l2", "dest", "L2 destination word (0 when to=host)"),
        _f("src_addr", 40, 24, "l2", "src", "L2 source word (0 when from=host)"),
        _f("aux_addr", 23, 7, "aux", "aux", "host offset in 16-byte units, added to the slot's base"),
        _f("shape_ptr_addr", 6, 1, "slot", "shape", "fmap-shape cache slot: (words, host hi, host lo)"),
        _f("async_", 0, 0, "async", "async", "fire-and-forget", **_ASYNC),
    ),
    Op.MEMSET: (
        # dest_cache 3 (and 2 in strict) is reserved: kept raw so the check can name it
        _f("dest_cache", 59, 58, "cache", "cache", "0 = fmap shape, 1 = weight shape, 2 = SFU regs (ext)",
           enum=DestCache, strict_enum=False),
        _f("dest_addr", 57, 52, "slot", "slot", "cache slot (SFU regs: 0 = scalar S, 1 = e_max)"),
        _f("a_value", 51, 36, "uint", "a", "first 16-bit value"),
        _f("b_value", 35, 20, "uint", "b", "second 16-bit value"),
        _f("c_value", 19, 4, "uint", "c", "third 16-bit value"),
        _f("reserved", 3, 1, "reserved", "", "must be 0"),
        _f("async_", 0, 0, "async", "async", "fire-and-forget (strict: reserved)", ext=True, **_ASYNC),
    ),
    Op.CVO: (
        _f("cvo_func", 59, 56, "func", "", "function code (mnemonic after `cvo`)", enum=CvoFunc),
        _f("src_addr", 55, 39, "l2", "src", "L2 word address of the input vector"),
        _f("dst_addr", 38, 22, "l2", "dst", "L2 word address of the output (second operand of MUL/ADD)"),
        _f("length", 21, 6, "uint", "len", "element count, 1..65535"),
        _f("flags", 5, 1, "flags", "flags", "[4] sub_emax, [3] recip_scale, [2] accm, [1:0] reserved",
           enum=CvoFlag, strict_enum=False),
        _f("async_", 0, 0, "async", "async", "fire-and-forget", **_ASYNC),
    ),
}


@dataclass(frozen=True)
class _MatOp:
    dest_reg: int = 0
    src_addr: int = 0
    flags: GemvFlag = GemvFlag(0)  # noqa: RUF009 (IntFlag is immutable)
    size_ptr_addr: int = 0
    shape_ptr_addr: int = 0
    parallel_lane: int = 0
    async_: bool = False
    op: ClassVar[Op]


@dataclass(frozen=True)
class Gemv(_MatOp):
    op: ClassVar[Op] = Op.GEMV


@dataclass(frozen=True)
class Gemm(_MatOp):
    op: ClassVar[Op] = Op.GEMM


@dataclass(frozen=True)
class Memcpy:
    from_device: Device = Device.HOST
    to_device: Device = Device.NPU
    dest_addr: int = 0
    src_addr: int = 0
    aux_addr: int = 0
    shape_ptr_addr: int = 0
    async_: bool = False
    op: ClassVar[Op] = Op.MEMCPY


@dataclass(frozen=True)
class Memset:
    dest_cache: DestCache = DestCache.FMAP
    dest_addr: int = 0
    a_value: int = 0
    b_value: int = 0
    c_value: int = 0
    async_: bool = False
    op: ClassVar[Op] = Op.MEMSET


@dataclass(frozen=True)
class Cvo:
    cvo_func: CvoFunc = CvoFunc.EXP
    src_addr: int = 0
    dst_addr: int = 0
    length: int = 1
    flags: CvoFlag = CvoFlag(0)  # noqa: RUF009 (IntFlag is immutable)
    async_: bool = False
    op: ClassVar[Op] = Op.CVO


Instr = Gemv | Gemm | Memcpy | Memset | Cvo
CLASSES: dict[Op, type] = {Op.GEMV: Gemv, Op.GEMM: Gemm, Op.MEMCPY: Memcpy, Op.MEMSET: Memset, Op.CVO: Cvo}
@dataclass(frozen=True)
class Limits:
    """What validation needs from a hardware description (defaults: the KV260 preset)."""

    l2_words: int = L2_WORDS_DEFAULT
    cc_entries: int = CC_ENTRIES_DEFAULT
    lanes: int = LANES_DEFAULT

    @staticmethod
    def of(hw: Any = None) -> Limits:
        if hw is None:
            return _DEFAULT_LIMITS
        if isinstance(hw, Limits):
            return hw
        return Limits(hw.l2.words, hw.constant_cache.entries, hw.gemv.cores)


_DEFAULT_LIMITS = Limits()


def _profile(profile: str) -> str:
    if profile not in PROFILES:
        raise AsmError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    return profile


def words_of(n_elems: int) -> int:
    """L2 words holding ``n_elems`` BF16 values."""
    return -(-int(n_elems) // ELEMS_PER_WORD)


def cvo_out_elems(func: CvoFunc, length: int) -> int:
    if CVO[func].form is CvoForm.LOAD_SCALAR:
        return 0
    return 1 if CVO[func].reduction else length


def check(ins: Instr, profile: str = "extended", hw: Any = None) -> str | None:
    """The reason an (in-range) instruction is invalid under ``profile``, or None."""
    lim = Limits.of(hw)
    ext = profile == "extended"
    for f in SPEC[ins.op]:
        v = getattr(ins, f.name, 0)
        if f.kind == "l2" and v >= lim.l2_words:
            return f"{f.name} 0x{v:X} is beyond L2 ({lim.l2_words} words)"
        if f.kind == "slot" and v >= lim.cc_entries and not (ins.op == Op.MEMSET and ins.dest_cache == 2):
            return f"{f.name} {v} is beyond the constant cache ({lim.cc_entries} entries)"
    if ins.async_ and ins.op in (Op.GEMV, Op.GEMM, Op.MEMSET) and not ext:
        return "async bit is reserved in this opcode (strict profile)"
    if ins.op in (Op.GEMV, Op.GEMM):
        if ins.flags & 0b111:
            return "reserved GEMV/GEMM flag bits [2:0] are set"
        if ins.parallel_lane > lim.lanes:
            return f"parallel_lane {ins.parallel_lane} exceeds the {lim.lanes} GEMV cores"
    elif ins.op == Op.MEMCPY:
        if ins.from_device == Device.HOST and ins.to_device == Device.HOST:
            return "MEMCPY host to host is not a route"
        if ins.from_device == Device.HOST and ins.src_addr:
            return "src_addr must be 0 when copying from the host (the host side is slot + aux)"
        if ins.to_device == Device.HOST and ins.dest_addr:
            return "dest_addr must be 0 when copying to the host (the host side is slot + aux)"
        if ins.from_device == Device.NPU and ins.to_device == Device.NPU and ins.aux_addr:
            return "aux_addr must be 0 for an L2-to-L2 copy"
    elif ins.op == Op.MEMSET:
        if ins.dest_cache == 3 or (ins.dest_cache == 2 and not ext):
            return f"dest_cache {int(ins.dest_cache)} is reserved"
        if ins.dest_cache == 2 and (ins.dest_addr > SREG_EMAX or ins.b_value or ins.c_value):
            return "SFU-register MEMSET needs slot 0 (scalar) or 1 (e_max) and b = c = 0"
    else:
        return _check_cvo(ins, ext, lim)
    return None


def _check_cvo(ins: Cvo, ext: bool, lim: Limits) -> str | None:
    fn = ins.cvo_func
    if fn not in STRICT_CVO and not ext:
        return f"cvo_func 0x{int(fn):X} is reserved in v002 (strict profile)"
    if ins.flags & 0b11:
        return "reserved CVO flag bits [1:0] are set"
    if ins.length == 0:
        return "CVO length is 0"
    if ins.flags & CvoFlag.SUB_EMAX and CVO[fn].form is not CvoForm.EXP:
        return f"sub_emax applies to EXP only, not {fn.name}"
    if ins.flags & CvoFlag.RECIP_SCALE and CVO[fn].form is not CvoForm.SCALE:
        return f"recip_scale applies to SCALE only, not {fn.name}"
    if ins.flags & CvoFlag.ACCM and not CVO[fn].accumulate:
        return f"accm is not defined for {fn.name}"
    if ins.src_addr + words_of(ins.length) > lim.l2_words:
        return f"source vector runs past L2 (0x{ins.src_addr:X} + {words_of(ins.length)} words)"
    if ins.dst_addr + words_of(cvo_out_elems(fn, ins.length)) > lim.l2_words:
        return f"destination vector runs past L2 (0x{ins.dst_addr:X})"
    return None


class Context(NamedTuple):
    """What a bound pccx spec is derived from: the ISA profile and the hardware limits."""

    profile: str
    limits: Limits


def _check_decoded(ins: Instr, ctx: Context) -> str | None:
    if ins.op == Op.MEMSET and not isinstance(ins.dest_cache, DestCache):
        return f"dest_cache {ins.dest_cache} is reserved"
    return check(ins, ctx.profile, ctx.limits)


ISA = Spec(
    "pccx", 64,
    tuple(Format(op.name, (const("opcode", 63, 60, int(op), doc="opcode"), *fields), cls=CLASSES[op],
                 check=_check_decoded, mnemonic_field="cvo_func" if op == Op.CVO else None)
          for op, fields in _FIELDS.items()),
    memo=1 << 18,  # the compiler's encode-time validation and the simulators' decode share results
)
# the field table per opcode (the opcode bits themselves left out), as bound fields: name, hi, lo, width,
# mask, kind, asm, doc, tags ("ext" = extended profile only)
SPEC: dict[Op, tuple[BoundField, ...]] = {
    Op[f.name]: tuple(bf for bf in f.fields if bf.const is None)
    for f in ISA.bind(Context("extended", Limits())).formats
}
_BOUND: dict[tuple[str, int], tuple[Any, BoundSpec]] = {}


def bound(profile: str = "extended", hw: Any = None) -> BoundSpec:
    """The toolkit spec bound to (profile, limits of ``hw``); cached per description object."""
    hit = _BOUND.get((profile, id(hw)))
    if hit is not None and hit[0] is hw:
        return hit[1]
    _profile(profile)
    spec = ISA.bind(Context(profile, Limits.of(hw)))
    if len(_BOUND) >= 256:
        _BOUND.clear()
    _BOUND[(profile, id(hw))] = (hw, spec)  # holds hw, so its id is not reused while cached
    return spec


_DEFAULT_BOUND = {p: bound(p) for p in PROFILES}


def decode(word: int, profile: str = "extended", hw: Any = None) -> Instr:
    """One 64-bit word -> instruction; raises `DecodeError` (the error interrupt) when invalid."""
    spec = _DEFAULT_BOUND.get(profile) if hw is None else None
    if spec is None:
        spec = bound(profile, hw)
    try:
        w = int(word)
    except (TypeError, ValueError):
        raise DecodeError(0, f"not an integer word: {word!r}") from None
    if not 0 <= w < 1 << 64:
        raise DecodeError(w & ((1 << 64) - 1), "word does not fit in 64 bits")
    hit = spec._memo.get(w)  # the memoised hit inline: simulators decode the same words many times
    if hit is None:
        hit = spec.decode_or_reason(w)
    if isinstance(hit, str):
        raise DecodeError(w, hit)
    return hit


def encode(ins: Instr, profile: str = "extended", hw: Any = None) -> int:
    """Instruction -> 64-bit word. Field overflow raises `AsmError`, an invalid instruction `DecodeError`."""
    return bound(profile, hw).encode(ins)


def field_names(op: Op) -> list[str]:
    return [f.name for f in SPEC[op] if f.kind != "reserved"]


def replace(ins: Instr, **changes: Any) -> Instr:
    return dataclasses.replace(ins, **changes)
