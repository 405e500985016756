"""Placement and routing policies: UA, NUMA, NAP (Algorithm 1), NAP*, each
with or without NAR (NUNA sections 4.1, 4.2 and 5.3; docs/policies.md).

A policy is a pure function ``(system, plan, options) -> Placement``.  The
``Placement`` holds

* ``tb_cu[t]``: the CU (id within its GPU) of threadblock ``t``;
* ``page_stack[gpu, page]``: the HBM stack of every 4 KiB page of every GPU's
  address space (``-1``: a page no step touches, left unplaced by NAP);
* the routing: ``domains`` (the NAR domains of the routing granularity;
  granularity 1 = the baseline hash over all ports) and ``tb_domain[t]``,
  the domain whose ports carry threadblock ``t``'s remote stores.

Resources (Algorithm 1, ``R_max``):

* CU: ``max_outstanding_per_cu`` (700) outstanding requests.  A threadblock
  needs ``min(700, ceil(bytes it sends / flit_bytes))`` of them (at most its
  whole traffic can be in flight, and never more than one CU's window).
* HBM stack: the bandwidth-delay product ``hbm_bw_bytes_per_ns *
  hbm_latency_ns`` (2500 B/ns x 150 ns = 375,000 B on Table 2), counted in
  whole pages (``floor``: 91 pages).  Taken alone this budget cannot hold a
  collective larger than ``n_hbm_stacks * BDP`` per GPU (6 MB on Table 2),
  while the paper runs up to 1 GB; a stack's page budget is therefore
  ``max(floor(BDP / page_bytes), ceil(pages of the GPU's address space /
  n_hbm_stacks))``, which always fits the plan and equals the BDP for the
  paper's latency-bound sizes.

Every policy checks both budgets; ``ValueError`` when a threadblock cannot be
placed (more threadblocks than the CUs can hold).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import numpy as np

from .nar import Domains, max_useful_granularity, nar_domains
from .plans import Plan
from .geometry import cu_router, hops as hop_count, port_router, router_die, stack_router
from .system import System

__all__ = [
    "POLICIES", "Placement", "PolicyOptions", "place", "canonical_policy", "policy_parts",
    "FIGURE11_ORDER", "logical_allocation", "algorithm1", "default_nar_granularity", "cu_demand",
    "stack_capacity_pages", "stack_budget_bytes", "STACK_BUDGET", "PageMap", "ua_cu_order", "round_robin_pages", "stack_domain", "CU_SHARING",
    "NAR_DOMAIN_BY", "NAP_GRANULARITY",
]

POLICIES = ("UA", "UA+NAR", "NUMA", "NUMA+NAR", "NAP", "NAP+NAR", "NAP*")
# the order of NUNA Figure 11: each placement without, then with NAR
FIGURE11_ORDER = ("UA", "UA+NAR", "NUMA", "NUMA+NAR", "NAP*", "NAP", "NAP+NAR")

# policy -> (threadblock placement, memory placement, NAR routing?)
_PARTS = {
    "UA": ("ua", "rr", False),
    "UA+NAR": ("ua", "rr", True),
    "NUMA": ("numa", "rr", False),
    "NUMA+NAR": ("numa", "rr", True),
    "NAP": ("nap", "nap", False),
    "NAP+NAR": ("nap", "nap", True),
    "NAP*": ("nap", "rr", False),
}


def canonical_policy(name: str) -> str:
    key = str(name).strip().upper().replace(" ", "")
    if key not in _PARTS:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(p.lower() for p in POLICIES)}")
    return key


def policy_parts(name: str) -> tuple[str, str, bool]:
    """(threadblock placement, memory placement, uses NAR) of a policy name."""
    return _PARTS[canonical_policy(name)]


CU_SHARING = ("spread", "requests")
NAR_DOMAIN_BY = ("address", "threadblock")
NAP_GRANULARITY = ("search", "default")
STACK_BUDGET = ("served", "pages")


@dataclasses.dataclass(frozen=True)
class PolicyOptions:
    """Modelling choices of the policies (docs/policies.md, "Modelling choices").

    nar_granularity: number of NAR domains (None: :func:`default_nar_granularity`).
        Used for routing by the ``+NAR`` policies and, by NAP / NAP+NAR / NAP*,
        as ``nar_max`` of Algorithm 1 (placement near the domains' ports).
        ``scenario.make_scenario`` lets NAP search it (section 4.1.2).
    cu_sharing: how many communication threadblocks a CU may host (D1).
        ``"spread"`` (default): at most ``ceil(threadblocks of the GPU / n_cus)``
        per CU (one per CU whenever the GPU has enough CUs); a threadblock
        occupies a CU (section 5.1: an operation "consumes CU resources (i.e.,
        blocking other threadblocks)"; 5.3: the dispatcher "prioritiz[es] free
        CUs").  ``"requests"``: only the 700-request budget counts, a
        threadblock needing ``min(700, ceil(bytes / flit))`` of it, so a small
        collective's threadblocks all fit one CU.
    nar_domain_by: what picks a flit's NAR domain (D5).  ``"address"``
        (default): the destination page's address segment (section 4.1.2:
        "The upper address bits determine the segment"; 4.2.3: "NAR domains
        are statically partitioned into per-stack regions"): a page placed by
        NAP carries the domain of the group that placed it, a round-robin page
        the domain whose region its stack backs (:func:`stack_domain`).  ``"threadblock"``: the domain of the
        threadblock (NAP's group domain; UA / NUMA: the domain nearest its CU).
    nap_granularity: how the NAP policies get ``nar_max`` when none is forced (D4).
        ``"search"`` (default; done by ``scenario.make_scenario``, which owns
        the cost model): every granularity 1 .. ``2 * mesh_rows`` is placed,
        lowered and estimated, the fastest kept (section 4: NAP "decides (i)
        the best NAR granularity"; 4.1.2: it "may exhaustively try all
        available NAR granularities (the algorithm runs quickly)").
        ``"default"``: :func:`default_nar_granularity`.
    stack_budget: how Algorithm 1 spends a stack's ``R_max`` (D6, :class:`PageMap`).
        ``"served"`` (default, section 4.2.2 as written): the bandwidth-delay
        product in bytes, decremented by every (threadblock, chunk) the stack
        serves, a new window opened when no stack fits.  ``"pages"``: a fixed
        page budget, each page counted once when placed.
    """

    nar_granularity: int | None = None
    cu_sharing: str = "spread"
    nar_domain_by: str = "address"
    nap_granularity: str = "search"
    stack_budget: str = "served"

    def __post_init__(self):
        if self.cu_sharing not in CU_SHARING:
            raise ValueError(f"cu_sharing must be one of {', '.join(CU_SHARING)}, got {self.cu_sharing!r}")
        if self.nar_domain_by not in NAR_DOMAIN_BY:
            raise ValueError(f"nar_domain_by must be one of {', '.join(NAR_DOMAIN_BY)}, "
                             f"got {self.nar_domain_by!r}")
        if self.stack_budget not in STACK_BUDGET:
            raise ValueError(f"stack_budget must be one of {', '.join(STACK_BUDGET)}, "
                             f"got {self.stack_budget!r}")
        if self.nap_granularity not in NAP_GRANULARITY:
            raise ValueError(f"nap_granularity must be one of {', '.join(NAP_GRANULARITY)}, "
                             f"got {self.nap_granularity!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class Placement:
    policy: str
    tb_cu: np.ndarray             # [n_tbs] CU id within the threadblock's GPU (-1: no steps)
    tb_domain: np.ndarray         # [n_tbs] routing domain of the threadblock
    page_stack: np.ndarray        # [n_gpus, n_pages] stack of each page (-1: unplaced)
    domains: Domains              # routing domains (granularity 1 = baseline hashing)
    placement_granularity: int    # nar_max used by Algorithm 1 (NAP, NAP*), else routing g
    cu_demand: np.ndarray         # [n_tbs] outstanding requests each threadblock needs
    cu_capacity: int              # R_max per CU (requests)
    stack_capacity_pages: int     # R_max per stack (pages)
    groups: Any = None            # logical groups (list of tb arrays, L order) if Algorithm 1 ran
    group_domain: Any = None      # [n_groups] domain of each group (Algorithm 1 round robin)
    tb_gpu: Any = None            # [n_tbs] GPU of each threadblock (copied from the plan)
    page_domain: Any = None       # [n_gpus, n_pages] NAR domain of each page (address routing), else None
    options: Any = None           # the PolicyOptions used
    granularity_search: Any = None  # {granularity: estimate_ns} when NAP chose its granularity
    stack_budget: str = "none"    # "served" / "pages": Algorithm 1's stack budget (PageMap); "none": round robin
    stack_windows: Any = None     # [n_gpus] bandwidth-delay windows opened per GPU ("served"), else None

    @property
    def routing_granularity(self) -> int:
        return self.domains.granularity

    def cu_load(self, n_gpus: int, n_cus: int) -> np.ndarray:
        """Outstanding requests placed on every (gpu, CU), ``[n_gpus, n_cus]``."""
        return _cu_load(self.tb_cu, self.tb_gpu, self.cu_demand, n_gpus, n_cus)

    def stack_pages(self, n_stacks: int) -> np.ndarray:
        """Pages placed on every (gpu, stack), ``[n_gpus, n_stacks]``."""
        ps = self.page_stack
        out = np.zeros((ps.shape[0], n_stacks), np.int64)
        for g in range(ps.shape[0]):
            v = ps[g]
            out[g] = np.bincount(v[v >= 0], minlength=n_stacks)
        return out

    def describe(self) -> dict:
        return {
            "policy": self.policy,
            "routing_granularity": int(self.routing_granularity),
            "placement_granularity": int(self.placement_granularity),
            "n_logical_groups": None if self.groups is None else len(self.groups),
            "cu_capacity_requests": int(self.cu_capacity),
            "stack_capacity_pages": int(self.stack_capacity_pages),
            "stack_budget": self.stack_budget,
            "stack_windows_max": (None if self.stack_windows is None else int(np.max(self.stack_windows))),
            "nar_granularity_chosen_by": "search" if self.granularity_search else "fixed",
            "nar_granularity_search_ns": (None if not self.granularity_search else
                                          {str(k): float(v) for k, v in self.granularity_search.items()}),
            "cu_sharing": None if self.options is None else self.options.cu_sharing,
            "nar_domain_by": (None if self.routing_granularity == 1 else
                              ("address" if self.page_domain is not None else "threadblock")),
            "max_tbs_per_cu": self._max_tbs_per_cu(),
        }

    def _max_tbs_per_cu(self) -> int:
        """Most threadblocks placed on one (GPU, CU); one count per (GPU, CU) pair, not per
        (GPU x 100000 + CU) index (0.8 GB of counts at 1,024 GPUs)."""
        used = self.tb_cu >= 0
        if self.tb_gpu is None or not np.any(used):
            return 0
        cu = self.tb_cu[used]
        return int(np.max(np.bincount(self.tb_gpu[used] * (int(cu.max()) + 1) + cu)))


def _cu_load(tb_cu, tb_gpu, demand, n_gpus, n_cus):
    ok = tb_cu >= 0
    flat = np.bincount(tb_gpu[ok] * n_cus + tb_cu[ok], weights=demand[ok], minlength=n_gpus * n_cus)
    return flat.reshape(n_gpus, n_cus).astype(np.int64)


# ---------------------------------------------------------------------------
# resources
# ---------------------------------------------------------------------------
def cu_demand(s: System, plan: Plan, cu_sharing: str = "spread") -> np.ndarray:
    """CU budget each threadblock takes, in outstanding requests (Algorithm 1, ``R_max`` of a CU).

    ``"requests"``: ``min(R_cu, ceil(bytes / flit))``, what it can have in flight.
    ``"spread"`` (default, :class:`PolicyOptions`): at least ``R_cu // k`` with
    ``k = ceil(threadblocks of its GPU / n_cus)``, so a CU hosts at most ``k``
    threadblocks (one per CU when the GPU has enough CUs).
    """
    flits = -(-plan.tb_bytes() // s.flit_bytes)
    req = np.minimum(flits, s.max_outstanding_per_cu).astype(np.int64)
    if cu_sharing == "requests":
        return req
    if cu_sharing != "spread":
        raise ValueError(f"cu_sharing must be one of {', '.join(CU_SHARING)}, got {cu_sharing!r}")
    has = np.bincount(plan.step_tb, minlength=plan.n_tbs) > 0
    per_gpu = np.bincount(plan.tb_gpu[has], minlength=plan.n_gpus)
    k = np.maximum(1, -(-per_gpu // s.n_cus))
    share = s.max_outstanding_per_cu // k
    return np.maximum(req, share[plan.tb_gpu]).astype(np.int64)


def stack_capacity_pages(s: System, plan: Plan) -> int:
    """Fixed page budget of a stack for ``stack_budget="pages"`` (D6):
    ``max(floor(BDP / page), ceil(address pages / n_stacks))``."""
    fair = -(-plan.address_pages(s.page_bytes) // s.n_hbm_stacks)
    return int(max(stack_budget_bytes(s) // s.page_bytes, fair, 1))


def stack_budget_bytes(s: System) -> int:
    """``R_max`` of an HBM stack (section 4.2.2): the bandwidth-delay product
    ``hbm_bw_bytes_per_ns x hbm_latency_ns`` in bytes (375,000 B on Table 2), at
    least one page (a page must fit one window)."""
    bdp = float(np.asarray(s.hbm_bw_bytes_per_ns)) * float(np.asarray(s.hbm_latency_ns))
    return int(max(round(bdp), int(s.page_bytes)))


def round_robin_pages(s: System, plan: Plan) -> np.ndarray:
    """Baseline memory: page ``p`` of every GPU on stack ``p mod n_hbm_stacks`` (section 5.3)."""
    n_pages = plan.address_pages(s.page_bytes)
    row = (np.arange(n_pages) % s.n_hbm_stacks).astype(np.int16)
    return np.tile(row, (plan.n_gpus, 1))


def default_nar_granularity(s: System, plan: Plan, groups=None) -> int:
    """Default NAR granularity: logical groups per GPU, clamped to [2, 2*mesh_rows].

    Section 6.5: with many threadblocks (1,008 per GPU) the finest
    granularity (12 = one domain per edge router on Table 2) is best; with
    few (7 per GPU) fine domains leave ports idle.  Algorithm 1 spreads the
    logical groups round-robin over the domains, so a GPU can fill at most
    as many domains as it has groups; at least 2 (one per short edge).
    """
    if groups is None:
        groups = logical_allocation(plan)
    per_gpu = len(groups) // max(1, plan.n_gpus)
    g = int(min(max(per_gpu, 2), max_useful_granularity(s)))
    return min(g, s.n_io_ports)


# ---------------------------------------------------------------------------
# Algorithm 1: logical allocation
# ---------------------------------------------------------------------------
def _chunk_keys(plan: Plan):
    """Integer key of every (chunk_id, buffer_type, gpu) a step touches, with its step row."""
    n = plan.n_chunks
    rows = np.repeat(np.arange(plan.n_steps), n)
    k = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    src = ((plan.src_gpu[rows] * 3 + plan.src_buf[rows]) << 40) + plan.src_chunk[rows] + k
    dst = ((plan.dst_gpu[rows] * 3 + plan.dst_buf[rows]) << 40) + plan.dst_chunk[rows] + k
    keys = np.stack([src, dst], axis=1).reshape(-1)
    return np.repeat(rows, 2), keys


def logical_allocation(plan: Plan) -> list[np.ndarray]:
    """Algorithm 1, ``logical_allocation(W)`` (section 4.2.1).

    Threadblocks are processed in id order (GPU-major).  A threadblock none of
    whose chunks belongs to a group forms a new group; otherwise it and its
    unassigned chunks join the group with which it shares the most chunks
    (ties: the group created first).  Chunks already in another group stay
    there (a cross-group access, resolved first-come first-served by the
    physical placement).  Returns the groups (arrays of threadblock ids, in
    joining order) sorted by decreasing number of threadblocks (stable:
    ties keep creation order).  Threadblocks without steps join no group.
    """
    hit = _GROUPS.get(plan)
    if hit is None:
        from .algorithm1_kernel import logical_groups
        rows, keys = _chunk_keys(plan)
        bounds = np.searchsorted(plan.step_tb[rows], np.arange(plan.n_tbs + 1))
        uniq, key_id = np.unique(keys, return_inverse=True)
        group = np.empty(plan.n_tbs, np.int64)
        n_groups = logical_groups(key_id.reshape(-1).astype(np.int64), bounds.astype(np.int64), len(uniq), group)
        tbs = np.flatnonzero(group >= 0)
        by_group = tbs[np.argsort(group[tbs], kind="stable")]      # joining order = threadblock order
        sizes = np.bincount(group[tbs], minlength=n_groups)
        members = np.split(by_group, np.cumsum(sizes)[:-1]) if n_groups else []
        order = np.argsort(-sizes, kind="stable")
        hit = _GROUPS[plan] = [members[q].astype(np.int64) for q in order]
    return list(hit)


#: logical_allocation's result per plan (one plan is placed at every granularity of NAP's search)
_GROUPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _logical_allocation_python(plan: Plan) -> list[np.ndarray]:
    """:func:`logical_allocation` in plain Python, dictionaries over chunk keys (the reference the
    compiled loop, :func:`algorithm1_kernel.logical_groups`, is checked against)."""
    rows, keys = _chunk_keys(plan)
    tb_of = plan.step_tb[rows]
    bounds = np.searchsorted(tb_of, np.arange(plan.n_tbs + 1))
    keys_l = keys.tolist()
    owner: dict[int, int] = {}
    members: list[list[int]] = []
    for tb in range(plan.n_tbs):
        lo, hi = bounds[tb], bounds[tb + 1]
        if lo == hi:
            continue
        mine = set(keys_l[lo:hi])
        counts: dict[int, int] = {}
        for c in mine:
            gid = owner.get(c)
            if gid is not None:
                counts[gid] = counts.get(gid, 0) + 1
        if counts:
            gid = min(counts, key=lambda q: (-counts[q], q))
            members[gid].append(tb)
        else:
            gid = len(members)
            members.append([tb])
        for c in mine:
            owner.setdefault(c, gid)
    order = sorted(range(len(members)), key=lambda q: -len(members[q]))  # stable
    return [np.asarray(members[q], dtype=np.int64) for q in order]


# ---------------------------------------------------------------------------
# helpers shared by the policies
# ---------------------------------------------------------------------------
def ua_cu_order(s: System) -> np.ndarray:
    """Baseline dispatch order: round-robin across dies, spreading over free CUs.

    Slot ``k`` goes to die ``k mod n_dies``; inside a die CUs are taken one
    per router first (router order row-major inside the die's column slab),
    then the second CU of every router, and so on.
    """
    cr = cu_router(s)
    die = router_die(s, cr)
    slot_in_router = np.arange(s.n_cus) % s.cus_per_router
    x, y = cr % s.mesh_cols, cr // s.mesh_cols
    xi = x - die * s.cols_per_die
    within = np.lexsort((xi, y, slot_in_router))  # CUs sorted by (slot, y, x-in-die)
    per_die = [within[die[within] == d] for d in range(s.n_dies)]
    return np.stack(per_die, axis=1).reshape(-1)  # interleave dies


def stack_order_by_router(s: System) -> np.ndarray:
    """``[n_routers, n_stacks]`` stacks by hop distance from each router (ties: lower id)."""
    sr = stack_router(s)
    d = hop_count(s, np.arange(s.n_routers)[:, None], sr[None, :])
    ids = np.broadcast_to(np.arange(s.n_hbm_stacks), d.shape)
    return np.lexsort((ids, d), axis=1)


class PageMap:
    """Page -> stack map under Algorithm 1's stack budget (section 4.2.2, lines 16-18).

    ``budget="served"`` (default, Algorithm 1 as written): every stack of every
    GPU starts with ``R_max = window_bytes`` (the bandwidth-delay product,
    :func:`stack_budget_bytes`), and every chunk a threadblock serves charges
    the stacks that hold it with the chunk's bytes (line 18, ``R[stack] -=
    cs``), also when its pages were placed earlier by another threadblock.
    Serving a chunk: first the stacks already holding some of its pages are
    charged; then each of its unplaced pages, in address order, goes to the
    first stack in ``order`` whose remaining budget fits the page's share of
    the chunk (first fit, "preferring the CU's nearest stack").  When no stack
    of the GPU fits, every stack of that GPU opens a new window (``R += R_max``):
    the data already in flight has drained (the budget is "the volume of data
    that can be in flight before saturation"), so a GPU whose traffic exceeds
    ``n_stacks x R_max`` spreads its pages evenly, window by window, nearest
    stacks first in each window.

    ``budget="pages"``: each page is charged once, in whole pages, against a
    fixed page budget ``cap_pages`` per stack (:func:`stack_capacity_pages`);
    the reading before Algorithm 1's per-chunk decrement was modelled
    (docs/policies.md, D6).
    """

    def __init__(self, s: System, plan: Plan, cap_pages: int | None = None, budget: str = "served"):
        if budget not in STACK_BUDGET:
            raise ValueError(f"stack_budget must be one of {', '.join(STACK_BUDGET)}, got {budget!r}")
        self.ps = np.full((plan.n_gpus, plan.address_pages(s.page_bytes)), -1, np.int16)
        self.pd = np.full(self.ps.shape, -1, np.int16)  # NAR domain of the group that placed the page
        self.page = int(s.page_bytes)
        self.budget = budget
        if budget == "pages":
            cap = stack_capacity_pages(s, plan) if cap_pages is None else int(cap_pages)
            self.window = cap * self.page     # a page charges page_bytes once; never refilled
        else:
            self.window = stack_budget_bytes(s)
        self.rem = np.full((plan.n_gpus, s.n_hbm_stacks), self.window, np.int64)
        self.windows = np.ones(plan.n_gpus, np.int64)  # windows opened per GPU (served budget)

    def _charge(self, gpu: int, pages: np.ndarray, nbytes: np.ndarray) -> None:
        st = self.ps[gpu, pages].astype(np.int64)
        self.rem[gpu] -= np.bincount(st, weights=nbytes, minlength=self.rem.shape[1]).astype(np.int64)

    def _refill(self, gpu: int, order: np.ndarray, need: int) -> None:
        """Open as many windows as it takes for one stack of ``order`` to fit ``need`` bytes."""
        if self.budget == "pages":
            raise AssertionError("stack budget exhausted")  # cannot happen: cap >= pages / n_stacks
        k = max(1, int(np.min(-(-(need - self.rem[gpu, order]) // self.window))))
        self.rem[gpu] += k * self.window
        self.windows[gpu] += k

    def _one(self, gpu: int, page: int, b: int, order: np.ndarray, domain: int) -> None:
        rem = self.rem[gpu]
        ok = np.flatnonzero(rem[order] >= b)
        if ok.size == 0:
            self._refill(gpu, order, b)
            ok = np.flatnonzero(rem[order] >= b)
        st = int(order[ok[0]])
        self.ps[gpu, page], self.pd[gpu, page] = st, domain
        rem[st] -= b

    def _full(self, gpu: int, pages: np.ndarray, order: np.ndarray, domain: int) -> None:
        """Place ``pages`` (all charged ``page_bytes``) first fit in ``order``, window by window."""
        rem, left, at = self.rem[gpu], pages.size, 0
        while left:
            take = np.maximum(rem[order] // self.page, 0)
            upto = np.minimum(np.concatenate([[0], np.cumsum(take)]), left)
            cnt = np.diff(upto)
            n = int(upto[-1])
            self.ps[gpu, pages[at:at + n]] = np.repeat(order, cnt)
            self.pd[gpu, pages[at:at + n]] = domain
            rem[order] -= cnt * self.page
            at, left = at + n, left - n
            if left:
                self._refill(gpu, order, self.page)

    def place(self, gpu: int, addr: int, nbytes: int, order: np.ndarray, domain: int = 0) -> None:
        """Serve the chunk ``[addr, addr + nbytes)`` of ``gpu``: charge its placed pages, place the rest."""
        P = self.page
        p0, p1 = addr // P, (addr + nbytes - 1) // P
        row = self.ps[gpu]
        if self.budget == "pages":   # a page is charged once, when it is placed
            free = p0 + np.flatnonzero(row[p0:p1 + 1] < 0)
            if free.size:
                self._full(gpu, free, order, domain)
            return
        if p0 == p1:  # fast path: a chunk inside one page
            if row[p0] >= 0:
                self.rem[gpu, row[p0]] -= nbytes
            else:
                self._one(gpu, p0, nbytes, order, domain)
            return
        pages = np.arange(p0, p1 + 1)
        share = np.full(pages.size, P, np.int64)           # the chunk's bytes in each of its pages
        share[0] = P * (p0 + 1) - addr
        share[-1] = addr + nbytes - P * p1
        placed = row[p0:p1 + 1] >= 0
        if placed.any():
            self._charge(gpu, pages[placed], share[placed])
        free = np.flatnonzero(~placed)
        if free.size == 0:
            return
        head = free[0] == 0 and share[0] < P
        tail = free[-1] == pages.size - 1 and share[-1] < P and free.size > int(head)
        if head:
            self._one(gpu, p0, int(share[0]), order, domain)
        mid = free[int(head):free.size - int(tail)]
        if mid.size:
            self._full(gpu, pages[mid], order, domain)
        if tail:
            self._one(gpu, p1, int(share[-1]), order, domain)


def _first_fit(rem_row: np.ndarray, order: np.ndarray, need: int, start: int) -> int:
    """Index into ``order`` of the first CU (from ``start``) with ``rem >= need``; -1 if none."""
    ok = rem_row[order[start:]] >= need
    k = int(np.argmax(ok)) if ok.size else 0
    return start + k if ok.size and ok[k] else -1


def _fail(plan: Plan, tb: int, need: int, s: System) -> ValueError:
    n_tbs = int(plan.tbs_per_gpu[plan.tb_gpu[tb]])
    return ValueError(
        f"cannot place threadblock {tb} (GPU {plan.tb_gpu[tb]}, {need} outstanding requests): "
        f"more threadblocks than the CUs can hold ({n_tbs} threadblocks on this GPU, "
        f"{s.n_cus} CUs x {s.max_outstanding_per_cu} requests)")


# ---------------------------------------------------------------------------
# threadblock placements
# ---------------------------------------------------------------------------
def _place_ua(s: System, plan: Plan, demand: np.ndarray) -> np.ndarray:
    """UA threadblocks (section 5.3): dispatch order :func:`ua_cu_order`, skipping full CUs."""
    from .algorithm1_kernel import ua_dispatch
    i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    rem = np.full((plan.n_gpus, s.n_cus), s.max_outstanding_per_cu, np.int64)
    tb_cu = np.full(plan.n_tbs, -1, np.int64)
    has = np.bincount(plan.step_tb, minlength=plan.n_tbs) > 0
    bad = ua_dispatch(i64(ua_cu_order(s)), i64(plan.tb_gpu), i64(demand), has, rem,
                      np.zeros(plan.n_gpus, np.int64), tb_cu)
    if bad >= 0:
        raise _fail(plan, int(bad), int(demand[bad]), s)
    return tb_cu


def _place_ua_python(s: System, plan: Plan, demand: np.ndarray) -> np.ndarray:
    """:func:`_place_ua` as a Python loop (the reference the compiled dispatch is checked against)."""
    order = ua_cu_order(s)
    rem = np.full((plan.n_gpus, s.n_cus), s.max_outstanding_per_cu, np.int64)
    ptr = np.zeros(plan.n_gpus, np.int64)
    tb_cu = np.full(plan.n_tbs, -1, np.int64)
    has = np.bincount(plan.step_tb, minlength=plan.n_tbs) > 0
    for tb in np.flatnonzero(has):
        g, q = int(plan.tb_gpu[tb]), int(demand[tb])
        cyc = np.concatenate([order[ptr[g]:], order[:ptr[g]]])
        k = _first_fit(rem[g], cyc, q, 0)
        if k < 0:
            raise _fail(plan, tb, q, s)
        cu = int(cyc[k])
        tb_cu[tb] = cu
        rem[g, cu] -= q
        ptr[g] = (ptr[g] + k + 1) % s.n_cus
    return tb_cu


def _place_numa(s: System, plan: Plan, demand: np.ndarray, page_stack: np.ndarray,
                groups: list) -> np.ndarray:
    """NUMA threadblocks (section 5.3): Algorithm 1's order, each threadblock on the
    first CU (with room) by mean hop distance to the pages it reads.

    The distance of a CU is the page-weighted mean hop count from its router
    to the stacks holding the threadblock's source pages (ties: lower CU id).
    """
    from .algorithm1_kernel import first_fit_each
    sr, cr = stack_router(s), cu_router(s)
    hop_cu_st = hop_count(s, cr[:, None], sr[None, :]).astype(np.float64)  # [C, St]
    # source pages of every step -> per-threadblock histogram of their stacks [n_tbs, St]
    saddr, St = plan.src_addr(s.page_bytes), int(s.n_hbm_stacks)
    p0 = saddr // s.page_bytes
    cnt = (saddr + plan.nbytes - 1) // s.page_bytes - p0 + 1
    rows = np.repeat(np.arange(plan.n_steps), cnt)
    page = p0[rows] + np.arange(len(rows)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    hist = np.bincount(plan.step_tb[rows] * St + page_stack[plan.src_gpu[rows], page],
                       minlength=plan.n_tbs * St).reshape(plan.n_tbs, St).astype(np.int64)
    del rows, page
    uniq, tb_order = np.unique(hist, axis=0, return_inverse=True)
    orders = np.stack([np.lexsort((np.arange(s.n_cus), np.round(hop_cu_st @ h / max(1, h.sum()), 9)))
                       for h in uniq]).astype(np.int64)
    rem = np.full((plan.n_gpus, s.n_cus), s.max_outstanding_per_cu, np.int64)
    tb_cu = np.full(plan.n_tbs, -1, np.int64)
    i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    tbs = i64(np.concatenate(groups)) if groups else np.zeros(0, np.int64)
    bad = first_fit_each(tbs, i64(tb_order.reshape(-1)), orders, i64(plan.tb_gpu), i64(demand), rem, tb_cu)
    if bad >= 0:
        raise _fail(plan, int(bad), int(demand[bad]), s)
    return tb_cu


def _place_numa_python(s: System, plan: Plan, demand: np.ndarray, page_stack: np.ndarray,
                       groups: list) -> np.ndarray:
    """:func:`_place_numa` one threadblock at a time in Python (the reference)."""
    sr, cr = stack_router(s), cu_router(s)
    hop_cu_st = hop_count(s, cr[:, None], sr[None, :]).astype(np.float64)  # [C, St]
    rem = np.full((plan.n_gpus, s.n_cus), s.max_outstanding_per_cu, np.int64)
    tb_cu = np.full(plan.n_tbs, -1, np.int64)
    saddr = plan.src_addr(s.page_bytes)
    cache: dict = {}
    for grp in groups:
        for tb in grp:
            rows = plan.steps_of(int(tb))
            g, q = int(plan.tb_gpu[tb]), int(demand[tb])
            hist = np.zeros(s.n_hbm_stacks, np.int64)
            for r in rows:
                p0 = saddr[r] // s.page_bytes
                p1 = (saddr[r] + plan.nbytes[r] - 1) // s.page_bytes
                hist += np.bincount(page_stack[g, p0:p1 + 1], minlength=s.n_hbm_stacks)
            key = hist.tobytes()
            if key not in cache:
                cost = hop_cu_st @ hist / max(1, hist.sum())
                cache[key] = np.lexsort((np.arange(s.n_cus), np.round(cost, 9)))
            order = cache[key]
            k = _first_fit(rem[g], order, q, 0)
            if k < 0:
                raise _fail(plan, int(tb), q, s)
            tb_cu[tb] = order[k]
            rem[g, order[k]] -= q
    return tb_cu


def algorithm1(s: System, plan: Plan, nar_max: int, *, place_memory: bool = True,
               groups: list | None = None, demand: np.ndarray | None = None,
               stack_budget: str = "served", engine: str | None = None):
    """NUNA Algorithm 1 (section 4.2): NAP threadblock and memory placement.

    ``L = logical_allocation(W)``; ``nar = 0``; for each group ``L_i``:
    ``nar = (nar + 1) mod nar_max`` (line 12, literally: the first group gets
    domain ``1 mod nar_max``); for each threadblock of the group,
    ``physical_placement`` picks the first CU, in order of mean hop distance
    to domain ``nar``'s ports, whose remaining outstanding-request budget
    fits the threadblock's demand, and places the pages of its chunks
    (steps in order; source chunk then destination chunk) on the nearest
    stacks whose budget fits (:class:`PageMap`, ``stack_budget``): a chunk on the threadblock's own GPU by
    distance from the chosen CU, a chunk on another GPU by distance from the
    domain's (ingress) ports, which are the same physical ports there
    (rail-optimized planes).  A page keeps the stack of the first chunk that
    touches it (first come, first served); sub-page chunks share pages.

    ``demand``: the CU budget of every threadblock (default :func:`cu_demand`).
    The domain of the group that places a page is recorded with it (the NAR
    address segment the driver maps the page into, section 4.2.3).

    ``engine``: ``"compiled"`` (the same loop over flat arrays,
    :func:`algorithm1_kernel.run_algorithm1`; the default,
    :data:`ALGORITHM1_ENGINE`) or ``"python"`` (this function's
    own loop over :class:`PageMap`, the readable reference; both give the same
    placement, tests/test_algorithm1_kernel.py).

    Returns ``(tb_cu, tb_domain, pages (the :class:`PageMap`) or None, groups,
    group_domain)``.
    """
    dom = nar_domains(s, nar_max)
    if groups is None:
        groups = logical_allocation(plan)
    if demand is None:
        demand = cu_demand(s, plan)
    engine = ALGORITHM1_ENGINE if engine is None else engine
    if engine == "compiled":
        return _algorithm1_compiled(s, plan, dom, place_memory, groups, demand, stack_budget)
    if engine != "python":
        raise ValueError(f"algorithm1 engine must be 'compiled' or 'python', got {engine!r}")
    rem = np.full((plan.n_gpus, s.n_cus), s.max_outstanding_per_cu, np.int64)
    ptr = np.zeros((plan.n_gpus, nar_max), np.int64)  # first CU in order with rem > 0
    tb_cu = np.full(plan.n_tbs, -1, np.int64)
    tb_dom = np.zeros(plan.n_tbs, np.int64)
    pages = PageMap(s, plan, budget=stack_budget) if place_memory else None
    st_by_router = stack_order_by_router(s)
    cr = cu_router(s)
    saddr, daddr = plan.src_addr(s.page_bytes), plan.dst_addr(s.page_bytes)
    bounds = np.searchsorted(plan.step_tb, np.arange(plan.n_tbs + 1))
    group_domain = np.zeros(len(groups), np.int64)
    nar = 0
    for gi, grp in enumerate(groups):
        nar = (nar + 1) % nar_max
        group_domain[gi] = nar
        order = dom.cu_order[nar]
        for tb in grp.tolist():
            g, q = int(plan.tb_gpu[tb]), int(demand[tb])
            k = _first_fit(rem[g], order, q, int(ptr[g, nar]))
            if k < 0:
                raise _fail(plan, tb, q, s)
            cu = int(order[k])
            tb_cu[tb], tb_dom[tb] = cu, nar
            rem[g, cu] -= q
            while ptr[g, nar] < s.n_cus and rem[g, order[ptr[g, nar]]] <= 0:
                ptr[g, nar] += 1
            if pages is not None:
                local = st_by_router[cr[cu]]
                for r in range(bounds[tb], bounds[tb + 1]):
                    nb = int(plan.nbytes[r])
                    pages.place(g, int(saddr[r]), nb, local, nar)
                    h = int(plan.dst_gpu[r])
                    pages.place(h, int(daddr[r]), nb, dom.stack_order[nar], nar)
    return tb_cu, tb_dom, pages, groups, group_domain


#: :func:`algorithm1`'s default engine ("python": the readable reference loop, for checks)
ALGORITHM1_ENGINE = "compiled"


def _algorithm1_compiled(s: System, plan: Plan, dom: Domains, place_memory: bool, groups: list,
                         demand: np.ndarray, stack_budget: str):
    """:func:`algorithm1` through the compiled loop (:mod:`algorithm1_kernel`), same outputs."""
    from . import algorithm1_kernel as K
    i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    pages = PageMap(s, plan, budget=stack_budget) if place_memory else None
    if pages is None:   # empty state the kernel does not touch
        rem_st, windows = np.zeros((1, 1), np.int64), np.zeros(1, np.int64)
        ps = pd = np.zeros((1, 1), np.int16)
        window, budget = 1, K.BUDGET_SERVED
    else:
        rem_st, windows, ps, pd, window = pages.rem, pages.windows, pages.ps, pages.pd, pages.window
        budget = K.BUDGET_PAGES if stack_budget == "pages" else K.BUDGET_SERVED
    sizes = [len(g) for g in groups]
    group_start = i64(np.concatenate([[0], np.cumsum(sizes)]))
    group_tbs = i64(np.concatenate(groups) if groups else np.zeros(0))
    rem_cu = np.full((plan.n_gpus, s.n_cus), s.max_outstanding_per_cu, np.int64)
    ptr = np.zeros((plan.n_gpus, dom.cu_order.shape[0]), np.int64)
    tb_cu = np.full(plan.n_tbs, -1, np.int64)
    tb_dom = np.zeros(plan.n_tbs, np.int64)
    group_domain = np.zeros(len(groups), np.int64)
    bounds = i64(np.searchsorted(plan.step_tb, np.arange(plan.n_tbs + 1)))
    rc = K.run_algorithm1(group_tbs, group_start, i64(dom.cu_order), i64(dom.stack_order),
                          i64(stack_order_by_router(s)), i64(cu_router(s)), i64(plan.tb_gpu), i64(demand),
                          bounds, i64(plan.nbytes), i64(plan.src_addr(s.page_bytes)),
                          i64(plan.dst_addr(s.page_bytes)), i64(plan.dst_gpu), rem_cu, ptr, tb_cu, tb_dom,
                          group_domain, pages is not None, rem_st, windows, ps, pd, int(s.page_bytes),
                          int(window), int(budget))
    if rc == K.PAGES_EXHAUSTED:
        raise AssertionError("stack budget exhausted")  # cannot happen: cap >= pages / n_stacks
    if rc >= 0:
        raise _fail(plan, int(rc), int(demand[rc]), s)
    return tb_cu, tb_dom, pages, groups, group_domain


# ---------------------------------------------------------------------------
# the policies
# ---------------------------------------------------------------------------
def stack_domain(s: System, dom: Domains) -> np.ndarray:
    """``[n_hbm_stacks]`` the NAR domain whose address region a stack backs: the address
    segment of a page that round-robin memory placement puts on that stack.

    Section 4.1.2: "Each segment utilizes all I/O ports, partitioned uniformly
    into subsets for each domain", and a domain's physical addresses are
    "restricted to ... specific HBM stacks closer to the subset of I/O ports";
    4.2.3: "NAR domains are statically partitioned into per-stack regions".
    So the stacks are partitioned among the domains, every domain getting
    ``floor(n_stacks / g)`` or ``ceil(n_stacks / g)`` of them (every domain is
    used when ``g <= n_stacks``), nearest first: (stack, domain) pairs are taken
    in increasing mean hop distance from the domain's port routers (ties:
    lower stack, then lower domain), first up to ``floor`` stacks per domain,
    then the rest up to ``ceil``.
    """
    pr, sr = port_router(s), stack_router(s)
    hp = hop_count(s, pr[:, None], sr[None, :]).astype(np.float64)
    d = np.round(np.stack([hp[p].mean(axis=0) for p in dom.ports]), 9)  # [g, St]
    g, n_st = d.shape
    dd, st = np.meshgrid(np.arange(g), np.arange(n_st), indexing="ij")
    order = np.lexsort((dd.ravel(), st.ravel(), d.ravel()))
    out = np.full(n_st, -1, np.int64)
    count = np.zeros(g, np.int64)
    for cap in (n_st // g, -(-n_st // g)):
        for k in order:
            q, t = int(dd.ravel()[k]), int(st.ravel()[k])
            if out[t] < 0 and count[q] < cap:
                out[t] = q
                count[q] += 1
    return out


def place(s: System, plan: Plan, policy: str, options: PolicyOptions | None = None,
          *, nar_granularity: int | None = None) -> Placement:
    """Place ``plan`` on ``s`` under ``policy`` (one of :data:`POLICIES`, any case).

    ``nar_granularity`` (or ``options.nar_granularity``): NAR domains for the
    ``+NAR`` routings and Algorithm 1; default :func:`default_nar_granularity`
    (``scenario.make_scenario`` searches it for the NAP policies).
    ``options``: the modelling choices (:class:`PolicyOptions`).
    """
    name = canonical_policy(policy)
    tbp, mem, use_nar = _PARTS[name]
    if plan.n_gpus != s.n_gpus:
        raise ValueError(f"plan has {plan.n_gpus} GPUs but the system has n_gpus={s.n_gpus}")
    opts = options or PolicyOptions()
    g = nar_granularity if nar_granularity is not None else opts.nar_granularity
    groups = logical_allocation(plan)
    if g is None:
        g = default_nar_granularity(s, plan, groups)
    g = int(g)
    if g < 1 or g > s.n_io_ports:
        raise ValueError(f"nar_granularity must lie in [1, {s.n_io_ports}], got {g}")
    demand = cu_demand(s, plan, opts.cu_sharing)
    cap = stack_capacity_pages(s, plan)
    group_domain = None
    used_groups = None
    pd = None
    windows = None
    if tbp == "nap":
        tb_cu, tb_dom, pages, used_groups, group_domain = algorithm1(
            s, plan, g, place_memory=(mem == "nap"), groups=groups, demand=demand,
            stack_budget=opts.stack_budget)
        if mem == "rr":
            ps, pd = round_robin_pages(s, plan), None
        else:
            ps, pd, windows = pages.ps, pages.pd, (pages.windows if pages.budget == "served" else None)
    else:
        ps = round_robin_pages(s, plan)
        if tbp == "ua":
            tb_cu = _place_ua(s, plan, demand)
        else:
            tb_cu = _place_numa(s, plan, demand, ps, groups)
            used_groups = groups
        tb_dom = None
    page_domain = None
    if use_nar:
        dom = nar_domains(s, g)
        if tb_dom is None:  # UA / NUMA + NAR: the domain nearest the threadblock's CU
            tb_dom = np.where(tb_cu >= 0, dom.cu_domain[np.maximum(tb_cu, 0)], 0)
        if opts.nar_domain_by == "address":
            by_stack = stack_domain(s, dom)[np.maximum(ps, 0)]
            page_domain = by_stack if pd is None else np.where(pd >= 0, pd, by_stack)
            page_domain = page_domain.astype(np.int16)
    else:
        dom = nar_domains(s, 1)
        tb_dom = np.zeros(plan.n_tbs, np.int64)
    return Placement(
        policy=name, tb_cu=tb_cu.astype(np.int64), tb_domain=np.asarray(tb_dom, np.int64),
        page_stack=ps, domains=dom, placement_granularity=(g if tbp == "nap" or use_nar else 1),
        cu_demand=demand, cu_capacity=int(s.max_outstanding_per_cu), stack_capacity_pages=cap,
        groups=used_groups, group_domain=group_domain, tb_gpu=plan.tb_gpu,
        page_domain=page_domain, options=opts,
        stack_budget=(opts.stack_budget if mem == "nap" else "none"), stack_windows=windows)
