"""``npukit nvme`` verbs against an in-process target: JSON shapes, data files, errors as one line."""

import json
import os

import pytest

from npukit.cli.main import main

from .conftest import NQN


def run(capsys, target, *argv):
    rc = main(["nvme", *argv, "--trsvcid", str(target.port), "--nqn", NQN])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_id_ctrl_id_ns_list_ns_smart_json(capsys, target):
    rc, out, _ = run(capsys, target, "id-ctrl", "--json")
    ctrl = json.loads(out)
    assert rc == 0 and ctrl["vid"] == 0x1B96 and ctrl["subnqn"] == NQN and ctrl["ver"] == 0x10400
    rc, out, _ = run(capsys, target, "id-ns", "-n", "1", "--json")
    assert json.loads(out)["nsze"] == 8 << 11
    rc, out, _ = run(capsys, target, "list-ns", "--json")
    assert json.loads(out) == {"nsid_list": [1]}
    rc, out, _ = run(capsys, target, "smart-log", "--json")
    assert json.loads(out)["temperature"] == 298
    rc, out, _ = run(capsys, target, "get-log", "-i", "3", "-l", "64", "--json")
    assert bytes.fromhex(json.loads(out)["data"])[8:13] == b"12.34"


def test_write_read_flush_with_files(capsys, target, tmp_path):
    data = os.urandom(4096)
    (tmp_path / "in.bin").write_bytes(data)
    rc, out, _ = run(capsys, target, "write", "-s", "40", "-c", "7", "-z", "4096",
                     "-d", str(tmp_path / "in.bin"))
    assert rc == 0 and "Success" in out
    rc, _, _ = run(capsys, target, "flush")
    assert rc == 0
    rc, _, _ = run(capsys, target, "read", "-s", "40", "-c", "7", "-d", str(tmp_path / "out.bin"))
    assert rc == 0 and (tmp_path / "out.bin").read_bytes() == data
    assert (target.tmp / "ns.img").read_bytes()[40 * 512: 40 * 512 + 4096] == data


def test_passthru_vendor_opcode_and_errors_are_one_line(capsys, target):
    rc, _, err = run(capsys, target, "admin-passthru", "-o", "0xc2", "-l", "16", "-r", "-4", "4")
    assert rc == 2 and err.startswith("npukit: error: ") and "INVALID_OPCODE" in err and err.count("\n") == 1
    rc, out, _ = run(capsys, target, "admin-passthru", "-o", "0xc2", "-l", "16", "-r", "-4", "4", "--json")
    assert rc == 1 and json.loads(out)["status"] == 0x4001
    rc, out, _ = run(capsys, target, "admin-passthru", "-o", "0x06", "-l", "4096", "-r", "-4", "1", "--json")
    assert rc == 0 and json.loads(out)["data"].startswith("961b961b")  # VID, SSVID little endian
    (target.tmp / "blk.bin").write_bytes(b"\x5a" * 512)
    rc, _, _ = run(capsys, target, "io-passthru", "-o", "0x01", "-n", "1", "-l", "512", "-w",
                   "-i", str(target.tmp / "blk.bin"))
    assert rc == 0
    rc, out, _ = run(capsys, target, "io-passthru", "-o", "0x02", "-n", "1", "-l", "512", "-r", "--json")
    assert rc == 0 and bytes.fromhex(json.loads(out)["data"]) == b"\x5a" * 512
    rc, _, err = run(capsys, target, "read", "-s", "0", "-c", "1", "-z", "100")
    assert rc == 2 and "does not match" in err
    rc = main(["nvme", "id-ctrl", "--trsvcid", "1", "--nqn", NQN])
    assert rc == 2 and capsys.readouterr().err.startswith("npukit: error: cannot connect")


def test_fw_download_commit_and_discover(capsys, target, tmp_path):
    (tmp_path / "fw.bin").write_bytes(b"\x7fELF" + bytes(8188))
    rc, _, _ = run(capsys, target, "fw-download", "-f", str(tmp_path / "fw.bin"))
    assert rc == 0
    rc, out, _ = run(capsys, target, "fw-commit", "-s", "2", "-a", "3", "--json")
    assert rc == 0 and json.loads(out)["firmware_log"]["active_slot"] == 2
    rc = main(["nvme", "discover", "-a", "127.0.0.1", "-s", str(target.port), "--json"])
    log = json.loads(capsys.readouterr().out)
    assert rc == 0 and log["records"][0]["subnqn"] == NQN


@pytest.mark.parametrize("verb", ["serve", "discover", "id-ctrl", "read", "admin-passthru", "fw-commit"])
def test_help(verb, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["nvme", verb, "--help"])
    assert (exc.value.code == 0 and "--json" in capsys.readouterr().out) or verb == "serve"
