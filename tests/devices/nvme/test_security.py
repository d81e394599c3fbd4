"""Security properties of ``npukit nvme serve``: loopback unless told otherwise, the host NQN
allow-list enforced on Connect and in the discovery log (a real process), and no string the peer
controls (host NQN, subsystem NQN, firmware slot) names a file."""

import os
from pathlib import Path

import pytest

from npukit.cli.main import build_parser
from npukit.devices.nvme import fuzz
from npukit.devices.nvme.client import NvmeStatusError, NvmeTcpHost
from npukit.devices.nvme.command import Command
from npukit.devices.nvme.server import ServeConfig, split_hostport
from npukit.devices.nvme.spec import DISCOVERY_NQN

ALLOWED = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
OTHER = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555"


def test_serve_listens_on_loopback_by_default():
    args = build_parser().parse_args(["nvme", "serve", "--namespace", "x.img"])
    assert split_hostport(args.listen)[0] == "127.0.0.1"
    assert split_hostport(ServeConfig().listen)[0] == "127.0.0.1"
    assert split_hostport(":4420") == ("127.0.0.1", 4420)  # an empty host is not "every interface"


def test_allow_list_is_enforced_by_a_serving_process(tmp_path):
    srv = fuzz.ServerProcess(tmp_path, extra=("--allow-host", ALLOWED))
    try:
        with NvmeTcpHost("127.0.0.1", srv.port, fuzz.GUEST_NQN, hostnqn=ALLOWED) as h:
            h.write(0, b"\x11" * 512)
            cntlid, hostid = h.cntlid, h.hostid
            with pytest.raises(NvmeStatusError) as err:  # Connect Invalid Host: SCT 1, SC 84h, DNR
                NvmeTcpHost("127.0.0.1", srv.port, fuzz.GUEST_NQN, hostnqn=OTHER)
            assert (err.value.cqe.sct, err.value.cqe.sc, err.value.cqe.dnr) == (1, 0x84, True)
            # another host NQN cannot attach an I/O queue to the allowed host's controller either
            out = fuzz.exchange(srv.port, [fuzz.icreq(), fuzz.connect_pdu(1, cntlid, fuzz.GUEST_NQN, OTHER,
                                                                           hostid)])
            assert out.statuses and out.statuses[0] & 0x7FF in (0x184, 0x182)
        for hostnqn, seen in ((ALLOWED, 1), (OTHER, 0)):
            with NvmeTcpHost("127.0.0.1", srv.discovery_port, DISCOVERY_NQN, hostnqn=hostnqn,
                             io_queues=0) as d:
                assert len(d.discovery_log()["records"]) == seen
    finally:
        srv.stop()


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_peer_controlled_strings_never_name_files(tmp_path):
    root = tmp_path / "srv"
    root.mkdir()
    outside = _tree(tmp_path.parent)
    srv = fuzz.ServerProcess(root)
    try:
        before = _tree(root)
        for hostnqn in ("../../../../../tmp/npukit-escape", "/tmp/npukit-escape2", "a/../../b\\..\\c"):
            with NvmeTcpHost("127.0.0.1", srv.port, fuzz.GUEST_NQN, hostnqn=hostnqn, io_queues=0) as h:
                h.fw_download(os.urandom(4096))
                assert h.fw_commit(2, 1).status == 0
                bad = h.admin(Command.build(0x10, cdws={10: 7 | (1 << 3)}), check=False).cqe
                assert (bad.sct, bad.sc) == (1, 0x06)  # Invalid Firmware Slot: slots are numbers, checked
        with pytest.raises(NvmeStatusError):
            NvmeTcpHost("127.0.0.1", srv.port, "../../etc/passwd")
    finally:
        srv.stop()
    assert _tree(root) - before <= {"state/fw", "state/fw/slot2.bin"}
    assert _tree(tmp_path.parent) - outside <= {f"{tmp_path.name}/srv/{p}" for p in _tree(root)} | {
        f"{tmp_path.name}/srv"}
    assert not Path("/tmp/npukit-escape").exists() and not Path("/tmp/npukit-escape2").exists()
