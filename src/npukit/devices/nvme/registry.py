"""The command handler registry: the extension point for vendor commands and log pages.

A handler is registered for ``(QueueKind, opcode)`` with the number of bytes it moves in each
direction, computed from the SQE. The transports use those lengths to pull host data before the
handler runs (PRP lists on the PCIe model, in-capsule data or R2T/H2CData on NVMe/TCP) and to push
the handler's output back (PRPs, C2HData). The opcode's direction bits (1:0) must agree with the
lengths a handler declares, as the base specification requires of every command, vendor ones too.

    registry.register(QueueKind.ADMIN, 0xC2, CommandSpec("accelerator identify", handler,
                                                         data_out=lambda cmd: cmd.cdw10 * 4))

A handler receives a :class:`Request` and returns a :class:`Result` (or raises ``NvmeError``);
returning ``DEFERRED`` keeps the command outstanding until ``Request.complete`` is called later.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from npukit.devices.nvme.command import Command
from npukit.errors import ConfigError

if TYPE_CHECKING:
    from npukit.devices.nvme.controller import Controller


class QueueKind(enum.Enum):
    ADMIN = "admin"
    IO = "io"


@dataclass
class Result:
    dw0: int = 0
    dw1: int = 0
    data: bytes | bytearray | memoryview = b""


DEFERRED = object()


@dataclass
class Request:
    """One command being executed: the controller, the queue, the SQE and the host's data."""

    ctrl: Controller
    qid: int
    cmd: Command
    data: memoryview = field(default_factory=lambda: memoryview(b""))
    complete: Callable[[Result | BaseException], None] | None = None


def no_data(cmd: Command) -> int:
    return 0


def dwords_cdw10(cmd: Command) -> int:
    """Length given as a 1-based dword count in CDW10 (Alkali vendor command convention)."""
    return cmd.cdw10 * 4


# Commands Supported and Effects data structure bits (NVMe base specification 1.4, Figure 211)
EFFECT_CSUPP, EFFECT_LBCC, EFFECT_NCC, EFFECT_NIC, EFFECT_CCC = 1 << 0, 1 << 1, 1 << 2, 1 << 3, 1 << 4
EFFECT_CSE_SHIFT = 16  # bits 18:16
EFFECTS_LOG_SIZE = 4096  # ACS0..255 at bytes 0..1023, IOCS0..255 at 1024..2047, the rest reserved


@dataclass(frozen=True)
class CommandEffects:
    """What executing a command may change, as the host reads it in log page 05h."""

    lbcc: bool = False  # logical block content change
    ncc: bool = False  # namespace capability change
    nic: bool = False  # namespace inventory change
    ccc: bool = False  # controller capability change (Identify Controller may read differently)
    cse: int = 0  # command submission and execution: 0 none, 1 one namespace, 2 all namespaces

    def encode(self) -> int:
        """The 32-bit entry of a supported command."""
        return (EFFECT_CSUPP | EFFECT_LBCC * self.lbcc | EFFECT_NCC * self.ncc | EFFECT_NIC * self.nic
                | EFFECT_CCC * self.ccc | (self.cse & 0x7) << EFFECT_CSE_SHIFT)


NO_EFFECTS = CommandEffects()


@dataclass(frozen=True)
class CommandSpec:
    name: str
    handler: Callable[[Request], Any]
    data_in: Callable[[Command], int] = no_data
    data_out: Callable[[Command], int] = no_data
    effects: CommandEffects = NO_EFFECTS


@dataclass(frozen=True)
class LogPageSpec:
    """A log page: ``build(ctrl, cmd)`` returns its whole content; offset and length are cut here."""

    name: str
    build: Callable[[Controller, Command], bytes]


class CommandRegistry:
    def __init__(self) -> None:
        self._commands: dict[tuple[QueueKind, int], CommandSpec] = {}
        self.log_pages: dict[int, LogPageSpec] = {}

    def register(self, kind: QueueKind, opcode: int, spec: CommandSpec, *, replace: bool = False) -> None:
        if not 0 <= opcode <= 0xFF:
            raise ConfigError(f"opcode {opcode} is not a byte")
        key = (kind, opcode)
        if key in self._commands and not replace:
            raise ConfigError(f"{kind.value} opcode 0x{opcode:02X} already has a handler")
        self._commands[key] = spec

    def register_log_page(self, lid: int, spec: LogPageSpec, *, replace: bool = False) -> None:
        if lid in self.log_pages and not replace:
            raise ConfigError(f"log page 0x{lid:02X} already has a builder")
        self.log_pages[lid] = spec

    def lookup(self, kind: QueueKind, opcode: int) -> CommandSpec | None:
        return self._commands.get((kind, opcode))

    def copy(self) -> CommandRegistry:
        other = CommandRegistry()
        other._commands = dict(self._commands)
        other.log_pages = dict(self.log_pages)
        return other

    def opcodes(self, kind: QueueKind) -> list[int]:
        return sorted(op for k, op in self._commands if k is kind)

    def effects_log(self) -> bytes:
        """Log page 05h built from the registered handlers: one entry per admin and I/O opcode."""
        page = bytearray(EFFECTS_LOG_SIZE)
        for (kind, opcode), spec in self._commands.items():
            base = 0 if kind is QueueKind.ADMIN else 1024
            struct.pack_into("<I", page, base + 4 * opcode, spec.effects.encode())
        return bytes(page)


def transfer_lengths(spec: CommandSpec, cmd: Command) -> tuple[int, int]:
    """(bytes host→controller, bytes controller→host) for a command, checked against opcode bits 1:0."""
    n_in, n_out = spec.data_in(cmd), spec.data_out(cmd)
    if (n_in and not cmd.opcode & 0x1) or (n_out and not cmd.opcode & 0x2):
        raise ConfigError(f"handler '{spec.name}' moves data against the direction bits of opcode "
                          f"0x{cmd.opcode:02X}")
    return n_in, n_out
