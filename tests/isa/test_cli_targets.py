"""How asm/disasm/sim pick a target and route its own flags (in-tree targets, in-process)."""

import pytest

from npukit.cli.main import main


@pytest.mark.parametrize(("argv", "needle"), [
    (["asm", "x.s", "-o", "x.bin", "--target", "nosuch"], "unknown target 'nosuch' with 'assemble'"),
    (["sim", "x.bin", "--target", "tern"], "unknown target 'tern' with 'simulate'"),
    (["asm", "x.s", "-o", "x.bin", "--target", "ebpf", "--profile", "strict"],
     "--profile is an option of target 'pccx', not 'ebpf'"),
    (["disasm", "x.bin", "--target", "pccx", "--hw", "tern-arty-a7-35t"],
     "describes a 'tern' device, not 'pccx'"),
])
def test_target_selection_errors_are_one_line(tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.s").write_text("exit\n")
    (tmp_path / "x.bin").write_bytes(bytes(8))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_the_hw_preset_picks_the_target_and_its_limits(tmp_path, capsys):
    hw = ["--hw", "pccx-v002-kv260", "--set", "constant_cache.entries_log2=1"]  # a 2-entry constant cache
    (tmp_path / "ok.s").write_text("memset cache=fmap slot=1 a=2 b=3 c=4\n")
    assert main(["asm", str(tmp_path / "ok.s"), "-o", str(tmp_path / "ok.hex"), *hw]) == 0
    want = (3 << 60) | (1 << 52) | (2 << 36) | (3 << 20) | (4 << 4)  # isa_pkg.sv MEMSET layout
    assert int((tmp_path / "ok.hex").read_text(), 16) == want
    (tmp_path / "bad.s").write_text("memset cache=fmap slot=2 a=2 b=3 c=4\n")
    capsys.readouterr()
    assert main(["asm", str(tmp_path / "bad.s"), "-o", str(tmp_path / "bad.hex"), *hw]) == 2
    assert "beyond the constant cache (2 entries)" in capsys.readouterr().err
