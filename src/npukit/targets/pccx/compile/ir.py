"""The compiler's value graph: symbolic L2 buffers and one node per future instruction (or host step).

A `Buf` is a vector of BF16 elements that will live in L2; it is either a root (placed by the
allocator) or an alias of a range of another buffer (``parent`` + element ``off``: the parts of a
concatenation, a value computed in place). A `Ref` names a word-aligned element range of a buffer
(a scalar operand may sit at any element). Nodes carry refs, never addresses: `codegen` resolves
aliases, places roots and encodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from npukit.errors import NpukitError
from npukit.targets.pccx.isa import ELEMS_PER_WORD, CvoFunc


class CompileError(NpukitError):
    """The model or configuration cannot be lowered onto the target (one-line reason)."""


class CapacityError(CompileError):
    """The program does not fit (L2, host staging): a smaller prefill chunk may."""


@dataclass(eq=False)
class Buf:
    n: int  # elements
    name: str = ""
    parent: Buf | None = None
    off: int = 0  # element offset in parent
    addr: int | None = None  # word address of a root, set by the allocator
    shared: bool = False  # constants / loaded vectors reused by several ops: never placed into a concat
    # attention span buffer (allocated at the bucket length, used length set per token): its span key,
    # the window class (decode) or (window class, token index in the chunk) (prefill)
    dyn: Any = None
    # sized by this window class's span bucket without being a span itself (the scores' -inf tail)
    bucket_class: Any = None

    @property
    def span_class(self) -> Any:
        """The window class whose span bucket sizes this buffer (None: its size is fixed). Such buffers
        are placed apart (`codegen.CodeGen._allocate`) and their copies' constant-cache entries named
        by class, not value, so one bucket's program differs from the next only where it names one."""
        if self.dyn is not None:
            return self.dyn[0] if isinstance(self.dyn, tuple) else self.dyn
        return self.bucket_class

    def root(self) -> tuple[Buf, int]:
        b, off = self, 0
        while b.parent is not None:
            off += b.off
            b = b.parent
        return b, off

    def alias(self, parent: Buf, off: int) -> None:
        if self.parent is not None:
            raise CompileError(f"buffer {self.name} is placed twice")
        self.parent, self.off = parent, off


@dataclass(frozen=True, eq=False)
class Ref:
    buf: Buf
    off: int  # element offset within buf
    n: int

    def root(self) -> tuple[Buf, int]:
        r, o = self.buf.root()
        return r, o + self.off

    def word(self) -> int:
        """L2 word address (after allocation); the range must start on a word boundary."""
        r, o = self.root()
        if o % ELEMS_PER_WORD:
            raise CompileError(f"{self.buf.name}+{self.off}: operand is not word aligned (element {o})")
        assert r.addr is not None
        return r.addr + o // ELEMS_PER_WORD


@dataclass(frozen=True)
class Weight:
    """A GEMV weight operand in host DDR: the image address and its layout."""

    addr: int
    fmt: str  # int4 | int8 | fp16
    m: int  # output rows
    k: int  # reduction length
    ext: int = 0  # npukit layout bits (memory.W_KMAJOR | W_SPLIT_SCALES | W_ACT_SCALE)
    scale_addr: int | None = None  # split row scales / activation scales (weight slot + 1)
    w_scale: bool = True
    name: str = ""
    # KV ring operand whose rows depend on the position: (kind "k"|"v", window key, codes base address,
    # row bytes, scales base address or None); `addr`/`scale_addr`/m or k hold the row-0, bucket values
    dyn: tuple | None = None


@dataclass(eq=False)
class Node:
    kind: str  # gemv | cvo | copy | load | store | emax_reset | host | mark
    out: Ref | None = None
    srcs: tuple[Ref, ...] = ()
    func: CvoFunc | None = None
    flags: int = 0
    scalar: Ref | float | None = None  # the S register operand (SCALE, RELU_BIAS)
    weight: Weight | None = None
    host_addr: int = 0  # load/store: host byte address
    findemax: bool = False
    host: Any = None  # host step payload (the driver runs it between program segments)
    label: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
