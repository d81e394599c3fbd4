"""One firmware run, as the Alkali APU does it (``apu-app/src/acc.cpp``): load the eBPF object, run it
with the Alkali entry ABI (r1 = input buffer, r2 = output buffer, r3 = input length) and the Alkali
helpers on npukit's eBPF VM, with TFLite executed by npukit's int8 interpreter (``tflite_apu``) or
through the VTA delegate (``tflite_vta``). Everything timed here is wall clock on this machine
(measured); VTA cycles come from the delegate's timing model (its own tier).

Helpers: 1 ``print(char *)``, 2 ``tflite_apu``, 3 ``tflite_vta`` ``(ibuf, obuf, isize, osize,
model_size)`` as in the seed, and 4 ``get_args(char *dst, int max)`` (npukit: copies the start
command's argument list, returns its length), the one way the argument list reaches the firmware.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from npukit.evidence import Ledger, Tier
from npukit.targets.ebpf.errors import HelperFault
from npukit.targets.ebpf.helpers import GET_ARGS_ARGS, PRINT_ARGS, HelperContext, alkali_helpers
from npukit.targets.ebpf.load import program_from_bytes
from npukit.targets.ebpf.memory import OUTPUT_BASE
from npukit.targets.ebpf.vm import DEFAULT_BUDGET, Machine


@dataclass
class TfliteCall:
    helper: str  # tflite_apu / tflite_vta
    start_s: float  # seconds since the run started
    host_s: float  # wall time of the whole helper (interpreter + delegate), measured
    vta_cycles: int = 0
    vta_tier: Tier = Tier.PROJECTED
    delegated_ops: int = 0
    host_ops: int = 0
    figures: Ledger = field(default_factory=Ledger)
    timings: list[Any] = field(default_factory=list)  # the delegate's per-op TimingResults (trace)
    note: str = ""
    out_bytes: int = 0


@dataclass
class RunOutcome:
    ok: bool
    r0: int = 0
    output: bytes = b""
    instructions: int = 0
    error: str = ""
    printed: list[tuple[float, str]] = field(default_factory=list)  # (seconds since start, text)
    tflite: list[TfliteCall] = field(default_factory=list)
    seconds: float = 0.0
    produced: int = 0  # output bytes: the extent the tflite helpers wrote, else the whole window
    engine: str = "fast"  # jit: a verified firmware ran as native code, proven accesses unchecked

    @property
    def vta_cycles(self) -> int:
        return sum(c.vta_cycles for c in self.tflite)

    @property
    def host_seconds(self) -> float:
        return sum(c.host_s for c in self.tflite)


class TfliteEngine:
    """The engine the tflite helpers call: ``delegate`` "apu" → host kernels, "vta" → the VTA delegate
    (``variant`` exact or alkali) found through the delegate registry; records one `TfliteCall`."""

    def __init__(self, variant: str, t0: float, calls: list[TfliteCall]) -> None:
        self.variant, self.t0, self.calls = variant, t0, calls
        self._prepared: dict[tuple[bytes, str], tuple[Any, Any, str]] = {}

    def _prepare(self, model: bytes, delegate: str) -> tuple[Any, Any, str]:
        from npukit.models.tflite import Interpreter, read_model
        from npukit.models.tflite.delegates import DelegateUnavailable, get_delegate

        engine, note = None, ""
        if delegate == "vta":
            try:
                engine = get_delegate("vta", self.variant)
            except DelegateUnavailable as exc:
                note = f"VTA delegate unavailable, ran on the host kernels ({exc})"
        return Interpreter(read_model(model), delegate=engine), engine, note

    def __call__(self, model: bytes, inputs: bytes, delegate: str) -> bytes:
        import numpy as np

        start = time.perf_counter()
        call = TfliteCall(f"tflite_{delegate}", start - self.t0, 0.0)
        key = (bytes(model), delegate)
        if key not in self._prepared:  # one partition (and VTA lowering) per model in a run
            self._prepared[key] = self._prepare(key[0], delegate)
        interp, engine, note = self._prepared[key]
        call.note = note
        parsed = interp.model
        feeds, pos = [], 0
        for t in parsed.input_tensors():
            n = int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
            if pos + n > len(inputs):
                raise HelperFault(-1, f"tflite: input {t.name!r} needs {n} bytes, {len(inputs) - pos} left")
            feeds.append(np.frombuffer(inputs[pos:pos + n], dtype=t.dtype).reshape(t.shape))
            pos += n
        values = interp.run_all(feeds)
        out = b"".join(np.ascontiguousarray(values[t.index]).tobytes() for t in parsed.output_tensors())
        call.host_s = time.perf_counter() - start
        call.out_bytes = len(out)
        call.delegated_ops, call.host_ops = interp.delegated_ops, interp.host_ops
        call.figures = interp.plan.figures
        if "vta_cycles" in call.figures:
            fig = call.figures["vta_cycles"]
            call.vta_cycles, call.vta_tier = int(fig.value), fig.tier
        call.timings = [(r.index, r.name, r.timing) for r in getattr(engine, "reports", [])]
        self.calls.append(call)
        return out


def run_firmware(image: bytes, input_data: bytes, output_size: int, *, args: bytes = b"",
                 variant: str = "exact", budget: int = DEFAULT_BUDGET, engine: str = "fast",
                 on_print: Callable[[str], None] | None = None) -> RunOutcome:
    """Run ``image`` on ``input_data``; never raises for a firmware problem (the outcome says why)."""
    t0 = time.perf_counter()
    outcome = RunOutcome(ok=False)
    helpers = alkali_helpers(tflite=TfliteEngine(variant, t0, outcome.tflite))

    def _print(ctx: HelperContext, a1: int, *_: int) -> int:
        text = ctx.mem.read_cstring(a1, ctx.pc).decode("utf-8", "replace")
        outcome.printed.append((time.perf_counter() - t0, text))
        if on_print is not None:
            on_print(text)
        return 0

    def _get_args(ctx: HelperContext, dst: int, size: int, *_: int) -> int:
        n = min(len(args), size & 0xFFFFFFFF)
        ctx.mem.write_bytes(dst, args[:n], ctx.pc)
        return len(args)

    helpers.register(1, "print", _print, PRINT_ARGS)
    helpers.register(4, "get_args", _get_args, GET_ARGS_ARGS)
    try:
        names = {n: i for i, n in helpers.names().items()}
        loaded = program_from_bytes(_unpad(bytes(image)), helper_names=names)
        machine = Machine(loaded.program, helpers, loaded.sections, entry=loaded.entry)
        if engine == "jit":
            _install_jit(machine, bytes(image), output_size)
        outcome.engine = engine
        result = machine.run(bytes(input_data), output_size, "alkali", budget=budget, engine=engine)
    except Exception as exc:  # the device keeps serving whatever a firmware or a model does
        outcome.error = f"{type(exc).__name__}: {exc}"
    else:
        outcome.ok, outcome.r0, outcome.output = True, result.r0, result.output
        outcome.instructions = result.instructions
        outcome.produced = _produced(result.calls, outcome.tflite, output_size)
    outcome.seconds = time.perf_counter() - t0
    return outcome


_JIT_CACHE: OrderedDict[tuple[bytes, int], Any] = OrderedDict()
_JIT_LOCK = threading.Lock()
JIT_CACHE_SIZE = 16


def _install_jit(machine: Machine, image: bytes, output_size: int) -> None:
    """Give ``machine`` the native code of ``image`` for this output window, compiled once per image
    (the code is stateless: each run binds it to its own machine and helpers)."""
    key = (hashlib.sha256(image).digest(), output_size)
    with _JIT_LOCK:
        cached = _JIT_CACHE.get(key)
        if cached is not None:
            _JIT_CACHE.move_to_end(key)
    if cached is None:
        cached = machine.jit("alkali", output_size)
        with _JIT_LOCK:
            _JIT_CACHE[key] = cached
            while len(_JIT_CACHE) > JIT_CACHE_SIZE:
                _JIT_CACHE.popitem(last=False)
    machine.jit("alkali", output_size, compiled=cached.bind(machine))


def verify_firmware(image: bytes, output_size: int, max_input: int = (1 << 32) - 1) -> list[str]:
    """Why the static verifier refuses ``image`` under the Alkali ABI ("pc N: reason" each; [] = safe),
    for inputs of at most ``max_input`` bytes. An image that does not even load gives its load error."""
    from npukit.errors import NpukitError
    from npukit.targets.ebpf.analysis import Options, analyze

    helpers = alkali_helpers(tflite=lambda model, inputs, delegate: inputs)
    helpers.register(1, "print", lambda *_: 0, PRINT_ARGS)
    try:
        names = {n: i for i, n in helpers.names().items()}
        loaded = program_from_bytes(_unpad(bytes(image)), helper_names=names)
    except NpukitError as exc:
        return [f"does not load: {exc}"]
    verdict = analyze(loaded.program, helpers, loaded.sections,
                      Options(abi="alkali", output_size=output_size, max_input=max_input, entry=loaded.entry))
    return [f"pc {f.pc}: {f.message}" for f in verdict.errors]


def _unpad(image: bytes) -> bytes:
    """Firmware arrives in whole dwords: an assembler-text image loses the NULs it was padded with
    (ELF objects and raw 8-byte slots are taken as they are)."""
    text = image.rstrip(b"\0")
    if image[:4] != b"\x7fELF" and text and b"\0" not in text and len(image) - len(text) < 4:
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            return image
        return text
    return image


def _produced(vm_calls: list, tflite: list[TfliteCall], window: int) -> int:
    """Output bytes produced: how far into the output buffer the tflite helpers wrote (their obuf
    pointer plus the bytes written, cut at osize); the whole window when no model ran."""
    ends = []
    for (_name, (_ibuf, obuf, _isize, osize, _msize)), call in zip(
            [c for c in vm_calls if c[0].startswith("tflite_")], tflite, strict=False):
        n = min(call.out_bytes, osize & 0xFFFFFFFF) if osize & 0xFFFFFFFF else call.out_bytes
        if OUTPUT_BASE <= obuf <= OUTPUT_BASE + window:
            ends.append(obuf - OUTPUT_BASE + n)
    return min(max(ends), window) if ends else window
