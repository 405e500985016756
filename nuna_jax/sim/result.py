"""What a simulation returns, and the error it raises instead of a partial answer."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["SimResult", "SimulationError", "latency_stats_ns"]


class SimulationError(RuntimeError):
    """A run lost a flit or could not finish within its time bound (never a partial answer)."""


class SimResult(NamedTuple):
    """Outcome of one complete simulation (all times integer ps, from t = 0).

    completion_ps   delivery time of the last flit (docs/model.md, "Completion time")
    issue_ps [N]    stage-0 service start (issue) of every flit, global flit id order
    deliver_ps [N]  delivery time of every flit
    store_ps [N]    store issue time (docs/model.md stage 3); -1 for background flits
    flit_flow [N]   flow row of every flit (rows >= n_traffic_flows are background)
    busy_ps [R]     total service time of every global resource (path.resource_layout)
    flits_injected, flits_delivered, flit_hops (resource services, CU issue included)
    n_traffic_flows rows of the Traffic (the rest are background flows)
    engine, wall_s  the engine's name; seconds of the whole engine call (packing the program
                    and loading the compiled loop included)
    background_complete  False when the run stopped at the last traffic delivery
                    (``stop_after_traffic``): background flits may be unfinished
    loop_s          seconds in the event loop alone (what ``flit_hops / loop_s`` rates measure)
    loop_cpu_s      the event loop's CPU seconds (its thread's; fast engine, else 0): the rate on a
                    shared machine, where wall seconds count other jobs' turns too
    trace           None, or the recorded services for a timeline (:mod:`nuna_jax.sim.trace`):
                    ``flit``, ``resource``, ``start_ps``, ``service_ps`` (int64 arrays) and
                    ``complete_before_ps`` (None: every service; else every service that starts
                    before that time, ps, and some after it)
    """

    completion_ps: int
    issue_ps: Any
    deliver_ps: Any
    store_ps: Any
    flit_flow: Any
    busy_ps: Any
    flits_injected: int
    flits_delivered: int
    flit_hops: int
    n_traffic_flows: int
    engine: str
    wall_s: float
    background_complete: bool = True
    loop_s: float = 0.0
    trace: Any = None
    loop_cpu_s: float = 0.0

    @property
    def completion_ns(self) -> float:
        return self.completion_ps / 1000.0

    @property
    def traffic_mask(self):
        return np.asarray(self.flit_flow) < self.n_traffic_flows

    @property
    def traffic_completion_ps(self) -> int:
        """Delivery of the last *traffic* flit (ignores background flows)."""
        d = np.asarray(self.deliver_ps)[self.traffic_mask]
        return int(d.max()) if d.size else 0

    @property
    def store_latency_ps(self):
        """One-way store latency of every traffic flit (store issue -> delivery), ps."""
        m = self.traffic_mask
        return np.asarray(self.deliver_ps)[m] - np.asarray(self.store_ps)[m]

    def summary(self) -> dict:
        """JSON-ready summary (the ``nuna-jax simulate`` keys)."""
        return {
            "completion_ns": self.traffic_completion_ps / 1000.0,
            "store_latency_ns": latency_stats_ns(self.store_latency_ps),
            "flits_injected": int(self.flits_injected),
            "flits_delivered": int(self.flits_delivered),
            "flit_hops": int(self.flit_hops),
            "engine": self.engine,
            "wall_s": float(self.wall_s),
            "sim_s": float(self.loop_s),
        }


def latency_stats_ns(lat_ps) -> dict:
    """mean / p50 / p99 / max of integer-ps latencies, in ns (nearest-rank percentiles)."""
    a = np.sort(np.asarray(lat_ps, dtype=np.int64))
    if a.size == 0:
        return {"mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0, "count": 0}

    def rank(q):  # nearest-rank percentile: smallest value with >= q of the samples at or below
        return float(a[max(0, int(np.ceil(q * a.size)) - 1)]) / 1000.0

    return {"mean": float(a.mean()) / 1000.0, "p50": rank(0.50), "p99": rank(0.99),
            "max": float(a[-1]) / 1000.0, "count": int(a.size)}
