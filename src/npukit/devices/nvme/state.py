"""Persistent device state: SMART/health counters, firmware slots, power-on bookkeeping.

Lives in a state directory (``state.json`` written atomically, ``fw/slotN.bin``). A start that finds
the previous run still marked running counts one unsafe shutdown, as a drive that lost power would.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from npukit.errors import ConfigError

FIRMWARE_SLOTS = 3
READ_ONLY_SLOT = 1
BUILTIN_REVISION = "12.34"  # Alkali RPU firmware's Identify FR


@dataclass
class Counters:
    data_units_read: int = 0  # 512-byte units; the log reports thousands, rounded up
    data_units_written: int = 0
    host_read_commands: int = 0
    host_write_commands: int = 0
    controller_busy_ns: int = 0
    power_cycles: int = 0
    power_on_seconds: float = 0.0
    unsafe_shutdowns: int = 0
    media_errors: int = 0
    error_log_entries: int = 0

    def add_reads(self, commands: int, blocks: int, busy_ns: int) -> None:
        """Count ``commands`` successful Reads of ``blocks`` blocks in all (one call per batch of them)."""
        self.host_read_commands += commands
        self.data_units_read += blocks
        self.controller_busy_ns += busy_ns


@dataclass
class Firmware:
    revisions: dict[int, str] = field(default_factory=lambda: {READ_ONLY_SLOT: BUILTIN_REVISION})
    active_slot: int = READ_ONLY_SLOT
    next_slot: int = 0  # 0: no activation pending at the next reset


def image_revision(image: bytes) -> str:
    """The 8-character revision a slot reports for an image (first 8 hex digits of its SHA-256)."""
    return hashlib.sha256(image).hexdigest()[:8].upper()


class DeviceState:
    """Counters and firmware slots, persisted under ``directory`` (in memory only when None)."""

    def __init__(self, directory: str | os.PathLike | None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.counters = Counters()
        self.firmware = Firmware()
        self._started = time.monotonic()
        if self.directory is None:
            return
        try:
            (self.directory / "fw").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create state directory {self.directory}: {exc.strerror}") from None
        path = self.directory / "state.json"
        if path.exists():
            try:
                data = json.loads(path.read_text())
                self.counters = Counters(**data["counters"])
                fw = data["firmware"]
                self.firmware = Firmware({int(k): v for k, v in fw["revisions"].items()},
                                         fw["active_slot"], fw["next_slot"])
                running = bool(data.get("running"))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"state file {path} is unreadable: {exc}") from None
            if running:
                self.counters.unsafe_shutdowns += 1
        self.counters.power_cycles += 1
        self.save(running=True)

    def save(self, *, running: bool = True) -> None:
        now = time.monotonic()
        self.counters.power_on_seconds += now - self._started
        self._started = now
        if self.directory is None:
            return
        data = {"running": running, "counters": asdict(self.counters),
                "firmware": {"revisions": {str(k): v for k, v in self.firmware.revisions.items()},
                             "active_slot": self.firmware.active_slot, "next_slot": self.firmware.next_slot}}
        path = self.directory / "state.json"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def power_on_hours(self) -> int:
        return int((self.counters.power_on_seconds + time.monotonic() - self._started) // 3600)

    def store_image(self, slot: int, image: bytes) -> str:
        revision = image_revision(image)
        if self.directory is not None:
            path = self.directory / "fw" / f"slot{slot}.bin"
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(image)
            os.replace(tmp, path)
        self.firmware.revisions[slot] = revision
        self.save()
        return revision

    def slot_image(self, slot: int) -> bytes | None:
        if self.directory is None:
            return None
        path = self.directory / "fw" / f"slot{slot}.bin"
        return path.read_bytes() if path.exists() else None

    def active_revision(self) -> str:
        return self.firmware.revisions.get(self.firmware.active_slot, BUILTIN_REVISION)
