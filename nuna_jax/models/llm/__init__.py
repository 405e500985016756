"""Old import path of :mod:`nuna_jax.e2e.llm` (the end-to-end model moved above the scenario layer):
an alias with no code of its own, so that ``from nuna_jax.models.llm.search import search`` and
``python -m nuna_jax.models.llm.collective_table`` keep working.  New code imports
``nuna_jax.e2e.llm``; nothing in the package imports this alias."""

import sys

from ...e2e.llm import collective_timing, configs, hardware, layers, provenance, report, search  # noqa: F401

for _m in ("collective_timing", "configs", "hardware", "layers", "provenance", "report", "search"):
    sys.modules[f"{__name__}.{_m}"] = sys.modules[f"nuna_jax.e2e.llm.{_m}"]
