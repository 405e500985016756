"""Candidate tables of the placement search and the assembly of a discrete
placement from one candidate index per threadblock (issue 12, items 1 and 4).

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
* Stack budget (``placement.stack_capacity_pages``): pages are placed as
  Algorithm 1 places them (section 4.2.2): threadblocks in logical-allocation
  order, steps in order, the source chunk on the stacks nearest the chosen
  CU, the destination chunk on the stacks nearest the domain's (ingress)
  ports, each page on the first stack in that order with budget left; a page
  keeps the stack of the first chunk that touches it.

So every assembled placement satisfies both budgets by construction, and the
all-zero choice reproduces NAP+NAR.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..nar import nar_domains
from ..placement import (Placement, cu_demand, default_nar_granularity, logical_allocation, place,
                         stack_capacity_pages)
from ..plans import Plan
from ..system import System, cu_router, hop_count, stack_router

__all__ = ["Candidates", "make_candidates", "assemble", "domain_offsets", "check_capacities"]


class Candidates(NamedTuple):
    """Per-threadblock candidate table (numpy).

    domain: ``[n_tbs, C]`` NAR domain of each candidate.
    cu: ``[n_tbs, C]`` preferred CU of each candidate (CU id within the GPU).
    router: ``[n_tbs, C]`` router of that CU.
    granularity: the routing granularity ``g`` of every candidate.
    active: ``[n_tbs]`` threadblocks with steps (the others stay unplaced).
    order: threadblocks in Algorithm 1's logical-allocation order.
    """

    domain: np.ndarray
    cu: np.ndarray
    router: np.ndarray
    granularity: int
    active: np.ndarray
    order: np.ndarray

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
                      int(g), active, order)
    return cand, nap


def _stack_order_from(s: System, routers: np.ndarray) -> np.ndarray:
    """``[len(routers), n_stacks]`` stacks by hop distance from each router (ties: lower id)."""
    d = hop_count(s, np.asarray(routers)[:, None], stack_router(s)[None, :])
    ids = np.broadcast_to(np.arange(s.n_hbm_stacks), d.shape)
    return np.lexsort((ids, d), axis=1)


def _place_pages(ps, rem, gpu: int, addr: int, nbytes: int, order, page_bytes: int) -> None:
    """First-come page placement of bytes ``[addr, addr+nbytes)`` of ``gpu`` on ``order``'s first stacks with room."""
    p0, p1 = addr // page_bytes, (addr + nbytes - 1) // page_bytes
    seg = ps[gpu, p0:p1 + 1]
    free = np.flatnonzero(seg < 0)
    if free.size == 0:
        return
    r = rem[gpu]
    upto = np.minimum(np.concatenate([[0], np.cumsum(r[order])]), free.size)
    cnt = np.diff(upto)
    if upto[-1] != free.size:
        raise AssertionError("stack budget exhausted")  # cannot happen: budget * stacks >= pages
    seg[free] = np.repeat(order, cnt)
    r[order] -= cnt


def assemble(s: System, plan: Plan, cand: Candidates, choice, *, policy: str = "OPT") -> Placement:
    """A feasible discrete placement from ``choice[t]`` (candidate index per threadblock), repaired."""
    choice = np.asarray(choice, np.int64)
    if choice.shape != (plan.n_tbs,) or choice.min(initial=0) < 0 or choice.max(initial=0) >= cand.n_candidates:
        raise ValueError(f"choice must be {plan.n_tbs} integers in [0, {cand.n_candidates})")
    dom = nar_domains(s, cand.granularity)
    demand = cu_demand(s, plan)
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
    # pages, Algorithm 1's rule (section 4.2.2), first come first served
    ps = np.full((plan.n_gpus, plan.address_pages(s.page_bytes)), -1, np.int16)
    srem = np.full((plan.n_gpus, s.n_hbm_stacks), cap, np.int64)
    near_cu = _stack_order_from(s, cu_router(s))                         # [n_cus, St]
    saddr, daddr = plan.src_addr(s.page_bytes), plan.dst_addr(s.page_bytes)
    bounds = np.searchsorted(plan.step_tb, np.arange(plan.n_tbs + 1))
    pb = int(s.page_bytes)
    for tb in cand.order.tolist():
        g = int(plan.tb_gpu[tb])
        local, remote = near_cu[tb_cu[tb]], dom.stack_order[tb_dom[tb]]
        for r in range(bounds[tb], bounds[tb + 1]):
            nb = int(plan.nbytes[r])
            _place_pages(ps, srem, g, int(saddr[r]), nb, local, pb)
            _place_pages(ps, srem, int(plan.dst_gpu[r]), int(daddr[r]), nb, remote, pb)
    tb_dom = np.where(cand.active, tb_dom, 0)
    return Placement(policy=policy, tb_cu=tb_cu, tb_domain=tb_dom.astype(np.int64), page_stack=ps,
                     domains=dom, placement_granularity=cand.granularity, cu_demand=demand,
                     cu_capacity=int(s.max_outstanding_per_cu), stack_capacity_pages=cap,
                     groups=None, group_domain=None, tb_gpu=plan.tb_gpu)


def check_capacities(s: System, plan: Plan, pl: Placement) -> dict:
    """Largest CU load (requests) and stack load (pages) against their budgets; ``ok`` if both hold."""
    cu = pl.cu_load(plan.n_gpus, s.n_cus)
    st = pl.stack_pages(s.n_hbm_stacks)
    placed = bool(np.all(pl.tb_cu[np.bincount(plan.step_tb, minlength=plan.n_tbs) > 0] >= 0))
    return {"cu_max_requests": int(cu.max()), "cu_capacity": int(pl.cu_capacity),
            "stack_max_pages": int(st.max()), "stack_capacity_pages": int(pl.stack_capacity_pages),
            "all_placed": placed,
            "ok": bool(cu.max() <= pl.cu_capacity and st.max() <= pl.stack_capacity_pages and placed)}
