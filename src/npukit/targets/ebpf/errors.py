"""Typed errors of the eBPF VM, each a one-line `NpukitError` (the CLI prints it and exits 2)."""

from __future__ import annotations

from npukit.errors import NpukitError


class BpfError(NpukitError):
    """Base class of every eBPF failure."""


class EncodingError(BpfError, ValueError):
    """Bytes that are not a valid RFC 9669 instruction stream (caught at load time)."""


class AsmError(BpfError, ValueError):
    """A line of assembler text that cannot be encoded."""


class VerifyError(BpfError, ValueError):
    """The static check at load time failed (jump out of range, fall-through, write to r10, ...)."""


class ElfError(BpfError, ValueError):
    """An ELF object the loader cannot use (machine, class, relocation type, missing section)."""


class RuntimeFault(BpfError):
    """A program stopped abnormally; ``pc`` is the slot that faulted."""

    def __init__(self, pc: int, message: str) -> None:
        self.pc = pc
        super().__init__(message)


class MemoryFault(RuntimeFault):
    """A load or store outside every mapped region, or a store into a read-only one."""

    def __init__(self, pc: int, insn_text: str, address: int, size: int, region: str, kind: str) -> None:
        self.address, self.size, self.region, self.kind = address, size, region, kind
        super().__init__(
            pc, f"memory fault at pc {pc} ({insn_text}): {kind} of {size} bytes at 0x{address:x} {region}"
        )


class BudgetExceeded(RuntimeFault):
    """The instruction budget ran out (a runaway loop)."""

    def __init__(self, pc: int, budget: int) -> None:
        self.budget = budget
        super().__init__(pc, f"instruction budget of {budget} exhausted at pc {pc}")


class CallDepthExceeded(RuntimeFault):
    """Too many nested BPF-to-BPF calls."""


class HelperFault(RuntimeFault):
    """A call to an unknown helper, or a helper that failed."""


class DivisionFault(RuntimeFault):
    """Division or modulo by zero under the Alkali fork's semantics (the RFC's give 0 / dst)."""
