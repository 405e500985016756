"""The NUNA path model over ``Traffic``: latency, busy times, bound, estimate (docs/analytical.md).

Built on :mod:`nuna_jax.path` (docs/model.md, "The path of a flit"), one idea per file:

* :mod:`.tables` — the resource tables (per-flow latency; per (phase, resource) busy time, earliest
  arrival, least remaining time, longest latency; the CU window), the flow weight, padding;
* :mod:`.stage_engine` / :mod:`.runs_engine` — the two engines that build them (reference / fast),
  :mod:`.intervals` — the runs engine's interval primitives;
* :mod:`.objective` — lower bound, estimate and smooth estimate as pure functions of the tables;
* :mod:`.background` — a concurrent kernel's on-chip flows (``sim.Background``) as load on the
  resources the traffic uses (``background=`` of the estimates; docs/analytical.md 2.7);
* :mod:`.segplan` — segment reductions over a structure computed once per traffic (hardware sweeps:
  :func:`sweep_plans`, gathers instead of scatters, same numbers);
* :mod:`.api` — the public jitted functions and :func:`path_costs` (pure; ``jit``/``vmap``/``grad``);
* :mod:`.report` — breakdown, ``evaluate``, shape buckets, Traffic stacking, ``estimate_many`` (one
  compiled call for a list of tables).

Engine and chunk size are explicit static arguments (``engine="runs"|"stages"``, ``chunk_flows``).
"""

from .background import BackgroundLoad, background_load
from .api import (TEMPERATURE_NS, WEIGHT_TEMPERATURE_NS, PathCosts, analyze, estimate_ns, flow_latency_ns,
                  lower_bound_ns, path_costs, resource_busy_ns, resource_tables, smooth_estimate_ns,
                  window_busy_ns)
from .report import (MAX_BATCH_ROWS, MIN_BATCH_ROWS, batch_bucket, batch_rows, breakdown, bucket_rows,
                     estimate_many, evaluate, pad_flows, stack_traffic)
from .runs_engine import sweep_plans
from .segplan import SegPlan
from .tables import (CHUNK_FLOWS, ENGINES, KINDS, Tables, pad_traffic, resolve_n_phases, resource_kind_index,
                     resource_service_ns)

__all__ = [
    "KINDS", "ENGINES", "CHUNK_FLOWS", "TEMPERATURE_NS", "WEIGHT_TEMPERATURE_NS", "Tables", "PathCosts",
    "resolve_n_phases", "resource_kind_index", "resource_service_ns", "resource_tables", "flow_latency_ns",
    "resource_busy_ns", "window_busy_ns", "lower_bound_ns", "estimate_ns", "smooth_estimate_ns",
    "path_costs", "analyze", "breakdown", "bucket_rows", "pad_flows", "pad_traffic", "stack_traffic",
    "evaluate", "estimate_many", "batch_bucket", "batch_rows", "MAX_BATCH_ROWS",
    "MIN_BATCH_ROWS", "sweep_plans", "SegPlan", "BackgroundLoad", "background_load",
]
