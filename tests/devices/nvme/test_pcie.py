"""The PCIe-style model: registers, admin/I/O queues in host memory, PRPs, phase tags, MSIs and the
queue-management errors, checked against the NVMe 1.4 rules (status values written out from the
specification's tables, not taken from the code)."""

import os

import pytest

from npukit.devices.nvme.command import Command
from npukit.devices.nvme.namespace import Namespace
from npukit.devices.nvme.pcie import HostMemory, PcieController, PcieHost
from npukit.devices.nvme.subsystem import Subsystem


@pytest.fixture
def host(tmp_path):
    ns = Namespace(tmp_path / "ns.img", size=4 << 20)
    sub = Subsystem("nqn.2026-11.io.npukit:pcie", [ns])
    mem = HostMemory(8 << 20)
    dev = PcieController(sub, mem)
    h = PcieHost(dev, mem, queue_entries=8)
    h.enable()
    yield h
    ns.close()


def rw(opcode, slba, nlb, nsid=1):
    return Command.build(opcode, nsid=nsid, cdws={10: slba, 12: nlb - 1})


def test_enable_sets_ready_and_identify_reports_alkali_ids(host):
    assert host.dev.mmio_read32(0x1C) & 1 == 1
    cqe, page = host.admin(Command.build(0x06, cdws={10: 1}), read_len=4096)
    assert cqe.status == 0
    assert int.from_bytes(page[0:2], "little") == 0x1B96  # PCI vendor ID of the Alkali board
    assert page[24:32] == b"DEADBEEF" and page[512] == 0x66 and page[513] == 0x44
    assert host.interrupts == [0]  # the admin CQ raised MSI vector 0 once


def test_io_with_prp_lists_and_phase_tags(host):
    c1, c2 = host.create_io_queue(1, entries=4, vector=5)
    assert (c1.status, c2.status) == (0, 0)
    data = os.urandom(16384)  # 4 pages: PRP1 + a PRP list
    cqe, _ = host.submit(1, rw(0x01, 10, 32), data)
    assert cqe.status == 0 and cqe.sqid == 1 and cqe.sqhd == 1 and cqe.phase == 1
    cqe, back = host.submit(1, rw(0x02, 10, 32), read_len=16384)
    assert back == data and cqe.sqhd == 2
    phases = [host.submit(1, rw(0x02, 0, 1), read_len=512)[0].phase for _ in range(4)]
    # CQ of 4 entries: completions 3 and 4 fill the first pass (P=1), 5 and 6 start the second (P=0)
    assert phases == [1, 1, 0, 0]
    assert host.interrupts.count(5) == 6


def test_queue_management_errors(host):
    def status(cqe):
        return cqe.sct, cqe.sc, cqe.dnr

    c1, _ = host.create_io_queue(5)  # five doorbell pairs: I/O queues 1..4 only
    assert status(c1) == (1, 0x01, True)  # Invalid Queue Identifier
    cqe, _ = host.admin(Command.build(0x05, dptr=(1 << 20).to_bytes(8, "little") + bytes(8),
                                      cdws={10: 2 | (0 << 16), 11: 1}))
    assert status(cqe) == (1, 0x02, True)  # Invalid Queue Size (one entry)
    cqe, _ = host.admin(Command.build(0x05, dptr=(1 << 20).to_bytes(8, "little") + bytes(8),
                                      cdws={10: 2 | (7 << 16), 11: 1 | (40 << 16)}))
    assert status(cqe) == (1, 0x08, True)  # Invalid Interrupt Vector
    cqe, _ = host.admin(Command.build(0x01, dptr=(1 << 20).to_bytes(8, "little") + bytes(8),
                                      cdws={10: 2 | (7 << 16), 11: 1 | (3 << 16)}))
    assert status(cqe) == (1, 0x00, True)  # Completion Queue Invalid
    c1, c2 = host.create_io_queue(1)
    assert c1.status == c2.status == 0
    cqe, _ = host.admin(Command.build(0x04, cdws={10: 1}))
    assert status(cqe) == (1, 0x0C, True)  # Invalid Queue Deletion: SQ 1 still uses CQ 1
    assert host.admin(Command.build(0x00, cdws={10: 1}))[0].status == 0
    assert status(host.admin(Command.build(0x00, cdws={10: 1}))[0]) == (1, 0x01, True)
    assert host.admin(Command.build(0x04, cdws={10: 1}))[0].status == 0


def test_sgl_on_pcie_and_unknown_opcodes(host):
    cqe, _ = host.admin(Command.build(0x06, flags=0x40, cdws={10: 1}), read_len=4096)
    assert (cqe.sct, cqe.sc, cqe.dnr) == (0, 0x02, True)
    cqe, _ = host.admin(Command.build(0xC2, cdws={10: 4}), read_len=16)
    assert (cqe.sct, cqe.sc, cqe.dnr) == (0, 0x01, True)


def test_shutdown_and_reset_state_machine(host):
    cc = host.dev.mmio_read32(0x14)
    host.dev.mmio_write32(0x14, cc | (1 << 14))  # SHN = 01b normal shutdown
    assert (host.dev.mmio_read32(0x1C) >> 2) & 3 == 0b10  # SHST: shutdown complete
    host.dev.mmio_write32(0x14, 0)  # EN = 0: reset
    assert host.dev.mmio_read32(0x1C) & 1 == 0
    assert host.dev.sqs == {} and host.dev.cqs == {}


def test_bad_cc_sets_fatal_status(tmp_path):
    sub = Subsystem("nqn.2026-11.io.npukit:cfs", [Namespace(tmp_path / "n.img", size=1 << 20)])
    mem = HostMemory(1 << 20)
    dev = PcieController(sub, mem)
    dev.mmio_write32(0x14, 1 | (1 << 7) | (6 << 16) | (4 << 20))  # MPS=1 (8 KiB): CAP.MPSMAX is 0
    assert dev.mmio_read32(0x1C) & 0x3 == 0b10  # CFS set, RDY clear


def test_firmware_loop_drains_fifo_only_when_serviced(tmp_path):
    sub = Subsystem("nqn.2026-11.io.npukit:fifo", [Namespace(tmp_path / "n.img", size=1 << 20)])
    mem = HostMemory(1 << 20)
    dev = PcieController(sub, mem, auto_service=False)
    dev.mmio_write32(0x24, 0x00070007)
    dev.mmio_write64(0x28, 0x1000)
    dev.mmio_write64(0x30, 0x2000)
    dev.mmio_write32(0x14, 1 | (6 << 16) | (4 << 20))
    assert dev.mmio_read32(0x1028) == 1 and dev.regs.fifo_level == 6
    assert dev.mmio_read32(0x1C) & 1 == 0  # the firmware has not looked yet
    assert dev.service() == 6
    assert dev.mmio_read32(0x1C) & 1 == 1 and dev.mmio_read32(0x1028) == 0
