"""NVM command set I/O handlers: Read, Write, Flush, Write Zeroes, Dataset Management, Compare."""

from __future__ import annotations

import struct

from npukit.devices.nvme.command import Command
from npukit.devices.nvme.layout import field_offset
from npukit.devices.nvme.namespace import Namespace
from npukit.devices.nvme.registry import (
    CommandEffects,
    CommandRegistry,
    CommandSpec,
    QueueKind,
    Request,
    Result,
)
from npukit.devices.nvme.spec import LBA_SIZE, NSID_ALL, IoOpcode, NvmeError, Status

FUA = 1 << 30
CHANGES_BLOCKS = CommandEffects(lbcc=True)
DSM_RANGE = struct.Struct("<IIQ")
DSM_DEALLOCATE = 1 << 2


def _namespace(req: Request) -> Namespace:
    ns = req.ctrl.subsystem.namespaces.get(req.cmd.nsid)
    if ns is None:
        raise NvmeError(Status.INVALID_NAMESPACE, f"namespace {req.cmd.nsid:#x} is not active",
                        param_loc=field_offset("nsid"))
    return ns


def _range(ns: Namespace, slba: int, nlb: int) -> None:
    if not ns.in_range(slba, nlb):
        raise NvmeError(Status.LBA_OUT_OF_RANGE, f"LBAs {slba}+{nlb} beyond {ns.blocks}", lba=slba,
                        param_loc=field_offset("io.slba"))


def _blocks_bytes(cmd: Command) -> int:
    return cmd.nlb * LBA_SIZE


def read(req: Request) -> Result:
    ns, cmd = _namespace(req), req.cmd
    _range(ns, cmd.slba, cmd.nlb)
    data = ns.read(cmd.slba, cmd.nlb)
    counters = req.ctrl.subsystem.state.counters
    counters.host_read_commands += 1
    counters.data_units_read += cmd.nlb
    return Result(data=data)


def write(req: Request) -> Result:
    ns, cmd = _namespace(req), req.cmd
    _range(ns, cmd.slba, cmd.nlb)
    ns.write(cmd.slba, req.data[: cmd.nlb * LBA_SIZE], fua=bool(cmd.cdw12 & FUA))
    counters = req.ctrl.subsystem.state.counters
    counters.host_write_commands += 1
    counters.data_units_written += cmd.nlb
    return Result()


def compare(req: Request) -> Result:
    ns, cmd = _namespace(req), req.cmd
    _range(ns, cmd.slba, cmd.nlb)
    stored = ns.read(cmd.slba, cmd.nlb)
    counters = req.ctrl.subsystem.state.counters
    counters.host_read_commands += 1
    counters.data_units_read += cmd.nlb
    if stored != req.data[: len(stored)]:
        raise NvmeError(Status.COMPARE_FAILURE, "data differs", lba=cmd.slba)
    return Result()


def flush(req: Request) -> Result:
    sub = req.ctrl.subsystem
    if req.cmd.nsid == NSID_ALL:
        for ns in sub.namespaces.values():
            ns.flush()
    else:
        _namespace(req).flush()
    sub.state.save()
    return Result()


def write_zeroes(req: Request) -> Result:
    ns, cmd = _namespace(req), req.cmd
    _range(ns, cmd.slba, cmd.nlb)
    ns.write_zeroes(cmd.slba, cmd.nlb, fua=bool(cmd.cdw12 & FUA))
    return Result()


def _dsm_bytes(cmd: Command) -> int:
    return ((cmd.cdw10 & 0xFF) + 1) * DSM_RANGE.size


def dataset_management(req: Request) -> Result:
    ns, cmd = _namespace(req), req.cmd
    ranges = []
    for i in range((cmd.cdw10 & 0xFF) + 1):
        _, nlb, slba = DSM_RANGE.unpack_from(req.data, i * DSM_RANGE.size)
        _range(ns, slba, nlb)
        ranges.append((slba, nlb))
    if cmd.cdw11 & DSM_DEALLOCATE:
        for slba, nlb in ranges:
            ns.write_zeroes(slba, nlb)
    return Result()


def register_nvm(registry: CommandRegistry) -> None:
    io = QueueKind.IO
    registry.register(io, IoOpcode.FLUSH, CommandSpec("flush", flush))
    registry.register(io, IoOpcode.WRITE, CommandSpec("write", write, data_in=_blocks_bytes,
                                                      effects=CHANGES_BLOCKS))
    registry.register(io, IoOpcode.READ, CommandSpec("read", read, data_out=_blocks_bytes))
    registry.register(io, IoOpcode.COMPARE, CommandSpec("compare", compare, data_in=_blocks_bytes))
    registry.register(io, IoOpcode.WRITE_ZEROES, CommandSpec("write zeroes", write_zeroes,
                                                             effects=CHANGES_BLOCKS))
    # deallocated blocks read as zeroes (DLFEAT 001b): a deallocation changes their content
    dsm = CommandSpec("dataset management", dataset_management, data_in=_dsm_bytes, effects=CHANGES_BLOCKS)
    registry.register(io, IoOpcode.DATASET_MANAGEMENT, dsm)
