"""Policies, Algorithm 1 and NAR domains (NUNA sections 4.1, 4.2, 5.3)."""

import numpy as np
import pytest

from nuna_jax.msccl import load_msccl
from nuna_jax.nar import nar_domains
from nuna_jax.placement import POLICIES, algorithm1, logical_allocation, place
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
    coll, n, size, tbs, alg = case
    s = preset("table2", n_gpus=n)
    plan = make_plan(coll, n, size, tbs_per_gpu=tbs, algorithm=alg)
    pl = place(s, plan, policy)
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
        tb_cu, tb_dom, ps, _, gdom, _ = algorithm1(s, plan, 2)
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
