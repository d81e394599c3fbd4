"""One accelerator: firmware slots, input/output buffers, its log, the status RAE snapshot and the
state machine idle → running → done | fail. Start runs the firmware on a worker thread, so status
polls see ``running`` first; reset and stop discard a run still in flight (the VM cannot be
preempted, its result is dropped when it ends)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from npukit.devices.alkali.firmware import RunOutcome, run_firmware
from npukit.devices.alkali.spec import (
    FIRMWARE_SLOTS,
    LogEntry,
    LogType,
    StatusId,
    StatusReport,
    TierCode,
    encode_log,
)

MiB = 1 << 20


@dataclass(frozen=True)
class AcceleratorConfig:
    input_size: int = 64 * MiB  # the reference's buffer capabilities (identify.cpp)
    output_size: int = 64 * MiB
    firmware_size: int = 1 * MiB
    slots: int = FIRMWARE_SLOTS
    budget: int = 50_000_000  # eBPF instructions per run


@dataclass
class RunRecord:
    """What the trace and the CLI need of a finished run."""

    start_s: float  # seconds since the device started
    outcome: RunOutcome
    firmware_id: int


class AcceleratorLog:
    """Entries plus the RAE snapshot: a read with RAE=1 freezes the page (so a 4-byte header read and
    the full read that follows agree); a read with RAE=0 returns it and consumes those entries."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self._frozen: tuple[bytes, int] | None = None

    def add(self, kind: int, text: str) -> None:
        self.entries.append(LogEntry(time.time_ns() // 1000, int(kind), text))

    def read(self, rae: bool) -> bytes:
        page, count = self._frozen or (encode_log(self.entries), len(self.entries))
        if rae:
            self._frozen = (page, count)
        else:
            self._frozen = None
            del self.entries[:count]
        return page


class Accelerator:
    def __init__(self, accel_id: int, cfg: AcceleratorConfig, *, variant: str = "exact",
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.accel_id, self.cfg, self.variant, self.clock = accel_id, cfg, variant, clock
        self.lock = threading.RLock()
        self.log = AcceleratorLog()
        self.slots: dict[int, bytearray] = {}
        self.state = StatusId.IDLE
        self.active_fw: int | None = None
        self.input = bytearray()
        self.output = b""
        self.produced = 0
        self.output_blocks: tuple[object, int, int] | None = None  # (namespace, first LBA, bytes)
        self.status_frozen: StatusReport | None = None
        self.last: RunOutcome | None = None
        self.runs: list[RunRecord] = []
        self.generation = 0
        self.thread: threading.Thread | None = None

    # ---- configuration ------------------------------------------------------------------------------
    def reset(self) -> None:
        with self.lock:
            self.generation += 1
            self.state, self.active_fw = StatusId.IDLE, None
            self.input, self.output, self.produced, self.output_blocks = bytearray(), b"", 0, None
            self.status_frozen, self.last = None, None

    def stop(self) -> bool:
        with self.lock:
            if self.state != StatusId.RUNNING:
                return False
            self.generation += 1
            self.state = StatusId.IDLE
            return True

    @property
    def output_window(self) -> int:
        return self.output_blocks[2] if self.output_blocks else self.cfg.output_size

    def report(self) -> StatusReport:
        out = self.last
        calls = out.tflite if out else []
        tier = TierCode[str(calls[0].vta_tier).upper()] if calls and calls[0].vta_cycles else TierCode.DERIVED
        return StatusReport(
            self.state, self.active_fw or 0, (out.r0 if out else 0), (out.instructions if out else 0),
            len(self.input), self.produced, (out.vta_cycles if out else 0), tier,
            int((out.host_seconds if out else 0) * 1e9), int((out.seconds if out else 0) * 1e9))

    # ---- running ------------------------------------------------------------------------------------
    def start(self, firmware_id: int, args: bytes,
              on_done: Callable[[Accelerator], None] | None = None, engine: str = "fast") -> None:
        """Caller holds the lock and has checked the preconditions. ``engine`` "jit" (for a firmware
        the verifier accepted) runs native code whose proven accesses are unchecked."""
        self.active_fw = firmware_id
        self.state = StatusId.RUNNING
        self.generation += 1
        self.produced, self.output, self.last = 0, b"", None
        gen, image, data = self.generation, bytes(self.slots[firmware_id]), bytes(self.input)
        window, start_s = self.output_window, self.clock()

        def work() -> None:
            outcome = run_firmware(image, data, window, args=args, variant=self.variant,
                                   budget=self.cfg.budget, on_print=self._printed(gen), engine=engine)
            self._finish(gen, outcome, RunRecord(start_s, outcome, firmware_id))
            if on_done is not None:
                on_done(self)

        self.thread = threading.Thread(target=work, name=f"alkali-accel-{self.accel_id}", daemon=True)
        self.thread.start()

    def _printed(self, gen: int) -> Callable[[str], None]:
        def add(text: str) -> None:
            with self.lock:
                if self.generation == gen:
                    self.log.add(LogType.FIRMWARE_MESSAGE, text.rstrip("\n"))
        return add

    def _finish(self, gen: int, outcome: RunOutcome, record: RunRecord) -> None:
        with self.lock:
            if self.generation != gen:  # reset or stopped meanwhile: the result is dropped
                return
            self.runs.append(record)
            self.last = outcome
            if not outcome.ok:
                self.state = StatusId.FAIL
                self.log.add(LogType.ACCELERATOR_ERROR,
                             f"firmware {record.firmware_id} failed: {outcome.error}")
                return
            self.output, self.produced = outcome.output, outcome.produced
            if self.output_blocks is not None:
                self.write_output_blocks()
            self.state = StatusId.DONE
            self.log.add(LogType.RUN_REPORT, run_summary(outcome, record.firmware_id))

    def write_output_blocks(self) -> None:
        ns, lba, size = self.output_blocks
        ns.write(lba, bytes(self.output[:size]).ljust(size, b"\0"))

    def wait(self, timeout: float | None = None) -> None:
        t = self.thread
        if t is not None:
            t.join(timeout)


def run_summary(out: RunOutcome, firmware_id: int) -> str:
    """The run report log entry: every number with its evidence tier and source."""
    parts = [f"firmware {firmware_id} returned r0={out.r0:#x} ({_signed(out.r0)})",
             f"output {out.produced} B", f"{out.instructions} eBPF instructions (measured, VM count)",
             f"run {out.seconds * 1e3:.3f} ms (measured, wall clock)"]
    for helper in sorted({c.helper for c in out.tflite}):
        calls = [c for c in out.tflite if c.helper == helper]
        c0 = calls[0]
        where = f"{c0.delegated_ops} ops on VTA, {c0.host_ops} on host" if helper == "tflite_vta" else \
            f"{c0.host_ops} ops on host"
        host_ms = sum(c.host_s for c in calls) * 1e3
        text = f"{helper} x{len(calls)}: {where}, host interpreter {host_ms:.3f} ms (measured, wall clock)"
        cycles = sum(c.vta_cycles for c in calls)
        if cycles:
            src = c0.figures["vta_cycles"].source if "vta_cycles" in c0.figures else "VTA timing model"
            text += f", VTA {cycles} cycles ({c0.vta_tier}, {src})"
        if c0.note:
            text += f"; {c0.note}"
        parts.append(text)
    return "; ".join(parts)


def _signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v
