"""Standard admin command handlers (NVMe 1.4 admin command set) registered into a :class:`CommandRegistry`."""

from __future__ import annotations

from npukit.devices.nvme import identify as idf
from npukit.devices.nvme.command import Command
from npukit.devices.nvme.layout import field_offset
from npukit.devices.nvme.logs import firmware_slot_page, smart_page
from npukit.devices.nvme.registry import (
    DEFERRED,
    CommandEffects,
    CommandRegistry,
    CommandSpec,
    LogPageSpec,
    QueueKind,
    Request,
    Result,
)
from npukit.devices.nvme.spec import (
    AEN_INFO_FW_ACTIVATION,
    AEN_INFO_TEMPERATURE,
    AEN_TYPE_NOTICE,
    AEN_TYPE_SMART,
    NSID_ALL,
    AdminOpcode,
    Cns,
    Feature,
    LogPage,
    NvmeError,
    Status,
)
from npukit.devices.nvme.state import FIRMWARE_SLOTS, READ_ONLY_SLOT

KATO_MAX_MS = 3_600_000
AEN_SUPPORTED = 0xFF | (1 << 9)
AERL = 3


def _log_length(cmd: Command) -> int:
    numd = (cmd.cdw10 >> 16) | ((cmd.cdw11 & 0xFFFF) << 16)
    return (numd + 1) * 4


def _active_nsid(req: Request, nsid: int) -> None:
    if nsid not in req.ctrl.subsystem.namespaces:
        raise NvmeError(Status.INVALID_NAMESPACE, f"namespace {nsid:#x} is not active",
                        param_loc=field_offset("nsid"))


def identify(req: Request) -> Result:
    cmd, ctrl = req.cmd, req.ctrl
    cns, csi = cmd.cdw10 & 0xFF, cmd.cdw11 >> 24
    sub = ctrl.subsystem
    if cns == Cns.CONTROLLER:
        return Result(data=idf.controller_page(ctrl.identity()))
    if ctrl.discovery:
        raise NvmeError(Status.INVALID_FIELD, f"CNS {cns:#x} on a discovery controller",
                        param_loc=field_offset("identify.cns"))
    if cns == Cns.NAMESPACE:
        if cmd.nsid == NSID_ALL:
            return Result(data=idf.namespace_page(0, sub.nqn, 0))
        _active_nsid(req, cmd.nsid)
        return Result(data=idf.namespace_page(sub.namespaces[cmd.nsid].blocks, sub.nqn, cmd.nsid))
    if cns == Cns.ACTIVE_NS_LIST:
        if cmd.nsid >= 0xFFFFFFFE:
            raise NvmeError(Status.INVALID_NAMESPACE, "NSID FFFFFFFEh/FFFFFFFFh for the active list")
        return Result(data=idf.active_namespace_list(list(sub.namespaces), cmd.nsid))
    if cns == Cns.NS_DESCRIPTORS:
        _active_nsid(req, cmd.nsid)
        return Result(data=idf.namespace_descriptors(sub.nqn, cmd.nsid))
    if cns in (Cns.CS_NAMESPACE, Cns.CS_CONTROLLER):
        if csi != 0:
            raise NvmeError(Status.INVALID_FIELD, f"command set {csi} is not supported",
                            param_loc=field_offset("identify.csi"))
        if cns == Cns.CS_NAMESPACE:
            _active_nsid(req, cmd.nsid)
        return Result(data=bytes(idf.IDENTIFY_SIZE))
    if cns == Cns.CS_INDEPENDENT_NS:
        _active_nsid(req, cmd.nsid)
        return Result(data=idf.cs_independent_namespace(True))
    raise NvmeError(Status.INVALID_FIELD, f"CNS {cns:#x} is not supported",
                    param_loc=field_offset("identify.cns"))


def get_log_page(req: Request) -> Result:
    cmd, ctrl = req.cmd, req.ctrl
    lid, rae = cmd.cdw10 & 0xFF, bool(cmd.cdw10 & (1 << 15))
    offset = cmd.cdw12 | (cmd.cdw13 << 32)
    spec = ctrl.subsystem.registry.log_pages.get(lid)
    if spec is None:
        raise NvmeError(Status.INVALID_LOG_PAGE, f"log page {lid:#x}", param_loc=field_offset("get_log.lid"))
    if offset % 4:
        raise NvmeError(Status.INVALID_FIELD, "log page offset is not dword aligned",
                        param_loc=field_offset("get_log.lpo"))
    content = spec.build(ctrl, cmd)
    if offset >= len(content):
        raise NvmeError(Status.INVALID_FIELD, f"offset {offset} is beyond the {len(content)}-byte log",
                        param_loc=field_offset("get_log.lpo"))
    ctrl.log_page_read(lid, rae)
    return Result(data=content[offset: offset + _log_length(cmd)])


def _effects_log(ctrl, cmd: Command) -> bytes:
    if ctrl.discovery:  # a discovery controller serves only discovery log pages
        raise NvmeError(Status.INVALID_LOG_PAGE, "commands and effects on a discovery controller")
    return ctrl.subsystem.registry.effects_log()


def _smart_log(ctrl, cmd: Command) -> bytes:
    if ctrl.discovery:
        raise NvmeError(Status.INVALID_LOG_PAGE, "SMART on a discovery controller")
    if cmd.nsid not in (0, NSID_ALL, *ctrl.subsystem.namespaces):
        raise NvmeError(Status.INVALID_NAMESPACE, f"namespace {cmd.nsid:#x}", param_loc=field_offset("nsid"))
    sub = ctrl.subsystem
    return smart_page(sub.state.counters, sub.state.power_on_hours(), sub.temperature_k,
                      _critical_warning(ctrl))


def _critical_warning(ctrl) -> int:
    temp, feats = ctrl.subsystem.temperature_k, ctrl.features
    return 0x2 if temp > feats.temp_over or temp < feats.temp_under else 0


def _error_log(ctrl, cmd: Command) -> bytes:
    return ctrl.error_log.page()


def _fw_slot_log(ctrl, cmd: Command) -> bytes:
    if ctrl.discovery:
        raise NvmeError(Status.INVALID_LOG_PAGE, "firmware slots on a discovery controller")
    return firmware_slot_page(ctrl.subsystem.state.firmware)


def set_features(req: Request) -> Result:
    cmd, ctrl = req.cmd, req.ctrl
    fid, value = cmd.cdw10 & 0xFF, cmd.cdw11
    if cmd.cdw10 >> 31:
        raise NvmeError(Status.FEATURE_NOT_SAVEABLE, f"feature {fid:#x} cannot be saved",
                        param_loc=field_offset("features.sv"))
    feats = ctrl.features
    if fid == Feature.TEMPERATURE_THRESHOLD:
        threshold, tmpsel, thsel = value & 0xFFFF, (value >> 16) & 0xF, (value >> 20) & 0x3
        if tmpsel not in (0, 0xF) or thsel > 1:
            raise NvmeError(Status.INVALID_FIELD, "TMPSEL/THSEL not supported",
                            param_loc=field_offset("features.tmpsel"))
        if thsel == 0:
            feats.temp_over = threshold
        else:
            feats.temp_under = threshold
        if _critical_warning(ctrl) and feats.aen_config & 0x2:
            ctrl.post_event(AEN_TYPE_SMART, AEN_INFO_TEMPERATURE, LogPage.SMART)
        return Result()
    if fid == Feature.VOLATILE_WRITE_CACHE and not ctrl.discovery:
        ctrl.subsystem.set_write_cache(bool(value & 1))
        return Result()
    if fid == Feature.NUMBER_OF_QUEUES and not ctrl.discovery:
        nsqr, ncqr = value & 0xFFFF, value >> 16
        if 0xFFFF in (nsqr, ncqr):
            raise NvmeError(Status.INVALID_FIELD, "NSQR/NCQR of 65535",
                            param_loc=field_offset("features.nsqr"))
        if ctrl.io_queues:
            raise NvmeError(Status.COMMAND_SEQUENCE_ERROR, "I/O queues already exist")
        granted = min(max(nsqr, ncqr) + 1, ctrl.max_io_queues)
        feats.queues_allocated = granted
        return Result(dw0=(granted - 1) | ((granted - 1) << 16))
    if fid == Feature.ASYNC_EVENT_CONFIG:
        feats.aen_config = value & AEN_SUPPORTED
        return Result()
    if fid == Feature.KEEP_ALIVE_TIMER:
        if value > KATO_MAX_MS:
            raise NvmeError(Status.KEEP_ALIVE_INVALID, f"KATO {value} ms above {KATO_MAX_MS}")
        granularity = 100 * ctrl.identity().kato_granularity_100ms
        feats.kato_ms = -(-value // granularity) * granularity
        return Result()
    raise NvmeError(Status.INVALID_FIELD, f"feature {fid:#x} is not supported",
                    param_loc=field_offset("features.fid"))


def get_features(req: Request) -> Result:
    cmd, ctrl = req.cmd, req.ctrl
    fid, sel = cmd.cdw10 & 0xFF, (cmd.cdw10 >> 8) & 0x7
    if sel == 3:
        if fid not in _FEATURE_IDS or (ctrl.discovery and fid not in _DISCOVERY_FEATURES):
            raise NvmeError(Status.INVALID_FIELD, f"feature {fid:#x} is not supported",
                            param_loc=field_offset("features.fid"))
        return Result(dw0=0b100)  # changeable, not saveable, not namespace specific
    if sel not in (0, 1):
        raise NvmeError(Status.INVALID_FIELD, "saved values are not supported (ONCS.SSS=0)",
                        param_loc=field_offset("features.sel"))
    defaults = sel == 1
    feats = ctrl.features
    if fid == Feature.TEMPERATURE_THRESHOLD:
        tmpsel, thsel = (cmd.cdw11 >> 16) & 0xF, (cmd.cdw11 >> 20) & 0x3
        if tmpsel not in (0, 0xF) or thsel > 1:
            raise NvmeError(Status.INVALID_FIELD, "TMPSEL/THSEL not supported",
                            param_loc=field_offset("features.tmpsel"))
        over, under = (0x157, 0) if defaults else (feats.temp_over, feats.temp_under)
        return Result(dw0=(over if thsel == 0 else under) | (tmpsel << 16) | (thsel << 20))
    if fid == Feature.VOLATILE_WRITE_CACHE and not ctrl.discovery:
        return Result(dw0=1 if defaults else int(ctrl.subsystem.write_cache))
    if fid == Feature.NUMBER_OF_QUEUES and not ctrl.discovery:
        n = ctrl.max_io_queues if defaults or feats.queues_allocated is None else feats.queues_allocated
        return Result(dw0=(n - 1) | ((n - 1) << 16))
    if fid == Feature.ASYNC_EVENT_CONFIG:
        return Result(dw0=0 if defaults else feats.aen_config)
    if fid == Feature.KEEP_ALIVE_TIMER:
        return Result(dw0=0 if defaults else feats.kato_ms)
    raise NvmeError(Status.INVALID_FIELD, f"feature {fid:#x} is not supported",
                    param_loc=field_offset("features.fid"))


_FEATURE_IDS = {int(f) for f in Feature}
_DISCOVERY_FEATURES = {Feature.ASYNC_EVENT_CONFIG, Feature.KEEP_ALIVE_TIMER, Feature.TEMPERATURE_THRESHOLD}


def _queue_manager(req: Request):
    if req.ctrl.queue_manager is None:
        # NVMe over Fabrics creates queues with Connect: these opcodes are reserved on fabrics
        raise NvmeError(Status.INVALID_OPCODE, "queue management is not available on a fabrics controller")
    return req.ctrl.queue_manager


def create_io_cq(req: Request) -> Result:
    qm, cmd = _queue_manager(req), req.cmd
    qm.create_cq(cmd.cdw10 & 0xFFFF, (cmd.cdw10 >> 16) + 1, cmd.prp1, bool(cmd.cdw11 & 1),
                 bool(cmd.cdw11 & 2), cmd.cdw11 >> 16)
    return Result()


def create_io_sq(req: Request) -> Result:
    qm, cmd = _queue_manager(req), req.cmd
    qm.create_sq(cmd.cdw10 & 0xFFFF, (cmd.cdw10 >> 16) + 1, cmd.prp1, bool(cmd.cdw11 & 1), cmd.cdw11 >> 16)
    return Result()


def delete_io_sq(req: Request) -> Result:
    _queue_manager(req).delete_sq(req.cmd.cdw10 & 0xFFFF)
    return Result()


def delete_io_cq(req: Request) -> Result:
    _queue_manager(req).delete_cq(req.cmd.cdw10 & 0xFFFF)
    return Result()


def abort(req: Request) -> Result:
    sqid, cid = req.cmd.cdw10 & 0xFFFF, req.cmd.cdw10 >> 16
    if not req.ctrl.sq_exists(sqid):  # as QEMU's controller does; the spec names no status for it
        raise NvmeError(Status.INVALID_FIELD, f"SQ {sqid} does not exist",
                        param_loc=field_offset("abort.sqid"))
    # Only outstanding Asynchronous Event Requests can still be aborted: every other command
    # completes before the next one is fetched. DW0 bit 0 = 1 means "not aborted".
    aborted = sqid == 0 and req.ctrl.abort_event_request(cid)
    return Result(dw0=0 if aborted else 1)


def async_event_request(req: Request):
    events = req.ctrl.events
    if len(events.pending) > AERL:
        raise NvmeError(Status.AER_LIMIT_EXCEEDED, f"more than {AERL + 1} outstanding requests")
    events.pending.append(req)
    req.ctrl._deliver_events()
    return DEFERRED


def keep_alive(req: Request) -> Result:
    return Result()


def firmware_download(req: Request) -> Result:
    ctrl, cmd = req.ctrl, req.cmd
    start, length = cmd.cdw11 * 4, (cmd.cdw10 + 1) * 4
    staging = ctrl.subsystem.firmware_staging(ctrl.hostnqn)
    if start == 0:
        staging.clear()
    end = start + length
    if any(start < e and s < end for s, e in staging.ranges):
        raise NvmeError(Status.OVERLAPPING_RANGE, f"dwords {cmd.cdw11}..{end // 4 - 1} already downloaded")
    if len(staging.image) < end:
        staging.image.extend(bytes(end - len(staging.image)))
    staging.image[start:end] = req.data[:length]
    staging.ranges.append((start, end))
    return Result()


def _staged_image(ctrl) -> bytes:
    staging = ctrl.subsystem.firmware_staging(ctrl.hostnqn)
    covered = 0
    for s, e in sorted(staging.ranges):
        if s != covered:
            raise NvmeError(Status.INVALID_FIRMWARE_IMAGE, "the downloaded image has a gap")
        covered = e
    if not covered:
        raise NvmeError(Status.INVALID_FIRMWARE_IMAGE, "no firmware image was downloaded")
    return bytes(staging.image[:covered])


def firmware_commit(req: Request) -> Result:
    ctrl, cmd = req.ctrl, req.cmd
    fs, ca, bpid = cmd.cdw10 & 0x7, (cmd.cdw10 >> 3) & 0x7, cmd.cdw10 >> 31
    state = ctrl.subsystem.state
    if bpid or ca > 3:
        raise NvmeError(Status.INVALID_FIELD, f"commit action {ca} (boot partitions are not supported)",
                        param_loc=field_offset("fw_commit.ca"))
    if ca in (0, 1, 3):
        slot = fs or READ_ONLY_SLOT + 1
        if slot > FIRMWARE_SLOTS or slot == READ_ONLY_SLOT:
            raise NvmeError(Status.INVALID_FIRMWARE_SLOT, f"slot {slot} is read-only or absent")
        state.store_image(slot, _staged_image(ctrl))
        ctrl.subsystem.firmware_staging(ctrl.hostnqn).clear()
    else:
        slot = fs
        if not 1 <= slot <= FIRMWARE_SLOTS:
            raise NvmeError(Status.INVALID_FIRMWARE_SLOT, f"slot {slot} does not exist")
        if slot not in state.firmware.revisions:
            raise NvmeError(Status.INVALID_FIRMWARE_IMAGE, f"slot {slot} holds no image")
    if ca in (1, 2):
        state.firmware.next_slot = slot
    elif ca == 3:
        state.firmware.active_slot, state.firmware.next_slot = slot, 0
        if ctrl.features.aen_config & (1 << 9):
            ctrl.post_event(AEN_TYPE_NOTICE, AEN_INFO_FW_ACTIVATION, LogPage.FIRMWARE_SLOT)
    state.save()
    return Result()


def register_admin(registry: CommandRegistry) -> None:
    A = QueueKind.ADMIN
    spec = [
        (AdminOpcode.DELETE_IO_SQ, CommandSpec("delete I/O submission queue", delete_io_sq)),
        (AdminOpcode.CREATE_IO_SQ, CommandSpec("create I/O submission queue", create_io_sq)),
        (AdminOpcode.GET_LOG_PAGE, CommandSpec("get log page", get_log_page, data_out=_log_length)),
        (AdminOpcode.DELETE_IO_CQ, CommandSpec("delete I/O completion queue", delete_io_cq)),
        (AdminOpcode.CREATE_IO_CQ, CommandSpec("create I/O completion queue", create_io_cq)),
        (AdminOpcode.IDENTIFY, CommandSpec("identify", identify, data_out=lambda c: idf.IDENTIFY_SIZE)),
        (AdminOpcode.ABORT, CommandSpec("abort", abort)),
        (AdminOpcode.SET_FEATURES, CommandSpec("set features", set_features)),
        (AdminOpcode.GET_FEATURES, CommandSpec("get features", get_features)),
        (AdminOpcode.ASYNC_EVENT_REQUEST, CommandSpec("asynchronous event request", async_event_request)),
        # activation changes Identify Controller's FR: the host re-reads it (CCC)
        (AdminOpcode.FIRMWARE_COMMIT, CommandSpec("firmware commit", firmware_commit,
                                                  effects=CommandEffects(ccc=True))),
        (AdminOpcode.FIRMWARE_DOWNLOAD, CommandSpec("firmware image download", firmware_download,
                                                    data_in=lambda c: (c.cdw10 + 1) * 4)),
        (AdminOpcode.KEEP_ALIVE, CommandSpec("keep alive", keep_alive)),
    ]
    for opcode, s in spec:
        registry.register(A, opcode, s)
    registry.register_log_page(LogPage.ERROR, LogPageSpec("error information", _error_log))
    registry.register_log_page(LogPage.SMART, LogPageSpec("SMART / health information", _smart_log))
    registry.register_log_page(LogPage.FIRMWARE_SLOT, LogPageSpec("firmware slot information", _fw_slot_log))
    registry.register_log_page(LogPage.COMMANDS_EFFECTS, LogPageSpec("commands supported and effects",
                                                                     _effects_log))
