"""The README's "Using it" commands, as written: each one parses, and each one that does not generate
tokens (those take a minute on 2 cores; `make demo` runs generation) runs to exit status 0 from the
repository root's layout (examples/ reachable, outputs in a scratch directory)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from npukit.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    block = text[text.index("## Using it"):].split("```bash", 1)[1].split("```", 1)[0]
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.split("#", 1)[0].strip()
        for part in line.split("&&"):
            argv = shlex.split(part)
            if argv[:1] == ["npukit"]:
                out.append(argv[1:])
    return out


COMMANDS = readme_commands()


def test_readme_lists_the_main_commands():
    names = {c[0] for c in COMMANDS if c}
    assert {"generate", "perf", "sweep", "asm", "disasm", "sim", "vectors", "formats", "hw"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c)[:60] for c in COMMANDS])
def test_readme_command_runs(argv, tmp_path, monkeypatch, capsys):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    if argv[:2] == ["shard", "compile"] and "--no-tiling" in argv:  # shown for its error
        assert main(argv) == 2 and "placement" in capsys.readouterr().err
        return
    if argv[:2] in (["nvme", "serve"], ["alkali", "run"]):  # a server and its client: tests/devices
        build_parser().parse_args(argv)
        return
    if argv[:1] == ["generate"] or argv == ["--help"]:
        if argv != ["--help"]:
            build_parser().parse_args(argv)  # flags as written
        return
    if argv[:1] == ["sim"] and not Path(argv[1]).exists():  # the asm line before writes it
        assert main(["asm", "examples/pccx/softmax.s", "-o", argv[1], "--format", "hex"]) == 0
    if argv[:1] == ["disasm"] and not Path(argv[1]).exists():
        assert main(["asm", "examples/pccx/softmax.s", "-o", argv[1], "--format", "hex"]) == 0
    if argv[:2] == ["sweep", "report"] and not Path(argv[2]).exists():  # the sweep line before writes it
        sweep = next(c for c in COMMANDS if c[:1] == ["sweep"] and argv[2] in c
                     and c[c.index(argv[2]) - 1] in ("-o", "--output", "--out"))
        assert main(sweep) == 0
    assert main(argv) == 0, capsys.readouterr().err
