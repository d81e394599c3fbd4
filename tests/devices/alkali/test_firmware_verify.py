"""Firmware verification at upload: strict refuses an out-of-bounds read with NVMe status Invalid
Firmware Image (NVMe base spec: SCT 1, SC 07h) and its reason in log page C0h; warn logs and runs."""

from npukit.devices.alkali.spec import StatusId

from .conftest import EXAMPLES, make_rig

INVALID_FIRMWARE_IMAGE = 0x107
OOB_READ_FW = "ldxw %r0, [%r1+8]\nexit\n"  # reads input bytes 8..12 without looking at r3
SAFE_FW = "mov %r0, 0\nmov %r4, 0\nl:\njge %r4, %r3, d\nmov %r5, %r1\nadd %r5, %r4\nldxb %r6, [%r5]\n" \
          "add %r0, %r6\nadd %r4, 1\nja l\nd:\nexit\n"


def _run(mode: str, firmware: str, tmp_path):
    rig = make_rig(tmp_path)
    rig.dev.verify = mode
    try:
        h = rig.host
        h.enable()
        h.send_firmware(0, 0, firmware.encode())
        h.send_data(0, bytes(range(16)))
        status = rig.status_of(h.start, 0, 0)
        rig.dev.wait_idle(30)
        last = rig.dev.accels[0].last
        engine = last.engine if last is not None else None
        return status, [(e.type, e.text) for e in h.log(0)], h.status(0), engine
    finally:
        rig.host.close()


def test_strict_rejects_an_out_of_bounds_read_with_its_reason(tmp_path):
    status, log, report, _ = _run("strict", OOB_READ_FW, tmp_path)
    assert status == INVALID_FIRMWARE_IMAGE
    assert report.status != StatusId.DONE
    texts = [t for _, t in log]
    assert any("pc 0" in t and "input length r3" in t for t in texts), texts


def test_strict_accepts_a_checked_loop(tmp_path):
    status, _, report, engine = _run("strict", SAFE_FW, tmp_path)
    assert status == 0 and report.status == StatusId.DONE and report.r0 == sum(range(16))
    assert engine == "jit"  # proven: native code without per-access checks


def test_warn_logs_the_reason_and_runs(tmp_path):
    status, log, report, engine = _run("warn", OOB_READ_FW, tmp_path)
    assert status == 0 and report.status == StatusId.DONE
    assert engine == "fast"  # not proven: every access checked
    assert any(t.startswith("warning: firmware 0 fails verification") for _, t in log)


def test_the_control_command_overrides_the_device_mode(tmp_path):
    from npukit.devices.alkali.spec import ControlOp

    rig = make_rig(tmp_path)  # device mode: warn (the rig's)
    try:
        h = rig.host
        h.enable()
        h.send_firmware(0, 0, OOB_READ_FW.encode())
        strict = rig.status_of(h.control, 0, ControlOp.SET_ACTIVE_FIRMWARE, 0, verify="strict")
        assert strict == INVALID_FIRMWARE_IMAGE
        rig.dev.verify = "strict"
        assert rig.status_of(h.control, 0, ControlOp.SET_ACTIVE_FIRMWARE, 0, verify="off") == 0
        assert rig.status_of(h.control, 0, ControlOp.SET_ACTIVE_FIRMWARE, 0) == INVALID_FIRMWARE_IMAGE
    finally:
        rig.host.close()


def test_reference_compat_does_not_verify(tmp_path):
    from npukit.devices.alkali.spec import Flavor

    rig = make_rig(tmp_path, flavor=Flavor.reference(), verify=None)
    try:
        assert rig.dev.verify == "off"
    finally:
        rig.host.close()


def test_the_device_verifies_strictly_by_default(tmp_path):
    # no verify mode given: an out-of-bounds firmware is refused over NVMe/TCP, the reason in log page C0h
    rig = make_rig(tmp_path, verify=None)
    try:
        h = rig.host
        assert rig.dev.verify == "strict"
        h.enable()
        h.send_firmware(0, 0, OOB_READ_FW.encode())
        h.send_data(0, bytes(range(16)))
        assert rig.status_of(h.start, 0, 0) == INVALID_FIRMWARE_IMAGE
        texts = [e.text for e in h.log(0)]
        reason = "firmware 0 fails verification: pc 0: load of 4 bytes at r1+8"
        assert any(reason in t and "input length r3" in t for t in texts), texts
        h.send_firmware(0, 1, SAFE_FW.encode())
        assert rig.status_of(h.start, 0, 1) == 0
    finally:
        rig.host.close()


def test_every_shipped_firmware_passes_the_default_device():
    from npukit.devices.alkali.accelerator import AcceleratorConfig
    from npukit.devices.alkali.firmware import verify_firmware

    cfg = AcceleratorConfig()  # the device's buffers: what it passes its verifier at upload
    objects = sorted(EXAMPLES.glob("*.o")) + sorted(EXAMPLES.glob("*/*.o"))
    assert len(objects) == 13
    for obj in objects:
        assert verify_firmware(obj.read_bytes(), cfg.output_size, cfg.input_size) == [], obj.name
