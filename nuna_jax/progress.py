"""One progress path for every long command and library call that takes a callback, on ``rich``.

The display goes to stderr and only when stderr is a terminal: off a terminal
(pipes, files, tests, CI) it writes nothing at all, so JSON on stdout and
one-line errors on stderr stay clean.

A command is a sequence of named *stages* (:data:`STAGES`: "planning",
"compiling", "evaluating", "simulating", ...), one line each, with a bar, the
count and an ETA where the work is countable (a spinner and the elapsed time
where it is not)::

    with Stages("estimate") as st:
        with st.stage("planning", total=7, unit="policies") as s:
            for p in policies:
                ...
                s.advance(note=p)
        with st.stage("evaluating", total=7, unit="policies") as s:
            ...

A single bar (the simulator's flits, a table's runs) is :class:`Progress`::

    with Progress(total=n_flits, label="simulating", unit="flits") as bar:
        bar.update(done, note=f"t={now_ns:.0f} ns")

and ``for x in track(items, label="evaluating"): ...`` iterates with one.
"""

from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, TypeVar

__all__ = ["Progress", "Stages", "STAGES", "track", "stderr_is_terminal"]

T = TypeVar("T")

#: the stage names commands use, in the order they usually come
STAGES = ("planning", "compiling", "evaluating", "simulating", "optimizing", "plotting", "building", "running")


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (the only place a progress display is drawn)."""
    return _is_tty(sys.stderr)


def _is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _rich_progress(countable: bool = True):
    """A started ``rich.progress.Progress`` on stderr: description, bar, count, elapsed, ETA, note."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress as _RichProgress, SpinnerColumn,
                               TextColumn, TimeElapsedColumn, TimeRemainingColumn)
    bar = _RichProgress(SpinnerColumn(finished_text="[green]done"), TextColumn("{task.description:<11s}"),
                        BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[unit]}"),
                        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                        TextColumn("{task.fields[note]}"),
                        console=Console(file=sys.stderr, force_terminal=True), transient=False)
    bar.start()
    return bar


class Progress:
    """One bar of ``total`` steps on stderr; silent unless ``enabled`` and stderr is a terminal.

    ``update(done)`` sets the absolute count; redraws are throttled to
    ``min_interval_s`` (``force=True`` redraws now).  The ETA column is rich's
    estimate from the rate so far.
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
            self._bar = _rich_progress()
            self._task = self._bar.add_task(label, total=self.total, note="", unit=unit)

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


class _Stage:
    """One stage line of :class:`Stages` (a no-op when the display is off)."""

    def __init__(self, owner: "Stages", name: str, total: int | None, unit: str):
        self.owner, self.name, self.total, self.done = owner, name, total, 0
        self._task = None
        if owner.on:
            self._task = owner._bar.add_task(name, total=total, note="", unit=unit)

    def update(self, done: int, note: str | None = None) -> None:
        self.done = int(done)
        if self._task is not None:
            kw = {} if note is None else {"note": note}
            self.owner._bar.update(self._task, completed=self.done, **kw)

    def advance(self, n: int = 1, note: str | None = None) -> None:
        self.update(self.done + int(n), note)

    def note(self, text: str) -> None:
        if self._task is not None:
            self.owner._bar.update(self._task, note=text)

    def __enter__(self) -> "_Stage":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self._task is not None:
            if exc_type is None:
                total = self.total if self.total is not None else max(self.done, 1)
                self.owner._bar.update(self._task, total=total, completed=total)
            self.owner._bar.stop_task(self._task)


class Stages:
    """A command's named stages (:data:`STAGES`) on one live display on stderr, one line each; silent
    unless ``enabled`` and stderr is a terminal.  ``stage(name, total=None, unit="")`` is a context
    manager: ``advance()`` / ``update(done)`` count, the line is finished when the block ends."""

    def __init__(self, command: str = "", *, enabled: bool = True):
        self.command = command
        self.on = bool(enabled) and _is_tty(sys.stderr)
        self._bar = _rich_progress() if self.on else None

    def stage(self, name: str, total: int | None = None, unit: str = "") -> _Stage:
        return _Stage(self, name, None if total is None else max(int(total), 1), unit)

    def callback(self, name: str, steps, unit: str = "steps"):
        """(stage, fn): a stage of ``len(steps)`` named steps and the callback a library call reports a
        finished step to (``fn(step_name)``: the bar moves to that step, its name as the note)."""
        st = self.stage(name, total=len(steps), unit=unit)
        order = list(steps)

        def fn(step, *_):
            if step in order:
                st.update(order.index(step) + 1, note=str(step))
            else:
                st.note(str(step))
        return st, fn

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
            self.on = False

    def __enter__(self) -> "Stages":
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
