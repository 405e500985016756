"""Policies, Algorithm 1 and NAR domains (NUNA sections 4.1, 4.2, 5.3)."""

import numpy as np
import pytest

from nuna_jax.msccl import load_msccl
from nuna_jax.nar import nar_domains
from nuna_jax.placement import POLICIES, PageMap, PolicyOptions, algorithm1, logical_allocation, place
from nuna_jax.plans import make_plan
from nuna_jax.geometry import cu_router, hops as hop_count, port_router, stack_router
from nuna_jax.presets import preset
from nuna_jax.lowering import build_traffic
from pathlib import Path

DATA = Path(__file__).parent / "data"
S8 = preset("table2")


def _independent_limits(s, plan):
    """R_max by hand: 700 requests per CU; stack pages = max(floor(2500*150/4096), ceil(pages/16))."""
    demand = np.minimum(np.ceil(plan.tb_bytes() / 256.0), 700)
    pages = plan.address_pages(4096)
    return demand, max(375000 // 4096, -(-pages // 16))


CASES = [
    ("allgather", 8, 10**6, None, "direct"),
    ("allgather", 8, 10**6, 1008, "direct"),
    ("alltoall", 8, 10**7, 20, "direct"),
    ("allreduce", 4, 10**8, None, "direct"),
    ("reducescatter", 5, 10**5, 9, "ring"),
]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", CASES)
def test_capacity_limits_never_exceeded(policy, case):
    """CU budget under the default options; the fixed page budget under stack_budget="pages"."""
    coll, n, size, tbs, alg = case
    s = preset("table2", n_gpus=n)
    plan = make_plan(coll, n, size, tbs_per_gpu=tbs, algorithm=alg)
    pl = place(s, plan, policy, PolicyOptions(stack_budget="pages"))
    demand, cap = _independent_limits(s, plan)
    has_steps = np.bincount(plan.step_tb, minlength=plan.n_tbs) > 0
    assert np.all(pl.tb_cu[has_steps] >= 0)
    load = np.zeros((n, s.n_cus))
    np.add.at(load, (plan.tb_gpu[has_steps], pl.tb_cu[has_steps]), demand[has_steps])
    assert load.max() <= 700
    for g in range(n):
        row = pl.page_stack[g]
        assert np.bincount(row[row >= 0], minlength=16).max() <= cap


def test_nar_domains_by_hand():
    s = S8
    d2 = nar_domains(s, 2)
    assert [list(p) for p in d2.ports] == [list(range(72)), list(range(72, 144))]
    d4 = nar_domains(s, 4)
    assert [list(p) for p in d4.ports] == [list(range(36)), list(range(36, 72)),
                                           list(range(108, 144)), list(range(72, 108))]
    d3 = nar_domains(s, 3)  # odd: the middle domain wraps around the bottom edge
    assert list(d3.ports[0]) == list(range(48))
    assert list(d3.ports[1]) == list(range(48, 72)) + list(range(120, 144))
    assert list(d3.ports[2]) == list(range(72, 120))
    d12 = nar_domains(s, 12)  # one edge router each (12 ports per router on Table 2)
    pr = port_router(s)
    assert all(len(set(pr[p])) == 1 for p in d12.ports)
    assert len(nar_domains(s, 5).flat) == 144 and sorted(nar_domains(s, 5).flat) == list(range(144))
    with pytest.raises(ValueError, match="nar_granularity"):
        nar_domains(s, 0)


@pytest.mark.parametrize("base,nar", [("UA", "UA+NAR"), ("NUMA", "NUMA+NAR"), ("NAP", "NAP+NAR")])
def test_nar_granularity_one_is_baseline_hashing(base, nar):
    plan = make_plan("allgather", 8, 3 * 10**5 + 8 * 37, tbs_per_gpu=11)
    a = build_traffic(S8, plan, place(S8, plan, base, nar_granularity=1))
    b = build_traffic(S8, plan, place(S8, plan, nar, nar_granularity=1))
    for k in ("src_gpu", "cu", "read_stack", "port", "dst_gpu", "dst_stack", "flits", "bytes", "tb", "step"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    # and the baseline hash is (dst address // 256) mod 144 for every flit (hand check on step 0)
    r = 0
    d0 = plan.dst_addr(4096)[r] // 256
    f = int(np.ceil(plan.nbytes[r] / 256))
    want = np.bincount((d0 + np.arange(f)) % 144, minlength=144)
    got = np.bincount(a.port[(a.tb == plan.step_tb[r]) & (a.step == 0)],
                      weights=a.flits[(a.tb == plan.step_tb[r]) & (a.step == 0)], minlength=144)
    assert np.array_equal(want, got)


def test_figure7_two_gpu_allgather():
    """Algorithm 1 on the two-GPU All-Gather: disjoint groups, round-robin over 2 domains."""
    s = preset("table2", n_gpus=2)
    for plan in (make_plan("allgather", 2, 2 * 8192, tbs_per_gpu=1),
                 load_msccl(DATA / "ag2_direct.xml", 2 * 8192)):
        groups = logical_allocation(plan)
        assert [list(g) for g in groups] == [[0], [1]]
        ch = [set(t for r in plan.steps_of(int(g[0])) for t in plan.chunk_tuples(r)) for g in groups]
        assert ch[0].isdisjoint(ch[1])
        tb_cu, tb_dom, pages, _, gdom = algorithm1(s, plan, 2)
        ps = pages.ps
        assert list(gdom) == [1, 0]  # line 12: nar = (nar + 1) mod 2, starting from nar = 0
        x = cu_router(s)[tb_cu] % s.mesh_cols
        assert list(x) == [23, 0]  # domain 1 = east ports (column 23), domain 0 = west (column 0)
        # stacks on column 22 (ids 7, 15) are nearest the east edge, column 1 (0, 8) the west
        sr = stack_router(s) % s.mesh_cols
        src0 = ps[0, plan.src_addr(4096)[0] // 4096]
        dst1 = ps[1, plan.dst_addr(4096)[0] // 4096]
        assert sr[src0] == 22 and sr[dst1] == 22
        src1 = ps[1, plan.src_addr(4096)[1] // 4096]
        dst0 = ps[0, plan.dst_addr(4096)[1] // 4096]
        assert sr[src1] == 1 and sr[dst0] == 1


def test_logical_allocation_joins_most_shared_group():
    # direct All-Gather with 14 threadblocks on 8 GPUs: 2 pieces per peer; the 7
    # threadblocks reading input piece k of GPU g share that chunk -> one group each
    # (piece k of peer stream j goes to threadblock 7k + j)
    plan = make_plan("allgather", 8, 8 * 2000, tbs_per_gpu=14)
    groups = logical_allocation(plan)
    assert len(groups) == 16 and all(len(g) == 7 for g in groups)
    assert list(groups[0]) == [0, 1, 2, 3, 4, 5, 6]  # piece 0 of every peer stream: tbs k*7 + j, k = 0


def _hops(s, t):
    cr, pr, sr = cu_router(s), port_router(s), stack_router(s)
    w = t.flits
    return (np.average(hop_count(s, cr[t.cu], pr[t.port]), weights=w),
            np.average(hop_count(s, pr[t.port], sr[t.dst_stack]), weights=w))


def test_nap_nar_hops_far_below_ua():
    """8 GPUs, 1 MB All-Gather, 7 threadblocks/GPU (measured: UA 14.0 / 14.3 hops
    CU->port / port->stack; NAP+NAR 1.5 / 3.8)."""
    plan = make_plan("allgather", 8, 10**6)
    ua = _hops(S8, build_traffic(S8, plan, place(S8, plan, "ua")))
    nn = _hops(S8, build_traffic(S8, plan, place(S8, plan, "nap+nar")))
    # UA hashes over all ports from CUs spread over the die: about half the mesh (24/2 + 3)
    assert 12 < ua[0] < 16 and 12 < ua[1] < 16
    assert nn[0] < 0.2 * ua[0]
    assert nn[1] < 0.4 * ua[1]


def test_impossible_requests():
    plan = make_plan("allgather", 8, 10**9, tbs_per_gpu=1008)  # 485 requests each: 1 per CU, 576 CUs
    for pol in ("ua", "numa", "nap+nar"):
        with pytest.raises(ValueError, match="more threadblocks than the CUs can hold"):
            place(S8, plan, pol)
    with pytest.raises(ValueError, match="unknown policy"):
        place(S8, make_plan("allgather", 8, 1000), "fastest")
    with pytest.raises(ValueError, match="n_gpus"):
        place(preset("table2", n_gpus=4), make_plan("allgather", 8, 1000), "ua")


def test_policy_names_case_insensitive_and_distinct():
    plan = make_plan("allgather", 8, 10**5)
    for name in POLICIES:
        assert place(S8, plan, name.lower()).policy == name
    assert POLICIES == ("UA", "UA+NAR", "NUMA", "NUMA+NAR", "NAP", "NAP+NAR", "NAP*")


def test_ua_spreads_over_dies_and_numa_near_memory():
    plan = make_plan("allgather", 8, 10**6, tbs_per_gpu=8)
    ua = place(S8, plan, "ua")
    die = (cu_router(S8)[ua.tb_cu[:8]] % 24) // 6
    assert list(die) == [0, 1, 2, 3, 0, 1, 2, 3]
    # NAP* keeps NAP's threadblocks but round-robin pages
    nap, star = place(S8, plan, "nap"), place(S8, plan, "nap*")
    assert np.array_equal(nap.tb_cu, star.tb_cu)
    assert np.array_equal(star.page_stack[0], np.arange(star.page_stack.shape[1]) % 16)


# ---------------------------------------------------------------------------
# Algorithm 1's stack budget as section 4.2.2 writes it (lines 16-18)
# ---------------------------------------------------------------------------
def _small_bdp_system(pages_per_window=3):
    """Table 2 with the HBM latency cut so that R_max = bw x latency is exactly 3 pages (12,288 B)."""
    s = preset("table2", n_gpus=2)
    return s.replace(hbm_latency_ns=pages_per_window * 4096 / float(s.hbm_bw_bytes_per_ns))


def test_stack_budget_served_hand_counted():
    """R[stack] -= cs for every chunk served, also a chunk whose pages another threadblock placed."""
    s = _small_bdp_system()
    plan = make_plan("allgather", 2, 16 * 4096, tbs_per_gpu=1)
    pm = PageMap(s, plan)
    order = np.array([5, 6, 7])
    assert pm.window == 3 * 4096
    pm.place(0, 0, 2 * 4096, order)              # first reader: pages 0, 1 on stack 5 (1 page left)
    assert list(pm.ps[0, :2]) == [5, 5] and pm.rem[0, 5] == 4096
    pm.place(0, 0, 2 * 4096, np.array([6, 7]))    # second reader of the same chunk: stack 5 charged again
    assert list(pm.ps[0, :2]) == [5, 5] and pm.rem[0, 5] == -4096
    pm.place(0, 2 * 4096, 2 * 4096, order)        # stack 5 is over budget: both pages on 6
    assert list(pm.ps[0, 2:4]) == [6, 6] and pm.rem[0, 6] == 4096
    pm.place(0, 4 * 4096, 3 * 4096, order)        # 1 page fits 6, then 2 on 7
    assert list(pm.ps[0, 4:7]) == [6, 7, 7] and pm.rem[0, 7] == 4096
    assert pm.windows[0] == 1
    pm.place(0, 7 * 4096, 2 * 4096, order)        # page 7 on 7; page 8 fits nowhere: a new window
    assert pm.ps[0, 7] == 7 and pm.windows[0] == 2
    assert pm.ps[0, 8] == 5 and pm.rem[0, 5] == -4096 + 3 * 4096 - 4096
    pm.place(1, 100, 1000, order)                 # a sub-page chunk is charged its own bytes
    assert pm.ps[1, 0] == 5 and pm.rem[1, 5] == 3 * 4096 - 1000
    pm.place(1, 1100, 2996, np.array([6]))        # a second chunk packed into the same page
    assert pm.ps[1, 0] == 5 and pm.rem[1, 5] == 3 * 4096 - 3996


def test_stack_budget_pages_hand_counted():
    """The fixed page budget (D6): a page counts once, when placed; a second reader costs nothing."""
    s = _small_bdp_system()
    plan = make_plan("allgather", 2, 16 * 4096, tbs_per_gpu=1)
    pm = PageMap(s, plan, 3, budget="pages")
    order = np.array([5, 6, 7])
    pm.place(0, 0, 2 * 4096, order)
    pm.place(0, 0, 2 * 4096, np.array([6, 7]))
    pm.place(0, 2 * 4096, 2 * 4096, order)        # stack 5 still has one page
    assert list(pm.ps[0, :4]) == [5, 5, 5, 6]


class _SlowServedPages:
    """Independent slow reference of the served budget: one page at a time, in plain Python."""

    def __init__(self, s, plan, cap_pages=None, budget="served"):
        self.ps = np.full((plan.n_gpus, plan.address_pages(s.page_bytes)), -1, np.int16)
        self.pd = np.full(self.ps.shape, -1, np.int16)
        self.P = int(s.page_bytes)
        self.R = max(round(float(s.hbm_bw_bytes_per_ns) * float(s.hbm_latency_ns)), self.P)
        self.rem = [[self.R] * s.n_hbm_stacks for _ in range(plan.n_gpus)]
        self.windows = np.ones(plan.n_gpus, np.int64)
        self.budget = budget

    def place(self, gpu, addr, nbytes, order, domain=0):
        P, rem = self.P, self.rem[gpu]
        spans = []
        for p in range(addr // P, (addr + nbytes - 1) // P + 1):
            lo, hi = max(addr, p * P), min(addr + nbytes, (p + 1) * P)
            spans.append((p, hi - lo))
        for p, b in spans:                         # stacks already holding the chunk are charged first
            if self.ps[gpu, p] >= 0:
                rem[self.ps[gpu, p]] -= b
        for p, b in spans:
            if self.ps[gpu, p] >= 0:
                continue
            fit = [st for st in order if rem[st] >= b]
            while not fit:
                for st in range(len(rem)):
                    rem[st] += self.R
                self.windows[gpu] += 1
                fit = [st for st in order if rem[st] >= b]
            self.ps[gpu, p], self.pd[gpu, p] = fit[0], domain
            rem[fit[0]] -= b


@pytest.mark.parametrize("case", [("allgather", 8, 10**6, None), ("allgather", 4, 3 * 10**6, 9),
                                  ("allreduce", 4, 2 * 10**6, None), ("alltoall", 8, 10**6, 20),
                                  ("allgather", 8, 10**5, 1008)])
def test_stack_budget_served_matches_slow_reference(case, monkeypatch):
    """NAP+NAR's page map under the vectorized PageMap equals the page-at-a-time reference."""
    import nuna_jax.placement as P
    coll, n, size, tbs = case
    s = preset("table2", n_gpus=n)
    plan = make_plan(coll, n, size, tbs_per_gpu=tbs, slot_align_bytes=1)
    fast = place(s, plan, "nap+nar", nar_granularity=4)
    monkeypatch.setattr(P, "PageMap", _SlowServedPages)
    monkeypatch.setattr(P, "ALGORITHM1_ENGINE", "python")   # the reference loop reads the slow map
    slow = place(s, plan, "nap+nar", nar_granularity=4)
    assert np.array_equal(fast.page_stack, slow.page_stack)
    assert np.array_equal(fast.stack_windows, slow.stack_windows)


def _bytes_served(plan, page_stack, n_stacks, P=4096):
    """[n_gpus, n_stacks] bytes every stack serves: each step reads its source chunk and writes its
    destination chunk, each page's share charged to the stack holding the page."""
    out = np.zeros((plan.n_gpus, n_stacks))
    for addrs, gpus in ((plan.src_addr(P), plan.src_gpu), (plan.dst_addr(P), plan.dst_gpu)):
        for r in range(plan.n_steps):
            a, b, g = int(addrs[r]), int(plan.nbytes[r]), int(gpus[r])
            pages = np.arange(a // P, (a + b - 1) // P + 1)
            share = np.minimum(a + b, (pages + 1) * P) - np.maximum(a, pages * P)
            np.add.at(out[g], page_stack[g, pages], share)
    return out


def test_stack_budget_served_balances_what_stacks_serve():
    """64 MB All-Gather (8 GPUs): the source chunk is read 7 times; charging every read (as written)
    keeps the busiest stack's served bytes nearer the mean than charging each page once."""
    s = preset("table2", n_gpus=8)
    plan = make_plan("allgather", 8, 64 * 10**6)
    imbalance = {}
    for b in ("served", "pages"):
        pl = place(s, plan, "nap+nar", PolicyOptions(stack_budget=b), nar_granularity=4)
        served = _bytes_served(plan, pl.page_stack, 16)
        imbalance[b] = float((served.max(axis=1) / served.mean(axis=1)).max())
    assert pl.stack_budget == "pages"
    assert imbalance["served"] < imbalance["pages"]


def test_describe_max_tbs_per_cu_counts_each_gpu_cu_pair():
    """``max_tbs_per_cu``: the most threadblocks on one (GPU, CU), counted pair by pair."""
    from collections import Counter

    from nuna_jax.placement import PolicyOptions, place
    from nuna_jax.presets import preset
    from nuna_jax.scenario import generated_plan
    for n, tbs, sharing in [(2, 1008, "spread"), (8, 28, "requests"), (8, 7, "spread")]:
        s = preset("table2", n_gpus=n)
        pl = place(s, generated_plan(s, "allgather", 10**6, tbs_per_gpu=tbs), "UA", PolicyOptions(cu_sharing=sharing))
        used = pl.tb_cu >= 0
        ref = max(Counter(zip(pl.tb_gpu[used].tolist(), pl.tb_cu[used].tolist())).values())
        assert pl.describe()["max_tbs_per_cu"] == ref
        assert ref == (2 if tbs > s.n_cus else 1)         # 1,008 threadblocks on 576 CUs: two share
