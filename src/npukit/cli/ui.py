"""Terminal output shared by every subcommand: aligned tables, progress on stderr (`progress`), JSON,
and the up-front checks of the paths a command will write (so a bad path fails before any work)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO, TypeVar

from npukit.errors import ConfigError
from npukit.progress import Progress, step  # noqa: F401  (commands use ui.Progress, ui.step)

T = TypeVar("T")

WIDTH = 100  # human tables fit this many columns; --json keeps every cell in full

# Argument destinations that name a file a command writes, for commands that do not tag their
# flags with `output_file` (checked all the same).
OUTPUT_DESTS = ("output", "out", "trace", "plot", "pareto")


class OutputPath(str):
    """A path a command will write; `check_args` verifies it before the command runs."""

    flag = "output"
    is_dir = False


def output_file(flag: str, directory: bool = False) -> Callable[[str], OutputPath]:
    """An argparse ``type`` marking the value as an output path (``directory``: a folder to fill)."""
    def make(text: str) -> OutputPath:
        out = OutputPath(text)
        out.flag, out.is_dir = flag, directory
        return out

    make.__name__ = "output directory" if directory else "output path"
    return make


def check_output(path: str | Path, flag: str, directory: bool = False) -> None:
    """Raise a one-line ConfigError when ``path`` cannot be written (missing folder, a directory in
    place of a file, no write permission). ``-`` (stdout) passes."""
    text = str(path)
    if text in ("", "-"):
        if text == "":
            raise ConfigError(f"{flag}: empty path")
        return
    p = Path(text)
    if directory:
        if p.exists() and not p.is_dir():
            raise ConfigError(f"{flag} {text}: exists and is not a directory")
        target = p if p.is_dir() else p.parent
    else:
        if p.is_dir():
            raise ConfigError(f"{flag} {text}: is a directory; give a file name")
        target = p.parent
    target = target if str(target) else Path(".")
    if not target.is_dir():
        raise ConfigError(f"{flag} {text}: directory {target} does not exist")
    if not os.access(target, os.W_OK) or (p.exists() and not directory and not os.access(p, os.W_OK)):
        raise ConfigError(f"{flag} {text}: not writable")


def check_input(path: str, flag: str) -> None:
    """A file the command reads: it must exist and be a regular file."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag} {path}: is a directory, not a file")
    if not p.is_file():
        raise ConfigError(f"{flag} {path}: no such file")


def output_paths(args: Any) -> list[str]:
    """Every path a parsed command line names for writing (as `check_args` finds them)."""
    out = []
    for dest, value in vars(args).items():
        for v in value if isinstance(value, list) else [value]:
            named = isinstance(v, OutputPath) or (dest in OUTPUT_DESTS and isinstance(v, str))
            if named and str(v) not in ("", "-"):
                out.append(str(v))
    return out


def remove_paths(paths: Iterable[str]) -> list[str]:
    """Delete these files or folders where they exist (a partial output); the ones removed."""
    import shutil

    removed = []
    for p in map(Path, paths):
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
            else:
                continue
        except OSError:
            continue
        removed.append(str(p))
    return removed


def check_args(args: T) -> T:
    """Every output path of a parsed command line, and a --hw that names a TOML file, checked before
    the command runs."""
    for dest, value in vars(args).items():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, OutputPath):
                check_output(v, v.flag, v.is_dir)
            elif dest in OUTPUT_DESTS and isinstance(v, str):
                check_output(v, f"--{dest}")
    hw = getattr(args, "hw", None)
    if isinstance(hw, str) and (hw.endswith(".toml") or os.sep in hw):
        check_input(hw, "--hw")
    return args


def tcp_address(text: str, flag: str, default_port: int) -> tuple[str, int]:
    """``tcp://HOST:PORT`` (or ``HOST:PORT``, ``tcp://HOST``) → (host, port); a ConfigError names
    ``flag`` otherwise. One address form for every NVMe/Alkali command."""
    from urllib.parse import urlparse

    u = urlparse(text if "://" in text else f"tcp://{text}")
    if u.scheme != "tcp" or not u.hostname:
        raise ConfigError(f"{flag} {text!r}: expected tcp://HOST:PORT")
    try:
        port = u.port
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: bad port") from None
    return u.hostname, default_port if port is None else port


def positive(kind: type = int, zero: bool = False) -> Callable[[str], Any]:
    """An argparse ``type``: a number > 0 (>= 0 with ``zero``)."""
    def parse(text: str) -> Any:
        import argparse

        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if v < 0 or (v == 0 and not zero) or v != v:
            raise argparse.ArgumentTypeError(f"must be {'>= 0' if zero else '> 0'}, got {text}")
        return v

    parse.__name__ = "positive number"
    return parse


def wide() -> bool:
    """``npukit --wide`` (or ``NPUKIT_WIDE=1``): tables at full width even on a terminal."""
    return os.environ.get("NPUKIT_WIDE", "") not in ("", "0")


def terminal_width(out: TextIO) -> int | None:
    """The width to fit tables to: the terminal's when ``out`` is one (and not ``--wide``), else
    None (full width: a file or a pipe gets every cell whole)."""
    try:
        on_terminal = out.isatty()
    except (AttributeError, ValueError):
        on_terminal = False
    if not on_terminal or wide():
        return None
    return shutil.get_terminal_size((WIDTH, 24)).columns


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str] | None = None, out: TextIO | None = None,
          align: str | None = None, width: int | None = None) -> None:
    """Print rows as a table that never cuts a cell. ``align`` is a string of 'l'/'r' per column.
    On a terminal (or with ``width``) a rich table fits the width, wrapping long cells onto more
    lines; to a file or a pipe, or with ``--wide``, plain aligned columns at full width."""
    out = out or sys.stdout
    cells = [[str(c) for c in r] for r in rows]
    head = [str(h) for h in headers] if headers else None
    ncol = max([len(r) for r in cells] + [len(head) if head else 0])
    if not ncol:
        return
    align = align or "l" * ncol
    fit_to = width or terminal_width(out)
    if fit_to is not None:
        _rich_table(cells, head, out, align, fit_to)
        return
    if head:
        cells.insert(0, head)
    widths = [max((len(r[i]) for r in cells if i < len(r)), default=0) for i in range(ncol)]
    for n, r in enumerate(cells):
        parts = []
        for i, c in enumerate(r):
            parts.append(c.rjust(widths[i]) if align[i % len(align)] == "r" else c.ljust(widths[i]))
        print("  ".join(parts).rstrip(), file=out)
        if head and n == 0:
            print("  ".join("-" * w for w in widths), file=out)


def _rich_table(cells: list[list[str]], head: list[str] | None, out: TextIO, align: str, width: int) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    ncol = max([len(r) for r in cells] + [len(head) if head else 0])
    t = Table(box=box.SIMPLE_HEAD if head else None, show_header=bool(head), show_edge=False,
              pad_edge=False, padding=(0, 1), header_style="bold")
    for i in range(ncol):
        t.add_column(head[i] if head and i < len(head) else "", overflow="fold",
                     justify="right" if align[i % len(align)] == "r" else "left")
    for r in cells:
        t.add_row(*(Text(c) for c in r))  # Text: a cell's brackets are data, not rich markup
    Console(file=out, width=width, highlight=False, soft_wrap=False).print(t)


def emit_json(obj: Any, out: TextIO | None = None) -> None:
    json.dump(obj, out or sys.stdout, indent=2, default=_json_default)
    (out or sys.stdout).write("\n")


def _json_default(o: Any) -> Any:
    to_json = getattr(o, "to_json", None)
    if callable(to_json):
        return to_json()
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def track(items: Iterable[T], total: int | None = None, label: str = "", enabled: bool | None = None
          ) -> Iterator[T]:
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(total, label, enabled) as bar:
        for item in items:
            yield item
            bar.update()
