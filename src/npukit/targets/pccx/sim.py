"""pccx v002 functional simulator: device state, bit-exact per-instruction semantics, Work records.

State: sparse host DDR (byte addressed, regions), L2 (words × 8 BF16 as uint16), the two 64-entry
constant caches (fmap shape, weight shape), the SFU scalar register S and the e_max register (both
BF16), and STATUS (BUSY/DONE/ERROR). Instructions execute in program order and each result is
visible when the instruction completes; ``async`` only tells the timing model that the issuer does
not wait (docs/targets/pccx.md). A word that fails validation, or a fault found while executing
(an operand range past L2, an unmapped host address, a bad weight format), raises the error
interrupt: the instruction is logged, STATUS.ERROR is set and the machine halts; no exception escapes
`run`/`step`.

Usage::

    sim = Simulator(hw, "extended")
    sim.host.write(0x1000_0000, weight_image(w, "int4", scales))
    sim.write_l2(0x100, x)
    sim.load_program(words)
    works = sim.run()          # list[npukit.sim.work.Work]; check sim.status / sim.error
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from npukit.errors import DecodeError
from npukit.sim.work import Work
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import format_instr
from npukit.targets.pccx.cvo import CVO, CvoForm, CvoSpec
from npukit.targets.pccx.grouped import run_grouped
from npukit.targets.pccx.isa import (
    ELEMS_PER_WORD,
    SREG_EMAX,
    CvoFlag,
    DestCache,
    Device,
    GemvFlag,
    Instr,
    Limits,
    Op,
    cvo_out_elems,
    decode,
    words_of,
)
from npukit.targets.pccx.memory import (
    FORMATS,
    W_ACT_SCALE,
    W_EXT_BITS,
    W_FMT_MASK,
    W_GROUP_OFFSETS,
    W_GROUPED,
    W_KMAJOR,
    W_OFFSET_MASK,
    W_OFFSET_SHIFT,
    W_SPLIT_SCALES,
    WORD_BYTES,
    DeviceFault,
    HostDDR,
    row_bytes,
)

STATUS_BUSY, STATUS_DONE, STATUS_ERROR = 0x1, 0x2, 0x4
_ROW_BLOCK = 1 << 22  # weights per GEMV chunk: bounds temporary memory on big matrices


# --- the simulator --------------------------------------------------------------------------------------

@dataclass
class ErrorRecord:
    index: int
    word: int
    reason: str

    def __str__(self) -> str:
        return f"error interrupt at instruction {self.index} (0x{self.word:016X}): {self.reason}"


class Simulator:
    def __init__(self, hw: Any = None, profile: str = "extended") -> None:
        if hw is None:
            from npukit.targets.pccx.hw import PccxHw

            hw = PccxHw()
        self.hw = hw
        self.profile = profile
        self.limits = Limits.of(hw)
        self.elems = ELEMS_PER_WORD
        self.host = HostDDR(hw.ddr.size_bytes)
        self.l2 = np.zeros((self.limits.l2_words, self.elems), np.uint16)
        self.cc = np.zeros((2, self.limits.cc_entries, 3), np.uint16)  # [fmap, weight][slot][a, b, c]
        self.s_reg = np.uint16(0x3F80)  # 1.0
        self.e_max = np.uint16(nx.BF16_NEG_INF)
        self.status = 0
        self.error: ErrorRecord | None = None
        self.log: list[str] = []
        self.program: list[int] = []
        self.pc = 0
        self.trace: list[tuple[Instr, Work]] = []

    # -- host-side helpers --
    def load_program(self, words: Any) -> None:
        self.program = [int(w) for w in words]
        self.pc = 0
        self.status &= ~(STATUS_DONE | STATUS_ERROR)
        self.error = None

    def write_l2(self, word: int, values: Any) -> None:
        """Store BF16 values (rounded with `numerics.bf16`) from L2 word ``word`` on."""
        self.write_l2_bits(word, nx.to_bits(np.asarray(values, np.float64).ravel()))

    def write_l2_bits(self, word: int, bits: Any) -> None:
        b = np.asarray(bits, np.uint16).ravel()
        self._range(word, b.size, "host write")
        self._put(word, b)

    def read_l2(self, word: int, n: int) -> np.ndarray:
        return nx.from_bits(self.read_l2_bits(word, n))

    def read_l2_bits(self, word: int, n: int) -> np.ndarray:
        self._range(word, n, "host read")
        return self._get(word, n)

    def set_cc(self, cache: int, slot: int, a: int, b: int = 0, c: int = 0) -> None:
        self.cc[int(cache), slot] = (a, b, c)

    @property
    def scalar(self) -> np.float32:
        return nx.from_bits(self.s_reg)[()]

    @property
    def emax(self) -> np.float32:
        return nx.from_bits(self.e_max)[()]

    @property
    def halted(self) -> bool:
        return bool(self.status & STATUS_ERROR) or self.pc >= len(self.program)

    # -- execution --
    def step(self) -> Work | None:
        """Execute one instruction; None when halted or on the error interrupt."""
        if self.halted:
            return None
        idx, word = self.pc, self.program[self.pc]
        self.status |= STATUS_BUSY
        try:
            ins = decode(word, self.profile, self.limits)
            work = self._exec(idx, ins)
        except (DecodeError, DeviceFault, ArithmeticError, ValueError) as exc:
            reason = exc.reason if isinstance(exc, DecodeError) else str(exc)
            self.error = ErrorRecord(idx, word, reason)
            self.log.append(str(self.error))
            self.status = (self.status | STATUS_ERROR) & ~STATUS_BUSY
            return None
        self.trace.append((ins, work))
        self.pc += 1
        if self.pc >= len(self.program):
            self.status = (self.status | STATUS_DONE) & ~STATUS_BUSY
        return work

    def run(self, max_steps: int | None = None) -> list[Work]:
        out: list[Work] = []
        while not self.halted and (max_steps is None or len(out) < max_steps):
            w = self.step()
            if w is None:
                break
            out.append(w)
        if not self.program:
            self.status |= STATUS_DONE
        return out

    # -- L2 access (elements, word aligned start) --
    def _range(self, word: int, n_elems: int, what: str) -> tuple[int, int]:
        end = word + words_of(n_elems)
        if word < 0 or end > self.limits.l2_words:
            raise DeviceFault(f"{what}: L2 words [0x{word:X}, 0x{end:X}) run past L2 "
                              f"({self.limits.l2_words} words)")
        return word, end

    def _get(self, word: int, n: int) -> np.ndarray:
        return self.l2[word: word + words_of(n)].reshape(-1)[:n].copy()

    def _put(self, word: int, bits: np.ndarray) -> None:
        """Write elements; the tail of a partial last word keeps its old contents."""
        flat = self.l2[word: word + words_of(bits.size)].reshape(-1)
        flat[: bits.size] = bits

    def _exec(self, idx: int, ins: Instr) -> Work:
        return _EXEC[ins.op](self, idx, ins)

    def _slot_addr(self, slot: int, what: str, byte_off: int = 0) -> int:
        if slot >= self.limits.cc_entries:
            raise DeviceFault(f"{what} needs weight slot {slot}, beyond the constant cache")
        _, hi, lo = (int(v) for v in self.cc[1, slot])
        return ((hi << 16) | lo) * WORD_BYTES + byte_off

    def _scale_addr(self, slot: int, what: str) -> int:
        a = int(self.cc[1, min(slot, self.limits.cc_entries - 1), 0])
        if a >= WORD_BYTES:
            raise DeviceFault(f"weight slot {slot} ({what}): byte offset {a} is not below 16")
        return self._slot_addr(slot, what, a)

    def _matop(self, idx: int, ins: Instr) -> Work:
        m, n, k = (int(v) for v in self.cc[0, ins.shape_ptr_addr])
        n = max(n, 1)
        if m == 0 or k == 0:
            raise DeviceFault(f"shape slot {ins.shape_ptr_addr} has M={m}, K={k}; both must be > 0")
        a = int(self.cc[1, ins.size_ptr_addr, 0])
        code, ext = a & W_FMT_MASK, a & ~W_FMT_MASK
        if code not in FORMATS:
            raise DeviceFault(f"weight slot {ins.size_ptr_addr} names format {code}; known 0 int4, "
                              "1 int8, 2 fp16")
        if ext & ~W_EXT_BITS:
            raise DeviceFault(f"weight slot {ins.size_ptr_addr} has unknown layout bits in a=0x{a:X}")
        if ext and self.profile != "extended":
            raise DeviceFault(f"weight layout bits 0x{ext:X} need the extended profile")
        if ext & W_SPLIT_SCALES and ext & W_ACT_SCALE:
            raise DeviceFault("split row scales and activation scales both need weight slot + 1")
        fmt = FORMATS[code]
        addr = self._slot_addr(ins.size_ptr_addr, "GEMV", (a & W_OFFSET_MASK) >> W_OFFSET_SHIFT)
        if ext & (W_GROUPED | W_GROUP_OFFSETS):  # scales per (row, group of 32): pccx/grouped.py
            return run_grouped(self, idx, ins, a, addr, m, n, k)
        kmajor = bool(ext & W_KMAJOR)
        rows, cols = (k, m) if kmajor else (m, k)
        rb = row_bytes(fmt, cols)
        kw, mw = words_of(k), words_of(m)
        src = self._range(ins.src_addr, n * kw * self.elems, "activation")
        dst = self._range(ins.dest_reg, n * mw * self.elems, "result")
        w_scale = bool(ins.flags & GemvFlag.W_SCALE)
        accm = bool(ins.flags & GemvFlag.ACCM)
        if ext & W_SPLIT_SCALES:
            s_addr = self._scale_addr(ins.size_ptr_addr + 1, "split row scales")
        else:
            s_addr = addr + rows * rb + (-(rows * rb)) % WORD_BYTES
        scales = self.host.read(s_addr, 4 * m).view("<f4").astype(np.float32) if w_scale else None
        xs = [nx.from_bits(self._get(ins.src_addr + j * kw, k)) for j in range(n)]
        if ext & W_ACT_SCALE:
            s_act = self.host.read(self._scale_addr(ins.size_ptr_addr + 1, "activation scales"),
                                   4 * k).view("<f4").astype(np.float32)
            xs = [nx.cvo_mul(x, s_act) for x in xs]
        outs, live = [], np.zeros(k, bool)
        for j in range(n):
            d = nx.from_bits(self._get(ins.dest_reg + j * mw, m)) if accm else None
            if kmajor:
                nz = self._nonzero_rows(xs[j])
                live |= nz
                outs.append(self._gemv_kmajor(addr, fmt, m, k, rb, xs[j], nz, scales, d))
            else:
                outs.append(self._gemv_rows(addr, fmt, m, k, rb, xs[j], scales, d))
        for j, o in enumerate(outs):
            self._put(ins.dest_reg + j * mw, nx.to_bits(o))
        if ins.flags & GemvFlag.FINDEMAX:
            e = nx.findemax(self.emax, np.concatenate(outs))
            self.e_max = nx.to_bits(e)[()]
        splits = nx.k_splits(k)
        reads = (src, dst) if accm else (src,)
        k_eff = int(live.sum()) if kmajor else k
        wbytes = ((k_eff if kmajor else m) * rb + (4 * m if w_scale else 0)
                  + (4 * k if ext & W_ACT_SCALE else 0))
        label = (f"{format_instr(ins)}  ; M={m} N={n} K={k} {fmt}"
                 f"{' w_scale' if w_scale else ''}{' kmajor' if kmajor else ''}"
                 f"{f' live_k={k_eff}' if kmajor else ''}{' act_scale' if ext & W_ACT_SCALE else ''}"
                 f" ksplit={splits}")
        return Work(idx, ins.op.name.lower(), label, macs=m * n * k_eff, weight_bytes=wbytes,
                    onchip_read_bytes=(n * kw + (n * mw if accm else 0)) * WORD_BYTES,
                    onchip_write_bytes=n * mw * WORD_BYTES, is_async=bool(ins.async_),
                    reads=reads, writes=(dst,), lanes=ins.parallel_lane)

    @staticmethod
    def _nonzero_rows(x: np.ndarray) -> np.ndarray:
        """Activation entries whose INT8 code is nonzero (what the K-major streamer fetches)."""
        if not np.all(np.isfinite(x)):
            return np.ones(x.size, bool)
        q, _ = nx.quantize_act(x)
        return q != 0

    def _gemv_kmajor(self, addr, fmt, m, k, rb, x, nz, scales, d) -> np.ndarray:
        """K-major image: only rows k with a nonzero activation code are used; the others act as zero
        weights (they multiply a zero code), so the value equals the dense GEMV's."""
        w = np.zeros((m, k), np.float16 if fmt == "fp16" else np.int8)
        step = max(1, _ROW_BLOCK // max(m, 1))
        for k0 in range(0, k, step):
            k1 = min(k, k0 + step)
            sel = np.flatnonzero(nz[k0:k1])
            if not sel.size:
                continue
            raw = self.host.read(addr + k0 * rb, (k1 - k0) * rb).reshape(k1 - k0, rb)[sel]
            if fmt == "int4":
                w[:, k0 + sel] = nx.unpack_int4(raw, m).T
            elif fmt == "int8":
                w[:, k0 + sel] = raw.view(np.int8).T
            else:
                w[:, k0 + sel] = raw.view("<f2").astype(np.float16).T
        return nx.gemv(w, x, scales, d, fmt=fmt)

    def _gemv_rows(self, addr, fmt, m, k, rb, x, scales, d) -> np.ndarray:
        out = np.empty(m, np.float32)
        step = max(1, _ROW_BLOCK // max(k, 1))
        for r0 in range(0, m, step):
            r1 = min(m, r0 + step)
            raw = self.host.read(addr + r0 * rb, (r1 - r0) * rb).reshape(r1 - r0, rb)
            if fmt == "int4":
                w = nx.unpack_int4(raw, k)
            elif fmt == "int8":
                w = raw.view(np.int8)
            else:
                w = raw.view("<f2").astype(np.float16)
            out[r0:r1] = nx.gemv(w, x, None if scales is None else scales[r0:r1],
                                 None if d is None else d[r0:r1], fmt=fmt)
        return out

    def _memcpy(self, idx: int, ins: Instr) -> Work:
        words, hi, lo = (int(v) for v in self.cc[0, ins.shape_ptr_addr])
        nbytes = words * WORD_BYTES
        host_addr = (((hi << 16) | lo) + ins.aux_addr) * WORD_BYTES
        label = f"{format_instr(ins)}  ; {words} words"
        common = {"is_async": bool(ins.async_)}
        if ins.from_device == Device.HOST:
            dst = self._range(ins.dest_addr, words * self.elems, "MEMCPY destination")
            data = self.host.read(host_addr, nbytes)
            self.l2[dst[0]: dst[1]] = data.view("<u2").reshape(words, self.elems)
            return Work(idx, "dma", label + f" from host 0x{host_addr:X}", ddr_read_bytes=nbytes,
                        onchip_write_bytes=nbytes, writes=(dst,), **common)
        src = self._range(ins.src_addr, words * self.elems, "MEMCPY source")
        block = self.l2[src[0]: src[1]].copy()
        if ins.to_device == Device.HOST:
            self.host.store(host_addr, block.astype("<u2").reshape(-1).view(np.uint8))
            return Work(idx, "dma", label + f" to host 0x{host_addr:X}", ddr_write_bytes=nbytes,
                        onchip_read_bytes=nbytes, reads=(src,), **common)
        dst = self._range(ins.dest_addr, words * self.elems, "MEMCPY destination")
        self.l2[dst[0]: dst[1]] = block
        return Work(idx, "dma", label, onchip_read_bytes=nbytes, onchip_write_bytes=nbytes,
                    reads=(src,), writes=(dst,), **common)

    def _memset(self, idx: int, ins: Instr) -> Work:
        if ins.dest_cache == DestCache.SREG:
            if ins.dest_addr == SREG_EMAX:
                self.e_max = np.uint16(ins.a_value)
            else:
                self.s_reg = np.uint16(ins.a_value)
        else:
            self.cc[int(ins.dest_cache), ins.dest_addr] = (ins.a_value, ins.b_value, ins.c_value)
        return Work(idx, "ctrl", format_instr(ins), is_async=bool(ins.async_))

    def _cvo(self, idx: int, ins: Instr) -> Work:
        fn, n = ins.cvo_func, ins.length
        spec = CVO[fn]
        src = self._range(ins.src_addr, n, "CVO source")
        x = nx.from_bits(self._get(ins.src_addr, n))
        accm = bool(ins.flags & CvoFlag.ACCM)
        reads = [src]
        out_n = cvo_out_elems(fn, n)
        dst = self._range(ins.dst_addr, out_n, "CVO destination") if out_n else None
        d = None
        if out_n and (accm or spec.arity == 2):
            d = nx.from_bits(self._get(ins.dst_addr, out_n))
            reads.append(dst)
        y = _CVO_STEP[spec.form](self, spec, ins, x, d)
        writes: tuple = ()
        if y is not None:
            bits = nx.to_bits(y)
            if out_n == 1 and spec.reduction:
                bits = np.concatenate([bits, np.zeros(self.elems - 1, np.uint16)])  # whole word written
            self._put(ins.dst_addr, bits)
            writes = (dst,)
        return Work(idx, "sfu", format_instr(ins), sfu_elems=n,
                    onchip_read_bytes=sum(e - b for b, e in reads) * WORD_BYTES,
                    onchip_write_bytes=sum(e - b for b, e in writes) * WORD_BYTES,
                    is_async=bool(ins.async_), reads=tuple(reads), writes=writes)

    # one step per operand form (cvo.CvoForm); ``d`` is the destination read (accm or a binary operand)
    def _cvo_unary(self, spec: CvoSpec, ins: Instr, x: np.ndarray, d: np.ndarray | None) -> np.ndarray:
        return spec.numerics(x, dst=d)

    def _cvo_exp(self, spec: CvoSpec, ins: Instr, x: np.ndarray, d: np.ndarray | None) -> np.ndarray:
        return spec.numerics(x, self.emax if ins.flags & CvoFlag.SUB_EMAX else None, d)

    def _cvo_scale(self, spec: CvoSpec, ins: Instr, x: np.ndarray, d: np.ndarray | None) -> np.ndarray:
        return spec.numerics(x, self.scalar, bool(ins.flags & CvoFlag.RECIP_SCALE), d)

    def _cvo_bias(self, spec: CvoSpec, ins: Instr, x: np.ndarray, d: np.ndarray | None) -> np.ndarray:
        return spec.numerics(x, self.scalar, d)

    def _cvo_binary(self, spec: CvoSpec, ins: Instr, x: np.ndarray, d: np.ndarray | None) -> np.ndarray:
        return spec.numerics(x, d)

    def _cvo_reduce_sum(self, spec: CvoSpec, ins: Instr, x: np.ndarray, d: np.ndarray | None) -> np.ndarray:
        s = spec.numerics(x, None if d is None else d[0])
        self.s_reg = nx.to_bits(s)[()]
        return np.array([s], np.float32)

    def _cvo_reduce_max(self, spec: CvoSpec, ins: Instr, x: np.ndarray, d: np.ndarray | None) -> np.ndarray:
        mx = spec.numerics(x)
        self.e_max = nx.to_bits(mx)[()]
        return np.array([mx], np.float32)

    def _cvo_load_scalar(self, spec: CvoSpec, ins: Instr, x: np.ndarray, d: np.ndarray | None) -> None:
        self.s_reg = self._get(ins.src_addr, ins.length)[ins.length - 1]  # S <- element len - 1


_CVO_STEP = {CvoForm.UNARY: Simulator._cvo_unary, CvoForm.EXP: Simulator._cvo_exp,
             CvoForm.SCALE: Simulator._cvo_scale, CvoForm.BIAS: Simulator._cvo_bias,
             CvoForm.BINARY: Simulator._cvo_binary, CvoForm.REDUCE_SUM: Simulator._cvo_reduce_sum,
             CvoForm.REDUCE_MAX: Simulator._cvo_reduce_max, CvoForm.LOAD_SCALAR: Simulator._cvo_load_scalar}
_EXEC = {Op.GEMV: Simulator._matop, Op.GEMM: Simulator._matop, Op.MEMCPY: Simulator._memcpy,
         Op.MEMSET: Simulator._memset, Op.CVO: Simulator._cvo}
