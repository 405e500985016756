"""Candidate tables of the placement search and the assembly of a discrete
placement from one candidate index per threadblock.

A *candidate* of threadblock ``t`` is a NAR domain ``d`` (at one routing
granularity ``g``) together with a CU near that domain's ports.  Candidate 0
is Algorithm 1's own choice (NUNA section 4.2: the group's domain, the CU
Algorithm 1 picked); candidate ``c`` moves the threadblock to domain
``(d_0 + o_c) mod g`` (offsets 0, +1, -1, +2, -2, ...) onto the CU at the
same rank of that domain's search order (``Domains.cu_order``), so a
threadblock keeps its distance to the ports it uses.  CUs under one router
are interchangeable and are filled at assembly.

:func:`assemble` turns a choice vector (``choice[t]`` in ``[0, C)``) into a
normal :class:`~nuna_jax.placement.Placement`, repairing as it goes:

* CU budget (``max_outstanding_per_cu``): a threadblock takes its candidate
  CU if the CU's remaining requests fit its demand, else the first CU with
  room in its domain's search order (Algorithm 1's first fit).
* Stack budget (``placement.PageMap``, the anchor's ``stack_budget``): pages
  are placed as Algorithm 1 places them (section 4.2.2): threadblocks in
  logical-allocation order, steps in order, the source chunk on the stacks
  nearest the chosen CU, the destination chunk on the stacks nearest the
  domain's (ingress) ports, each page on the first stack in that order whose
  budget fits; every chunk served charges its stacks; a page keeps the stack
  of the first chunk that touches it.

So every assembled placement satisfies both budgets by construction, and the
all-zero choice reproduces NAP+NAR.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..nar import nar_domains
from ..placement import (PageMap, Placement, PolicyOptions, cu_demand, logical_allocation, place,
                         stack_capacity_pages, stack_domain, stack_order_by_router)
from ..plans import Plan
from ..geometry import cu_router
from ..system import System

__all__ = ["Candidates", "make_candidates", "assemble", "domain_offsets", "check_capacities"]


class Candidates(NamedTuple):
    """Per-threadblock candidate table (numpy).

    domain: ``[n_tbs, C]`` NAR domain of each candidate.
    cu: ``[n_tbs, C]`` preferred CU of each candidate (CU id within the GPU).
    router: ``[n_tbs, C]`` router of that CU.
    granularity: the routing granularity ``g`` of every candidate.
    active: ``[n_tbs]`` threadblocks with steps (the others stay unplaced).
    order: threadblocks in Algorithm 1's logical-allocation order.
    options: the anchor placement's modelling choices (CU sharing, NAR domain by address).
    address_routing: the anchor routes by the destination page's domain (D5).
    """

    domain: np.ndarray
    cu: np.ndarray
    router: np.ndarray
    granularity: int
    active: np.ndarray
    order: np.ndarray
    options: Any = None
    address_routing: bool = False

    @property
    def n_candidates(self) -> int:
        return int(self.domain.shape[1])


def domain_offsets(g: int, n: int) -> np.ndarray:
    """The first ``min(n, g)`` domain offsets 0, +1, -1, +2, -2, ... taken mod ``g`` (distinct)."""
    out: list[int] = []
    k = 0
    while len(out) < min(n, g):
        for o in ((k,) if k == 0 else (k, -k)):
            if o % g not in out and len(out) < min(n, g):
                out.append(o % g)
        k += 1
    return np.asarray(out, np.int64)


def make_candidates(s: System, plan: Plan, *, nar_granularity: int | None = None,
                    n_candidates: int = 4) -> tuple[Candidates, Placement]:
    """Candidate table and the NAP+NAR placement it is anchored on (candidate 0).

    ``n_candidates``: at most this many domains per threadblock (``<= g``).
    """
    if n_candidates < 1:
        raise ValueError(f"n_candidates must be >= 1, got {n_candidates}")
    if nar_granularity is None:   # NAP's own choice (section 4.1.2: it tries every granularity)
        from ..scenario import search_nar_granularity
        nap, _ = search_nar_granularity(s, plan, "nap+nar")
    else:
        nap = place(s, plan, "nap+nar", nar_granularity=nar_granularity)
    g = nap.routing_granularity
    dom = nap.domains
    offs = domain_offsets(g, n_candidates)
    active = nap.tb_cu >= 0
    # rank of each threadblock's CU in its domain's search order
    rank_of = np.argsort(dom.cu_order, axis=1)                    # [g, n_cus] CU -> rank
    d0 = nap.tb_domain
    cu0 = np.maximum(nap.tb_cu, 0)
    rank = rank_of[d0, cu0]
    domain = (d0[:, None] + offs[None, :]) % g                     # [n_tbs, C]
    cu = dom.cu_order[domain, rank[:, None]]
    cu[:, 0] = cu0                                                  # candidate 0: Algorithm 1 exactly
    groups = nap.groups if nap.groups is not None else logical_allocation(plan)
    order = np.concatenate([np.asarray(q, np.int64) for q in groups]) if groups else np.zeros(0, np.int64)
    cand = Candidates(domain.astype(np.int64), cu.astype(np.int64), cu_router(s)[cu].astype(np.int64),
                      int(g), active, order, nap.options or PolicyOptions(), nap.page_domain is not None)
    return cand, nap


def assemble(s: System, plan: Plan, cand: Candidates, choice, *, policy: str = "OPT") -> Placement:
    """A feasible discrete placement from ``choice[t]`` (candidate index per threadblock), repaired."""
    choice = np.asarray(choice, np.int64)
    if choice.shape != (plan.n_tbs,) or choice.min(initial=0) < 0 or choice.max(initial=0) >= cand.n_candidates:
        raise ValueError(f"choice must be {plan.n_tbs} integers in [0, {cand.n_candidates})")
    dom = nar_domains(s, cand.granularity)
    demand = cu_demand(s, plan, (cand.options or PolicyOptions()).cu_sharing)
    cap = stack_capacity_pages(s, plan)
    rows = np.arange(plan.n_tbs)
    want_cu, tb_dom = cand.cu[rows, choice], cand.domain[rows, choice]
    rem = np.full((plan.n_gpus, s.n_cus), s.max_outstanding_per_cu, np.int64)
    tb_cu = np.full(plan.n_tbs, -1, np.int64)
    for tb in cand.order.tolist():
        g, q, c = int(plan.tb_gpu[tb]), int(demand[tb]), int(want_cu[tb])
        if rem[g, c] < q:
            order = dom.cu_order[tb_dom[tb]]
            ok = np.flatnonzero(rem[g, order] >= q)
            if ok.size == 0:
                raise ValueError(f"cannot place threadblock {tb}: more threadblocks than the CUs can hold")
            c = int(order[ok[0]])
        tb_cu[tb] = c
        rem[g, c] -= q
    # pages, Algorithm 1's rule (section 4.2.2), first come first served; each page records the
    # domain of the threadblock that placed it (the NAR address segment, 4.2.3)
    budget = (cand.options or PolicyOptions()).stack_budget
    pages = PageMap(s, plan, cap, budget=budget)
    near_router = stack_order_by_router(s)                               # [n_routers, St]
    cr = cu_router(s)
    saddr, daddr = plan.src_addr(s.page_bytes), plan.dst_addr(s.page_bytes)
    bounds = np.searchsorted(plan.step_tb, np.arange(plan.n_tbs + 1))
    for tb in cand.order.tolist():
        g, d = int(plan.tb_gpu[tb]), int(tb_dom[tb])
        local, remote = near_router[cr[tb_cu[tb]]], dom.stack_order[d]
        for r in range(bounds[tb], bounds[tb + 1]):
            nb = int(plan.nbytes[r])
            pages.place(g, int(saddr[r]), nb, local, d)
            pages.place(int(plan.dst_gpu[r]), int(daddr[r]), nb, remote, d)
    tb_dom = np.where(cand.active, tb_dom, 0)
    page_domain = None
    if cand.address_routing:   # as placement.place: pages no threadblock placed take their stack's domain
        by_stack = stack_domain(s, dom)[np.maximum(pages.ps, 0)]
        page_domain = np.where(pages.pd >= 0, pages.pd, by_stack).astype(np.int16)
    return Placement(policy=policy, tb_cu=tb_cu, tb_domain=tb_dom.astype(np.int64), page_stack=pages.ps,
                     domains=dom, placement_granularity=cand.granularity, cu_demand=demand,
                     cu_capacity=int(s.max_outstanding_per_cu), stack_capacity_pages=cap,
                     groups=None, group_domain=None, tb_gpu=plan.tb_gpu, page_domain=page_domain,
                     options=cand.options, stack_budget=budget,
                     stack_windows=(pages.windows if budget == "served" else None))


def check_capacities(s: System, plan: Plan, pl: Placement) -> dict:
    """Largest CU load (requests) against its budget, and the stacks' budget.

    ``stack_budget="pages"``: the largest stack load (pages) against the fixed
    page budget.  ``"served"``: the budget is spent window by window
    (``placement.PageMap``), which holds by construction; the windows opened
    are reported.  ``ok`` if every budget holds and every threadblock is placed.
    """
    cu = pl.cu_load(plan.n_gpus, s.n_cus)
    st = pl.stack_pages(s.n_hbm_stacks)
    placed = bool(np.all(pl.tb_cu[np.bincount(plan.step_tb, minlength=plan.n_tbs) > 0] >= 0))
    stack_ok = pl.stack_budget != "pages" or st.max() <= pl.stack_capacity_pages
    return {"cu_max_requests": int(cu.max()), "cu_capacity": int(pl.cu_capacity),
            "stack_max_pages": int(st.max()), "stack_capacity_pages": int(pl.stack_capacity_pages),
            "stack_budget": pl.stack_budget,
            "stack_windows_max": None if pl.stack_windows is None else int(np.max(pl.stack_windows)),
            "all_placed": placed,
            "ok": bool(cu.max() <= pl.cu_capacity and stack_ok and placed)}
