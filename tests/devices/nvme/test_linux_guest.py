"""The Linux kernel's NVMe/TCP host (Debian 6.1 in QEMU) and nvme-cli against ``npukit nvme serve``.

One boot runs tools/qemu_guest/nvme_check.sh in the guest: nvme discover, nvme connect with header and
data digests, /dev/nvme0n1 size, direct-I/O writes through both the R2T and the in-capsule paths with
checksums of what the kernel reads back, id-ctrl, id-ns, smart-log before/after, a vendor admin
opcode, firmware download/commit/log, disconnect, then a second connect with --disable-sqflow (Reads
completed by C2HData SUCCESS) reading the same blocks back. The host side then compares nvme-cli's
Identify data with npukit's client and reads the guest's blocks back through npukit's client."""

import hashlib
import importlib.util
import json
import re
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from npukit.devices.nvme.client import NvmeTcpHost

from .conftest import read_ready_line

ROOT = Path(__file__).resolve().parents[3]
GUEST_TOOLS = ROOT / "tools" / "qemu_guest"
NQN = "nqn.2026-11.io.npukit:guest"
SIZE = 64 << 20
NEEDED = ["qemu-system-x86_64", "busybox", "nvme", "cpio", "depmod", "dpkg-deb", "apt-get"]


def _builder():
    spec = importlib.util.spec_from_file_location("build_guest", GUEST_TOOLS / "build_guest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def built_guest():
    """(the guest builder module, its manifest) — the tools present and the cached guest built, or the
    test fails saying what to run (never a skip)."""
    missing = [tool for tool in NEEDED if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run scripts/ensure_debian_deps.sh (make test runs it)")
    builder = _builder()
    try:
        manifest = builder.build()
    except builder.GuestBuildError as exc:
        pytest.fail(f"building the QEMU guest failed: {exc}")
    return builder, manifest


def parse_results(text: str) -> tuple[dict[str, tuple[str, int]], dict[str, str]]:
    blocks, values = {}, {}
    text = text.replace("\r", "")
    for m in re.finditer(r"^@@BEGIN (\S+)\n(.*?)^@@END \1 rc=(\d+)$", text, re.S | re.M):
        blocks[m.group(1)] = (m.group(2), int(m.group(3)))
    for m in re.finditer(r"^@@VALUE (\S+) (.*)$", text, re.M):
        values[m.group(1)] = m.group(2).strip()
    return blocks, values


def _json(blocks, name):
    text, rc = blocks[name]
    assert rc == 0, f"{name} failed in the guest: {text}"
    return json.loads(text)


def _same_fields(ours: dict, theirs: dict) -> list[str]:
    """Keys both sides report; returns the ones that differ."""
    differ = []
    for key, value in ours.items():
        if key not in theirs or isinstance(theirs[key], (list, dict)):
            continue
        other = theirs[key]
        if isinstance(value, int):
            same = int(other) == value
        else:
            same = str(other).strip() == str(value).strip()
        if not same:
            differ.append(f"{key}: npukit {value!r} vs nvme-cli {other!r}")
    return differ


def _effects_entries(blocks) -> dict[tuple[str, int], int]:
    """nvme-cli's plain effects-log listing: ``ACS<opcode> [name] <effects hex>`` / ``IOCS...``."""
    text, rc = blocks["effects_log"]
    assert rc == 0, text
    entries = {}
    for m in re.finditer(r"^(ACS|IOCS)\s*(\d+)\s*\[[^\]]*\]\s*([0-9a-fA-F]{8})", text, re.M):
        entries[("admin" if m.group(1) == "ACS" else "io", int(m.group(2)))] = int(m.group(3), 16)
    assert entries, text
    return entries


@pytest.mark.slow
def test_linux_nvme_tcp_host_against_npukit_target(tmp_path):
    builder, manifest = built_guest()

    serve = subprocess.Popen(
        [sys.executable, "-m", "npukit", "nvme", "serve", "--listen", "127.0.0.1:0", "--discovery-port", "0",
         "--advertise-addr", "10.0.2.2", "--nqn", NQN, "--namespace", str(tmp_path / "ns.img"),
         "--size", str(SIZE), "--state-dir", str(tmp_path / "state")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = read_ready_line(serve)
        hostid = str(uuid.uuid4())
        env = (f"HOST=10.0.2.2\nPORT={ready['port']}\nDISC_PORT={ready['discovery_port']}\nNQN={NQN}\n"
               f"HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:{hostid}\nHOSTID={hostid}\n")
        initrd = builder.script_archive(manifest, {"/test.env": env,
                                                   "/test.sh": (GUEST_TOOLS / "nvme_check.sh").read_text()},
                                        tmp_path / "initrd.gz")
        results = tmp_path / "results.txt"
        boot = subprocess.run(builder.qemu_command(manifest, initrd, results), capture_output=True, text=True,
                              timeout=420)
        console = boot.stdout + boot.stderr
        blocks, values = parse_results(results.read_text() if results.exists() else "")
        assert values.get("done") == "1", f"the guest did not finish; console tail:\n{console[-3000:]}"

        discovered = _json(blocks, "discover")["records"]
        assert [(r["subnqn"], r["trsvcid"], r["traddr"], r["trtype"]) for r in discovered] == [
            (NQN, str(ready["port"]), "10.0.2.2", "tcp")]
        assert blocks["connect"][1] == 0, blocks["connect"][0]
        assert int(values["size_sectors"]) * 512 == SIZE

        assert blocks["dd_write_64k"][1] == 0 and blocks["dd_write_4k"][1] == 0
        assert values["readback_sha256"] == values["pattern_sha256"]
        assert values["readback_head_sha256"] == values["head_sha256"]
        assert blocks["flush"][1] == 0

        before, after = _json(blocks, "smart_before"), _json(blocks, "smart_after")
        assert int(after["host_write_commands"]) - int(before["host_write_commands"]) >= 16 + 32
        assert int(after["data_units_written"]) >= int(before["data_units_written"]) + 3  # 1.125 MiB
        assert int(after["host_read_commands"]) > int(before["host_read_commands"])

        effects = _effects_entries(blocks)
        assert effects[("admin", 0x10)] == 0x11 and effects[("io", 0x01)] == 0x3  # commit CCC, write LBCC
        assert effects[("io", 0x02)] == 0x1 and ("admin", 0xCA) not in effects
        for opcode in (0xC2, 0xC6):  # Alkali identify / status: supported, no effects
            assert effects[("admin", opcode)] == 0x1
        assert effects[("admin", 0xC0)] == 0x11  # global control: enables accelerators (CCC)
        assert effects[("io", 0x85)] == effects[("io", 0x91)] == 0x11  # firmware upload, control: CCC
        assert effects[("io", 0x8C)] == 0x3 and effects[("io", 0x81)] == 0x1  # storage output writes LBAs

        text, rc = blocks["vendor_passthru"]
        assert rc != 0 and "Invalid Command Opcode" in text and "0x4001" in text  # SC 1 with DNR
        assert blocks["disconnect"][1] == 0 and "disconnected 1 controller" in blocks["disconnect"][0]
        # `nvme connect --disable-sqflow`: Linux's reads completed by C2HData SUCCESS return the same blocks
        assert blocks["connect_sqflow"][1] == 0, blocks["connect_sqflow"][0]
        assert values["sqflow_readback_sha256"] == values["pattern_sha256"]
        assert values["sqflow_head_sha256"] == values["head_sha256"]
        log = (tmp_path / "state" / "target.log").read_text()  # the kernel did ask for it (CATTR bit 2)
        assert re.search(r"queue [1-9]\d* connected with SQ flow control disabled", log), log[-2000:]
        text, rc = blocks["disconnect_sqflow"]
        assert rc == 0 and "disconnected 1 controller" in text
        assert blocks["fw_download"][1] == 0 and blocks["fw_commit"][1] == 0, blocks["fw_commit"][0]
        revision = values["fw_sha256"][:8].upper()  # a slot's revision: the image's SHA-256, 8 digits
        assert revision in blocks["fw_log"][0] and "12.34" in blocks["fw_log"][0], blocks["fw_log"][0]

        # npukit's own client: the same Identify data and the same blocks
        with NvmeTcpHost("127.0.0.1", ready["port"], NQN, io_queues=1) as host:
            id_ctrl = _json(blocks, "id_ctrl")
            ours = {k: v for k, v in host.identify.items() if k != "cntlid"}  # one ID per association
            common = [k for k in ours if k in id_ctrl]
            assert len(common) >= 40 and _same_fields(ours, id_ctrl) == []
            id_ns = _json(blocks, "id_ns")
            ours_ns = host.identify_namespace(1)
            assert _same_fields(ours_ns, id_ns) == [] and id_ns["nsze"] == SIZE // 512
            assert id_ns["lbafs"][0]["ds"] == 9
            region = b"".join(host.read(2048 + k, 256) for k in range(0, 2048, 256))
            head = host.read(6144, 256)
        assert hashlib.sha256(region).hexdigest() == values["pattern_sha256"]
        assert hashlib.sha256(head).hexdigest() == values["head_sha256"]
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(15)
        except subprocess.TimeoutExpired:
            serve.kill()
