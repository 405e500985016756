"""One entry point from "collective + policy" to traffic, shared by the CLIs
(place, estimate, simulate): plan -> placement -> traffic.

>>> from nuna_jax.presets import preset
>>> sc = make_scenario(preset("table2"), collective="allgather", size_bytes=10**6, policy="nap+nar")
>>> sc.traffic.total_bytes == 7 * 10**6
True
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from .msccl import load_msccl
from .nar import max_useful_granularity
from .placement import POLICIES, Placement, PolicyOptions, canonical_policy, place, policy_parts
from .plans import ALGORITHMS, COLLECTIVES, Plan, make_plan
from .system import System
from .lowering import build_traffic
from .traffic import Traffic

__all__ = ["Scenario", "make_scenario", "generated_plan", "search_nar_granularity", "POLICIES",
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


def search_nar_granularity(system: System, plan: Plan, policy: str,
                           options: PolicyOptions | None = None) -> tuple[Placement, Traffic]:
    """NAP's choice of NAR granularity (section 4: NAP "decides (i) the best NAR
    granularity"; 4.1.2: "exhaustively try all available NAR granularities").

    Every granularity ``1 .. 2 * mesh_rows`` (1 = one domain of all ports, i.e.
    no NAR) is placed, lowered and estimated with the analytical path model
    (``models.contention.estimate_ns``, every candidate in one compiled call:
    ``models.contention.estimate_many``); the fastest is kept (ties: the smaller
    granularity).  Returns the chosen placement (its ``granularity_search``
    holds every candidate's estimate) and its traffic.
    """
    from .models.contention import estimate_many

    opts = options or PolicyOptions()
    gs = range(1, min(max_useful_granularity(system), system.n_io_ports) + 1)
    cands = []
    for g in gs:
        pl = place(system, plan, policy, dataclasses.replace(opts, nar_granularity=g))
        cands.append((pl, build_traffic(system, plan, pl)))
    # the estimate alone (what ``evaluate`` reports as time_ns): a smaller program to compile
    costs = dict(zip(gs, map(float, estimate_many(system, [t for _, t in cands]))))
    best = None
    for g, (pl, t) in zip(gs, cands):
        if best is None or costs[g] < best[0]:
            best = (costs[g], pl, t)
    pl = dataclasses.replace(best[1], granularity_search=costs)
    return pl, best[2]


def generated_plan(system: System, collective: str, size_bytes: int, *, algorithm: str = "direct",
                   tbs_per_gpu: int | None = None, elem_bytes: int = 2, slot_align_bytes: int | None = None):
    """The generated plan every scenario uses (:func:`plans.make_plan` for ``system.n_gpus``), per-GPU
    slots aligned to the system's page unless ``slot_align_bytes`` says otherwise (docs/policies.md,
    "Modelling choices", D3)."""
    align = int(system.page_bytes) if slot_align_bytes is None else int(slot_align_bytes)
    return make_plan(collective, system.n_gpus, size_bytes, algorithm=algorithm, tbs_per_gpu=tbs_per_gpu,
                     elem_bytes=elem_bytes, slot_align_bytes=align)


def make_scenario(system: System, *, collective: str | None = None, plan_file: str | None = None,
                  size_bytes: int, policy: str, tbs_per_gpu: int | None = None,
                  nar_granularity: int | None = None, algorithm: str = "direct",
                  elem_bytes: int = 2, options: PolicyOptions | None = None,
                  slot_align_bytes: int | None = None) -> Scenario:
    """Build plan, placement and traffic.

    Exactly one of ``collective`` (a generated plan, :func:`plans.make_plan`)
    or ``plan_file`` (an MSCCL XML file, :func:`msccl.load_msccl`) is given;
    ``size_bytes`` is the collective's per-GPU buffer size (plans module
    doc).  ``tbs_per_gpu`` applies to generated plans only (default
    ``n_gpus - 1``).  ``nar_granularity`` forces the granularity; otherwise
    the NAP policies search it (:func:`search_nar_granularity`, unless
    ``options.nap_granularity == "default"``) and the others use
    :func:`placement.default_nar_granularity`.  ``options``: the modelling
    choices (:class:`placement.PolicyOptions`).  ``slot_align_bytes``: the
    alignment of per-GPU slots in generated plans (default: the system's
    page, docs/policies.md "Modelling choices", D3).
    """
    opts = options or PolicyOptions()
    if nar_granularity is not None:
        opts = dataclasses.replace(opts, nar_granularity=int(nar_granularity))
    align = int(system.page_bytes) if slot_align_bytes is None else int(slot_align_bytes)
    if (collective is None) == (plan_file is None):
        raise ValueError("give exactly one of collective or plan_file (--collective or --plan)")
    name = canonical_policy(policy)  # fail early on an unknown name
    if plan_file is not None:
        if tbs_per_gpu is not None:
            raise ValueError("--tbs applies to generated plans; an MSCCL file fixes its threadblocks")
        plan = load_msccl(plan_file, size_bytes, elem_bytes=elem_bytes)
        if plan.n_gpus != system.n_gpus:
            raise ValueError(f"plan file {plan_file!r} is for {plan.n_gpus} GPUs but the system has "
                             f"n_gpus={system.n_gpus} (use --gpus {plan.n_gpus})")
    else:
        plan = generated_plan(system, collective, size_bytes, algorithm=algorithm, tbs_per_gpu=tbs_per_gpu,
                              elem_bytes=elem_bytes, slot_align_bytes=align)
    if (opts.nar_granularity is None and opts.nap_granularity == "search"
            and policy_parts(name)[0] == "nap"):
        pl, t = search_nar_granularity(system, plan, name, opts)
        return Scenario(system, plan, pl, t)
    pl = place(system, plan, name, opts)
    return Scenario(system, plan, pl, build_traffic(system, plan, pl))
