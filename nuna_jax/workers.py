"""Worker processes for a sweep's simulator points, startable before jax is imported
(``sweep.simpool`` runs tasks on them; docs/sweep.md "Simulator points").

Importing this module loads nothing but the standard library, so ``nuna-jax sweep --jobs N``
starts its ``N - 1`` workers (:func:`start_early`) right after parsing its arguments: each
worker imports jax, the scenario builder and the simulator and loads the compiled event loop
(:data:`WARM_TARGET`) while the command itself is still importing and planning; on a 2-core machine
the two imports overlap instead of the worker's coming after the command's.  The pool is then
taken by the sweep's runner (:func:`take_early`); if the sweep never needs it,
:func:`close_early` kills it.
"""

from __future__ import annotations

import contextlib
import os
import sys

__all__ = ["start_early", "take_early", "close_early"]

_EARLY: dict = {}      # jobs -> (executor, environment, warming futures)


#: a worker's first task (``module:function``, run by :func:`_call`): import what a simulator task
#: needs and load the compiled event loop (``sweep.simpool.warm_worker``).  Named, not imported:
#: this module stays below the layers it starts (standard library only; tests/test_layers.py)
WARM_TARGET = "nuna_jax.sweep.simpool:warm_worker"


def _call(target: str):
    """Run the function ``target`` (``"module:function"``) in a worker, importing its module there."""
    import importlib
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)()


def _worker_init() -> None:
    """A worker ignores SIGINT (a terminal's ^C reaches the whole process group; the parent stops the
    workers).  It started with SIGINT blocked (:func:`_without_main`), so a ^C that came while it
    was importing is pending: ignored once it is unblocked here, no traceback."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def set_environ(values: dict) -> dict:
    """Set environment variables (a value None: unset); return the old values, for a later
    ``set_environ(old)`` to restore them."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return old


class _Env:
    """Environment for spawned workers (inherited at spawn): JAX on the CPU, the XLA cache shared."""

    def __enter__(self):
        want = {"JAX_PLATFORMS": "cpu"}
        d = os.environ.get("NUNA_JAX_CACHE_DIR")
        if d != "" and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
            want["JAX_COMPILATION_CACHE_DIR"] = d or os.path.join(os.path.expanduser("~"), ".cache", "nuna_jax", "xla")
            want["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "1.0"
        self.old = {k: os.environ.get(k) for k in want}
        os.environ.update(want)
        return self

    def __exit__(self, *exc):
        set_environ(self.old)


@contextlib.contextmanager
def _without_main():
    """Start workers without the caller's ``__main__`` and with SIGINT blocked.  *Spawn* re-imports the main module in every
    worker, which re-runs a script that has no ``if __name__ == "__main__"`` guard (and imports what it
    imports, jax included, once per worker).  Workers run only ``nuna_jax`` code
    (``simpool.sim_task`` and its arguments), so the main module is hidden while they start."""
    import signal
    m = sys.modules.get("__main__")
    saved = {k: m.__dict__[k] for k in ("__file__", "__spec__") if m is not None and k in m.__dict__}
    # SIGINT blocked while workers start (they inherit the mask, see _worker_init); a ^C meanwhile
    # stays pending here and is delivered when the mask is restored
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        if m is not None:
            m.__dict__.pop("__file__", None)
            m.__spec__ = None
        yield
    finally:
        if m is not None:
            m.__dict__.pop("__spec__", None)
            m.__dict__.update(saved)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _stop(ex) -> None:
    """Kill a pool's workers now (an interrupted or failed sweep must not wait for the tasks in flight)."""
    procs = list((getattr(ex, "_processes", None) or {}).values())
    for p in procs:
        try:
            p.kill()
        except (OSError, ValueError, AttributeError):
            pass
    for p in procs:
        try:
            p.join(5.0)
        except (OSError, ValueError, AttributeError, AssertionError):
            pass
    ex.shutdown(wait=False)


def start_early(jobs: int) -> None:
    """Start ``jobs - 1`` spawned workers now, each warming up (:data:`WARM_TARGET`); a no-op for
    ``jobs <= 1`` or when a pool was started already."""
    jobs = int(jobs)
    if jobs <= 1 or _EARLY:
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    env = _Env().__enter__()              # restored when the runner that takes the pool closes
    ex = ProcessPoolExecutor(jobs - 1, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init)
    with _without_main():
        warming = [ex.submit(_call, WARM_TARGET) for _ in range(jobs - 1)]
    _EARLY[jobs] = (ex, env, warming)


def take_early(jobs: int):
    """The pool :func:`start_early` started for ``jobs`` (``(executor, env, warming)``, now the
    caller's to close), or None."""
    return _EARLY.pop(int(jobs), None)


def close_early() -> None:
    """Kill a pool started early that no sweep took (and restore the environment)."""
    while _EARLY:
        _, (ex, env, _w) = _EARLY.popitem()
        _stop(ex)
        env.__exit__()
