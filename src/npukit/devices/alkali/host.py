"""Host side of the Alkali vendor commands over npukit's NVMe/TCP client: one method per command and
`AlkaliHost.run`, the document's example command flow (identify twice, enable, send firmware, send data
or use local storage, start, poll status with RAE, read the log, read the output)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

from npukit.devices.alkali.spec import (
    ADMIN_GLOBAL_CONTROL,
    ADMIN_IDENTIFY,
    ADMIN_STATUS,
    IO_CONTROL,
    IO_READ_DATA,
    IO_READ_FIRMWARE,
    IO_SEND_DATA,
    IO_SEND_FIRMWARE,
    IO_STORAGE_INPUT,
    IO_STORAGE_OUTPUT,
    LOG_ACCELERATOR,
    AcceleratorInfo,
    ControlOp,
    Flavor,
    GlobalOp,
    LogEntry,
    StatusId,
    StatusReport,
    encode_args,
    parse_identify,
    parse_log,
    parse_status,
)
from npukit.devices.nvme.client import NvmeTcpHost
from npukit.devices.nvme.command import Command
from npukit.devices.nvme.spec import LBA_SIZE
from npukit.errors import ConfigError, NpukitError

VERIFY_CODES = {"strict": 1, "warn": 2, "off": 3}


class AlkaliHostError(NpukitError):
    """The device answered something the flow cannot use (bad magic, a failed run, a timeout)."""


@dataclass
class Step:
    t: float  # seconds since the flow started
    seconds: float
    command: str
    detail: str


@dataclass
class FlowResult:
    output: bytes
    status: StatusReport
    log: list[LogEntry]
    accelerators: list[AcceleratorInfo]
    timeline: list[Step] = field(default_factory=list)
    polls: int = 0


def parse_connect(url: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` (or ``HOST:PORT``) → (host, port)."""
    u = urlparse(url if "://" in url else f"tcp://{url}")
    if u.scheme != "tcp" or not u.hostname:
        raise ConfigError(f"--connect {url!r}: expected tcp://HOST:PORT")
    try:
        port = u.port or 4420
    except ValueError:
        raise ConfigError(f"--connect {url!r}: bad port") from None
    return u.hostname, port


class AlkaliHost:
    def __init__(self, nvme: NvmeTcpHost, *, flavor: Flavor | None = None, nsid: int = 1) -> None:
        self.nvme, self.flavor, self.nsid = nvme, flavor or Flavor.doc(), nsid
        mdts = int(nvme.identify.get("mdts") or 0)
        self.max_transfer = (1 << (12 + mdts)) if mdts else 1 << 20
        self.timeline: list[Step] = []
        self._t0 = time.perf_counter()

    @classmethod
    def connect(cls, url: str, nqn: str, *, flavor: Flavor | None = None, **kw) -> AlkaliHost:
        host, port = parse_connect(url)
        return cls(NvmeTcpHost(host, port, nqn, io_queues=1, **kw), flavor=flavor)

    def close(self) -> None:
        self.nvme.close()

    def __enter__(self) -> AlkaliHost:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- raw commands ---------------------------------------------------------------------------------
    def _cmd(self, queue: str, name: str, opcode: int, cdws: dict[int, int], data: bytes = b"",
             read_len: int = 0, detail: str = "") -> bytes:
        start = time.perf_counter()
        cmd = Command.build(opcode, nsid=self.nsid if queue == "io" else 0, cdws=cdws)
        try:
            if queue == "admin":
                reply = self.nvme.admin(cmd, data, read_len)
            else:
                reply = self.nvme.io(cmd, data, read_len)
        finally:
            self.timeline.append(Step(start - self._t0, time.perf_counter() - start, name, detail))
        return reply.data

    def identify_raw(self, length: int) -> bytes:
        return self._cmd("admin", "accelerator identify", ADMIN_IDENTIFY, {10: length // 4}, read_len=length,
                         detail=f"{length} B")

    def identify(self) -> list[AcceleratorInfo]:
        """Step 1: 8 bytes (magic + length), then the whole structure."""
        head = self.identify_raw(8)
        if head[:4] != self.flavor.magic:
            raise AlkaliHostError(f"not an Alkali accelerator device: magic {head[:4]!r}, expected "
                                  f"{self.flavor.magic!r} (--compat reference expects b'WDC0')")
        total = int.from_bytes(head[4:8], "little")
        _magic, _total, accels = parse_identify(self.identify_raw(-(-total // 4) * 4))
        return accels

    def enable(self) -> None:
        self._cmd("admin", "global control: enable", ADMIN_GLOBAL_CONTROL, {12: GlobalOp.ENABLE})

    def disable(self) -> None:
        self._cmd("admin", "global control: disable", ADMIN_GLOBAL_CONTROL, {12: GlobalOp.DISABLE})

    def _chunks(self, data: bytes):
        data = bytes(data) + bytes(-len(data) % 4)
        step = self.max_transfer
        for off in range(0, max(len(data), 1), step):
            yield off, data[off:off + step]

    def send_firmware(self, accel: int, fw_id: int, image: bytes) -> None:
        for off, chunk in self._chunks(image):
            self._cmd("io", "send firmware", IO_SEND_FIRMWARE,
                      {10: len(chunk) // 4, 11: off // 4, 12: accel, 13: fw_id}, chunk,
                      detail=f"accel {accel} slot {fw_id}: {len(chunk)} B at {off}")

    def read_firmware(self, accel: int, fw_id: int, size: int) -> bytes:
        return self._read(IO_READ_FIRMWARE, "read firmware", accel, size, {13: fw_id})

    def send_data(self, accel: int, data: bytes) -> None:
        for off, chunk in self._chunks(data):
            self._cmd("io", "send data", IO_SEND_DATA, {10: len(chunk) // 4, 11: off // 4, 12: accel}, chunk,
                      detail=f"accel {accel}: {len(chunk)} B at {off}")

    def read_data(self, accel: int, size: int) -> bytes:
        return self._read(IO_READ_DATA, "read data", accel, size, {})

    def _read(self, opcode: int, name: str, accel: int, size: int, extra: dict[int, int]) -> bytes:
        out, padded = bytearray(), -(-size // 4) * 4
        for off in range(0, padded, self.max_transfer):
            n = min(self.max_transfer, padded - off)
            out += self._cmd("io", name, opcode, {10: n // 4, 11: off // 4, 12: accel, **extra}, read_len=n,
                             detail=f"accel {accel}: {n} B at {off}")
        return bytes(out[:size])

    def write_blocks(self, slba: int, data: bytes) -> int:
        """nvme write of ``data`` (padded to whole LBAs) at ``slba``; returns the blocks written."""
        data = bytes(data) + bytes(-len(data) % LBA_SIZE)
        per = self.max_transfer // LBA_SIZE
        for k in range(0, len(data) // LBA_SIZE, per):
            start = time.perf_counter()
            self.nvme.write(slba + k, data[k * LBA_SIZE:(k + per) * LBA_SIZE], nsid=self.nsid)
            self.timeline.append(Step(start - self._t0, time.perf_counter() - start, "nvm write",
                                      f"LBA {slba + k}"))
        return len(data) // LBA_SIZE

    def _storage(self, opcode: int, name: str, accel: int, slba: int, nbytes: int) -> None:
        unit = self.flavor.storage_unit
        if slba * LBA_SIZE % unit:
            raise ConfigError(f"LBA {slba} is not on a {unit}-byte boundary")
        units = -(-nbytes // unit)
        nlb = units - 1 if self.flavor.storage_nlb_zero_based else units
        first = slba * LBA_SIZE // unit
        self._cmd("io", name, opcode, {12: first & 0xFFFFFFFF, 13: first >> 32, 14: nlb & 0xFFFF, 15: accel},
                  detail=f"accel {accel}: {units} x {unit} B at unit {first}")

    def storage_input(self, accel: int, slba: int, nbytes: int) -> None:
        self._storage(IO_STORAGE_INPUT, "local storage as input", accel, slba, nbytes)

    def storage_output(self, accel: int, slba: int, nbytes: int) -> None:
        self._storage(IO_STORAGE_OUTPUT, "local storage as output", accel, slba, nbytes)

    def control(self, accel: int, op: ControlOp, fw_id: int = 0, args: bytes = b"",
                verify: str | None = None) -> None:
        """``verify`` (strict/warn/off) overrides the device's firmware verification for this command
        (CDW15 bits 1:0, an npukit extension; None leaves the device's mode)."""
        cdws = {10: len(args) // 4, 13: int(op), 14: fw_id}
        if verify is not None:
            cdws[15] = VERIFY_CODES[verify]
        cdws[self.flavor.control_accel_dword] = accel if self.flavor.control_accel_dword != 14 else fw_id
        if self.flavor.control_accel_dword == 14 and accel != fw_id:
            raise ConfigError("--compat reference: accelerator and firmware ID share CDW14 and must be equal")
        self._cmd("io", f"control: {op.name.lower()}", IO_CONTROL, cdws, args,
                  detail=f"accel {accel} fw {fw_id}" + (f", {len(args)} B of arguments" if args else ""))

    def start(self, accel: int, fw_id: int, args: list[bytes] | None = None) -> None:
        self.control(accel, ControlOp.START, fw_id, encode_args(args or []))

    def status(self, accel: int) -> StatusReport:
        """Step 6: 4 bytes with RAE=1 (the length), then that length with RAE=0."""
        head = self._cmd("admin", "status (RAE=1)", ADMIN_STATUS, {10: 1, 12: accel | (1 << 31)}, read_len=4)
        length = max(int.from_bytes(head, "little"), 8)
        full = self._cmd("admin", "status (RAE=0)", ADMIN_STATUS, {10: -(-length // 4), 12: accel},
                         read_len=-(-length // 4) * 4)
        return parse_status(full)

    def log(self, accel: int) -> list[LogEntry]:
        """Step 7: log page C0h, 4 bytes with RAE=1, then its length with RAE=0."""
        head = self._log_page(accel, 4, rae=True)
        length = int.from_bytes(head, "little")
        return parse_log(self._log_page(accel, -(-length // 4) * 4, rae=False)) if length > 16 else []

    def _log_page(self, accel: int, length: int, *, rae: bool) -> bytes:
        start = time.perf_counter()
        try:
            return self.nvme.get_log(LOG_ACCELERATOR, length, rae=rae, lsi=accel)
        finally:
            self.timeline.append(Step(start - self._t0, time.perf_counter() - start,
                                      f"get log page C0h (RAE={int(rae)})", f"LSI {accel}: {length} B"))

    def wait(self, accel: int, *, timeout: float = 120.0, interval: float = 0.02) -> tuple[StatusReport, int]:
        deadline, polls = time.monotonic() + timeout, 0
        while True:
            rep = self.status(accel)
            polls += 1
            if rep.status in (StatusId.DONE, StatusId.FAIL) or (rep.status == StatusId.IDLE and polls > 1):
                return rep, polls
            if time.monotonic() > deadline:
                raise AlkaliHostError(f"accelerator {accel} still {StatusId(rep.status).name.lower()} after "
                                      f"{timeout:g} s")
            time.sleep(interval)

    # ---- the example command flow --------------------------------------------------------------------
    def run(self, firmware: bytes, *, accel: int = 0, fw_id: int = 0, data: bytes | None = None,
            storage: tuple[int, int] | None = None, args: list[bytes] | None = None,
            output_size: int | None = None, timeout: float = 120.0) -> FlowResult:
        """``data``: bytes for Send Data; or ``storage`` = (first LBA, bytes) already on the namespace."""
        accels = self.identify()
        info = next((a for a in accels if a.accel_id == accel), None)
        if info is None:
            raise AlkaliHostError(f"the device has no accelerator {accel} "
                                  f"(it lists {[a.accel_id for a in accels]})")
        limit = info.capabilities.get(1)
        size = len(data) if data is not None else storage[1] if storage else 0
        if limit is not None and size > limit:
            raise AlkaliHostError(f"{size} input bytes exceed accelerator {accel}'s {limit}-byte "
                                  "input buffer")
        self.enable()
        self.send_firmware(accel, fw_id, firmware)
        if storage is not None:
            self.storage_input(accel, *storage)
        elif data is not None:
            self.send_data(accel, data)
        if self.flavor.control_accel_dword == 14:  # the reference host-app selects the slot first
            self.control(accel, ControlOp.SET_ACTIVE_FIRMWARE, fw_id)
        self.start(accel, fw_id, args)
        status, polls = self.wait(accel, timeout=timeout)
        log = self.log(accel)
        if status.status != StatusId.DONE:
            raise AlkaliHostError(f"accelerator {accel} ended in {StatusId(status.status).name.lower()}: "
                                  + "; ".join(e.text for e in log[-3:]))
        n = status.output_bytes if self.flavor.status_descriptors else output_size
        if n is None:
            raise ConfigError("the status has no output length (--compat reference): give --out-size")
        output = self.read_data(accel, output_size if output_size is not None else n)
        return FlowResult(output, status, log, accels, list(self.timeline), polls)
