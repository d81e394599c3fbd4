"""The Alkali NVMe register block (alkali-csd-hw ``NVMeCore``): NVMe 1.4 controller registers, five
doorbell pairs at a 4-byte stride, and three firmware-facing registers after them:

* ``0x1028`` IRQ status (read-only, bit 0 = the host-write FIFO is not empty),
* ``0x102C`` IRQ data (read-only; a read pops the FIFO and returns the dword index of a register the
  host wrote, i.e. its byte address / 4),
* ``0x1030`` host interrupt (a write of a bit mask raises those MSI vectors once; reads as 0).

Only host-port writes are logged in the 128-deep FIFO, as in the hardware; a write that finds it full
is stored but not logged, and counted in ``fifo_overflows``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from npukit.devices.nvme.spec import Register
from npukit.errors import ConfigError

CAP_RESET = 0x0000_0020_0801_0FFF  # MQES 4095, CQR 1, TO 8 (4 s), CSS bit 37 (NVM), MPSMIN=MPSMAX=0
VS_RESET = 0x0001_0400
DOORBELL_PAIRS = 5
DOORBELL_STRIDE = 4
FIFO_DEPTH = 128
REGISTER_SPACE = Register.IRQ_HOST + 4
# Registers the host cannot change (NVMe 1.4 marks them RO); the Alkali block stores any host write,
# see docs/devices/nvme.md.
_HOST_READ_ONLY = {Register.CAP, Register.CAP + 4, Register.VS, Register.CSTS, Register.IRQ_STATUS,
                   Register.IRQ_DATA}

CC_EN = 1 << 0
CSTS_RDY, CSTS_CFS = 1 << 0, 1 << 1
SHST_NORMAL, SHST_OCCURRING, SHST_COMPLETE = 0, 1, 2


def sq_doorbell(qid: int) -> int:
    return Register.DOORBELL_BASE + 2 * qid * DOORBELL_STRIDE


def cq_doorbell(qid: int) -> int:
    return Register.DOORBELL_BASE + (2 * qid + 1) * DOORBELL_STRIDE


def cc_fields(cc: int) -> dict[str, int]:
    return {"en": cc & 1, "css": (cc >> 4) & 0x7, "mps": (cc >> 7) & 0xF, "ams": (cc >> 11) & 0x7,
            "shn": (cc >> 14) & 0x3, "iosqes": (cc >> 16) & 0xF, "iocqes": (cc >> 20) & 0xF}


class RegisterFile:
    """32-bit registers addressed by byte offset; 64-bit ones are two dwords (low first)."""

    def __init__(self, on_host_interrupt: Callable[[int], None] | None = None) -> None:
        self._words = [0] * (REGISTER_SPACE // 4)
        self._fifo: deque[int] = deque()
        self.fifo_overflows = 0
        self.on_host_interrupt = on_host_interrupt
        self.reset()

    def reset(self) -> None:
        """Controller reset values: everything 0 but CAP and VS (the doorbells are cleared too)."""
        self._words = [0] * (REGISTER_SPACE // 4)
        self.store64(Register.CAP, CAP_RESET)
        self.store(Register.VS, VS_RESET)

    @staticmethod
    def _index(offset: int) -> int:
        if offset % 4 or not 0 <= offset < REGISTER_SPACE:
            raise ConfigError(f"register offset 0x{offset:X} is not a dword in the register block")
        return offset // 4

    # controller (firmware) port: no FIFO logging
    def load(self, offset: int) -> int:
        return self._words[self._index(offset)]

    def load64(self, offset: int) -> int:
        return self.load(offset) | (self.load(offset + 4) << 32)

    def store(self, offset: int, value: int) -> None:
        self._words[self._index(offset)] = value & 0xFFFFFFFF

    def store64(self, offset: int, value: int) -> None:
        self.store(offset, value)
        self.store(offset + 4, value >> 32)

    # host port
    def host_read(self, offset: int) -> int:
        index = self._index(offset)
        if offset == Register.IRQ_STATUS:
            return 1 if self._fifo else 0
        if offset == Register.IRQ_DATA:
            return self._fifo.popleft() if self._fifo else 0
        if offset == Register.IRQ_HOST:
            return 0
        return self._words[index]

    def host_write(self, offset: int, value: int) -> None:
        index = self._index(offset)
        if offset in _HOST_READ_ONLY:
            return
        if offset == Register.IRQ_HOST:
            self.raise_interrupts(value)
            return
        self._words[index] = value & 0xFFFFFFFF
        if len(self._fifo) < FIFO_DEPTH:
            self._fifo.append(index)
        else:
            self.fifo_overflows += 1

    def raise_interrupts(self, mask: int) -> None:
        """The firmware's write to IRQ_HOST: raise each MSI vector whose bit is set."""
        if self.on_host_interrupt is None:
            return
        for vector in range(32):
            if mask >> vector & 1:
                self.on_host_interrupt(vector)

    # firmware side of the FIFO
    def irq_pending(self) -> bool:
        return bool(self._fifo)

    def pop_host_write(self) -> int | None:
        """Byte offset of the oldest logged host write (IRQ data × 4), or None when empty."""
        return self._fifo.popleft() * 4 if self._fifo else None

    @property
    def fifo_level(self) -> int:
        return len(self._fifo)
