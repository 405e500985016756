"""The exact discrete flit simulator (docs/simulator.md).

``simulate(system, traffic)`` runs every 256 B flit of a ``Traffic`` through
the path of docs/model.md in integer picoseconds, FCFS on every resource,
and returns a :class:`SimResult` (completion time, per-flit store latency,
per-resource busy time, flit counts).  Two engines with the same semantics:
a plain reference event loop (``reference``) and a compiled one (``fast``).
"""

from .api import ENGINES, simulate, simulate_batch
from .background import Background, background_stages, gemm_background, make_background
from .kernel import HAVE_NUMBA
from .program import Program, compile_program, to_ps
from .reference import check_fcfs, run_reference
from .result import SimResult, SimulationError, latency_stats_ns

__all__ = [
    "simulate", "simulate_batch", "ENGINES", "SimResult", "SimulationError", "latency_stats_ns",
    "Program", "compile_program", "to_ps", "run_reference", "check_fcfs", "HAVE_NUMBA",
    "Background", "make_background", "background_stages", "gemm_background",
]
