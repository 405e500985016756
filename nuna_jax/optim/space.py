"""The search space: every NAP decision as its own variable, and the
factored traffic tables that evaluate any point of it without lowering (docs/optim.md).

Variables (one integer vector ``x``; ``x[:n_tbs]`` threadblocks, ``x[n_tbs:]`` page groups):

* threadblock ``t``: one of ``C`` candidates (:mod:`.candidates`): a NAR domain at the
  routing granularity ``g`` (Algorithm 1's, NUNA section 4.1.2) and a CU near that domain's
  ports (section 4.2.2); candidate 0 is Algorithm 1's own.
* page group ``q``: a run of at most ``group_pages`` consecutive pages of one GPU touched by the
  plan, with one NAP stack and one first-touching threadblock; one of ``K`` candidate HBM stacks:
  candidate 0 is NAP's stack, candidates ``1 .. K-1`` the stacks nearest it (hop distance).
  So the page groups are placed independently of the threadblocks (section 4.2.2 ties them:
  source chunk near the CU, destination chunk near the ports).  The all-zero ``x`` is NAP+NAR.

Budgets: a CU's outstanding requests (``max_outstanding_per_cu``, section 4.2.2, ``R_max``) and a
stack's pages (``cap_pages`` = the larger of ``placement.stack_capacity_pages`` and NAP's own
fullest stack, so NAP+NAR is feasible): both are constraints, enforced by repair when a point
is assembled (:func:`repair`) and by augmented-Lagrangian penalties in the relaxed loss.

Factored tables.  Under NAR with routing by address (the default, section 4.1.2) a flit's port
depends on the destination address and on the domain of the page's *first-touching*
threadblock; its CU on the issuing threadblock; its read and write stacks on two page groups.
So every flow of every point is a row of one static table, built once by ``lowering.build_traffic``
per candidate ``c`` (every threadblock on ``c``, each page group given a stack id of its own so
that no two groups merge): a row is present in ``x`` iff ``x[key] == cand`` (``key`` the first
toucher of its destination group, or its own threadblock under routing by threadblock), and its
``cu``, ``read_stack`` and ``dst_stack`` columns are read from ``x`` (:func:`hard_traffic`).
``tests/test_optim_space.py`` checks the estimate of the gathered rows against
``build_traffic(assemble(x))`` on random points.
"""

from __future__ import annotations

import types
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ..geometry import stack_router
from ..lowering import build_traffic
from ..models.contention import bucket_rows
from ..models.contention.api import resource_tables
from ..models.contention.background import estimate_phases_bg
from ..models.contention.objective import estimate_phases
from ..models.contention.tables import resolve_n_phases
from ..nar import nar_domains
from ..placement import Placement, PolicyOptions, cu_demand, stack_capacity_pages, stack_order_by_router
from ..plans import Plan
from ..system import System
from ..traffic import FIELDS, Traffic
from .candidates import Candidates, assemble, make_candidates

__all__ = ["Space", "make_space", "assemble_point", "repair", "hard_traffic", "HardTable", "estimate_points",
           "page_groups", "check_point", "hard_table", "gather_rows"]


class Space(NamedTuple):
    cand: Candidates
    nap: Placement
    n_tbs: int
    n_grp: int
    grp_gpu: np.ndarray        # [G]
    grp_first: np.ndarray      # [G] first page
    grp_pages: np.ndarray      # [G] pages in the group
    grp_key: np.ndarray        # [G] first-touching threadblock
    grp_cand: np.ndarray       # [G, K] candidate stacks (0: NAP's)
    grp_order: np.ndarray      # [G, St] every stack, nearest NAP's first (grp_cand is its first K columns)
    cap_pages: int             # pages per stack
    demand: np.ndarray         # [n_tbs] CU requests
    var_n: np.ndarray          # [n_tbs + G] options per variable (1: fixed)

    @property
    def n_vars(self) -> int:
        return self.n_tbs + self.n_grp

    @property
    def K(self) -> int:
        return int(self.grp_cand.shape[1])

    @property
    def C(self) -> int:
        return self.cand.n_candidates


def page_groups(s: System, plan: Plan, nap: Placement, order: np.ndarray, group_pages: int):
    """Page groups: runs of touched pages with one NAP stack and one first toucher, at most
    ``group_pages`` long.  Returns (gpu, first page, pages, first toucher) arrays and the
    ``[n_gpus, n_pages]`` group id of every page (-1: untouched)."""
    pb = s.page_bytes
    n_pages = plan.address_pages(pb)
    first = np.full((plan.n_gpus, n_pages), -1, np.int64)
    saddr, daddr = plan.src_addr(pb), plan.dst_addr(pb)
    bounds = np.searchsorted(plan.step_tb, np.arange(plan.n_tbs + 1))
    for tb in order.tolist():   # Algorithm 1's traversal (candidates.assemble): steps in order, source then dest
        for r in range(bounds[tb], bounds[tb + 1]):
            nb = int(plan.nbytes[r])
            for g, a in ((int(plan.src_gpu[r]), int(saddr[r])), (int(plan.dst_gpu[r]), int(daddr[r]))):
                p0, p1 = a // pb, (a + nb - 1) // pb + 1
                seg = first[g, p0:p1]
                seg[seg < 0] = tb
    gid = np.full((plan.n_gpus, n_pages), -1, np.int64)
    G_gpu, G_first, G_n, G_key = [], [], [], []
    ps = np.asarray(nap.page_stack)
    for g in range(plan.n_gpus):
        cur = None
        for p in range(n_pages):
            f = first[g, p]
            if f < 0:
                cur = None
                continue
            if cur is None or G_key[cur] != f or ps[g, p] != ps[g, G_first[cur]] or G_n[cur] >= group_pages:
                cur = len(G_gpu)
                G_gpu.append(g); G_first.append(p); G_n.append(0); G_key.append(int(f))
            G_n[cur] += 1
            gid[g, p] = cur
    return (np.asarray(G_gpu, np.int64), np.asarray(G_first, np.int64), np.asarray(G_n, np.int64),
            np.asarray(G_key, np.int64), gid)


def auto_group_pages(s: System, plan: Plan, per_chunk: int = 4, least: int = 8) -> int:
    """At least ``least`` pages (32 kB on Table 2), and few enough groups that the largest step's
    chunk spans about ``per_chunk`` of them (the table's rows grow with the groups a step spans)."""
    big = int(np.max(plan.nbytes, initial=0))
    return int(max(least, -(-(-(-big // int(s.page_bytes))) // per_chunk)))


def make_space(s: System, plan: Plan, *, nar_granularity: int | None = None, n_candidates: int = 4,
               n_stack_candidates: int = 4, group_pages: int | None = None, pages: bool = True):
    """The space of ``plan`` on ``s`` and its factored tables (``pages=False``: every page group fixed
    on NAP's stack, only the threadblocks searched).  ``group_pages`` (default
    :func:`auto_group_pages`): the most pages of one group."""
    cand, nap = make_candidates(s, plan, nar_granularity=nar_granularity, n_candidates=n_candidates)
    if group_pages is None:
        group_pages = auto_group_pages(s, plan)
    gg, gf, gn, gk, gid = page_groups(s, plan, nap, cand.order, group_pages)
    ps = np.asarray(nap.page_stack).astype(np.int64)
    a0 = ps[gg, gf]
    near = stack_order_by_router(s)[stack_router(s)[a0]]             # [G, St], a0 first (distance 0)
    # a0 first, then the nearest others
    order = np.concatenate([a0[:, None], np.stack([r[r != x] for r, x in zip(near, a0)])], axis=1) \
        if len(a0) else np.zeros((0, s.n_hbm_stacks), np.int64)
    K = max(1, min(int(n_stack_candidates), s.n_hbm_stacks)) if pages else 1
    gc = order[:, :K]
    nap_load = np.zeros((plan.n_gpus, s.n_hbm_stacks), np.int64)
    np.add.at(nap_load, (gg, a0), gn)
    cap = int(max(stack_capacity_pages(s, plan), nap_load.max(initial=0)))
    demand = cu_demand(s, plan, (cand.options or PolicyOptions()).cu_sharing)
    var_n = np.concatenate([np.where(cand.active, cand.n_candidates, 1), np.full(len(gg), K)]).astype(np.int64)
    sp = Space(cand, nap, plan.n_tbs, len(gg), gg, gf, gn, gk, gc, order, cap, np.asarray(demand), var_n)
    return sp, gid


# ---------------------------------------------------------------------------
# repair and assembly (host, numpy)
# ---------------------------------------------------------------------------
def repair(s: System, plan: Plan, sp: Space, x):
    """(tb_cu [n_tbs], group stack [G]) of point ``x``, both budgets repaired: a threadblock whose CU
    lacks room takes the first CU with room in its domain's search order (Algorithm 1's first fit);
    threadblocks in Algorithm 1's order.  Page groups: a point within the stack budget is kept as it
    is; otherwise :func:`_repair_stacks` (from NAP's stacks, the moves that fit)."""
    x = np.asarray(x, np.int64)
    cand = sp.cand
    xt, xg = x[:sp.n_tbs], x[sp.n_tbs:]
    dom = nar_domains(s, cand.granularity)
    rows = np.arange(plan.n_tbs)
    want, tdom = cand.cu[rows, xt], cand.domain[rows, xt]
    rem = np.full((plan.n_gpus, s.n_cus), s.max_outstanding_per_cu, np.int64)
    tb_cu = np.full(plan.n_tbs, -1, np.int64)
    for tb in cand.order.tolist():
        g, q, c = int(plan.tb_gpu[tb]), int(sp.demand[tb]), int(want[tb])
        if rem[g, c] < q:
            o = dom.cu_order[tdom[tb]]
            ok = np.flatnonzero(rem[g, o] >= q)
            if ok.size == 0:
                raise ValueError(f"cannot place threadblock {tb}: more threadblocks than the CUs can hold")
            c = int(o[ok[0]])
        tb_cu[tb] = c
        rem[g, c] -= q
    st = sp.grp_cand[np.arange(sp.n_grp), xg]
    load = np.zeros((plan.n_gpus, s.n_hbm_stacks), np.int64)
    np.add.at(load, (sp.grp_gpu, st), sp.grp_pages)
    if load.max(initial=0) > sp.cap_pages:
        st = _repair_stacks(s, plan, sp, xg)
    return tb_cu, st.astype(np.int64)


def _repair_stacks(s: System, plan: Plan, sp: Space, xg: np.ndarray) -> np.ndarray:
    """Stacks of the page groups of an over-budget point, within ``cap_pages``: start from NAP's
    assignment (feasible: ``cap_pages`` >= NAP's fullest stack) and move the groups that ``xg``
    moves, in index order, each to its chosen stack if it has room, else to its next candidate
    with room, else it stays where it is; two passes (a move blocked in the first may fit once
    later groups have left).  Every step keeps every stack within budget, so this cannot fail
    (greedy first fit from empty stacks could: at 10 MB the groups are up to 77 pages and NAP fills
    the stacks to the page, so fragmentation could leave no stack with room for a group)."""
    st = sp.grp_cand[:, 0].copy()
    load = np.zeros((plan.n_gpus, s.n_hbm_stacks), np.int64)
    np.add.at(load, (sp.grp_gpu, st), sp.grp_pages)
    todo = np.flatnonzero(xg != 0)
    for _ in range(2):
        left = []
        for q in todo.tolist():
            g, n, k0 = int(sp.grp_gpu[q]), int(sp.grp_pages[q]), int(xg[q])
            pref = [int(sp.grp_cand[q, k]) for k in list(range(k0, sp.K)) + list(range(1, k0))]
            if st[q] in pref:                       # only a move to a more preferred candidate
                pref = pref[:pref.index(int(st[q]))]
            ok = [k for k in pref if load[g, k] + n <= sp.cap_pages]
            if ok:
                load[g, st[q]] -= n
                st[q] = ok[0]
                load[g, st[q]] += n
            if st[q] != sp.grp_cand[q, k0]:
                left.append(q)                      # not on its own choice yet: retried once
        todo = np.asarray(left, np.int64)
    return st

def assemble_point(s: System, plan: Plan, sp: Space, gid: np.ndarray, x, *, policy: str = "OPT") -> Placement:
    """A normal Placement of point ``x`` (repaired, :func:`repair`)."""
    x = np.asarray(x, np.int64)
    cand = sp.cand
    tb_cu, st = repair(s, plan, sp, x)
    xt = x[:sp.n_tbs]
    tdom = cand.domain[np.arange(plan.n_tbs), xt]
    ps = np.array(sp.nap.page_stack, np.int16, copy=True)
    touched = gid >= 0
    ps[touched] = st[gid[touched]]
    page_domain = None
    if cand.address_routing:
        page_domain = np.array(sp.nap.page_domain, np.int16, copy=True)
        page_domain[touched] = tdom[sp.grp_key[gid[touched]]]
    return Placement(policy=policy, tb_cu=tb_cu, tb_domain=np.where(cand.active, tdom, 0).astype(np.int64),
                     page_stack=ps, domains=nar_domains(s, cand.granularity),
                     placement_granularity=cand.granularity, cu_demand=sp.demand,
                     cu_capacity=int(s.max_outstanding_per_cu), stack_capacity_pages=int(sp.cap_pages),
                     groups=None, group_domain=None, tb_gpu=plan.tb_gpu, page_domain=page_domain,
                     options=cand.options, stack_budget="pages", stack_windows=None)


def check_point(s: System, plan: Plan, sp: Space, pl: Placement) -> dict:
    """Largest CU load (requests) and stack load (pages, touched pages only) against the space's budgets."""
    cu = pl.cu_load(plan.n_gpus, s.n_cus)
    st = np.zeros((plan.n_gpus, s.n_hbm_stacks), np.int64)
    ps = np.asarray(pl.page_stack).astype(np.int64)
    for q in range(sp.n_grp):
        g, p0, n = sp.grp_gpu[q], sp.grp_first[q], sp.grp_pages[q]
        np.add.at(st[g], ps[g, p0:p0 + n], 1)
    placed = bool(np.all(pl.tb_cu[np.bincount(plan.step_tb, minlength=plan.n_tbs) > 0] >= 0))
    return {"cu_max_requests": int(cu.max()), "cu_capacity": int(pl.cu_capacity),
            "stack_max_pages": int(st.max(initial=0)), "stack_capacity_pages": int(sp.cap_pages),
            "stack_budget": "pages (touched)", "all_placed": placed,
            "ok": bool(cu.max() <= pl.cu_capacity and st.max(initial=0) <= sp.cap_pages and placed)}


# ---------------------------------------------------------------------------
# the factored tables
# ---------------------------------------------------------------------------
@struct.dataclass
class HardTable:
    """Static rows of every candidate (jnp) and the gather layout of one point's rows."""

    base: Traffic          # [R] rows, cu / read_stack / dst_stack / weight are placeholders
    row_cand: Any          # [R]
    row_key: Any           # [R] threadblock whose candidate decides the row's presence
    row_sg: Any            # [R] source page group
    row_dg: Any            # [R] destination page group
    row_own: Any           # [R] 1 where row_key is the row's own threadblock
    start: Any             # [n_tbs, C] first row of (key, cand)
    length: Any            # [n_tbs, C] rows of (key, cand)
    pos_tb: Any            # [N] key threadblock of every gathered position
    pos_j: Any             # [N] offset inside its block
    cand_cu: Any           # [n_tbs, C]
    grp_cand: Any          # [G, K]
    n_phases: int = struct.field(pytree_node=False)
    n_rows: int = struct.field(pytree_node=False)     # R (real rows)
    n_hard: int = struct.field(pytree_node=False)     # N (gathered positions, padded)


def _proxy(s: System, n_ids: int):
    return types.SimpleNamespace(flit_bytes=s.flit_bytes, page_bytes=s.page_bytes,
                                 hbm_routers_per_stack=s.hbm_routers_per_stack, n_hbm_stacks=int(n_ids),
                                 n_gpus=s.n_gpus, n_cus=s.n_cus, n_io_ports=s.n_io_ports)


def hard_table(s: System, plan: Plan, sp: Space, gid: np.ndarray) -> HardTable:
    """Lower every candidate once (every page group a stack id of its own) and index the rows."""
    cand = sp.cand
    local = np.full_like(gid, 0)
    off = np.zeros(plan.n_gpus + 1, np.int64)
    for g in range(plan.n_gpus):
        ids = gid[g][gid[g] >= 0]
        off[g + 1] = off[g] + (ids.max() + 1 - ids.min() if ids.size else 0)
        local[g] = np.where(gid[g] >= 0, gid[g] - (ids.min() if ids.size else 0), 0)
    n_ids = max(1, int(np.max(np.diff(off))))
    first_id = np.array([gid[g][gid[g] >= 0].min() if np.any(gid[g] >= 0) else 0 for g in range(plan.n_gpus)])
    proxy = _proxy(s, n_ids)
    parts = []
    for c in range(cand.n_candidates):
        pl = assemble(s, plan, cand, np.full(plan.n_tbs, c))
        fake = types.SimpleNamespace(domains=pl.domains, tb_cu=pl.tb_cu, tb_domain=pl.tb_domain,
                                     page_stack=local.astype(np.int16), page_domain=pl.page_domain)
        t = build_traffic(proxy, plan, fake)
        sg = first_id[np.asarray(t.src_gpu)] + np.asarray(t.read_stack)
        dg = first_id[np.asarray(t.dst_gpu)] + np.asarray(t.dst_stack)
        key = sp.grp_key[dg] if cand.address_routing else np.asarray(t.tb)
        parts.append((t, np.full(t.n_flows, c), key, sg, dg))
    cols = {k: np.concatenate([np.asarray(getattr(p[0], k)) for p in parts]) for k in FIELDS}
    rc, rk, rsg, rdg = (np.concatenate([p[i] for p in parts]) for i in range(1, 5))
    o = np.lexsort((np.arange(len(rc)), rc, rk))
    cols = {k: v[o] for k, v in cols.items()}
    rc, rk, rsg, rdg = rc[o], rk[o], rsg[o], rdg[o]
    C = cand.n_candidates
    flat = rk * C + rc
    cnt = np.bincount(flat, minlength=plan.n_tbs * C).reshape(plan.n_tbs, C)
    start = (np.cumsum(cnt.ravel()) - cnt.ravel()).reshape(plan.n_tbs, C)
    M = cnt.max(axis=1)
    pos_tb = np.repeat(np.arange(plan.n_tbs), M)
    pos_j = np.arange(int(M.sum())) - np.repeat(np.cumsum(M) - M, M)
    N = bucket_rows(max(len(pos_tb), 1))
    pad = N - len(pos_tb)
    pos_tb = np.concatenate([pos_tb, np.zeros(pad, np.int64)])
    pos_j = np.concatenate([pos_j, np.full(pad, 1 << 30, np.int64)])   # never valid
    n_phases = resolve_n_phases(types.SimpleNamespace(phase=cols["phase"]))
    base = Traffic(**{k: jnp.asarray(v) for k, v in cols.items()})
    return HardTable(base, jnp.asarray(rc), jnp.asarray(rk), jnp.asarray(rsg), jnp.asarray(rdg),
                     jnp.asarray((rk == cols["tb"]).astype(np.int32)), jnp.asarray(start), jnp.asarray(cnt),
                     jnp.asarray(pos_tb), jnp.asarray(pos_j), jnp.asarray(cand.cu), jnp.asarray(sp.grp_cand),
                     int(n_phases), len(rc), int(N))


def gather_rows(ht: HardTable, xt):
    """Row index ``[N]`` of point ``xt`` (threadblock candidates) and validity."""
    st = ht.start[ht.pos_tb, xt[ht.pos_tb]]
    ln = ht.length[ht.pos_tb, xt[ht.pos_tb]]
    valid = ht.pos_j < ln
    idx = jnp.where(valid, st + jnp.minimum(ht.pos_j, jnp.maximum(ln - 1, 0)), 0)
    return idx, valid


def hard_traffic(ht: HardTable, xt, tb_cu, gstack) -> Traffic:
    """The traffic of a point: ``xt`` threadblock candidates, ``tb_cu`` (repaired) CUs, ``gstack``
    (repaired) stack of every page group; weight 1 on its rows, 0 on the padding."""
    idx, valid = gather_rows(ht, xt)
    t = jax.tree_util.tree_map(lambda v: v[idx], ht.base)
    w = valid.astype(t.flits.dtype)
    return t.replace(cu=tb_cu[t.tb].astype(t.cu.dtype), read_stack=gstack[ht.row_sg[idx]].astype(t.cu.dtype),
                     dst_stack=gstack[ht.row_dg[idx]].astype(t.cu.dtype), weight=w, flits=t.flits * w,
                     bytes=t.bytes * w)


def _est_one(s, ht, xt, tb_cu, gstack, bl=None):
    tb = resource_tables(s, hard_traffic(ht, xt, tb_cu, gstack), ht.n_phases)
    return jnp.sum((estimate_phases(tb) if bl is None else estimate_phases_bg(tb, bl))[0])


@jax.jit
def _est_batch(s, ht, xt, tb_cu, gstack, bl=None):
    return jax.lax.map(lambda a: _est_one(s, ht, *a, bl), (xt, tb_cu, gstack))


def estimate_points(s: System, ht: HardTable, xt, tb_cu, gstack, bl=None) -> np.ndarray:
    """Path-model estimate (ns) of a batch of repaired points ``[B, .]`` (one compiled program per B).
    ``bl``: a concurrent kernel's :class:`~nuna_jax.models.contention.BackgroundLoad` (computed once,
    :mod:`.gemm`; docs/analytical.md 2.7), or ``None`` (no background: the program without it)."""
    if bl is None:
        return np.asarray(_est_batch(s, ht, jnp.asarray(xt), jnp.asarray(tb_cu), jnp.asarray(gstack)))
    return np.asarray(_est_batch(s, ht, jnp.asarray(xt), jnp.asarray(tb_cu), jnp.asarray(gstack), bl))
