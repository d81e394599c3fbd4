"""Commands Supported and Effects log (05h) and the Identify Controller bits that announce it.

Reference: NVMe base specification 1.4, Figure 210 (ACS0..255 at bytes 0..1023, IOCS0..255 at
1024..2047) and Figure 211 (bit 0 CSUPP, 1 LBCC, 2 NCC, 3 NIC, 4 CCC, 18:16 CSE); Figure 247 (LPA bit 1,
OACS bit 2 = Firmware Commit and Image Download).
"""

from __future__ import annotations

import struct

from npukit.devices.alkali.device import AlkaliDevice
from npukit.devices.nvme.admin import get_log_page
from npukit.devices.nvme.command import Command
from npukit.devices.nvme.identify import CONTROLLER_FIELDS, ControllerIdentity, controller_page
from npukit.devices.nvme.registry import CommandEffects, CommandRegistry, CommandSpec, QueueKind, Request
from npukit.devices.nvme.subsystem import Subsystem, default_registry


def _entry(page: bytes, kind: str, opcode: int) -> int:
    return struct.unpack_from("<I", page, (0 if kind == "admin" else 1024) + 4 * opcode)[0]


def test_effects_bits_are_where_the_spec_puts_them():
    assert CommandEffects().encode() == 0x1
    assert CommandEffects(lbcc=True).encode() == 0x3
    assert CommandEffects(ncc=True).encode() == 0x5
    assert CommandEffects(nic=True).encode() == 0x9
    assert CommandEffects(ccc=True).encode() == 0x11
    assert CommandEffects(cse=1).encode() == 0x1_0001 and CommandEffects(cse=2).encode() == 0x2_0001


def test_standard_commands_in_the_log():
    page = default_registry().effects_log()
    assert len(page) == 4096 and not any(page[2048:])
    assert _entry(page, "io", 0x01) == 0x3  # Write: LBCC
    assert _entry(page, "io", 0x08) == 0x3 and _entry(page, "io", 0x09) == 0x3  # Write Zeroes, DSM
    assert _entry(page, "io", 0x02) == 0x1 and _entry(page, "io", 0x00) == 0x1  # Read, Flush
    assert _entry(page, "admin", 0x10) == 0x11  # Firmware Commit: CCC
    assert _entry(page, "admin", 0x06) == 0x1 and _entry(page, "admin", 0x02) == 0x1
    assert _entry(page, "admin", 0x80) == 0 and _entry(page, "io", 0x81) == 0  # not supported


def test_alkali_vendor_commands_in_the_log(tmp_path):
    sub = Subsystem("nqn.2026-11.io.npukit:fx")
    AlkaliDevice().install(sub)
    page = sub.registry.effects_log()
    assert _entry(page, "admin", 0xC2) == 0x1 and _entry(page, "admin", 0xC6) == 0x1
    assert _entry(page, "admin", 0xC0) == 0x11  # global control
    assert _entry(page, "io", 0x85) == 0x11 and _entry(page, "io", 0x91) == 0x11  # firmware, control
    assert _entry(page, "io", 0x8C) == 0x3  # storage output writes the namespace
    assert _entry(page, "io", 0x81) == 0x1 and _entry(page, "io", 0x88) == 0x1
    # one table: every registered opcode is listed supported, nothing else
    for kind, name in ((QueueKind.ADMIN, "admin"), (QueueKind.IO, "io")):
        listed = [op for op in range(256) if _entry(page, name, op) & 1]
        assert listed == sub.registry.opcodes(kind)


def _identify(ident: ControllerIdentity) -> dict[str, int]:
    page = controller_page(ident)
    fields = {name: (offset, fmt) for name, offset, fmt in CONTROLLER_FIELDS}
    return {k: struct.unpack_from("<" + fields[k][1], page, fields[k][0])[0] for k in ("oacs", "lpa")}


def test_identify_announces_what_the_registry_serves():
    sub = Subsystem("nqn.2026-11.io.npukit:id")
    ctrl = sub.new_controller(hostnqn="nqn.host")
    values = _identify(ctrl.identity())
    assert values["lpa"] & 0x2 and values["oacs"] == 0x4  # effects log; firmware commit/download only
    # OACS bit 2 needs both Firmware Commit (10h) and Firmware Image Download (11h)
    commit_only = CommandRegistry()
    commit_only.register(QueueKind.ADMIN, 0x10, CommandSpec("firmware commit", lambda req: None))
    without = Subsystem("nqn.2026-11.io.npukit:nofw", registry=commit_only).new_controller(hostnqn="h")
    assert _identify(without.identity()) == {"oacs": 0, "lpa": 0x4}  # no effects log registered either


def test_get_log_page_05h_through_the_controller():
    sub = Subsystem("nqn.2026-11.io.npukit:log")
    ctrl = sub.new_controller(hostnqn="nqn.host")
    cmd = Command.build(0x02, cdws={10: 0x05 | (1023 << 16)})
    result = get_log_page(Request(ctrl, 0, cmd))
    assert bytes(result.data) == sub.registry.effects_log()
