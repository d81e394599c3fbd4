"""Start-up stays lean: a cheap ``npukit`` command line must not import the heavy stacks (NumPy, numba,
torch, the model runtime, asyncio servers, target packages) that only some commands need, and the lazy
parser that makes this so answers exactly like the fully built one.

Oracles: a fresh interpreter's own record of what it imported (``sys.modules``) and of the CPU time
it used (``resource``); for equivalence, argparse's rendering of the fully built parser (every
command's ``register()`` run in full, as before the lazy build existed)."""

from __future__ import annotations

import contextlib
import io
import json
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import npukit.cli
from npukit.cli.main import build_parser, main

# what none of the listed command lines may import; a prefix also covers its submodules
HEAVY = ("numpy", "numba", "torch", "asyncio", "npukit.runtime", "npukit.models", "npukit.targets",
         "npukit.sim", "npukit.devices")
PROBE = """
import contextlib, io, json, sys
from npukit.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        rc = main(json.loads(sys.argv[1]))
    except SystemExit as exc:
        rc = exc.code
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def imported_by(argv: list[str]) -> tuple[int, set[str]]:
    """(exit status, every module name) of ``npukit ARGV`` run in a fresh interpreter."""
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["rc"], set(out["modules"])


def heavy_in(modules: set[str], heavy: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in heavy))


@pytest.mark.parametrize("argv", [[], ["--help"], ["--version"], ["hw"], ["hw", "--help"],
                                  ["formats", "--help"], ["sim", "--help"], ["nvme", "--help"]],
                         ids=lambda argv: " ".join(argv) or "(none)")
def test_cheap_command_lines_import_nothing_heavy(argv):
    rc, modules = imported_by(argv)
    assert rc == 0
    if argv[:1] in (["sim"], ["nvme"]):  # their flags come from the target registry / device
        heavy = ("numba", "torch", "npukit.runtime", "npukit.models")
    else:
        heavy = HEAVY
    assert heavy_in(modules, heavy) == [], argv


def test_bpf_run_loads_only_the_ebpf_vm(tmp_path):
    prog = tmp_path / "add.s"
    prog.write_text("mov %r0, 1\nadd %r0, 2\nexit\n")
    rc, modules = imported_by(["bpf", "run", str(prog)])
    assert rc == 0 and "npukit.targets.ebpf.vm" in modules
    assert heavy_in(modules, ("numba", "torch", "asyncio", "npukit.runtime", "npukit.models",
                              "npukit.targets.pccx", "npukit.sim", "npukit.devices")) == []


def test_help_costs_little_cpu():
    """CPU time, not wall time: a busy 2-core host delays a process but does not bill it. Before the
    lazy parser ``npukit --help`` used ~0.5 s of CPU (every command built in full); now ~0.09 s."""
    used = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run([sys.executable, "-m", "npukit.cli.main", "--help"], capture_output=True,
                           timeout=120)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert r.returncode == 0
        used.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    assert min(used) < 0.3, used


def _command_parsers(parser) -> dict:
    return next(a for a in parser._actions if a.dest == "command").choices


def test_lazy_parser_answers_like_the_full_one():
    full = build_parser()
    for argv in ([], ["--help"], ["--version"], ["no-such-command"]):
        assert build_parser(argv).format_help() == full.format_help(), argv
    for name, sub in _command_parsers(full).items():
        lazy = _command_parsers(build_parser([name, "--help"]))[name]
        assert lazy.format_help() == sub.format_help(), name
        assert [a.dest for a in lazy._actions] == [a.dest for a in sub._actions], name
        assert lazy._defaults.keys() == sub._defaults.keys(), name


PLUGIN = '''
"""An out-of-tree command module whose commands are not named after it."""
import argparse


def register(sub):
    p = sub.add_parser("zz-first", help="first plug-in command")
    p.add_argument("--n", type=int, required=True)
    p.set_defaults(func=lambda args: print("first", args.n * 2) or 0)
    q = sub.add_parser("zz-second", help="second plug-in command")
    q.add_argument("word")
    q.set_defaults(func=lambda args: print("second", args.word[::-1]) or 0)
'''


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    (tmp_path / "cmd_zz_plugin.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.setattr(npukit.cli, "__path__", [*npukit.cli.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "npukit.cli.cmd_zz_plugin", raising=False)
    yield tmp_path
    sys.modules.pop("npukit.cli.cmd_zz_plugin", None)


def test_out_of_tree_commands_still_work(plugin_dir, capsys):
    assert main(["zz-first", "--n", "21"]) == 0
    assert capsys.readouterr().out == "first 42\n"
    assert main(["zz-second", "abc"]) == 0  # a module's second command: the full build finds it
    assert capsys.readouterr().out == "second cba\n"
    with pytest.raises(SystemExit) as exc:
        main(["zz-first"])
    assert exc.value.code == 2 and "--n" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0 and "first plug-in command" in capsys.readouterr().out


def test_demo_plugins_are_still_discovered(capsys):
    assert main(["demo", "--list"]) == 0
    out = capsys.readouterr().out
    shipped = sorted(p.stem[len("demo_"):] for p in Path(npukit.cli.__file__).parent.glob("demo_*.py"))
    assert shipped and all(name in out for name in shipped)


def test_no_command_prints_help_and_bad_command_is_one_usage_error(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: npukit") and all(n in out for n in _command_parsers(build_parser()))
    with contextlib.redirect_stderr(io.StringIO()) as err, pytest.raises(SystemExit) as exc:
        main(["hw", "--no-such-flag"])
    assert exc.value.code == 2 and "Traceback" not in err.getvalue()
    assert err.getvalue().splitlines()[-1].startswith("npukit hw: error: unrecognized arguments")
