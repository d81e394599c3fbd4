"""Every vendor command: success and each error status (numbers from the NVMe base specification's
status tables), with the log page C0h entry each failure leaves (types from the Alkali document)."""

import struct
import time

from npukit.devices.alkali.spec import ControlOp, LogType, StatusId, parse_log
from npukit.devices.nvme.command import Command

from .conftest import ARGS_FW, COPY_FW, OOB_FW, SPIN_FW

# NVMe base specification 1.4, Figures 126/127/129 (SCT << 8 | SC)
INVALID_FIELD, SEQUENCE_ERROR, INVALID_NAMESPACE = 0x002, 0x00C, 0x00B
LBA_OUT_OF_RANGE, CAPACITY_EXCEEDED, INVALID_FW_SLOT = 0x080, 0x081, 0x106
# the Alkali document's example entry types
T_FW_ID, T_INPUT, T_OUTPUT, T_ACCEL = 0, 1, 2, 3


def _entries(rig, lsi):
    return [(e.type, e.text) for e in rig.host.log(lsi)]


def _wait(rig, accel=0):
    rig.dev.wait_idle(60)
    return rig.host.status(accel)


def test_identify_twice_and_the_structure(rig):
    head = rig.host.identify_raw(8)
    assert head[:4] == b"WDC\0"  # the document's magic
    total = struct.unpack_from("<I", head, 4)[0]
    full = rig.host.identify_raw(total)
    assert len(full) == total == 16 + 2 * (8 + 4 * 16)
    # hand-decoded per the document's tables: descriptor length incl. its 8-byte header, id, caps
    for k in range(2):
        base = 16 + k * 72
        length, accel_id = struct.unpack_from("<IH", full, base)
        assert (length, accel_id) == (72, k)
        caps = {struct.unpack_from("<I", full, base + 8 + 16 * i)[0]:
                struct.unpack_from("<Q", full, base + 16 + 16 * i)[0] for i in range(4)}
        assert caps[1] == 64 << 10 and caps[2] == 4 << 10 and caps[0] == 16 << 10


def test_reference_identify_bytes_equal_the_firmware(tmp_path):
    """--compat reference with the firmware's 64 MiB buffers: byte for byte the 72-byte structure the
    reference's identify.cpp produces (dump in refs/alkali_vta.md §1.4)."""
    from npukit.devices.alkali.accelerator import AcceleratorConfig
    from npukit.devices.alkali.spec import Flavor

    from .conftest import make_rig
    r = make_rig(tmp_path, accelerators=1, flavor=Flavor.reference(), config=AcceleratorConfig())
    try:
        expected = bytes.fromhex(
            "57444330480000000000000000000000" "38000000000000000000000000000000"
            "00000000000000000100000000000000" "00000004000000000200000000000000" "0000000400000000")
        assert r.host.identify_raw(72) == expected
        assert [a.capabilities for a in r.host.identify()] == [{0: 0, 1: 64 << 20, 2: 64 << 20}]
    finally:
        r.host.close()
        r.thread.stop()
        r.sub.close()


def test_global_control_and_disabled_subsystem(rig):
    h = rig.host
    assert rig.status_of(h.send_data, 0, b"abcd") == SEQUENCE_ERROR  # disabled at power-on
    assert rig.status_of(h.send_firmware, 1, 0, b"abcd") == SEQUENCE_ERROR
    assert [t for t, _ in _entries(rig, 0)] == [T_ACCEL] and "disabled" in _entries(rig, 1)[0][1]
    h.enable()
    assert rig.status_of(h.send_data, 0, b"abcd") == 0
    h.disable()
    assert rig.status_of(h.control, 0, ControlOp.RESET) == SEQUENCE_ERROR
    bad = Command.build(0xC0, cdws={12: 2})
    assert rig.status_of(h.nvme.admin, bad) == INVALID_FIELD
    assert any("global control operation 2" in text for _, text in _entries(rig, 0xFFFF))


def test_unknown_accelerator(rig):
    h = rig.host
    h.enable()
    assert rig.status_of(h.send_data, 7, b"abcd") == INVALID_FIELD
    assert rig.status_of(h.status, 9) == INVALID_FIELD
    assert rig.status_of(h.nvme.get_log, 0xC0, 4, lsi=5) == INVALID_FIELD
    texts = [text for t, text in _entries(rig, 0xFFFF)]
    assert len(texts) == 3 and all("no accelerator" in t for t in texts)


def test_firmware_send_read_and_errors(rig):
    h = rig.host
    h.enable()
    h.max_transfer = 4096  # exercise the dword offset (CDW11) of split transfers
    image = bytes(range(256)) * 40  # 10 KiB: three commands, beyond the in-capsule size
    h.send_firmware(1, 2, image)
    assert h.read_firmware(1, 2, len(image)) == image
    assert rig.status_of(h.read_firmware, 1, 3, 16) == INVALID_FW_SLOT  # empty slot
    assert rig.status_of(h.send_firmware, 1, 4, b"abcd") == INVALID_FW_SLOT  # 4 slots: 0..3
    assert rig.status_of(h.send_firmware, 1, 0, bytes(20 << 10)) == CAPACITY_EXCEEDED  # 16 KiB slots
    assert rig.status_of(h.read_firmware, 1, 2, 20 << 10) == CAPACITY_EXCEEDED
    gap = Command.build(0x85, nsid=1, cdws={10: 1, 11: 100000, 12: 1, 13: 2})
    assert rig.status_of(h.nvme.io, gap, b"abcd") == INVALID_FIELD
    types = [t for t, _ in _entries(rig, 1)]
    assert types == [T_FW_ID] * 5


def test_data_buffers_and_errors(rig):
    h = rig.host
    h.enable()
    h.send_firmware(0, 0, h_asm(COPY_FW))
    payload = bytes((7 * i) & 0xFF for i in range(3000))
    h.max_transfer = 1024
    h.send_data(0, payload)  # three chunks at dword offsets
    h.start(0, 0)
    st = _wait(rig)
    assert st.status == StatusId.DONE and st.input_bytes == 3000 and st.r0 == 3000
    assert st.output_bytes == 4096  # no model ran: the whole output window
    assert h.read_data(0, 3000) == payload
    gap = Command.build(0x81, nsid=1, cdws={10: 1, 11: 5000, 12: 0})
    assert rig.status_of(h.nvme.io, gap, b"abcd") == INVALID_FIELD
    h.max_transfer = 128 << 10
    assert rig.status_of(h.send_data, 0, bytes(65 << 10)) == CAPACITY_EXCEEDED
    assert rig.status_of(h.read_data, 0, 8192) == CAPACITY_EXCEEDED
    types = [t for t, _ in _entries(rig, 0)]
    assert types[-3:] == [T_INPUT, T_INPUT, T_OUTPUT]


def h_asm(text: str) -> bytes:
    return text.encode()  # the device loads uBPF assembler text as well as ELF objects


def test_local_storage_input_and_output(rig):
    h = rig.host
    h.enable()
    data = bytes((i * 31 + 5) & 0xFF for i in range(1536))  # three 512-byte LBAs
    h.write_blocks(40, data)
    h.send_firmware(1, 0, h_asm(COPY_FW))
    h.storage_input(1, 40, len(data))
    h.storage_output(1, 100, 2048)  # output window = 4 LBAs, written when the run ends
    h.start(1, 0)
    st = _wait(rig, 1)
    assert st.status == StatusId.DONE and st.r0 == 1536
    assert h.nvme.read(100, 4) == data + bytes(512)
    h.storage_output(1, 200, 1024)  # after a run: copied at once (the document's step 8)
    assert h.nvme.read(200, 2) == data[:1024]
    assert rig.status_of(h.storage_input, 1, 8190, 4096) == LBA_OUT_OF_RANGE  # 8192 LBAs
    assert rig.status_of(h.storage_output, 1, 0, 8192) == CAPACITY_EXCEEDED  # 4 KiB output
    assert rig.status_of(h.storage_input, 1, 0, 128 << 10) == CAPACITY_EXCEEDED  # 64 KiB input
    wrong_ns = Command.build(0x88, nsid=5, cdws={12: 0, 14: 0, 15: 1})
    assert rig.status_of(h.nvme.io, wrong_ns) == INVALID_NAMESPACE
    types = [t for t, _ in _entries(rig, 1)]
    assert types[-4:] == [T_INPUT, T_OUTPUT, T_INPUT, T_INPUT]


def test_control_operations_and_errors(rig):
    h = rig.host
    h.enable()
    assert rig.status_of(h.start, 0, 1) == INVALID_FW_SLOT  # empty slot
    assert rig.status_of(h.control, 0, ControlOp.SET_ACTIVE_FIRMWARE, 3) == INVALID_FW_SLOT
    h.send_firmware(0, 1, h_asm(SPIN_FW))
    h.control(0, ControlOp.SET_ACTIVE_FIRMWARE, 1)
    h.start(0, 1)
    assert h.status(0).status == StatusId.RUNNING
    assert rig.status_of(h.start, 0, 1) == SEQUENCE_ERROR
    assert rig.status_of(h.send_data, 0, b"abcd") == SEQUENCE_ERROR
    h.control(0, ControlOp.STOP)
    assert h.status(0).status == StatusId.IDLE
    rig.dev.wait_idle(60)
    assert h.status(0).status == StatusId.IDLE  # the stopped run's result was discarded
    bad_op = Command.build(0x91, nsid=1, cdws={12: 0, 13: 9})
    assert rig.status_of(h.nvme.io, bad_op) == INVALID_FIELD
    bad_args = Command.build(0x91, nsid=1, cdws={10: 1, 12: 0, 13: 1, 14: 1})
    assert rig.status_of(h.nvme.io, bad_args, struct.pack("<I", 64)) == INVALID_FIELD
    entries = _entries(rig, 0)  # the third: the device's verifier warns once about the endless loop
    assert [t for t, _ in entries] == [T_FW_ID, T_FW_ID, T_FW_ID, T_ACCEL, T_ACCEL, T_ACCEL, T_ACCEL, T_ACCEL]
    assert "infinite loop" in entries[2][1]
    assert "stopped" in entries[5][1] and "argument list" in entries[7][1]
    h.send_data(0, b"12345678")
    h.control(0, ControlOp.RESET)
    st = h.status(0)
    assert (st.status, st.input_bytes, st.active_firmware) == (StatusId.IDLE, 0, 0)


def test_argument_list_reaches_the_firmware(rig):
    h = rig.host
    h.enable()
    h.send_firmware(0, 0, h_asm(ARGS_FW))
    h.start(0, 0, [struct.pack("<I", 1024), b"hello"])
    st = _wait(rig)
    # the document's entry layout: u32 length (header included), value padded to a dword
    expected = struct.pack("<II", 8, 1024) + struct.pack("<I", 12) + b"hello\0\0\0"
    assert st.r0 == len(expected) and h.read_data(0, len(expected)) == expected


def test_status_rae_freezes_until_read_with_rae_clear(rig):
    h = rig.host
    h.enable()
    h.send_firmware(0, 0, h_asm(SPIN_FW))
    h.start(0, 0)
    frozen = h._cmd("admin", "s", 0xC6, {10: 8, 12: 1 << 31}, read_len=32)  # RAE=1: snapshot taken
    assert struct.unpack_from("<I", frozen, 4)[0] == StatusId.RUNNING
    rig.dev.wait_idle(60)  # the run ends (budget) meanwhile
    again = h._cmd("admin", "s", 0xC6, {10: 8, 12: 0}, read_len=32)  # RAE=0: the snapshot, released
    assert struct.unpack_from("<I", again, 4)[0] == StatusId.RUNNING
    now = h._cmd("admin", "s", 0xC6, {10: 8, 12: 0}, read_len=32)
    assert struct.unpack_from("<I", now, 4)[0] == StatusId.FAIL


def test_log_rae_keeps_the_page_and_rae_clear_consumes_it(rig):
    h = rig.host
    rig.status_of(h.send_data, 1, b"abcd")  # disabled: one entry
    head = h.nvme.get_log(0xC0, 4, rae=True, lsi=1)
    length = struct.unpack("<I", head)[0]
    rig.status_of(h.send_data, 1, b"abcd")  # a second entry arrives between the two reads
    page = h.nvme.get_log(0xC0, length, rae=False, lsi=1)
    assert len(parse_log(page)) == 1 and struct.unpack_from("<I", page)[0] == length
    entry_len, ts_us, kind = struct.unpack_from("<IQI", page, 16)
    assert entry_len == length - 16 and kind == T_ACCEL and abs(ts_us / 1e6 - time.time()) < 60
    assert len(h.log(1)) == 1  # the second entry; the first was consumed


def test_faulting_firmware_fails_and_the_device_keeps_serving(rig):
    h = rig.host
    h.enable()
    h.send_firmware(0, 0, h_asm(OOB_FW))
    h.start(0, 0)
    st = _wait(rig)
    assert st.status == StatusId.FAIL
    log = h.log(0)
    assert log[-1].type == LogType.ACCELERATOR_ERROR and "memory fault" in log[-1].text
    assert "store of 1 bytes" in log[-1].text
    h.send_firmware(0, 1, h_asm(SPIN_FW))
    h.start(0, 1)
    assert _wait(rig).status == StatusId.FAIL
    assert "budget of 3000000 exhausted" in h.log(0)[-1].text
    h.nvme.write(3, b"\x5a" * 512)  # plain I/O still served
    assert h.nvme.read(3, 1) == b"\x5a" * 512
    h.send_firmware(0, 2, h_asm(COPY_FW))  # and the accelerator runs again
    h.send_data(0, b"ok!!")
    h.start(0, 2)
    assert _wait(rig).status == StatusId.DONE and h.read_data(0, 4) == b"ok!!"


def test_reference_flavor_fields(ref_rig):
    h = ref_rig.host
    head = h.identify_raw(8)
    assert head[:4] == b"WDC0"
    h.enable()
    h.send_firmware(0, 0, h_asm(COPY_FW))
    h.write_blocks(8, b"R" * 4096)  # RAM-disk page 1 = LBAs 8..15
    h.storage_input(0, 8, 4096)  # 4 KiB pages, NLB a plain count, accelerator in CDW15
    raw = Command.build(0x88, nsid=1, cdws={12: 1, 14: 1, 15: 0})
    assert h.nvme.io(raw).cqe.status == 0
    h.control(0, ControlOp.SET_ACTIVE_FIRMWARE, 0)  # accelerator ID in CDW14, as the firmware reads it
    h.start(0, 0)
    ref_rig.dev.wait_idle(60)
    status = h._cmd("admin", "s", 0xC6, {10: 8, 12: 0}, read_len=32)
    assert struct.unpack_from("<II", status) == (8, StatusId.DONE)  # length 8, no descriptors
    assert status[8:] == bytes(24)
    assert h.read_data(0, 4096) == b"R" * 4096


def test_remaining_error_statuses(rig):
    h = rig.host
    assert rig.status_of(h.read_data, 0, 4) == SEQUENCE_ERROR  # disabled
    assert rig.status_of(h.storage_output, 0, 0, 512) == SEQUENCE_ERROR
    h.enable()
    assert rig.status_of(h.read_firmware, 3, 0, 4) == INVALID_FIELD  # unknown accelerator
    assert rig.status_of(h.storage_output, 1, 8191, 1024) == LBA_OUT_OF_RANGE
    h.send_firmware(1, 0, h_asm(SPIN_FW))
    h.start(1, 0)
    assert rig.status_of(h.read_data, 1, 4) == SEQUENCE_ERROR  # while running
    assert rig.status_of(h.storage_input, 1, 0, 512) == SEQUENCE_ERROR
    assert rig.status_of(h.control, 1, ControlOp.SET_ACTIVE_FIRMWARE, 0) == SEQUENCE_ERROR
    rig.dev.wait_idle(60)
    assert [t for t, _ in _entries(rig, 0)] == [T_ACCEL, T_ACCEL]
    entries = _entries(rig, 1)
    assert [t for t, _ in entries] == [T_OUTPUT, T_FW_ID, T_ACCEL, T_ACCEL, T_ACCEL, T_ACCEL]
    assert "warning" in entries[1][1] and "budget" in entries[-1][1]
    assert "no accelerator 3" in _entries(rig, 0xFFFF)[0][1]


def test_reference_flavor_runs_the_reference_host_flow(ref_rig):
    """The reference host-app's order (set active firmware, then start, both with CDW14 = 0) and its
    fixed output length: the status carries no output size in this flavor."""
    from .conftest import EXAMPLES

    h = ref_rig.host
    data = (EXAMPLES / "add" / "input.bin").read_bytes()
    flow = h.run((EXAMPLES / "add_vta.v1.o").read_bytes(), data=data, output_size=4)
    assert flow.status.length == 8 and flow.status.status == StatusId.DONE
    assert [s.command for s in flow.timeline][5:7] == ["control: set_active_firmware", "control: start"]
    assert len(flow.output) == 4
