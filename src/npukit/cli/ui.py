"""Terminal output shared by every subcommand: aligned tables, a progress bar on stderr, JSON."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TextIO, TypeVar

T = TypeVar("T")


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str] | None = None, out: TextIO | None = None,
          align: str | None = None) -> None:
    """Print rows as an aligned text table. ``align`` is a string of 'l'/'r' per column."""
    out = out or sys.stdout
    cells = [[str(c) for c in r] for r in rows]
    if headers:
        cells.insert(0, [str(h) for h in headers])
    if not cells:
        return
    ncol = max(len(r) for r in cells)
    widths = [max((len(r[i]) for r in cells if i < len(r)), default=0) for i in range(ncol)]
    align = align or "l" * ncol
    for n, r in enumerate(cells):
        parts = []
        for i, c in enumerate(r):
            parts.append(c.rjust(widths[i]) if align[i % len(align)] == "r" else c.ljust(widths[i]))
        print("  ".join(parts).rstrip(), file=out)
        if headers and n == 0:
            print("  ".join("-" * w for w in widths), file=out)


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


class Progress:
    """A minimal progress bar on stderr; silent when stderr is not a terminal or ``enabled`` is False."""

    def __init__(self, total: int | None, label: str = "", enabled: bool | None = None,
                 stream: TextIO | None = None) -> None:
        self.total, self.label, self.n = total, label, 0
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.t0 = time.perf_counter()
        self._last = 0.0

    def update(self, n: int = 1, note: str = "") -> None:
        self.n += n
        now = time.perf_counter()
        if self.enabled and (now - self._last > 0.1 or (self.total and self.n >= self.total)):
            self._last = now
            self._draw(note)

    def _draw(self, note: str) -> None:
        dt = time.perf_counter() - self.t0
        rate = self.n / dt if dt > 0 else 0.0
        if self.total:
            frac = min(self.n / self.total, 1.0)
            bar = "#" * int(frac * 24)
            head = f"{self.label} [{bar:<24}] {self.n}/{self.total}"
        else:
            head = f"{self.label} {self.n}"
        self.stream.write(f"\r{head}  {rate:.1f}/s {note}\033[K")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw("")
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def track(items: Iterable[T], total: int | None = None, label: str = "", enabled: bool | None = None
          ) -> Iterator[T]:
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(total, label, enabled) as bar:
        for item in items:
            yield item
            bar.update()
