"""The compiled Algorithm 1 loop (``algorithm1_kernel``) against the readable reference loop
(``placement.algorithm1(engine="python")``): the same threadblock CUs, domains, page stacks,
page domains, stack budgets and windows, on plans that exercise every branch of the page
budget (sub-page chunks, chunks across page boundaries, refills, the fixed page budget)."""

import numpy as np
import pytest

from nuna_jax.placement import algorithm1
from nuna_jax.plans import make_plan
from nuna_jax.presets import preset

CASES = [  # (collective, gpus, per-GPU bytes, threadblocks per GPU, slot alignment (None: page), nar_max)
    ("allgather", 8, 10**6, None, None, 4),
    ("allgather", 8, 10**6, 28, 1, 3),          # unaligned slots: chunks straddle pages
    ("allgather", 4, 3 * 10**6 + 38, 9, 1, 2),
    ("allreduce", 4, 2 * 10**6, None, None, 8),
    ("allreduce", 8, 777_778, 14, 2, 5),
    ("alltoall", 8, 10**6, 20, 1, 4),
    ("alltoall", 2, 5000, 3, 1, 1),             # sub-page chunks
    ("allgather", 8, 10**5, 1008, None, 6),     # many tiny chunks per page
    ("allgather", 8, 64 * 10**6, None, None, 4),  # many windows (refills)
    ("reducescatter", 4, 10**6 + 6, 5, 2, 3),
]


def _run(s, plan, nar_max, engine, **kw):
    tb_cu, tb_dom, pages, groups, gdom = algorithm1(s, plan, nar_max, engine=engine, **kw)
    out = {"tb_cu": tb_cu, "tb_dom": tb_dom, "group_domain": gdom,
           "groups": np.concatenate(groups) if groups else np.zeros(0)}
    if pages is not None:
        out.update(ps=pages.ps, pd=pages.pd, rem=pages.rem, windows=pages.windows)
    return out


@pytest.mark.parametrize("budget", ["served", "pages"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}g-{c[2]}B-{c[3]}tb")
def test_compiled_equals_reference(case, budget):
    coll, n, size, tbs, align, nar_max = case
    s = preset("table2", n_gpus=n)
    plan = make_plan(coll, n, size, tbs_per_gpu=tbs, slot_align_bytes=int(s.page_bytes) if align is None else align)
    ref = _run(s, plan, nar_max, "python", stack_budget=budget)
    got = _run(s, plan, nar_max, "compiled", stack_budget=budget)
    assert set(ref) == set(got)
    for k in ref:
        assert np.array_equal(ref[k], got[k]), k
    assert (got["tb_cu"][np.bincount(plan.step_tb, minlength=plan.n_tbs) > 0] >= 0).all()


def test_compiled_without_memory_equals_reference():
    s = preset("table2", n_gpus=8)
    plan = make_plan("allgather", 8, 10**6, tbs_per_gpu=112)
    ref = _run(s, plan, 4, "python", place_memory=False)
    got = _run(s, plan, 4, "compiled", place_memory=False)
    assert "ps" not in got
    for k in ref:
        assert np.array_equal(ref[k], got[k]), k


def test_compiled_refuses_what_the_reference_refuses():
    """More threadblocks than the CUs hold: both engines raise the same error."""
    s = preset("table2", n_gpus=8)
    plan = make_plan("allgather", 8, 10**9, tbs_per_gpu=1008)   # 485 requests each: 1 per CU, 576 CUs
    msgs = []
    for engine in ("python", "compiled"):
        with pytest.raises(ValueError, match="more threadblocks than the CUs can hold") as e:
            algorithm1(s, plan, 4, engine=engine)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]


def test_unknown_engine():
    s = preset("table2", n_gpus=2)
    with pytest.raises(ValueError, match="engine"):
        algorithm1(s, make_plan("allgather", 2, 8192), 1, engine="fortran")


def test_logical_groups_match_the_python_loop():
    """The compiled logical allocation (algorithm1_kernel.logical_groups) gives the groups of the
    dictionary loop (placement._logical_allocation_python), members and order, on generated plans
    of every collective and algorithm and on MSCCL plans (several chunks a step)."""
    import glob
    import itertools

    from nuna_jax import placement as P
    from nuna_jax.msccl import load_msccl
    from nuna_jax.plans import ALGORITHMS, COLLECTIVES, make_plan
    plans = [make_plan(c, n, z, algorithm=a, tbs_per_gpu=t, slot_align_bytes=4096) for c, a, n, z, t in
             itertools.product(COLLECTIVES, ALGORITHMS, [2, 5], [999, 3_000_001], [None, 1, 28])]
    plans += [load_msccl(f, 1 << 20) for f in sorted(glob.glob("/work/shared/data/msccl/*.xml"))]
    for p in plans:
        got, ref = P.logical_allocation(p), P._logical_allocation_python(p)
        assert [g.tolist() for g in got] == [g.tolist() for g in ref]
        assert P.logical_allocation(p)[0] is got[0]       # kept per plan (NAP's granularity search)


def test_ua_dispatch_matches_the_python_loop():
    """UA's compiled dispatch (algorithm1_kernel.ua_dispatch) places every threadblock on the CU
    the Python loop (placement._place_ua_python) picks, CUs shared or not, and fails on the same
    threadblock when the CUs are full."""
    import itertools

    from nuna_jax import placement as P
    for n, tbs, sharing in itertools.product([2, 8], [None, 28, 700, 1008], ["spread", "requests"]):
        s = preset("table2", n_gpus=n)
        plan = make_plan("allgather", n, 10**6, tbs_per_gpu=tbs, slot_align_bytes=4096)
        demand = P.cu_demand(s, plan, sharing)
        np.testing.assert_array_equal(P._place_ua(s, plan, demand), P._place_ua_python(s, plan, demand))
    s = preset("table2", n_gpus=2)
    plan = make_plan("allgather", 2, 10**7, tbs_per_gpu=600, slot_align_bytes=4096)
    demand = np.full(plan.n_tbs, s.max_outstanding_per_cu, np.int64)    # one CU each: 576 CUs, 600 tbs
    with pytest.raises(ValueError) as new:
        P._place_ua(s, plan, demand)
    with pytest.raises(ValueError) as ref:
        P._place_ua_python(s, plan, demand)
    assert str(new.value) == str(ref.value)


def test_numa_dispatch_matches_the_python_loop():
    """NUMA's vectorized page histograms and compiled first fit (placement._place_numa) give the
    CUs of the one-threadblock-at-a-time loop (placement._place_numa_python), on generated plans
    of several collectives, sizes and threadblock counts, and on unaligned slots."""
    import itertools

    from nuna_jax import placement as P
    for coll, n, size, tbs, align in itertools.product(["allgather", "allreduce", "alltoall"], [2, 8],
                                                      [10**5, 3 * 10**6 + 38], [None, 28, 1008], [1, 4096]):
        s = preset("table2", n_gpus=n)
        plan = make_plan(coll, n, size, tbs_per_gpu=tbs, slot_align_bytes=align)
        demand, ps, groups = P.cu_demand(s, plan), P.round_robin_pages(s, plan), P.logical_allocation(plan)
        np.testing.assert_array_equal(P._place_numa(s, plan, demand, ps, groups),
                                      P._place_numa_python(s, plan, demand, ps, groups))
