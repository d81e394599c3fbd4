import subprocess
import sys

from npukit.cli.main import build_parser, main


def test_help_lists_subcommands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "hw" in out


def test_error_is_one_line_and_nonzero(capsys):
    rc = main(["hw", "definitely-not-a-preset"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("npukit: error: unknown hardware preset")
    assert err.count("\n") == 1


def test_module_entry_point_runs():
    r = subprocess.run([sys.executable, "-m", "npukit", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("npukit ")


def test_every_subcommand_has_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sub.choices
    for name, p in sub.choices.items():
        assert p.format_help().startswith("usage: npukit " + name)
