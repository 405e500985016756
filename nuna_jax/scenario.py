"""One entry point from "collective + policy" to traffic, shared by the CLIs
(place, estimate, simulate): plan -> placement -> traffic.

>>> from nuna_jax.presets import preset
>>> sc = make_scenario(preset("table2"), collective="allgather", size_bytes=10**6, policy="nap+nar")
>>> sc.traffic.total_bytes == 7 * 10**6
True
"""

from __future__ import annotations

from typing import NamedTuple

from .msccl import load_msccl
from .placement import POLICIES, Placement, canonical_policy, place
from .plans import ALGORITHMS, COLLECTIVES, Plan, make_plan
from .system import System
from .lowering import build_traffic
from .traffic import Traffic

__all__ = ["Scenario", "make_scenario", "POLICIES",
           "COLLECTIVES", "ALGORITHMS"]


class Scenario(NamedTuple):
    system: System
    plan: Plan
    placement: Placement
    traffic: Traffic

    def describe(self) -> dict:
        """JSON-ready summary of what was built (plan, policy, routing, traffic size)."""
        out = {"plan": self.plan.describe(), "placement": self.placement.describe()}
        out["traffic"] = {"n_flows": self.traffic.n_flows, "flits": self.traffic.total_flits,
                          "bytes": self.traffic.total_bytes}
        return out


def make_scenario(system: System, *, collective: str | None = None, plan_file: str | None = None,
                  size_bytes: int, policy: str, tbs_per_gpu: int | None = None,
                  nar_granularity: int | None = None, algorithm: str = "direct",
                  elem_bytes: int = 2) -> Scenario:
    """Build plan, placement and traffic.

    Exactly one of ``collective`` (a generated plan, :func:`plans.make_plan`)
    or ``plan_file`` (an MSCCL XML file, :func:`msccl.load_msccl`) is given;
    ``size_bytes`` is the collective's per-GPU buffer size (plans module
    doc).  ``tbs_per_gpu`` applies to generated plans only (default
    ``n_gpus - 1``); ``nar_granularity`` defaults to
    :func:`placement.default_nar_granularity`.
    """
    if (collective is None) == (plan_file is None):
        raise ValueError("give exactly one of collective or plan_file (--collective or --plan)")
    canonical_policy(policy)  # fail early on an unknown name
    if plan_file is not None:
        if tbs_per_gpu is not None:
            raise ValueError("--tbs applies to generated plans; an MSCCL file fixes its threadblocks")
        plan = load_msccl(plan_file, size_bytes, elem_bytes=elem_bytes)
        if plan.n_gpus != system.n_gpus:
            raise ValueError(f"plan file {plan_file!r} is for {plan.n_gpus} GPUs but the system has "
                             f"n_gpus={system.n_gpus} (use --gpus {plan.n_gpus})")
    else:
        plan = make_plan(collective, system.n_gpus, size_bytes, algorithm=algorithm,
                         tbs_per_gpu=tbs_per_gpu, elem_bytes=elem_bytes)
    pl = place(system, plan, policy, nar_granularity=nar_granularity)
    return Scenario(system, plan, pl, build_traffic(system, plan, pl))
