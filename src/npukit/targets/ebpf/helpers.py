"""Helper functions a program reaches with ``call N`` (or ``callx``), as an injectable registry.

A helper is ``fn(ctx, r1, r2, r3, r4, r5) -> r0`` where ``ctx`` is a `HelperContext` (checked memory
access, the ``printed`` list, the output buffer). Two stock registries:

* `alkali_helpers` — the Alkali firmware's: 1 ``print(char *)``, 2 ``tflite_apu`` and 3 ``tflite_vta``
  ``(ibuf, obuf, isize, osize, model_size)``: the model is ``ibuf[0:model_size]``, the inputs follow it,
  the outputs are concatenated into ``obuf``; 4 ``get_args(dst, max)`` (the Alkali device replaces it with
  one that copies the start command's arguments; here there are none and it returns 0).
  The TFLite engine is injected (``tflite=``); by default
  `default_tflite` uses ``npukit.models.tflite`` when that package exists, else `IdentityTflite`, a
  documented test double that copies the input bytes after the model into ``obuf``; tests inject
  their own engines.
* `conformance_helpers` — uBPF's conformance plugin: 0 gather_bytes, 1 memfrob, 2 no_op, 3 sqrti,
  4 strcmp_ext, 5 unwind (returns its argument; a 0 result ends the program with r0 = 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from npukit.errors import NpukitError
from npukit.targets.ebpf.errors import HelperFault
from npukit.targets.ebpf.memory import Memory

M64 = 0xFFFFFFFFFFFFFFFF


@dataclass
class HelperContext:
    mem: Memory
    printed: list[str] = field(default_factory=list)
    pc: int = -1
    calls: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)


HelperFn = Callable[..., int]


@dataclass(frozen=True)
class Helper:
    """``args``: the verifier's signature, one entry per argument register r1.. (None: unknown):
    ``any`` (initialised), ``cstr`` (pointer to a readable byte; the NUL is found at run time),
    ``mem_r:N`` / ``mem_w:N`` / ``mem_rw:N`` (pointer to memory holding as many bytes as register rN)."""

    index: int
    name: str
    fn: HelperFn
    args: tuple[str, ...] | None = None


class HelperRegistry:
    """Index → helper; ``unwind_index`` names the helper whose 0 result stops the program."""

    def __init__(self, helpers: list[Helper] | None = None, unwind_index: int | None = None) -> None:
        self._by_index: dict[int, Helper] = {}
        self.unwind_index = unwind_index
        for h in helpers or []:
            self._by_index[h.index] = h

    def register(self, index: int, name: str, fn: HelperFn, args: tuple[str, ...] | None = None) -> None:
        self._by_index[index] = Helper(index, name, fn, args)

    def get(self, index: int) -> Helper | None:
        return self._by_index.get(index)

    def index_of(self, name: str) -> int | None:
        return next((h.index for h in self._by_index.values() if h.name == name), None)

    def names(self) -> dict[int, str]:
        return {i: h.name for i, h in sorted(self._by_index.items())}

    def call(self, ctx: HelperContext, index: int, args: tuple[int, int, int, int, int]) -> int:
        helper = self._by_index.get(index)
        if helper is None:
            raise HelperFault(ctx.pc, f"call to unknown helper {index} at pc {ctx.pc}")
        try:
            return int(helper.fn(ctx, *args)) & M64
        except NpukitError:
            raise
        except Exception as exc:  # an injected helper's bug must not escape as a traceback
            raise HelperFault(
                ctx.pc, f"helper {index} ({helper.name}) failed at pc {ctx.pc}: {type(exc).__name__}: {exc}"
            ) from exc


# --------------------------------------------------------------------------- Alkali


class TfliteEngine(Protocol):
    def __call__(self, model: bytes, inputs: bytes, delegate: str) -> bytes: ...


class IdentityTflite:
    """Test double for the TFLite helpers: returns the input bytes unchanged (and records each call)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, str]] = []

    def __call__(self, model: bytes, inputs: bytes, delegate: str) -> bytes:
        self.calls.append((len(model), len(inputs), delegate))
        return inputs


def npukit_tflite(model: bytes, inputs: bytes, delegate: str) -> bytes:
    """Run a .tflite model with npukit's int8 interpreter, as the firmware's ``tflite_handler`` does.

    Inputs are consecutive slices of ``inputs``, each as long as its tensor; the outputs come back
    concatenated. ``delegate="vta"`` applies npukit's VTA delegate when it is registered, else the
    model runs on the host reference kernels (the delegate is not bit-exact to TFLite by design).
    """
    import numpy as np

    from npukit.models.tflite import Interpreter, read_model
    from npukit.models.tflite.delegates import DelegateUnavailable, get_delegate

    parsed = read_model(bytes(model))
    feeds, pos = [], 0
    for t in parsed.input_tensors():
        n = int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
        chunk = inputs[pos : pos + n]
        if len(chunk) < n:
            raise HelperFault(
                -1, f"tflite: input {t.name!r} needs {n} bytes, {len(chunk)} left in the buffer"
            )
        feeds.append(np.frombuffer(chunk, dtype=t.dtype).reshape(t.shape))
        pos += n
    engine = None
    if delegate == "vta":
        try:
            engine = get_delegate("vta")
        except DelegateUnavailable:
            engine = None
    outputs = Interpreter(parsed, delegate=engine).run_all(feeds)
    return b"".join(np.ascontiguousarray(outputs[t.index]).tobytes() for t in parsed.output_tensors())


def default_tflite() -> TfliteEngine:
    """npukit's TFLite interpreter when ``npukit.models.tflite`` is installed, else the identity double."""
    import importlib.util

    if importlib.util.find_spec("npukit.models.tflite") is None:
        return IdentityTflite()
    return npukit_tflite


def _print(ctx: HelperContext, a1: int, *_: int) -> int:
    text = ctx.mem.read_cstring(a1, ctx.pc).decode("utf-8", "replace")
    ctx.printed.append(text)
    return 0


def _tflite(delegate: str, engine: TfliteEngine) -> HelperFn:
    def run(ctx: HelperContext, ibuf: int, obuf: int, isize: int, osize: int, model_size: int) -> int:
        isize, osize, model_size = isize & 0xFFFFFFFF, osize & 0xFFFFFFFF, model_size & 0xFFFFFFFF
        region = ctx.mem.find(ibuf, 1)
        if region is None:
            raise ctx.mem.fault(ibuf, 1, "load", ctx.pc)
        available = region.end - ibuf
        model = ctx.mem.read_bytes(ibuf, model_size, ctx.pc)
        inputs = ctx.mem.read_bytes(ibuf + model_size, min(isize, available - model_size), ctx.pc)
        ctx.calls.append((f"tflite_{delegate}", (ibuf, obuf, isize, osize, model_size)))
        out = engine(model, inputs, delegate)
        ctx.mem.write_bytes(obuf, bytes(out)[:osize] if osize else bytes(out), ctx.pc)
        return 0

    return run


PRINT_ARGS = ("cstr",)
# (ibuf, obuf, isize, osize, model_size): the model's bytes are read from ibuf, osize bytes written to obuf
TFLITE_ARGS = ("mem_r:5", "mem_w:4", "any", "any", "any")
GET_ARGS_ARGS = ("mem_w:2", "any")


def _no_args(ctx: HelperContext, *_: int) -> int:
    return 0  # outside a device's start command there is no argument list: 0 bytes copied


def alkali_helpers(tflite: TfliteEngine | None = None) -> HelperRegistry:
    engine = tflite if tflite is not None else default_tflite()
    return HelperRegistry(
        [
            Helper(1, "print", _print, PRINT_ARGS),
            Helper(2, "tflite_apu", _tflite("apu", engine), TFLITE_ARGS),
            Helper(3, "tflite_vta", _tflite("vta", engine), TFLITE_ARGS),
            Helper(4, "get_args", _no_args, GET_ARGS_ARGS),
        ]
    )


# --------------------------------------------------------------------------- uBPF conformance plugin


def _gather_bytes(ctx: HelperContext, a: int, b: int, c: int, d: int, e: int) -> int:
    return ((a & 0xFF) << 32) | ((b & 0xFF) << 24) | ((c & 0xFF) << 16) | ((d & 0xFF) << 8) | (e & 0xFF)


def _memfrob(ctx: HelperContext, a: int, b: int, *_: int) -> int:
    data = ctx.mem.read_bytes(a, b, ctx.pc)
    ctx.mem.write_bytes(a, bytes(x ^ 42 for x in data), ctx.pc)
    return 0


def _no_op(ctx: HelperContext, *_: int) -> int:
    return 0


def _sqrti(ctx: HelperContext, a: int, *_: int) -> int:
    return int(math.sqrt(float(a)))


def _strcmp(ctx: HelperContext, a: int, b: int, *_: int) -> int:
    x, y = ctx.mem.read_cstring(a, ctx.pc), ctx.mem.read_cstring(b, ctx.pc)
    for p, q in zip(x + b"\0", y + b"\0", strict=False):
        if p != q:
            return (p - q) & M64
    return 0


def _unwind(ctx: HelperContext, a: int, *_: int) -> int:
    return a


def conformance_helpers() -> HelperRegistry:
    return HelperRegistry(
        [
            Helper(0, "gather_bytes", _gather_bytes, ("any",) * 5),
            Helper(1, "memfrob", _memfrob, ("mem_rw:2", "any")),
            Helper(2, "no_op", _no_op, ()),
            Helper(3, "sqrti", _sqrti, ("any",)),
            Helper(4, "strcmp_ext", _strcmp, ("cstr", "cstr")),
            Helper(5, "unwind", _unwind, ("any",)),
        ],
        unwind_index=5,
    )


REGISTRIES = {"alkali": alkali_helpers, "conformance": conformance_helpers}
