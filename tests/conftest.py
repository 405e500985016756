"""Suite-wide test settings.

Memory: JAX keeps every compiled executable (and its traced jaxpr) for the life of the process, so a
single ``python -m pytest`` process grew to about 6 GB over the suite's ~3,000 compiles.  After each
test module, when the process holds more than ``NUNA_TEST_RSS_MB`` (default 1500) MB (split evenly
between pytest-xdist workers), the compilation
caches are dropped (``jax.clear_caches``).  Measured 2026-12-02: peak 2.5 GB instead of 6 GB.  Freed memory is
handed back to the system (glibc ``malloc_trim``) so that RSS shows what is live and the caches are
dropped only when the live set is over the limit: without that, RSS stayed near the limit and this
cleared after most modules (on four modules, clearing after each cost about 10% more CPU time);
with it, RSS fell from ~1.1 GB to ~0.5 GB after a clear in a six-module sample.
"""

from __future__ import annotations

import gc
import os
import sys

import pytest

# the budget is for the whole run: pytest-xdist workers (PYTEST_XDIST_WORKER_COUNT) share it
_LIMIT_MB = float(os.environ.get("NUNA_TEST_RSS_MB", "1500")) / max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def _rss_mb() -> float | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


# nothing a test builds reaches the user's cache, and nothing of it reaches a test: every on-disk cache
# (XLA programs, the scenario store; nuna_jax.cache) lives in a directory of this run, unless the
# caller chose one (an empty NUNA_JAX_CACHE_DIR keeps them off)
if "NUNA_JAX_CACHE_DIR" not in os.environ:
    import tempfile
    os.environ["NUNA_JAX_CACHE_DIR"] = tempfile.mkdtemp(prefix="nuna_jax_test_cache_")


@pytest.fixture(autouse=True)
def _scenario_store_off():
    """The command line turns the scenario store on for its process (an in-process ``main()`` call
    too): turn it off again after each test, so that library tests build their scenarios."""
    yield
    from nuna_jax import cache
    cache.use_scenarios(False)


@pytest.fixture(autouse=True, scope="module")
def _bounded_jax_caches():
    yield
    rss = _rss_mb()
    if rss is not None and rss > _LIMIT_MB and "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
        gc.collect()
        _trim()


def _trim() -> None:
    """Hand freed memory back to the system (glibc), so that RSS shows what is live again."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class _CompileCount:
    """Counts XLA backend compilations (jax.monitoring's backend-compile event) inside a ``with``
    block: ``with count_compiles() as c: ...; c.n``."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __enter__(self):
        import jax
        self.n = 0
        jax.monitoring.register_event_duration_secs_listener(self._on)
        return self

    def _on(self, event, duration, **kw):
        if event == self.EVENT:
            self.n += 1

    def __exit__(self, *exc):
        from jax._src import monitoring   # no public unregister in jax.monitoring
        monitoring.unregister_event_duration_listener(self._on)


@pytest.fixture
def count_compiles():
    """A context manager counting XLA compilations (``_CompileCount``)."""
    return _CompileCount
