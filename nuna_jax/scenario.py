"""One entry point from "collective + policy" to traffic, shared by the CLIs
(place, estimate, simulate, optimize): plan -> placement -> traffic.

>>> from nuna_jax.system import preset
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
from .traffic import Traffic, build_traffic

__all__ = ["Scenario", "make_scenario", "add_scenario_args", "scenario_from_args", "POLICIES",
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


def add_scenario_args(p) -> None:
    """Add --collective/--plan, --size, --policy, --tbs, --nar-granularity, --algorithm."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--collective", metavar="NAME",
                     help=f"generated collective: {', '.join(COLLECTIVES)}")
    src.add_argument("--plan", metavar="FILE.xml", help="an MSCCL XML algorithm file instead of --collective")
    p.add_argument("--size", required=True, metavar="SIZE",
                   help="per-GPU buffer size, e.g. 100kB, 1MB (decimal), 1MiB (binary)")
    p.add_argument("--policy", default="nap+nar", metavar="POLICY",
                   help=f"placement/routing: {', '.join(x.lower() for x in POLICIES)} (default nap+nar)")
    p.add_argument("--tbs", type=int, default=None, metavar="N",
                   help="threadblocks per GPU for generated plans (default: n_gpus - 1)")
    p.add_argument("--nar-granularity", type=int, default=None, metavar="G",
                   help="NAR domains (default: logical groups per GPU clamped to [2, 2*mesh_rows])")
    p.add_argument("--algorithm", default="direct", choices=ALGORITHMS,
                   help="generated plan algorithm (default direct, as in the paper)")


def scenario_from_args(args, system: System) -> Scenario:
    """Scenario from parsed CLI args (see :func:`add_scenario_args`).

    With ``--plan`` and no explicit ``--gpus``, the system takes the file's
    GPU count.
    """
    from .cliutil import parse_size
    size = parse_size(args.size)
    plan_file = getattr(args, "plan", None)
    if plan_file is not None and getattr(args, "gpus", None) is None:
        from .msccl import msccl_gpus
        n = msccl_gpus(plan_file)
        if n != system.n_gpus:
            system = system.replace(n_gpus=n)
    return make_scenario(system, collective=getattr(args, "collective", None), plan_file=plan_file,
                         size_bytes=size, policy=args.policy, tbs_per_gpu=args.tbs,
                         nar_granularity=args.nar_granularity, algorithm=args.algorithm)
