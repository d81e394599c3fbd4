"""Every ``npukit`` command line in the README and docs/ parses as written (flags and values the
parser accepts); lines with placeholders (``[...]``, ``A|B``, ``<...>``, ``...``) are templates."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from npukit.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = re.compile(r"\[|\||<|\.\.\.|…|\bFILE\b|\bDIR\b|\bNQN\b|\bHOST\b|\bN\b")


def doc_commands() -> list[tuple[str, list[str]]]:
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", doc.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s#.*$", "", line).strip().removeprefix("$ ")
                for part in re.split(r"&&|;", line):
                    part = part.strip()
                    if part.startswith("npukit ") and not TEMPLATE.search(part):
                        try:
                            argv = shlex.split(part)[1:]
                        except ValueError:
                            continue
                        out.append((f"{doc.relative_to(ROOT)}: {part[:70]}", argv))
    return out


COMMANDS = doc_commands()


def test_the_docs_have_commands() -> None:
    assert len(COMMANDS) > 60


@pytest.mark.parametrize("argv", [a for _, a in COMMANDS], ids=[i for i, _ in COMMANDS])
def test_doc_command_parses(argv: list[str], capsys) -> None:
    try:
        build_parser(argv).parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            pytest.fail(capsys.readouterr().err)
