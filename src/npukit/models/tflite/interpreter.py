"""The int8 interpreter: a plain walk over the graph, one kernel call per op (compiled kernels by default).

    interp = Interpreter("model.tflite")
    outputs = interp.run([x])            # {output name: array}, bit-exact with LiteRT BUILTIN_REF

Kernels are prepared once (multipliers, tables, im2col weight matrices); ``run`` binds the inputs,
calls each op's kernel on NumPy arrays and keeps every tensor's value. A delegate's `Plan` takes
segments of ops by index; those run through the delegate and the rest on the host kernels. Hooks
(``interp.hooks``) receive one `OpRecord` per op or segment with its wall time, for traces.
"""

from __future__ import annotations

import operator
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from npukit.errors import ModelError
from npukit.models.tflite.delegates import Delegate, Plan, Segment
from npukit.models.tflite.kernels import KERNELS, Ctx, Kernel, UnsupportedOp
from npukit.models.tflite.kernels.compiled import COMPILED_KERNELS
from npukit.models.tflite.model import Model, Tensor
from npukit.models.tflite.reader import read_model

Feeds = Sequence[np.ndarray] | Mapping[str, np.ndarray]


class _BlasLimit:
    """Run the small per-op matmuls on one BLAS thread: on a busy machine OpenBLAS's spinning worker
    threads make a 64×576×64 product ~100× slower (measured: 22 ms vs 0.2 ms). Needs threadpoolctl;
    without it BLAS keeps its own setting."""

    def __init__(self, threads: int | None) -> None:
        self._controller = None
        self.threads = threads
        if threads is not None:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:  # optional: results are identical either way, only speed differs
                return
            self._controller = ThreadpoolController()

    def __enter__(self):
        self._ctx = (self._controller.limit(limits=self.threads, user_api="blas")
                     if self._controller is not None else None)
        if self._ctx is not None:
            self._ctx.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)


@dataclass(frozen=True)
class OpRecord:
    index: int  # first op index (a segment's first op)
    name: str  # op name, or the segment label
    where: str  # "host" or the delegate's name
    start: float  # seconds since the run started
    seconds: float
    ops: tuple[int, ...] = ()


def prepare_op(model: Model, index: int, compiled: bool = False) -> Kernel:
    """The host kernel for op ``index`` (the compiled one where ``compiled`` and the op has one);
    `UnsupportedOp` (one line: op index and name) otherwise."""
    op = model.ops[index]
    prepare = (COMPILED_KERNELS.get(op.name) if compiled else None) or KERNELS.get(op.name)
    if prepare is None:
        raise UnsupportedOp(f"op {op.index} {op.name}: not supported by the int8 reference interpreter")
    return prepare(Ctx(model, op))


class Interpreter:
    def __init__(self, model: Model | str | os.PathLike | bytes, delegate: Delegate | None = None,
                 plan: Plan | None = None, blas_threads: int | None = 1, compiled: bool = True) -> None:
        self.model = model if isinstance(model, Model) else read_model(model)
        if plan is None:
            plan = delegate.partition(self.model) if delegate is not None else Plan()
        self.plan = plan
        self.delegate_name = getattr(delegate, "name", "delegate") if delegate is not None else "host"
        self._delegated = plan.delegated_ops()
        self._segment_at: dict[int, Segment] = {min(s.ops): s for s in plan.segments if s.ops}
        self._kernels: dict[int, Kernel] = {
            op.index: prepare_op(self.model, op.index, compiled) for op in self.model.ops
            if op.index not in self._delegated
        }
        self.hooks: list[Callable[[OpRecord], None]] = []
        self.compiled = compiled
        # bound once: a run copies the constants list and reads the graph's inputs and outputs
        self._constants = [t.data for t in self.model.tensors]
        self._inputs, self._outputs = self.model.input_tensors(), self.model.output_tensors()
        # only BLAS-backed kernels need the limit (entering it costs ~10 µs a run): the reference
        # kernels' matmuls, a compiled kernel that says so (the float32 GEMM CONV_2D past the int8
        # kernels' K bound), and whatever a delegate's segments call
        uses_blas = (not compiled or bool(self._delegated)
                     or any(getattr(k, "uses_blas", False) for k in self._kernels.values()))
        self._blas = _BlasLimit(blas_threads if uses_blas else None)
        # the host-only hot path: (kernel, input indices, output indices) per op, bound once
        self._steps = [(self._kernels[op.index], tuple(op.inputs), tuple(op.outputs)) for op in self.model.ops
                       ] if not plan.segments and not self._delegated else None
        # the same with each op's inputs gathered by one C call (an absent optional input, index −1,
        # reads a None slot appended past the tensors during a walk) and its one output stored
        # directly: the Python left between the kernels is ~0.3 µs an op less (digits: 4 ops)
        single = self._steps is not None and all(len(outs) == 1 for _, _, outs in self._steps)
        none_slot = len(self.model.tensors)
        self._fast_steps = [(k, _gatherer(ins, none_slot), outs[0]) for k, ins, outs in self._steps
                            ] if single else None

    @property
    def host_ops(self) -> int:
        return len(self._kernels)

    @property
    def delegated_ops(self) -> int:
        return len(self._delegated)

    def bind(self, feeds: Feeds) -> list[np.ndarray | None]:
        """Tensor values before the first op: constants plus the graph inputs from ``feeds``."""
        values: list[np.ndarray | None] = list(self._constants)
        ins = self._inputs
        if isinstance(feeds, Mapping):
            by_name = {t.name: t for t in ins}
            unknown = sorted(set(feeds) - set(by_name))
            if unknown:
                raise ModelError(f"unknown input {unknown[0]!r} (inputs: {', '.join(by_name)})")
            pairs = [(by_name[n], v) for n, v in feeds.items()]
            missing = [t.name for t in ins if t.name not in feeds]
        else:
            feeds = list(feeds)
            if len(feeds) > len(ins):
                raise ModelError(f"{len(feeds)} inputs given, the model takes {len(ins)}")
            pairs = list(zip(ins, feeds, strict=False))
            missing = [t.name for t in ins[len(feeds):]]
        if missing:
            raise ModelError(f"missing input {missing[0]!r} (the model takes {len(ins)})")
        for t, v in pairs:
            values[t.index] = _coerce(t, v)
        return values

    def run(self, feeds: Feeds) -> dict[str, np.ndarray]:
        """Outputs by tensor name."""
        values = self.run_all(feeds)
        result = {}
        for t in self._outputs:
            if values[t.index] is None:
                raise ModelError(f"output {t.name} was never computed")
            result[t.name] = values[t.index]
        return result

    def run_batch(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        """Outputs by tensor name for a batch along N: ``batch`` holds B inputs of a one-input model
        declared with batch 1 (shape ``(B, *input_shape[1:])``); every output's axis 0 is B. The
        same plan runs once for all B (the host kernels read N from their input), so the per-op
        overhead is paid once per batch; each sample's outputs equal what `run` gives it."""
        ins = self.model.input_tensors()
        if len(ins) != 1 or tuple(ins[0].shape[:1]) != (1,):
            raise ModelError("run_batch needs a model with one input whose batch axis is 1")
        if self.plan.segments or self._delegated:
            raise ModelError("run_batch runs the host kernels only (no delegate)")
        t = ins[0]
        a = np.asarray(batch)
        if a.ndim != len(t.shape) or tuple(a.shape[1:]) != tuple(t.shape[1:]) or a.shape[0] < 1:
            rest = ", ".join(map(str, t.shape[1:]))
            raise ModelError(f"run_batch: shape {list(a.shape)} is not (B, {rest})")
        values: list[np.ndarray | None] = [x.data for x in self.model.tensors]
        values[t.index] = np.ascontiguousarray(_coerce_values(t, a))
        with self._blas:
            self._walk(values)
        return {o.name: values[o.index] for o in self.model.output_tensors()}

    def run_all(self, feeds: Feeds) -> list[np.ndarray | None]:
        """Every tensor's value after the run, by tensor index (None for tensors never produced)."""
        values = self.bind(feeds)
        with self._blas:
            self._walk(values)
        return values

    def _walk(self, values: list[np.ndarray | None]) -> None:
        if self._fast_steps is not None and not self.hooks:
            values.append(None)  # the slot absent inputs read
            try:
                for kernel, gather, out in self._fast_steps:
                    values[out] = kernel(gather(values))[0]
            finally:
                values.pop()
            return
        if self._steps is not None and not self.hooks:
            for kernel, ins, outs in self._steps:
                produced = kernel([values[i] if i >= 0 else None for i in ins])
                for i, v in zip(outs, produced, strict=True):
                    values[i] = v
            return
        t0 = time.perf_counter()
        record = bool(self.hooks)
        for op in self.model.ops:
            seg = self._segment_at.get(op.index)
            if seg is not None:
                start = time.perf_counter()
                produced = seg.run({i: values[i] for i in seg.inputs})
                for i, v in produced.items():
                    values[i] = v
                if record:
                    self._emit(OpRecord(op.index, seg.label or op.name, self.delegate_name,
                                        start - t0, time.perf_counter() - start, seg.ops))
                continue
            if op.index in self._delegated:
                continue
            start = time.perf_counter()
            outs = self._kernels[op.index]([values[i] if i >= 0 else None for i in op.inputs])
            for i, v in zip(op.outputs, outs, strict=True):
                values[i] = v
            if record:
                self._emit(OpRecord(op.index, op.name, "host", start - t0, time.perf_counter() - start,
                                    (op.index,)))

    def _emit(self, rec: OpRecord) -> None:
        for hook in self.hooks:
            hook(rec)


def _gatherer(ins: tuple[int, ...], none_slot: int) -> Callable[[list], tuple]:
    """A function that picks an op's inputs out of the tensor values as one tuple."""
    slots = [i if i >= 0 else none_slot for i in ins]
    if len(slots) >= 2:
        return operator.itemgetter(*slots)
    if len(slots) == 1:
        only = slots[0]
        return lambda values: (values[only],)
    return lambda values: ()


def _coerce(t: Tensor, v: object) -> np.ndarray:
    a = np.asarray(v)
    if tuple(a.shape) != tuple(t.shape):
        if a.size == int(np.prod(t.shape)) and a.ndim == 1:
            a = a.reshape(t.shape)
        else:
            raise ModelError(f"input {t.name}: shape {list(a.shape)} ≠ expected {list(t.shape)}")
    return _coerce_values(t, a)


def _coerce_values(t: Tensor, a: np.ndarray) -> np.ndarray:
    """``a`` in the tensor's dtype: integer values range-checked, floats cast."""
    if a.dtype == t.dtype:
        return a
    if t.dtype.kind in "iu" and a.dtype.kind in "iu":
        info = np.iinfo(t.dtype)
        if a.size and (int(a.min()) < info.min or int(a.max()) > info.max):
            raise ModelError(f"input {t.name}: values outside {t.dtype} range [{info.min}, {info.max}]")
        return a.astype(t.dtype)
    if t.dtype.kind == "f" and a.dtype.kind in "fiu":
        return a.astype(t.dtype)
    raise ModelError(f"input {t.name}: expected {t.dtype}, got {a.dtype}")
