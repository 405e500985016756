"""The issue-19 search space (nuna_jax.optim.space / point): page groups as their own variables,
the factored tables, the straight-through gradient, and the descent against its ablation.

Independent references: ``lowering.build_traffic`` of the assembled placement and the public
``estimate_ns`` / ``smooth_estimate_ns`` (the factored tables must give the same estimate),
NAP+NAR from ``placement.place`` (the all-zero point must reproduce it row for row), budgets
recounted from the raw arrays, finite differences of the smooth estimate with one alternative
row set added by hand, and an exhaustive enumeration of a tiny space.
"""

import itertools
from collections import Counter

import jax.numpy as jnp
import numpy as np
import pytest

from nuna_jax.lowering import build_traffic
from nuna_jax.models.contention import estimate_ns, smooth_estimate_ns
from nuna_jax.optim.driver import optimize, prepare
from nuna_jax.optim.point import Evaluator, move_gradient
from nuna_jax.optim.space import assemble_point, estimate_points, repair
from nuna_jax.plans import make_plan
from nuna_jax.presets import preset
from nuna_jax.traffic import FIELDS, Traffic

MONO3 = preset("mono", n_gpus=3)


def _case(gpus, coll, size, tbs=2):
    s = preset("mono", n_gpus=gpus)
    return s, make_plan(coll, gpus, size, tbs_per_gpu=tbs, slot_align_bytes=s.page_bytes)


def _random_points(sp, n, seed):
    rng = np.random.default_rng(seed)
    return [np.where(sp.var_n > 1, rng.integers(0, sp.var_n), 0) for _ in range(n)]


CASES = [(3, "allgather", 30_000), (3, "alltoall", 300_000), (3, "allreduce", 60_000)]


@pytest.mark.parametrize("gpus,coll,size", CASES)
def test_factored_estimate_equals_lowered_estimate(gpus, coll, size):
    """The gathered rows of a point estimate exactly what build_traffic of its placement does."""
    s, plan = _case(gpus, coll, size)
    P = prepare(s, plan, nar_granularity=3, n_candidates=3, n_stack_candidates=3, group_pages=2)
    sp, gid, ht = P["sp"], P["gid"], P["ht"]
    pts = [np.zeros(sp.n_vars, np.int64)] + _random_points(sp, 5, 0)
    diff = []
    for x in pts:
        cu, st = repair(s, plan, sp, x)
        fast = float(estimate_points(s, ht, x[None, :sp.n_tbs], cu[None], st[None])[0])
        ref = float(estimate_ns(s, build_traffic(s, plan, assemble_point(s, plan, sp, gid, x))))
        assert fast == pytest.approx(ref, rel=1e-5), x
        diff.append(ref)
    assert len(set(np.round(diff, 3))) > 1   # the points differ: the check is not vacuous


def test_all_zero_point_is_nap_nar_row_for_row():
    plan = make_plan("allgather", 8, 10**6)
    s = preset("table2")
    P = prepare(s, plan)
    sp, gid = P["sp"], P["gid"]
    a = build_traffic(s, plan, assemble_point(s, plan, sp, gid, np.zeros(sp.n_vars, np.int64)))
    from nuna_jax.scenario import search_nar_granularity
    b = build_traffic(s, plan, search_nar_granularity(s, plan, "nap+nar")[0])
    for k in FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(a, k)), np.asarray(getattr(b, k)), err_msg=k)
    assert sp.n_grp > plan.n_gpus   # the 125 kB shards are split into several page groups


@pytest.mark.parametrize("gpus,coll,size", CASES)
def test_every_repaired_point_holds_both_budgets(gpus, coll, size):
    """Recount CU requests and pages per stack from tb_cu / page_stack, against the budgets."""
    s, plan = _case(gpus, coll, size)
    P = prepare(s, plan, nar_granularity=3, n_candidates=3, n_stack_candidates=4, group_pages=1)
    sp, gid = P["sp"], P["gid"]
    # every group on its candidate 1: many groups on few stacks (the page budget binds)
    pts = [np.where(sp.var_n > 1, 1, 0), np.where(sp.var_n > 1, sp.var_n - 1, 0)] + _random_points(sp, 3, 1)
    dem = np.minimum(-(-plan.tb_bytes() // s.flit_bytes), s.max_outstanding_per_cu)
    for x in pts:
        pl = assemble_point(s, plan, sp, gid, x)
        load = {}
        for tb in range(plan.n_tbs):
            if dem[tb] > 0:
                assert pl.tb_cu[tb] >= 0
                key = (int(plan.tb_gpu[tb]), int(pl.tb_cu[tb]))
                load[key] = load.get(key, 0) + int(dem[tb])
        assert max(load.values()) <= s.max_outstanding_per_cu
        touched = np.zeros_like(pl.page_stack, bool)
        pb = s.page_bytes
        for addr, gpu in ((plan.src_addr(pb), plan.src_gpu), (plan.dst_addr(pb), plan.dst_gpu)):
            for a, n, g in zip(addr, plan.nbytes, gpu):
                touched[g, a // pb:(a + n - 1) // pb + 1] = True
        for g in range(plan.n_gpus):
            row = pl.page_stack[g][touched[g]]
            assert row.min() >= 0
            assert np.bincount(row, minlength=s.n_hbm_stacks).max() <= sp.cap_pages


def test_move_gradient_matches_finite_differences_of_added_rows():
    """dT/dP[t, c] for a candidate c the point does not take = the derivative of the smooth estimate
    when the rows of threadblock t at candidate c (lowered by build_traffic) are added with weight eps;
    likewise dT/dQ[q, k] with the rows reading group q moved to stack k."""
    s, plan = _case(3, "allgather", 300_000)
    P = prepare(s, plan, nar_granularity=3, n_candidates=3, n_stack_candidates=8, group_pages=64)
    sp, gid, tt = P["sp"], P["gid"], P["tt"]
    x = _random_points(sp, 1, 3)[0]
    x[sp.n_tbs:] = 0     # NAP's stacks: a point the stack budget's repair leaves as it is
    cu, st = repair(s, plan, sp, x)
    np.testing.assert_array_equal(st, sp.grp_cand[:, 0])
    tau = 20.0
    _, gP, gQ = move_gradient(s, tt, jnp.asarray(x[:sp.n_tbs]), jnp.asarray(x[sp.n_tbs:]), tau,
                              jnp.asarray(cu), jnp.asarray(st))
    gP, gQ = np.asarray(gP), np.asarray(gQ)
    base = build_traffic(s, plan, assemble_point(s, plan, sp, gid, x))

    def with_rows(extra, eps):
        cols = {k: np.concatenate([np.asarray(getattr(base, k)), np.asarray(getattr(extra, k))]) for k in FIELDS}
        cols["weight"] = np.concatenate([np.ones(base.n_flows), np.full(extra.n_flows, eps)])
        if eps == 0.0:
            cols = {k: v[:base.n_flows] for k, v in cols.items()}
        return float(smooth_estimate_ns(s, Traffic(**cols), tau))

    def fd(extra):
        # in float64 and at a tiny weight: a flow of weight w enters the smooth maxima as w^(tau_w/tau)
        # (docs/model.md, "Flow weight"), flat at 0, so the derivative at 0 is the busy time's (linear)
        import jax
        prev = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", True)
        try:
            eps = 1e-7
            return (with_rows(extra, eps) - with_rows(extra, 0.0)) / eps
        finally:
            jax.config.update("jax_enable_x64", prev)

    checked = 0
    for t in range(plan.n_tbs):
        c = (x[t] + 1) % 3
        y = x.copy()
        y[t] = c
        alt = build_traffic(s, plan, assemble_point(s, plan, sp, gid, y))
        own = np.asarray(alt.tb) == t
        extra = Traffic(**{k: np.asarray(getattr(alt, k))[own] for k in FIELDS})
        ref = fd(extra)
        assert gP[t, c] == pytest.approx(ref, rel=2e-2, abs=1e-3)
        checked += abs(ref) > 1e-3
    # page groups: group q moved to its candidate stack k, where neither q's stack nor k holds
    # another group of that GPU (so no row of the point merges or splits): the rows that reading
    # or writing q produce at stack k are exactly the rows of the moved point not in the point's
    keys = [f for f in FIELDS if f != "weight"]

    def rows(t):   # a multiset: distinct residues can give identical rows
        return Counter(tuple(np.asarray(getattr(t, f))[i].item() for f in keys) for i in range(t.n_flows))

    rb = rows(base)
    n_grp_checked = 0
    for q in range(sp.n_grp):
        others = set(st[(sp.grp_gpu == sp.grp_gpu[q]) & (np.arange(sp.n_grp) != q)].tolist())
        free = [k for k in range(sp.K) if sp.grp_cand[q, k] not in others and sp.grp_cand[q, k] != st[q]]
        if st[q] in others or not free:
            continue
        k = free[0]
        y = x.copy()
        y[sp.n_tbs + q] = k
        el = list((rows(build_traffic(s, plan, assemble_point(s, plan, sp, gid, y))) - rb).elements())
        extra = Traffic(**{f: np.array([r[keys.index(f)] for r in el]) if f != "weight" else np.ones(len(el))
                           for f in FIELDS})
        assert extra.n_flows > 0
        ref = fd(extra)
        assert gQ[q, k] == pytest.approx(ref, rel=2e-2, abs=1e-3), q
        n_grp_checked += 1
        checked += abs(ref) > 1e-3
    assert n_grp_checked >= 1
    assert checked >= 1   # at least one derivative is not 0: the check is not vacuous


def test_tiny_space_search_finds_enumerated_optimum():
    """Every point of a tiny space enumerated (3^4 threadblock choices x 2^8 page-group stacks); the
    search with 250 evaluations (1.2 % of the points) reaches the optimum, which NAP+NAR is not."""
    s, plan = _case(2, "allgather", 30_000)
    kw = dict(nar_granularity=3, n_candidates=3, n_stack_candidates=2, group_pages=8)
    P = prepare(s, plan, **kw)
    sp, ht = P["sp"], P["ht"]
    pts = np.array(list(itertools.product(*[range(n) for n in sp.var_n])), np.int64)
    assert len(pts) == 3 ** 4 * 2 ** 8
    rep = [repair(s, plan, sp, x) for x in pts]
    vals = np.concatenate([estimate_points(s, ht, pts[i:i + 1024, :sp.n_tbs],
                                           np.stack([r[0] for r in rep[i:i + 1024]]),
                                           np.stack([r[1] for r in rep[i:i + 1024]]))
                           for i in range(0, len(pts), 1024)])
    best, nap = vals.min(), vals[0]
    assert best < nap * (1 - 1e-3)
    r = optimize(s, plan, budget=250, baselines=False, prepared=P, n_simulate=1)
    assert r["budget"]["used"] <= 250
    assert r["gap"]["best_estimate_ns"] == pytest.approx(best, rel=1e-6)
    assert r["capacities"]["ok"]
    # one simulator call for the best estimate, and NAP+NAR (the reference) beside it in the pool
    kinds = [p["kind"] for p in r["pool"]]
    assert len(kinds) == 2 and kinds[-1] == "algorithm1", kinds
    assert r["pool"][-1]["simulated_ns"] == r["nap_nar_simulated_ns"]
    assert r["simulated_ns"] == min(p["simulated_ns"] for p in r["pool"])


def test_stack_repair_cannot_fail_when_nap_fills_every_stack():
    """Two stacks of 10 pages, both filled by NAP (groups of 6 + 4 and 4 + 6 pages); the point moves
    the 4-page group 1 onto stack 1.  Greedy first fit from empty stacks (this search's first repair)
    puts groups 0-2 on stacks 0, 1, 1 and then has no stack with room for group 3's 6 pages; the
    repair from NAP's stacks keeps group 1 where it is (stack 1 has no room) and holds the budget."""
    import types

    from nuna_jax.optim.space import _repair_stacks
    sp = types.SimpleNamespace(grp_cand=np.array([[0, 1], [0, 1], [1, 0], [1, 0]]), grp_gpu=np.zeros(4, np.int64),
                               grp_pages=np.array([6, 4, 4, 6]), cap_pages=10, K=2)
    s, plan = types.SimpleNamespace(n_hbm_stacks=2), types.SimpleNamespace(n_gpus=1)
    st = _repair_stacks(s, plan, sp, np.array([0, 1, 0, 0]))
    np.testing.assert_array_equal(st, [0, 0, 1, 1])
    # an empty third stack: the moves that fit are made (groups 0 and 1 fill it), group 2's is not
    sp.grp_cand = np.array([[0, 2], [0, 2], [1, 2], [1, 2]])
    st = _repair_stacks(types.SimpleNamespace(n_hbm_stacks=3), plan, sp, np.array([1, 1, 1, 0]))
    np.testing.assert_array_equal(st, [2, 2, 1, 1])


def test_fixed_seed_bit_identical():
    s, plan = _case(2, "allgather", 30_000)
    kw = dict(budget=120, nar_granularity=3, n_candidates=3, n_stack_candidates=2, seed=5)
    r1, r2 = optimize(s, plan, **kw), optimize(s, plan, **kw)
    assert r1["choice"] == r2["choice"] and r1["baselines"] == r2["baselines"]
    np.testing.assert_array_equal(r1["placement"].page_stack, r2["placement"].page_stack)
    for b in r1["baselines"].values():
        assert b["path_model_evals"] <= 120 and b["simulator_calls"] <= 3


def test_evaluator_charges_and_caches():
    s, plan = _case(2, "allgather", 30_000)
    P = prepare(s, plan, nar_granularity=3, n_candidates=3, n_stack_candidates=2)
    ev = Evaluator(s, plan, P["sp"], P["gid"], P["ht"], budget=10)
    x = np.zeros(P["sp"].n_vars, np.int64)
    ev(x)
    ev(x)
    assert ev.n_evals == 1
    ev.charge(8)
    assert ev.left() == 1
    from nuna_jax.optim.point import BudgetExhausted
    with pytest.raises(BudgetExhausted):
        ev.charge(2)


def test_descent_beats_its_no_descent_ablation_at_equal_budget():
    """Issue 19, item 6: on a small All-Gather (4 GPUs, 300 kB, 2 threadblocks per GPU) the search
    with the descent is faster on the simulator than the same pipeline without it, with the same
    150 path-model evaluations and 3 simulator calls, on each of three seeds and by >= 3 % on their
    mean.  The default descent (score function, tied logits), measured when written: 2,595.5 /
    2,660.0 / 2,158.2 ns against 2,660.6 / 2,672.5 / 2,660.0 (NAP+NAR 2,672.5; the straight-through
    descent: 2,201-2,220, ``test_straight_through_descent_beats_its_ablation``)."""
    s, plan = _case(4, "allgather", 300_000)
    P = prepare(s, plan, nar_granularity=3, n_candidates=3)
    got, abl = [], []
    for seed in range(3):
        r = optimize(s, plan, budget=150, seed=seed, prepared=P, baselines=("no_descent",))
        nd = r["baselines"]["no_descent"]
        assert r["budget"]["used"] <= 150 and nd["path_model_evals"] <= 150
        assert r["budget"]["steps"] >= 1 and r["budget"]["descent_evals"] > 0
        got.append(r["simulated_ns"])
        abl.append(nd["simulated_ns"])
        assert got[-1] < abl[-1], (seed, got, abl)
    assert np.mean(got) <= 0.97 * np.mean(abl), (got, abl)


@pytest.mark.slow
def test_straight_through_descent_beats_its_ablation():
    """The same small All-Gather with the straight-through descent (``estimator="straight_through"``):
    faster than its ablation on each of three seeds (measured: 2,201-2,220 ns against 2,660-2,672)."""
    s, plan = _case(4, "allgather", 300_000)
    P = prepare(s, plan, nar_granularity=3, n_candidates=3)
    for seed in range(3):
        r = optimize(s, plan, budget=150, seed=seed, prepared=P, baselines=("no_descent",),
                     estimator="straight_through")
        assert r["budget"]["steps"] >= 1 and r["budget"]["used"] <= 150
        assert r["simulated_ns"] < 0.97 * r["baselines"]["no_descent"]["simulated_ns"], (seed, r["simulated_ns"])


@pytest.mark.slow
def test_repair_holds_the_stack_budget_on_the_10mb_all_to_all():
    """The case the first repair failed on in the grid ("cannot place page group 864: the stacks are
    full"): the 8-GPU 10 MB All-to-All, where NAP fills stacks to the page (277 of 306 pages) and
    groups are up to 77 pages.  300 points moving 2-100 % of the groups (greedy first fit from
    empty stacks fails on 2 of them): every one repaired within the budget, recounted from the
    repaired stacks; the two fullest also assembled and recounted from page_stack."""
    from nuna_jax.optim.space import check_point, make_space
    from nuna_jax.scenario import make_scenario
    sc = make_scenario(preset("table2", n_gpus=8), collective="alltoall", size_bytes=10_000_000,
                       policy="nap+nar", tbs_per_gpu=7)
    s, plan = sc.system, sc.plan
    sp, gid = make_space(s, plan)
    assert sp.grp_pages.max() > 8   # large groups: the case where fragmentation bites
    rng = np.random.default_rng(0)
    over = []
    for _ in range(300):
        p = rng.choice([0.02, 0.1, 0.5, 1.0])
        x = np.where((sp.var_n > 1) & (rng.random(sp.n_vars) < p), rng.integers(0, sp.var_n), 0)
        want = np.zeros((plan.n_gpus, s.n_hbm_stacks), np.int64)
        np.add.at(want, (sp.grp_gpu, sp.grp_cand[np.arange(sp.n_grp), x[sp.n_tbs:]]), sp.grp_pages)
        _, st = repair(s, plan, sp, x)
        load = np.zeros((plan.n_gpus, s.n_hbm_stacks), np.int64)
        np.add.at(load, (sp.grp_gpu, st), sp.grp_pages)
        assert load.max() <= sp.cap_pages
        over.append((want.max(), x))
    assert max(w for w, _ in over) > sp.cap_pages   # the repair had work to do
    for _, x in sorted(over, key=lambda r: -r[0])[:2]:
        c = check_point(s, plan, sp, assemble_point(s, plan, sp, gid, x))
        assert c["ok"] and c["stack_max_pages"] <= sp.cap_pages, c
