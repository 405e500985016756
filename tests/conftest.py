"""Suite-wide test settings.

Memory: JAX keeps every compiled executable (and its traced jaxpr) for the life of the process, so a
single ``python -m pytest`` process grew to about 6 GB over the suite's ~3,000 compiles.  After each
test module, when the process holds more than ``NUNA_TEST_RSS_MB`` (default 1500) MB, the compilation
caches are dropped (``jax.clear_caches``): the peak stays near that figure plus one module's growth,
and the few functions shared between modules compile again (a few CPU seconds over the suite, where
clearing after every module would cost about a minute).
"""

from __future__ import annotations

import gc
import os
import sys

import pytest

_LIMIT_MB = float(os.environ.get("NUNA_TEST_RSS_MB", "1500"))


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
