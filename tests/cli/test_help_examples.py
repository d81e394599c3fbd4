"""Every (sub)command's --help ends with one example that its own parser accepts; a wrong flag
prints the usage of the subcommand it was given to."""

from __future__ import annotations

import shlex

import pytest

from npukit.cli import help_examples
from npukit.cli.main import build_parser, main

PARSERS = help_examples.subparsers(build_parser())


@pytest.mark.parametrize("path", sorted(PARSERS), ids=lambda p: p or "npukit")
def test_help_has_an_example_the_parser_accepts(path: str, capsys) -> None:
    helptext = PARSERS[path].format_help()
    assert "\nexample:\n  npukit " in helptext, f"npukit {path} --help shows no example"
    line = helptext.split("\nexample:\n  ", 1)[1].splitlines()[0]
    argv = shlex.split(line)[1:]
    if path:
        assert argv[:len(path.split())] == path.split(), line  # the example is of this command
    try:
        build_parser(argv).parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"example does not parse ({exc.code}): {line}\n{capsys.readouterr().err}")


@pytest.mark.parametrize("argv", [["bpf", "disasm", "x.o", "--bogus"],
                                  ["perf", "--hw", "h", "--model", "m", "--bogus"],
                                  ["nvme", "id-ctrl", "--nope"]])
def test_wrong_flag_shows_the_subcommand_usage(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    cmd = " ".join(a for a in argv if not a.startswith("-") and a not in ("x.o", "h", "m"))
    assert exc.value.code == 2
    assert err.startswith(f"usage: npukit {cmd} ") and f"npukit {cmd}: error: unrecognized arguments" in err
