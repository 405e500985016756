"""Names the command line shows or checks while it parses its arguments (choices, help text),
kept free of jax, flax and numba: ``--help``, ``--version``, ``--list`` and argument errors answer
without loading them (so that ``--help`` stays fast).  Where the library's own tuple lives in a module that imports
jax, this is a copy; tests/test_cli_quick.py checks every copy against the library's."""

from __future__ import annotations

from ..plans import ALGORITHMS, COLLECTIVES  # noqa: F401  (plans needs numpy only)

#: ``placement.POLICIES``
POLICIES = ("UA", "UA+NAR", "NUMA", "NUMA+NAR", "NAP", "NAP+NAR", "NAP*")
#: ``sim.ENGINES``
SIM_ENGINES = ("fast", "reference")
#: ``models.kernel.OPS`` (``FUSED_OPS + COLLECTIVE_OPS``), ``SCHEDULES``, ``MECHANISMS``
KERNEL_OPS = ("gemm", "ag+gemm", "gemm+rs", "gemm+ar", "all-reduce", "all-gather", "reduce-scatter", "all-to-all")
#: ``models.kernel_workloads.WORKLOADS`` (ParallelKittens section 4 workloads)
KERNEL_WORKLOADS = ("ring-attention", "ulysses", "moe-dispatch")
KERNEL_SCHEDULES = ("intra", "inter")
KERNEL_MECHANISMS = ("ce", "tma", "reg")
#: ``kernel_presets.kernel_preset_names()``
KERNEL_PRESETS = ("b200", "h100", "h200", "h200-measured", "nuna-table2")
