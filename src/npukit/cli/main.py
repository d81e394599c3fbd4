"""Entry point: ``npukit <command> ...``. Typed npukit errors become one line and exit status 2.

Start-up stays fast: for a command line, only the chosen command's parser is built in full. Every
other command is still listed (name and one-line help, for ``npukit --help`` and "invalid choice"),
but its ``register()`` is stopped right after ``add_parser``, so its flags, and the registries or
models some flags read their choices from, are never loaded. So ``register()`` calls ``add_parser``
first and a module adds one command (house style): a second one still runs, but ``--help`` lists only
the first. ``build_parser()`` with no command line builds every command in full (tests walk it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import npukit
from npukit.errors import NpukitError
from npukit.plugins import import_prefixed, prefixed_names

PACKAGE, PREFIX = "npukit.cli", "cmd_"


class _Listed(BaseException):
    """Ends a ``register()`` whose command was only listed (a BaseException: no ``except Exception``
    inside a plug-in swallows it)."""


class _ListingOnly:
    """The subparsers action as one module's ``register()`` sees it in a lazy build: the chosen
    command gets its full parser (and so does any command the module adds after it); a command before
    it, or in a module without it, is added with its name and help, then register() stops."""

    def __init__(self, sub: argparse._SubParsersAction, chosen: str | None) -> None:
        self._sub, self._chosen, self._in_full = sub, chosen, False

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser = self._sub.add_parser(name, **kwargs)
        if self._chosen is not None and self._chosen in (name, *kwargs.get("aliases", ())):
            self._in_full = True
        if self._in_full:
            return parser
        raise _Listed

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._sub, attr)


def _top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(
        prog="npukit",
        description="Custom AI accelerators, real before silicon: formats, ISAs, bit-exact simulators, "
        "compilers, runtimes and evidence-tiered performance ledgers.",
    )
    parser.add_argument("--version", action="version", version=f"npukit {npukit.__version__}")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress displays (also accepted after the command; NPUKIT_QUIET=1)")
    parser.add_argument("--wide", action="store_true",
                        help="tables at full width on a terminal too (also after the command; NPUKIT_WIDE=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    return parser, sub


def _command_word(argv: Sequence[str]) -> str | None:
    """The word argparse will take as COMMAND (the top level's options take no values)."""
    for i, arg in enumerate(argv):
        if arg == "--":
            return argv[i + 1] if i + 1 < len(argv) else None
        if not arg.startswith("-"):
            return arg
    return None


def _lazy_parser(modules: list[str], chosen: str | None) -> argparse.ArgumentParser | None:
    """A parser with ``chosen`` in full and the other commands of ``modules`` listed; None when no
    module registered ``chosen``."""
    parser, sub = _top_parser()
    for module in modules:
        with contextlib.suppress(_Listed):
            importlib.import_module(f"{PACKAGE}.{module}").register(_ListingOnly(sub, chosen))
    return parser if chosen is None or chosen in sub.choices else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``npukit`` parser; given ``argv``, only the command it names is built in full. Every
    (sub)command's --help ends with an example (`help_examples`)."""
    from npukit.cli import help_examples

    parser = _build_parser(argv)
    help_examples.attach(parser)
    return parser


def _build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    if argv is None:
        parser, sub = _top_parser()
        for module in import_prefixed(PACKAGE, PREFIX):
            module.register(sub)
        return parser
    chosen = _command_word(argv)
    names = prefixed_names(PACKAGE, PREFIX)
    own = f"{PREFIX}{chosen.replace('-', '_')}" if chosen else ""
    if own in names and argv[0] == chosen:  # `npukit CMD ...`: nothing else is shown
        parser = _lazy_parser([own], chosen)
        if parser is not None:
            return parser
    # a command no module registered (a typo, a module's second command): the full build decides
    return _lazy_parser(names, chosen) or _build_parser()


def _chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest (sub)command parser the parsed command line went through."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if not subs or name not in subs[0].choices:
            return parser
        parser = subs[0].choices[name]


GLOBAL_FLAGS = {"--quiet": "NPUKIT_QUIET", "--wide": "NPUKIT_WIDE"}


def _take_global_flags(argv: list[str]) -> list[str]:
    """``--quiet`` / ``--wide`` anywhere before a ``--`` apply to this process (and its children,
    through their environment variables); the rest of argv goes to the parser."""
    end = argv.index("--") if "--" in argv else len(argv)
    for flag, env in GLOBAL_FLAGS.items():
        if flag in argv[:end]:
            os.environ[env] = "1"
    head = [a for a in argv[:end] if a not in GLOBAL_FLAGS]
    return head + argv[end:]


_SKIP_TEARDOWN: list[bool] = []  # set by a command (`skip_teardown`) whose process may end at once


def skip_teardown() -> None:
    """The running command is done with everything it made (outputs written, workers closed): when it
    succeeds as the process's own command, the process exits without the interpreter's teardown. After
    `npukit generate --target pccx` that teardown frees ~460,000 objects (compiled programs, plans,
    timing rows): 0.5-0.6 s of every run, measured on the 2-core Xeon host, for nothing."""
    _SKIP_TEARDOWN.append(True)


def main(argv: list[str] | None = None) -> int:
    try:
        rc = _main(argv)
    except KeyboardInterrupt:  # during start-up or parsing, before the command ran
        rc = _interrupted([])
    if argv is None and rc == 0 and _SKIP_TEARDOWN:  # the process's command line (not a caller's list)
        _exit_now(rc)
    return rc


def _exit_now(rc: int) -> None:
    """End the process with ``rc`` once what it printed is out: atexit handlers run, the interpreter's
    object teardown does not."""
    import atexit
    import contextlib

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more can be delivered
            stream.flush()
    atexit._run_exitfuncs()
    os._exit(rc)


def _interrupted(fresh: list[str]) -> int:
    """Ctrl-C: remove what the command had begun to write (only paths that did not exist before it
    ran), say so in one line, exit 130. A second Ctrl-C meanwhile is ignored, not a traceback."""
    import signal

    from npukit.cli.ui import remove_paths

    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        removed = remove_paths(fresh)
        tail = f"; removed the partial {', '.join(removed)}" if removed else ""
        print(f"npukit: interrupted{tail}", file=sys.stderr)
    finally:
        signal.signal(signal.SIGINT, old)
    return 130


def _main(argv: list[str] | None) -> int:
    argv = _take_global_flags(sys.argv[1:] if argv is None else list(argv))
    from npukit.progress import step

    with step(f"starting npukit {argv[0] if argv else ''}".rstrip(), plain=False):  # (a terminal only:
        parser = build_parser(argv)  # a command's parser can import its registries, seconds on a busy host)
        args, extras = parser.parse_known_args(argv)
    if extras:  # a wrong flag: the usage of the command it was given to, not the top level's
        _chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(extras)}")
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0
    from npukit.cli.ui import check_args, output_paths

    fresh = [p for p in output_paths(args) if not os.path.lexists(p)]
    if getattr(args, "resumable_output", False):  # e.g. a sweep's streamed rows: kept for --resume
        fresh = []
    try:
        check_args(args)  # output paths (and a --hw file) before any work
        return int(args.func(args) or 0)
    except NpukitError as exc:
        print(f"npukit: error: {str(exc).removeprefix(': ')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted(fresh)
    except BrokenPipeError:  # `npukit ... | head`: stop quietly (and let no flush at exit complain)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
