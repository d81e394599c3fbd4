"""Progress for anything that can take over 2 s, on a terminal and off it.

On a terminal (stderr is a TTY) one rich display on stderr shows every active step: a spinner with
elapsed time for a step (`step`), a bar with count and ETA for countable work (`Progress`). The
display redraws on its own thread, so a long compiled call inside a step never leaves the terminal
silent; it is erased when the last step ends. Off a terminal (a log, a pipe, CI) a step writes one
plain line once it has run for ``PLAIN_AFTER`` seconds and one when it ends, and countable work a
line per update at most every ``PLAIN_EVERY`` seconds, so quick commands stay as quiet as before.
``npukit --quiet`` (or ``NPUKIT_QUIET=1``) silences all of it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

PLAIN_AFTER = 2.0  # s: a plain-line step that ends sooner prints nothing
PLAIN_EVERY = 1.0  # s between plain lines of countable work

_live: Any = None  # the one rich display while any step or bar is active
_users = 0
_lock = threading.RLock()


def quiet() -> bool:
    return os.environ.get("NPUKIT_QUIET", "") not in ("", "0")


def set_quiet(value: bool = True) -> None:
    """Silence (or restore) every progress display of this process."""
    if value:
        os.environ["NPUKIT_QUIET"] = "1"
    else:
        os.environ.pop("NPUKIT_QUIET", None)


def _on_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _acquire() -> Any:
    """The shared rich display (started on first use)."""
    global _live, _users
    with _lock:
        if _live is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            _live = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24),
                             TextColumn("{task.fields[count]}"), TimeElapsedColumn(),
                             TextColumn("{task.fields[eta]}"),
                             console=Console(file=sys.stderr), transient=True, refresh_per_second=8,
                             redirect_stdout=_on_terminal(sys.stdout), redirect_stderr=True)
            _live.start()
        _users += 1
        return _live


def _release() -> None:
    global _live, _users
    with _lock:
        _users -= 1
        if _users == 0 and _live is not None:
            _live.stop()
            _live = None


def _eta(done: int, total: int | None, elapsed: float) -> str:
    if not total or done <= 0 or done >= total:
        return ""
    left = elapsed / done * (total - done)
    return f"ETA {int(left) // 60}:{int(left) % 60:02d}"


class Progress:
    """Countable work: ``update()`` after each unit. A rich bar with count, elapsed time and ETA on a
    terminal; off it, a plain line at most every second once the work has run for 2 s (and a final
    one). ``enabled=False`` shows nothing; None decides from the stream and ``--quiet``."""

    def __init__(self, total: int | None, label: str = "", enabled: bool | None = None,
                 stream: TextIO | None = None) -> None:
        self.total, self.label, self.n = total, label, 0
        self.stream = stream or sys.stderr
        self.enabled = not quiet() if enabled is None else (enabled and not quiet())
        self.rich = self.enabled and _on_terminal(self.stream) and self.stream is sys.stderr
        self.t0 = time.perf_counter()
        self._last_line = self.t0
        self._printed = False
        self._task = None
        if self.rich:
            self._live = _acquire()
            self._task = self._live.add_task(label, total=total, count=self._count(), eta="")

    def _count(self) -> str:
        return f"{self.n}/{self.total}" if self.total else str(self.n)

    def update(self, n: int = 1, note: str = "") -> None:
        self.n += n
        now = time.perf_counter()
        if self._task is not None:
            desc = f"{self.label} {note}".strip()
            self._live.update(self._task, completed=self.n, description=desc, count=self._count(),
                              eta=_eta(self.n, self.total, now - self.t0))
        elif self.enabled and now - self.t0 >= PLAIN_AFTER and now - self._last_line >= PLAIN_EVERY:
            self._line(note)

    def _line(self, note: str = "") -> None:
        self._last_line, self._printed = time.perf_counter(), True
        dt = self._last_line - self.t0
        eta = _eta(self.n, self.total, dt)
        self.stream.write(f"npukit: {self.label} {self._count()} ({dt:.1f} s{', ' + eta if eta else ''})"
                          f"{' ' + note if note else ''}\n")
        self.stream.flush()

    def close(self) -> None:
        if self._task is not None:
            self._live.remove_task(self._task)
            self._task = None
            _release()
        elif self.enabled and self._printed:
            self._line("done")
            self._printed = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def step(what: str, stream: TextIO | None = None, plain: bool = True) -> Iterator[None]:
    """One stretch of uncountable work, named (``"loading model bitnet-b1.58-2b-4t"``): a spinner
    with elapsed time on a terminal; off it, a line if it runs past 2 s and one when it ends
    (``plain=False``: nothing off a terminal). While a display is up, what the program writes to
    stderr (warnings, messages) is printed above it."""
    stream = stream or sys.stderr
    if quiet() or (not plain and not _on_terminal(stream)):
        yield
        return
    if _on_terminal(stream) and stream is sys.stderr:
        live = _acquire()
        task = live.add_task(what, total=None, count="", eta="")
        try:
            yield
        finally:
            live.remove_task(task)
            _release()
        return
    t0 = time.perf_counter()
    started = threading.Event()

    def announce() -> None:
        started.set()
        stream.write(f"npukit: {what} ...\n")
        stream.flush()

    timer = threading.Timer(PLAIN_AFTER, announce)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if started.is_set():
            stream.write(f"npukit: {what}: {time.perf_counter() - t0:.1f} s\n")
            stream.flush()
