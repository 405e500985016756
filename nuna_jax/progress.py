"""One progress bar for every long command (simulate, optimize, sweep, reproduce), on ``rich``.

The bar goes to stderr and only when stderr is a terminal: off a terminal
(pipes, files, tests, CI) it writes nothing, so JSON on stdout and one-line
errors on stderr stay clean.  Usage::

    with Progress(total=n_flits, label="simulate", unit="flits") as bar:
        ...
        bar.update(done, note=f"t={now_ns:.0f} ns")

or ``for x in track(items, label="sweep"): ...``.
"""

from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, TypeVar

__all__ = ["Progress", "track"]

T = TypeVar("T")


class Progress:
    """A progress bar of ``total`` steps on stderr; silent unless ``enabled`` and stderr is a terminal.

    ``update(done)`` sets the absolute count; redraws are throttled to
    ``min_interval_s`` (``force=True`` redraws now).
    """

    def __init__(self, total: int, label: str = "", *, unit: str = "", enabled: bool = True,
                 min_interval_s: float = 0.2):
        self.total = max(int(total), 1)
        self.label, self.unit = label, unit
        self.on = bool(enabled) and _is_tty(sys.stderr)
        self.min_interval_s = float(min_interval_s)
        self._last = 0.0
        self._bar = self._task = None
        if self.on:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as _RichProgress
            self._bar = _RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn(unit), TimeElapsedColumn(), TextColumn("{task.fields[note]}"),
                                      console=Console(file=sys.stderr), transient=False)
            self._bar.start()
            self._task = self._bar.add_task(label, total=self.total, note="")

    def update(self, done: int, note: str = "", force: bool = False) -> None:
        if not self.on:
            return
        t = time.perf_counter()
        if not force and t - self._last < self.min_interval_s:
            return
        self._last = t
        self._bar.update(self._task, completed=min(int(done), self.total), note=note)

    def close(self) -> None:
        if self.on and self._bar is not None:
            self._bar.stop()
            self._bar = None
            self.on = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def track(items: Iterable[T], label: str = "", *, total: int | None = None, enabled: bool = True) -> Iterator[T]:
    """Iterate ``items`` with a progress bar (one step per item)."""
    if total is None:
        try:
            total = len(items)  # type: ignore[arg-type]
        except TypeError:
            total = 0
    with Progress(total, label, enabled=enabled) as bar:
        for k, x in enumerate(items, 1):
            yield x
            bar.update(k, force=k == total)


def _is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
