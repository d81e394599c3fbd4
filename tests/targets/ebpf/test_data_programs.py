"""Our own programs in the bpf_conformance format (tests/targets/ebpf/data/*.data), run through the CLI.

Expected values come from RFC 9669's text (division/modulo by zero, signed division, shift masking,
sign-extending loads, 32-bit atomics, JMP32) and from uBPF's conformance-plugin helper convention; an
``-- error`` section holds a phrase the one-line error must contain.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npukit.cli.main import main

DATA = Path(__file__).parent / "data"
FILES = sorted(DATA.glob("*.data"))


def parse(path: Path) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in path.read_text().splitlines():
        body = line.split("#", 1)[0].rstrip()
        if body.startswith("--"):
            current = body[2:].strip()
            sections[current] = []
        elif current is not None and body.strip():
            sections[current].append(body)
    return {k: "\n".join(v) for k, v in sections.items()}


def test_corpus_present() -> None:
    assert len(FILES) >= 15


@pytest.mark.parametrize("engine", ["jit", "fast", "interp"])
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_program(path: Path, engine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sec = parse(path)
    prog = tmp_path / ("prog.raw" if "raw" in sec else "prog.s")
    prog.write_text(sec.get("raw") or sec["asm"])
    argv = [
        "bpf",
        "run",
        str(prog),
        "--abi",
        "ubpf",
        "--helpers",
        "conformance",
        "--json",
        "--engine",
        engine,
        "--budget",
        "100000",
    ]
    if "mem" in sec:
        (tmp_path / "mem.hex").write_text(sec["mem"])
        argv += ["--mem", str(tmp_path / "mem.hex")]
    rc = main(argv)
    out, err = capsys.readouterr()
    if "error" in sec:
        assert rc == 2
        assert len(err.strip().splitlines()) == 1 and err.startswith("npukit: error:")
        assert sec["error"].strip() in err
    else:
        assert rc == 0, err
        assert json.loads(out)["r0"] == int(sec["result"].strip(), 0)
