"""The Alkali accelerator device: vendor commands registered into an NVM subsystem's handler registry.

Field layout (doc flavor; `Flavor.reference` changes the marked ones):

* admin C2h Identify: CDW10 = dwords to return (1-based, the Alkali convention).
* admin C6h Status: CDW10 dwords, CDW12[15:0] accelerator, CDW12[31] RAE.
* admin C0h Global Control: CDW12 = 0 enable / 1 disable.
* Get Log Page C0h: LSI (CDW11[31:16]) = accelerator (FFFFh: the subsystem log), RAE = CDW10[15].
* I/O 81h/82h send/read data, 85h/86h send/read firmware: CDW10 dwords, CDW11 dword offset into the
  buffer (npukit: transfers above MDTS are split), CDW12[15:0] accelerator, CDW13 firmware ID.
* I/O 88h/8Ch local storage as input/output: SLBA = CDW13:CDW12, NLB = CDW14[15:0], accelerator =
  CDW15[15:0] (the Read/Write layout moved by two dwords leaves no other place). Doc: 512-byte LBAs, NLB
  0-based, as the Read command; reference: 4 KiB RAM-disk pages, NLB a plain count.
* I/O 91h Basic Control: CDW13 op, CDW14 firmware ID, accelerator CDW12[15:0] (reference: CDW14),
  start's argument list = CDW10 dwords of host data.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from npukit.devices.alkali.accelerator import Accelerator, AcceleratorConfig, AcceleratorLog
from npukit.devices.alkali.firmware import verify_firmware
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
    SUBSYSTEM_LOG_ID,
    AcceleratorInfo,
    Capability,
    ControlOp,
    Flavor,
    GlobalOp,
    LogType,
    StatusId,
    encode_identify,
    encode_status,
    parse_args,
)
from npukit.devices.nvme.layout import field_offset
from npukit.devices.nvme.registry import (
    NO_EFFECTS,
    CommandEffects,
    CommandSpec,
    LogPageSpec,
    QueueKind,
    Request,
    Result,
    dwords_cdw10,
)
from npukit.devices.nvme.spec import LBA_SIZE, NvmeError, Status
from npukit.errors import ConfigError
from npukit.targets.ebpf.vm import default_engine

VERIFY_MODES = ("strict", "warn", "off")


class AlkaliError(NvmeError):
    """A vendor command refused; ``log_type`` and ``accel`` say where the log entry goes."""

    def __init__(self, status: Status, reason: str, log_type: LogType, accel: int | None,
                 param_loc: int = 0xFFFF) -> None:
        super().__init__(status, reason, param_loc=param_loc)
        self.reason, self.log_type, self.accel = reason, log_type, accel


@dataclass
class CommandEvent:
    """One vendor command as the device saw it (the demo's timeline and trace)."""

    name: str
    queue: str
    opcode: int
    start_s: float
    seconds: float
    status: int
    detail: dict = field(default_factory=dict)


class AlkaliDevice:
    def __init__(self, accelerators: int = 1, *, flavor: Flavor | None = None, delegate: str = "exact",
                 config: AcceleratorConfig | None = None, vta_clock_hz: int = 0,
                 verify: str | None = None) -> None:
        if not 1 <= accelerators <= 0xFFFE:
            raise ConfigError(f"--accelerators {accelerators}: 1..65534")
        if delegate not in ("exact", "alkali"):
            raise ConfigError(f"unknown delegate {delegate!r} (exact or alkali)")
        self.flavor = flavor or Flavor.doc()
        self.verify = verify or ("off" if self.flavor.name == "reference" else "strict")
        if self.verify not in VERIFY_MODES:
            raise ConfigError(f"unknown verify mode {self.verify!r} (strict, warn or off)")
        self._verified: dict[tuple[int, int], tuple[bytes, list[str]]] = {}  # (accel, slot): image, reasons
        self.cfg = config or AcceleratorConfig()
        self.delegate = delegate
        self.t0 = time.perf_counter()
        self.enabled = False
        self.accels = {i: Accelerator(i, self.cfg, variant=delegate, clock=self.now)
                       for i in range(accelerators)}
        self.subsystem_log = AcceleratorLog()
        self.events: deque[CommandEvent] = deque(maxlen=100_000)  # bounded: a server polls for hours
        self.vta_clock_hz = vta_clock_hz or _vta_clock()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    # ---- registration ------------------------------------------------------------------------------
    def install(self, subsystem) -> AlkaliDevice:
        reg = subsystem.registry
        # effects (log page 05h): enabling accelerators, loading or switching firmware change what the
        # controller offers (CCC); storage output writes the namespace's blocks (LBCC)
        state, blocks, none = CommandEffects(ccc=True), CommandEffects(lbcc=True), NO_EFFECTS
        admin = [(ADMIN_IDENTIFY, "accelerator identify", self.identify, 0, dwords_cdw10, none),
                 (ADMIN_STATUS, "get accelerator status", self.status, 0, dwords_cdw10, none),
                 (ADMIN_GLOBAL_CONTROL, "global accelerator control", self.global_control, 0, 0, state)]
        io = [(IO_SEND_DATA, "send data", self.send_data, dwords_cdw10, 0, none),
              (IO_READ_DATA, "read data", self.read_data, 0, dwords_cdw10, none),
              (IO_SEND_FIRMWARE, "send firmware", self.send_firmware, dwords_cdw10, 0, state),
              (IO_READ_FIRMWARE, "read firmware", self.read_firmware, 0, dwords_cdw10, none),
              (IO_STORAGE_INPUT, "local storage as input", self.storage_input, 0, 0, none),
              (IO_STORAGE_OUTPUT, "local storage as output", self.storage_output, 0, 0, blocks),
              (IO_CONTROL, "basic accelerator control", self.control, dwords_cdw10, 0, state)]
        for kind, table in ((QueueKind.ADMIN, admin), (QueueKind.IO, io)):
            for opcode, name, fn, n_in, n_out, effects in table:
                spec = CommandSpec(name, self._wrap(name, kind.value, fn), data_in=n_in or _none,
                                   data_out=n_out or _none, effects=effects)
                reg.register(kind, opcode, spec, replace=True)
        reg.register_log_page(LOG_ACCELERATOR, LogPageSpec("accelerator log", self._log_page), replace=True)
        return self

    def _wrap(self, name: str, queue: str, fn):
        def handler(req: Request) -> Result:
            start = self.now()
            status, detail = 0, {}
            try:
                result = fn(req)
                return result
            except AlkaliError as exc:
                status = int(exc.status)
                detail = {"error": exc.reason}
                self._log_error(exc)
                raise
            finally:
                self.events.append(CommandEvent(name, queue, req.cmd.opcode, start, self.now() - start,
                                                status, detail))
        return handler

    def _log_error(self, exc: AlkaliError) -> None:
        text = f"{exc.status.name}: {exc.reason}"
        if exc.accel is not None and exc.accel in self.accels:
            acc = self.accels[exc.accel]
            with acc.lock:
                acc.log.add(exc.log_type, text)
        else:
            self.subsystem_log.add(exc.log_type, text)

    # ---- helpers -----------------------------------------------------------------------------------
    def _accel(self, accel_id: int, *, need_enabled: bool = True) -> Accelerator:
        acc = self.accels.get(accel_id)
        if acc is None:
            raise AlkaliError(Status.INVALID_FIELD, f"no accelerator {accel_id} (the device has "
                              f"{len(self.accels)})", LogType.ACCELERATOR_ERROR, None,
                              param_loc=field_offset("alkali.accel_id"))
        if need_enabled and not self.enabled:
            raise AlkaliError(Status.COMMAND_SEQUENCE_ERROR, "the accelerator subsystem is disabled "
                              "(Global Accelerator Control 0 enables it)", LogType.ACCELERATOR_ERROR,
                              accel_id)
        return acc

    @staticmethod
    def _not_running(acc: Accelerator, what: str) -> None:
        if acc.state == StatusId.RUNNING:
            raise AlkaliError(Status.COMMAND_SEQUENCE_ERROR, f"{what} while accelerator {acc.accel_id} is "
                              "running", LogType.ACCELERATOR_ERROR, acc.accel_id)

    def _slot(self, acc: Accelerator, fw_id: int, *, filled: bool) -> None:
        if fw_id >= self.cfg.slots:
            raise AlkaliError(Status.INVALID_FIRMWARE_SLOT,
                              f"firmware ID {fw_id} beyond the {self.cfg.slots} slots",
                              LogType.INVALID_FIRMWARE_ID, acc.accel_id,
                              param_loc=field_offset("alkali.fw_id"))
        if filled and fw_id not in acc.slots:
            raise AlkaliError(Status.INVALID_FIRMWARE_SLOT, f"firmware slot {fw_id} is empty",
                              LogType.INVALID_FIRMWARE_ID, acc.accel_id,
                              param_loc=field_offset("alkali.fw_id"))

    # ---- admin -------------------------------------------------------------------------------------
    def identify_bytes(self) -> bytes:
        infos = []
        for i in self.accels:
            caps = {Capability.FIRMWARE: self.cfg.firmware_size if self.flavor.name == "doc" else 0,
                    Capability.INPUT_BUFFER: self.cfg.input_size,
                    Capability.OUTPUT_BUFFER: self.cfg.output_size,
                    Capability.VTA: self.vta_clock_hz}
            chosen = {int(c): v for c, v in caps.items() if c in self.flavor.capabilities}
            infos.append(AcceleratorInfo(i, chosen))
        return encode_identify(self.flavor.magic, infos)

    def identify(self, req: Request) -> Result:
        return Result(data=self.identify_bytes())

    def status(self, req: Request) -> Result:
        acc = self._accel(req.cmd.cdw12 & 0xFFFF, need_enabled=False)
        rae = bool(req.cmd.cdw12 >> 31)
        with acc.lock:
            rep = acc.status_frozen or acc.report()
            acc.status_frozen = rep if rae else None
        return Result(data=encode_status(rep, self.flavor.status_descriptors))

    def global_control(self, req: Request) -> Result:
        op = req.cmd.cdw12
        if op not in (GlobalOp.ENABLE, GlobalOp.DISABLE):
            raise AlkaliError(Status.INVALID_FIELD, f"global control operation {op} (0 enable, 1 disable)",
                              LogType.ACCELERATOR_ERROR, None, param_loc=field_offset("alkali.operation"))
        self.enabled = op == GlobalOp.ENABLE
        return Result()

    def _log_page(self, ctrl, cmd) -> bytes:
        lsi, rae = cmd.cdw11 >> 16, bool(cmd.cdw10 & (1 << 15))
        if lsi == SUBSYSTEM_LOG_ID:
            return self.subsystem_log.read(rae)
        try:
            acc = self._accel(lsi, need_enabled=False)
        except AlkaliError as exc:
            self._log_error(exc)
            raise
        with acc.lock:
            return acc.log.read(rae)

    # ---- I/O: buffers and firmware -------------------------------------------------------------------
    def send_data(self, req: Request) -> Result:
        cmd = req.cmd
        acc = self._accel(cmd.cdw12 & 0xFFFF)
        offset, n = cmd.cdw11 * 4, cmd.cdw10 * 4
        with acc.lock:
            self._not_running(acc, "send data")
            if offset > len(acc.input):
                raise AlkaliError(Status.INVALID_FIELD, f"data offset {offset} leaves a gap after the "
                                  f"{len(acc.input)} bytes loaded", LogType.INVALID_INPUT_BUFFER,
                                  acc.accel_id,
                                  field_offset("alkali.offset"))
            if offset + n > self.cfg.input_size:
                raise AlkaliError(Status.CAPACITY_EXCEEDED, f"{offset + n} bytes overflow the "
                                  f"{self.cfg.input_size}-byte input buffer", LogType.INVALID_INPUT_BUFFER,
                                  acc.accel_id,
                                  field_offset("alkali.numd"))
            del acc.input[offset:]
            acc.input += req.data
        return Result()

    def read_data(self, req: Request) -> Result:
        cmd = req.cmd
        acc = self._accel(cmd.cdw12 & 0xFFFF)
        offset, n = cmd.cdw11 * 4, cmd.cdw10 * 4
        with acc.lock:
            self._not_running(acc, "read data")
            if offset + n > self.cfg.output_size:
                raise AlkaliError(Status.CAPACITY_EXCEEDED, f"reading {offset + n} bytes from the "
                                  f"{self.cfg.output_size}-byte output buffer", LogType.INVALID_OUTPUT_BUFFER,
                                  acc.accel_id,
                                  field_offset("alkali.numd"))
            return Result(data=bytes(acc.output[offset:offset + n]))

    def send_firmware(self, req: Request) -> Result:
        cmd = req.cmd
        acc = self._accel(cmd.cdw12 & 0xFFFF)
        fw_id, offset, n = cmd.cdw13, cmd.cdw11 * 4, cmd.cdw10 * 4
        with acc.lock:
            self._slot(acc, fw_id, filled=False)
            image = acc.slots.get(fw_id, bytearray()) if offset else bytearray()
            if offset > len(image):
                raise AlkaliError(Status.INVALID_FIELD, f"firmware offset {offset} leaves a gap after "
                                  f"{len(image)} bytes", LogType.INVALID_FIRMWARE_ID, acc.accel_id,
                                  field_offset("alkali.offset"))
            if offset + n > self.cfg.firmware_size:
                raise AlkaliError(Status.CAPACITY_EXCEEDED, f"a {offset + n}-byte firmware exceeds the "
                                  f"{self.cfg.firmware_size}-byte slot", LogType.INVALID_FIRMWARE_ID,
                                  acc.accel_id,
                                  field_offset("alkali.numd"))
            del image[offset:]
            image += req.data
            acc.slots[fw_id] = image
        return Result()

    def read_firmware(self, req: Request) -> Result:
        cmd = req.cmd
        acc = self._accel(cmd.cdw12 & 0xFFFF)
        fw_id, offset, n = cmd.cdw13, cmd.cdw11 * 4, cmd.cdw10 * 4
        with acc.lock:
            self._slot(acc, fw_id, filled=True)
            if offset + n > self.cfg.firmware_size:
                raise AlkaliError(Status.CAPACITY_EXCEEDED, f"reading {offset + n} bytes of a "
                                  f"{self.cfg.firmware_size}-byte slot", LogType.INVALID_FIRMWARE_ID,
                                  acc.accel_id,
                                  field_offset("alkali.numd"))
            return Result(data=bytes(acc.slots[fw_id][offset:offset + n]))

    def _blocks(self, req: Request, log_type: LogType, limit: int) -> tuple[Accelerator, object, int, int]:
        cmd = req.cmd
        acc = self._accel(cmd.cdw15 & 0xFFFF)
        ns = req.ctrl.subsystem.namespaces.get(cmd.nsid)
        if ns is None:
            raise AlkaliError(Status.INVALID_NAMESPACE, f"namespace {cmd.nsid:#x} is not active", log_type,
                              acc.accel_id,
                              field_offset("nsid"))
        unit = self.flavor.storage_unit
        nlb = (cmd.cdw14 & 0xFFFF) + (1 if self.flavor.storage_nlb_zero_based else 0)
        slba = cmd.cdw12 | (cmd.cdw13 << 32)
        size, lba = nlb * unit, slba * unit // LBA_SIZE
        if not nlb or not ns.in_range(lba, size // LBA_SIZE):
            raise AlkaliError(Status.LBA_OUT_OF_RANGE, f"{nlb} blocks of {unit} B at {slba} beyond the "
                              f"{ns.blocks}-LBA namespace", log_type, acc.accel_id,
                              field_offset("alkali.slba"))
        if size > limit:
            raise AlkaliError(Status.CAPACITY_EXCEEDED, f"{size} bytes overflow the {limit}-byte buffer",
                              log_type, acc.accel_id,
                              field_offset("alkali.nlb"))
        return acc, ns, lba, size

    def storage_input(self, req: Request) -> Result:
        acc, ns, lba, size = self._blocks(req, LogType.INVALID_INPUT_BUFFER, self.cfg.input_size)
        with acc.lock:
            self._not_running(acc, "local storage as input")
            acc.input = bytearray(ns.read(lba, size // LBA_SIZE))
        return Result()

    def storage_output(self, req: Request) -> Result:
        acc, ns, lba, size = self._blocks(req, LogType.INVALID_OUTPUT_BUFFER, self.cfg.output_size)
        with acc.lock:
            self._not_running(acc, "local storage as output")
            acc.output_blocks = (ns, lba, size)
            if acc.state == StatusId.DONE:  # after a run: copy now (the document's step 8)
                acc.write_output_blocks()
        return Result()

    # ---- I/O: control ------------------------------------------------------------------------------
    def control(self, req: Request) -> Result:
        cmd = req.cmd
        acc = self._accel(getattr(cmd, f"cdw{self.flavor.control_accel_dword}") & 0xFFFF)
        op, fw_id = cmd.cdw13, cmd.cdw14
        with acc.lock:
            if op == ControlOp.RESET:
                acc.reset()
            elif op == ControlOp.STOP:
                if acc.stop():
                    acc.log.add(LogType.ACCELERATOR_ERROR,
                                "stopped by the host; the run's result is discarded")
            elif op == ControlOp.SET_ACTIVE_FIRMWARE:
                self._not_running(acc, "set active firmware")
                self._slot(acc, fw_id, filled=True)
                self._check_firmware(acc, fw_id, cmd.cdw15)
                acc.active_fw = fw_id
            elif op == ControlOp.START:
                self._not_running(acc, "start")
                self._slot(acc, fw_id, filled=True)
                try:
                    parse_args(bytes(req.data))
                except ValueError as exc:
                    raise AlkaliError(Status.INVALID_FIELD, f"argument list: {exc}",
                                      LogType.ACCELERATOR_ERROR, acc.accel_id,
                                      field_offset("alkali.numd")) from None
                verified = self._check_firmware(acc, fw_id, cmd.cdw15)
                # a proven firmware runs as native code without per-access checks (where llvmlite loads)
                engine = "jit" if verified and default_engine() == "jit" else "fast"
                acc.start(fw_id, bytes(req.data), engine=engine)  # the firmware reads its args with helper 4
            else:
                raise AlkaliError(Status.INVALID_FIELD, f"control operation {op} (0 reset, 1 start, 2 stop, "
                                  "3 set active firmware)", LogType.ACCELERATOR_ERROR, acc.accel_id,
                                  field_offset("alkali.control_op"))
        return Result()

    def _check_firmware(self, acc: Accelerator, fw_id: int, cdw15: int) -> bool:
        """The upload's verification (CDW15[1:0] per command: 0 device mode, 1 strict, 2 warn, 3 off):
        strict refuses an unsafe image with Invalid Firmware Image and its reasons in log page 0xC0."""
        mode = (None, "strict", "warn", "off")[cdw15 & 3] or self.verify
        if mode == "off":
            return False
        image = bytes(acc.slots[fw_id])
        known = self._verified.get((acc.accel_id, fw_id))
        fresh = known is None or known[0] != image
        if fresh:
            known = (image, verify_firmware(image, self.cfg.output_size, self.cfg.input_size))
            self._verified[(acc.accel_id, fw_id)] = known
        reasons = known[1]
        if not reasons:
            return True
        text = f"firmware {fw_id} fails verification: " + "; ".join(reasons[:8])
        if mode == "warn":
            if fresh:  # one warning per image
                acc.log.add(LogType.INVALID_FIRMWARE_ID, f"warning: {text}")
            return False
        raise AlkaliError(Status.INVALID_FIRMWARE_IMAGE, text, LogType.INVALID_FIRMWARE_ID, acc.accel_id,
                          param_loc=field_offset("alkali.fw_check"))

    def wait_idle(self, timeout: float = 60.0) -> None:
        for acc in self.accels.values():
            acc.wait(timeout)


def _none(cmd) -> int:
    return 0


def _vta_clock() -> int:
    try:
        from npukit.hw import load_hw

        return int(load_hw("vta-alkali", [], expect="vta").clock_hz)
    except Exception:  # the VTA target is optional for the device
        return 0
