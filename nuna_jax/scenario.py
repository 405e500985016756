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
from .plans import ALGORITHMS, COLLECTIVES, Plan, canonical_collective, make_plan
from .system import System
from .lowering import build_traffic
from .traffic import Traffic

__all__ = ["Scenario", "make_scenario", "generated_plan", "search_nar_granularity", "tbs_candidates",
           "TBS_BEST_MULTIPLES", "TBS_BEST_MAX", "POLICIES", "COLLECTIVES", "ALGORITHMS"]

# "the best-performing number of threadblocks" (NUNA 5.1): the candidates are these multiples of
# one threadblock per peer, up to the paper's high-parallelization count (1,008 per GPU, 6.5)
TBS_BEST_MULTIPLES = (1, 4, 16)
TBS_BEST_MAX = 1008


class Scenario(NamedTuple):
    system: System
    plan: Plan
    placement: Placement
    traffic: Traffic
    tbs_search: dict | None = None       # {threadblocks per GPU: estimate_ns} when tbs_per_gpu="best"
    tbs_chosen_by: str = "fixed"         # "search" (best), "fixed" (given), "default" (n_gpus - 1), "plan" (MSCCL)

    def describe(self) -> dict:
        """JSON-ready summary of what was built (plan, policy, routing, traffic size, threadblock count)."""
        out = {"plan": self.plan.describe(), "placement": self.placement.describe()}
        out["traffic"] = {"n_flows": self.traffic.n_flows, "flits": self.traffic.total_flits,
                          "bytes": self.traffic.total_bytes}
        out["tbs_per_gpu"] = int(self.plan.tbs_per_gpu.max(initial=0))
        out["tbs_chosen_by"] = self.tbs_chosen_by
        out["tbs_search_ns"] = (None if self.tbs_search is None else
                                {str(k): float(v) for k, v in self.tbs_search.items()})
        return out


def tbs_candidates(n_gpus: int, algorithm: str = "direct",
                   multiples: tuple[int, ...] = TBS_BEST_MULTIPLES) -> tuple[int, ...]:
    """Threadblock counts per GPU that ``tbs_per_gpu="best"`` tries (NUNA 5.1: "the best-performing
    number of threadblocks"): ``k x (n_gpus - 1)`` for ``k`` in ``multiples`` (default
    :data:`TBS_BEST_MULTIPLES`), those up to :data:`TBS_BEST_MAX` (8 GPUs: 7, 28, 112; 64 GPUs:
    63, 252, 1008; 128 GPUs: 127, 508), at least one."""
    from .plans import default_tbs_per_gpu
    base = default_tbs_per_gpu(n_gpus, algorithm)
    out = [k * base for k in sorted(multiples) if k * base <= max(TBS_BEST_MAX, base)]
    return tuple(dict.fromkeys(out))


def _estimate(system: System, t: Traffic) -> float:
    """The path model's estimate (``evaluate``'s ``time_ns``), ns."""
    from .models.contention import bucket_rows, estimate_ns, pad_flows, resolve_n_phases
    return float(estimate_ns(system, pad_flows(t, bucket_rows(t.n_flows)), n_phases=resolve_n_phases(t)))


def search_nar_granularity(system: System, plan: Plan, policy: str,
                           options: PolicyOptions | None = None) -> tuple[Placement, Traffic]:
    """NAP's choice of NAR granularity (section 4: NAP "decides (i) the best NAR
    granularity"; 4.1.2: "exhaustively try all available NAR granularities").

    Every granularity ``1 .. 2 * mesh_rows`` (1 = one domain of all ports, i.e.
    no NAR) is placed, lowered and estimated with the analytical path model
    (``models.contention.estimate_ns``, the candidates in one compiled call:
    ``models.contention.estimate_many``); the fastest is kept (ties: the smaller
    granularity).  Returns the chosen placement (its ``granularity_search``
    holds every candidate's estimate) and its traffic.

    Memory: where ``estimate_many`` would estimate one table per call anyway (a candidate of more
    than half ``MAX_BATCH_ROWS`` rows), each candidate is estimated alone as soon as it is built
    (``estimate_many`` of that one table, padded to its own row bucket: the value the sweep's build
    workers compute, ``sweep.trafficpool.nap_candidate``) and only the fastest is kept; so are the
    candidates built before the first such one.  (Until
    2026-12-02 a streamed candidate was padded to the longest table so far and the earlier ones rebuilt
    when that grew; zero rows change no estimate on a CPU: the 12 candidates of the 64-GPU 64 MB
    1,008-threadblock All-Gather bit for bit, ``benchmarks/out/profile_fig9_one_*``, at a third of
    the rows estimated.)
    """
    from .models.contention import batch_rows, estimate_many
    from .models.contention import report

    opts = options or PolicyOptions()
    gs = range(1, min(max_useful_granularity(system), system.n_io_ports) + 1)
    max_rows = int(report.MAX_BATCH_ROWS)

    def build(g):
        pl = place(system, plan, policy, dataclasses.replace(opts, nar_granularity=g))
        return pl, build_traffic(system, plan, pl)

    held, costs, best = {}, {}, None

    def consider(g, pl, t, cost):
        nonlocal best
        costs[g] = cost
        if best is None or (cost, g) < (best[0], best[1]):
            best = (cost, g, pl, t)

    def estimate(items):   # estimate_many of these candidates, {g: (placement, traffic)}
        for k, c in zip(items, estimate_many(system, [t for _, t in items.values()], max_batch_rows=max_rows)):
            consider(k, *items[k], float(c))

    streamed = False
    for g in gs:
        pl, t = build(g)
        if streamed or max_rows // batch_rows(t.n_flows) <= 1:
            for k, v in list(held.items()) + [(g, (pl, t))]:   # from the first large one on: alone
                estimate({k: v})
            held.clear()
            streamed = True
        else:
            held[g] = (pl, t)
    if held:   # the whole list in estimate_many's batches (the usual case)
        estimate(held)
    pl = dataclasses.replace(best[2], granularity_search=dict(sorted(costs.items())))
    return pl, best[3]


def generated_plan(system: System, collective: str, size_bytes: int, *, algorithm: str = "direct",
                   tbs_per_gpu: int | None = None, elem_bytes: int = 2, slot_align_bytes: int | None = None):
    """The generated plan every scenario uses (:func:`plans.make_plan` for ``system.n_gpus``), per-GPU
    slots aligned to the system's page unless ``slot_align_bytes`` says otherwise (docs/policies.md,
    "Modelling choices", D3)."""
    align = int(system.page_bytes) if slot_align_bytes is None else int(slot_align_bytes)
    return make_plan(collective, system.n_gpus, size_bytes, algorithm=algorithm, tbs_per_gpu=tbs_per_gpu,
                     elem_bytes=elem_bytes, slot_align_bytes=align)


def make_scenario(system: System, *, collective: str | None = None, plan_file: str | None = None,
                  size_bytes: int, policy: str, tbs_per_gpu: int | str | None = None,
                  nar_granularity: int | None = None, algorithm: str = "direct",
                  elem_bytes: int = 2, options: PolicyOptions | None = None,
                  slot_align_bytes: int | None = None, limits=None) -> Scenario:
    """Build plan, placement and traffic.

    Exactly one of ``collective`` (a generated plan, :func:`plans.make_plan`)
    or ``plan_file`` (an MSCCL XML file, :func:`msccl.load_msccl`) is given;
    ``size_bytes`` is the collective's per-GPU buffer size (plans module
    doc).  ``tbs_per_gpu`` applies to generated plans only: an integer, ``None``
    (one per peer, ``n_gpus - 1``) or ``"best"``: every count of
    :func:`tbs_candidates` is built and the one with the smallest path-model
    estimate kept (ties: fewer threadblocks; NUNA 5.1's "best-performing number
    of threadblocks", chosen per policy; the CLI's default).  ``nar_granularity`` forces the granularity; otherwise
    the NAP policies search it (:func:`search_nar_granularity`, unless
    ``options.nap_granularity == "default"``) and the others use
    :func:`placement.default_nar_granularity`.  ``options``: the modelling
    choices (:class:`placement.PolicyOptions`).  ``slot_align_bytes``: the
    alignment of per-GPU slots in generated plans (default: the system's
    page, docs/policies.md "Modelling choices", D3).  ``limits`` (default :func:`limits.active`):
    the system and the plan's work (threadblocks, steps, pages) are checked before anything is
    built, and every call inside uses the same limits (``WorkLimitError``).  Where the scenario
    store is on (:mod:`nuna_jax.cache`: the command line, the experiments), a scenario built
    before from the same inputs and model code is read back instead of rebuilt.
    """
    from . import cache
    from .limits import active, using
    lim = active(limits)
    args = dict(collective=collective, plan_file=plan_file, size_bytes=size_bytes, policy=policy,
                tbs_per_gpu=tbs_per_gpu, nar_granularity=nar_granularity, algorithm=algorithm,
                elem_bytes=elem_bytes, options=options, slot_align_bytes=slot_align_bytes)
    key = cache.scenario_key(system, args, lim.factor) if cache.scenarios_on() else None
    hit = None if key is None else cache.load_scenario(key)
    if hit is not None:
        return hit
    with using(lim):
        sc = _make_scenario(system, **args, lim=lim)
    if key is not None:
        cache.store_scenario(key, sc)
    return sc


def _make_scenario(system, *, collective, plan_file, size_bytes, policy, tbs_per_gpu, nar_granularity, algorithm,
                   elem_bytes, options, slot_align_bytes, lim) -> Scenario:
    from .limits import WorkLimitError, check_traffic_work, generated_plan_work, plan_work
    lim.check_system(system, f"make_scenario: system {system.name!r}")
    opts = options or PolicyOptions()
    if nar_granularity is not None:
        opts = dataclasses.replace(opts, nar_granularity=int(nar_granularity))
    align = int(system.page_bytes) if slot_align_bytes is None else int(slot_align_bytes)
    if (collective is None) == (plan_file is None):
        raise ValueError("give exactly one of collective or plan_file (--collective or --plan)")
    name = canonical_policy(policy)  # fail early on an unknown name
    best = isinstance(tbs_per_gpu, str)
    if best and tbs_per_gpu.strip().lower() != "best":
        raise ValueError(f"tbs_per_gpu must be an integer >= 1, None or 'best', got {tbs_per_gpu!r}")
    if best and plan_file is None:
        costs, sc_best, err = {}, None, None
        for tbs in tbs_candidates(system.n_gpus, algorithm):
            try:
                # built here, not through the scenario store: the chosen one is stored once, as "best"
                sc = _make_scenario(system, collective=collective, plan_file=None, size_bytes=size_bytes,
                                    policy=name, tbs_per_gpu=tbs, nar_granularity=None, algorithm=algorithm,
                                    elem_bytes=elem_bytes, options=opts, slot_align_bytes=slot_align_bytes, lim=lim)
            except WorkLimitError:    # over the work limits: the whole call is, not just this candidate
                raise
            except ValueError as e:   # more threadblocks than the CUs can hold: not a candidate
                err = e
                continue
            costs[tbs] = (min(sc.placement.granularity_search.values()) if sc.placement.granularity_search
                          else _estimate(system, sc.traffic))
            if sc_best is None or costs[tbs] < costs[sc_best[0]]:
                sc_best = (tbs, sc)
        if sc_best is None:
            raise err
        return sc_best[1]._replace(tbs_search=costs, tbs_chosen_by="search")
    if plan_file is not None:
        if tbs_per_gpu is not None and not best:
            raise ValueError("--tbs applies to generated plans; an MSCCL file fixes its threadblocks")
        plan = load_msccl(plan_file, size_bytes, elem_bytes=elem_bytes)
        if plan.n_gpus != system.n_gpus:
            raise ValueError(f"plan file {plan_file!r} is for {plan.n_gpus} GPUs but the system has "
                             f"n_gpus={system.n_gpus} (use --gpus {plan.n_gpus})")
        check_traffic_work(lim, plan_work(plan), system, f"plan file {plan_file!r} at {size_bytes} B", flits=False)
    else:
        if collective is not None and not isinstance(tbs_per_gpu, str):
            coll = canonical_collective(collective)
            check_traffic_work(lim, generated_plan_work(coll, str(algorithm).strip().lower(), system.n_gpus,
                                                        tbs_per_gpu, size_bytes), system,
                               f"make_scenario({coll}, {size_bytes} B on {system.n_gpus} GPUs)", flits=False)
        plan = generated_plan(system, collective, size_bytes, algorithm=algorithm, tbs_per_gpu=tbs_per_gpu,
                              elem_bytes=elem_bytes, slot_align_bytes=align)
    if (opts.nar_granularity is None and opts.nap_granularity == "search"
            and policy_parts(name)[0] == "nap"):
        pl, t = search_nar_granularity(system, plan, name, opts)
    else:
        pl = place(system, plan, name, opts)
        t = build_traffic(system, plan, pl)
    by = "plan" if plan_file is not None else ("default" if tbs_per_gpu is None else "fixed")
    return Scenario(system, plan, pl, t, tbs_chosen_by=by)
