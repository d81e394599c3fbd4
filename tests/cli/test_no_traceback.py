"""No npukit command prints a traceback for a bad file argument, and every output path is checked
before any work: the subcommands (nested ones and each demo system's flags too) are enumerated from
the parser, so a new command is covered the day it lands.

Oracle: the process contract itself — an escaping exception is a traceback; a bad output path must
end in exit status 2 with one ``npukit: error:`` line, whatever the rest of the command line is."""

from __future__ import annotations

import argparse
import asyncio
import re
import signal

import pytest

from npukit.cli import ui
from npukit.cli.main import build_parser, main
from npukit.plugins import import_prefixed

FILE_WORDS = re.compile(r"file|path|program|src|dir|image|trace|plot|pareto|out|model|namespace|input"
                        r"|data|fw|preset|hw|dump", re.I)
# seconds one fuzzed call may take: commands must fail fast on bad files (a server that starts on
# an acceptable empty file is stopped here and counted as no traceback)
CALL_LIMIT_S = 20
# run_cli takes SIGALRM for its own limit, which pytest-timeout's signal method also uses: watch these
# tests from a thread instead, so a call that still hangs fails the run rather than stalling it
pytestmark = pytest.mark.timeout(300, method="thread")


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        if path == ("demo",):  # each system's own flags, parsed by its module
            for mod in import_prefixed("npukit.cli", "demo_"):
                p = argparse.ArgumentParser()
                getattr(mod, "add_arguments", lambda p: None)(p)
                yield ("demo", mod.__name__.rsplit("demo_", 1)[1]), p
        return
    for name, sp in subs[0].choices.items():
        yield from leaves(sp, (*path, name))


LEAVES = list(leaves(build_parser()))


def _takes_value(a: argparse.Action) -> bool:
    return a.nargs != 0 and a.dest != "help" and a.nargs != argparse.REMAINDER


def is_output(a: argparse.Action) -> bool:
    return _takes_value(a) and (getattr(a.type, "__name__", "").startswith("output ")
                                or a.dest in ui.OUTPUT_DESTS)


def is_file(a: argparse.Action) -> bool:
    if not _takes_value(a) or a.type in (int, float) or a.choices:
        return False
    words = " ".join([a.dest, str(a.metavar or ""), *a.option_strings])
    return bool(FILE_WORDS.search(words))


def filler(a: argparse.Action) -> str:
    if a.choices:
        return str(next(iter(a.choices)))
    return "1"


def argv_for(path: tuple[str, ...], parser: argparse.ArgumentParser, target: argparse.Action, value: str
             ) -> list[str]:
    out: list[str] = list(path) if path[:1] != ("demo",) or len(path) == 1 else ["demo", path[1]]
    rest: list[str] = []
    for a in parser._actions:
        if not _takes_value(a):
            continue
        if a is target:
            v = value
        elif a.required or (not a.option_strings and a.nargs not in ("?", "*")):
            v = filler(a)
        else:
            continue
        if a.option_strings:
            rest += [a.option_strings[-1], v]
        else:
            out.append(v)
    return out + rest


class _Slow(Exception):
    pass


_STOPPED_LOOPS: list[asyncio.AbstractEventLoop] = []


def _alarm(*_: object) -> None:
    # A command serving on an event loop (`nvme serve` on uvloop) runs this handler inside a loop
    # callback whose exceptions the loop logs and drops: stop that loop instead (the command's tasks are
    # cancelled and its cleanup runs, and `run` then raises RuntimeError), raise anywhere else.
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise _Slow from None
    _STOPPED_LOOPS.append(loop)
    loop.stop()


def run_cli(argv: list[str], capsys) -> tuple[int | str, str]:
    """(exit status or 'slow', stderr); an exception escaping main fails the test with the argv."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CALL_LIMIT_S)
    _STOPPED_LOOPS.clear()
    try:
        rc: int | str = main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 2
    except _Slow:
        rc = "slow"
    except Exception as exc:
        if not (_STOPPED_LOOPS and isinstance(exc, RuntimeError)):  # not the loop the alarm stopped
            pytest.fail(f"npukit {' '.join(argv)} raised {type(exc).__name__}: {exc}")
        rc = "slow"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, capsys.readouterr().err


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("fuzz")
    (d / "empty.json").write_bytes(b"")
    (d / "garbage.hex").write_bytes(bytes(range(256)) * 3)
    (d / "adir").mkdir()
    return {"missing": str(d / "no" / "such" / "x.json"), "directory": str(d / "adir"),
            "empty": str(d / "empty.json"), "garbage": str(d / "garbage.hex")}


def test_every_command_is_enumerated():
    names = {p for p, _ in LEAVES}
    for cmd in (("perf",), ("sweep",), ("sim",), ("generate",), ("asm",), ("hw",), ("vectors",)):
        assert cmd in names
    outputs = {(p, a.dest) for p, parser in LEAVES for a in parser._actions if is_output(a)}
    for need in ((("perf",), "plot"), (("sim",), "trace"), (("sweep",), "out"), (("sweep",), "pareto"),
                 (("generate",), "trace"), (("asm",), "output")):
        assert need in outputs


OUTPUT_CASES = [(p, a.dest) for p, parser in LEAVES for a in parser._actions if is_output(a)]


@pytest.mark.parametrize("kind", ["missing", "directory"])
@pytest.mark.parametrize(("path", "dest"), OUTPUT_CASES, ids=[f"{' '.join(p)}:{d}" for p, d in OUTPUT_CASES])
def test_unwritable_output_is_one_line_exit_2(path, dest, kind, bad, capsys):
    parser = dict(LEAVES)[path]
    action = next(a for a in parser._actions if a.dest == dest)
    folder = getattr(action.type, "__name__", "") == "output directory"
    value = bad["empty"] if folder and kind == "directory" else bad[kind]  # a file where a folder goes
    argv = argv_for(path, parser, action, value)
    rc, err = run_cli(argv, capsys)
    assert rc == 2, (argv, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("npukit: error: "), (argv, err)
    assert ("does not exist" in err) if kind == "missing" else ("directory" in err), err


# output paths are covered above (an existing file there is simply overwritten)
FILE_CASES = [(p, a.dest) for p, parser in LEAVES for a in parser._actions if is_file(a) and not is_output(a)]


@pytest.mark.slow
@pytest.mark.parametrize(("path", "dest"), FILE_CASES, ids=[f"{' '.join(p)}:{d}" for p, d in FILE_CASES])
def test_bad_file_arguments_never_traceback(path, dest, bad, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything a command writes by default lands here
    parser = dict(LEAVES)[path]
    action = next(a for a in parser._actions if a.dest == dest)
    for value in bad.values():
        argv = argv_for(path, parser, action, value)
        rc, err = run_cli(argv, capsys)
        assert "Traceback" not in err, (argv, err)
        if rc not in (0, "slow"):
            assert err.strip().splitlines()[-1].startswith("npukit"), (argv, err)
