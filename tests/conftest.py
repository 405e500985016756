"""Suite-wide test settings.

Memory: JAX keeps every compiled executable (and its traced jaxpr) for the life of the process, so a
single ``python -m pytest`` process grew to about 6 GB over the suite's ~3,000 compiles.  After each
test module, when the process holds more than ``NUNA_TEST_RSS_MB`` (default 1500) MB (split evenly
between pytest-xdist workers), the compilation
caches are dropped (``jax.clear_caches``).  Measured 2026-12-02: peak 2.5 GB instead of 6 GB.  The
allocator keeps most freed memory, so past the first modules RSS stays near the limit and this clears
after most modules; functions shared between modules compile again (on a sample of four modules,
clearing after each cost about 10% more CPU time).  Returning freed memory to the system after a
clear (glibc ``malloc_trim``) would make clears rarer; not tried yet.
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


@pytest.fixture(autouse=True, scope="module")
def _bounded_jax_caches():
    yield
    rss = _rss_mb()
    if rss is not None and rss > _LIMIT_MB and "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
        gc.collect()
