"""The threadblock count per GPU as a searched variable (nuna_jax.optim.counts) and the tied local
search (point.tied_local_search), issue 19 items 1 and 2.

References: every point of a tiny union enumerated with each count's own (fixed-count) evaluator;
scenario.make_scenario's own choice of the best count; moves written by hand on a stub evaluator;
the exact gradient of an enumerated expectation by central differences."""

import itertools
import types

import numpy as np
import pytest

from nuna_jax.lowering import build_traffic
from nuna_jax.optim.counts import CountEvaluator, CountSpace, prepare_counts
from nuna_jax.optim.driver import BASELINES, optimize
from nuna_jax.optim.point import Evaluator, local_search, tied_local_search
from nuna_jax.optim.score import score_gradient, score_probs
from nuna_jax.presets import preset
from nuna_jax.scenario import generated_plan, make_scenario
from nuna_jax.traffic import FIELDS


@pytest.fixture(scope="module")
def tiny():
    """3 GPUs, All-Gather of 600 kB, 2 or 3 threadblocks per GPU, 2 NAR domains, threadblock variables
    only: 2^6 + 2^9 = 576 points.  NAP+NAR's estimate picks 2 (2,965.8 ns against 2,988.6 at 3);
    the best point of the union is at 3 (2,101.0 against 2,114.5 at 2, measured when written)."""
    s = preset("mono", n_gpus=3)
    plan = generated_plan(s, "allgather", 600_000, tbs_per_gpu=2)
    P = prepare_counts(s, plan, counts=(2, 3), nar_granularity=2, n_candidates=2, pages=False)
    return s, plan, P


def _enumerate(s, P):
    """Every point of every count, estimated by that count's own Evaluator: [(est, count, x)]."""
    out = []
    cs = P["sp"]
    for c, (pl, Pc) in enumerate(zip(cs.plans, P["preps"])):
        sp = Pc["sp"]
        ev = Evaluator(s, pl, sp, Pc["gid"], Pc["ht"])
        pts = [np.array(q, np.int64) for q in itertools.product(*[range(n) for n in sp.var_n])]
        out += [(e, cs.counts[c], x) for e, x in zip(ev.many(pts), pts)]
    return out


def test_union_best_point_is_at_another_count_than_nap_nar(tiny):
    s, plan, P = tiny
    cs = P["sp"]
    assert cs.counts == (2, 3) and P["ref"] == 2                # option 0: NAP+NAR's count
    assert P["costs"][2] < P["costs"][3]
    allp = _enumerate(s, P)
    assert len(allp) == 2 ** 6 + 2 ** 9
    best = min(allp, key=lambda r: r[0])
    best_at_ref = min(e for e, c, _ in allp if c == 2)
    assert best[1] == 3 and best[0] < best_at_ref * (1 - 1e-3)  # not vacuous: the count matters
    # the union evaluator: the same estimates, one evaluation per distinct (count, point)
    ev = CountEvaluator(s, cs, P["preps"], budget=len(allp))
    xs = []
    for e, c, x in allp:
        u = np.zeros(cs.n_vars, np.int64)
        j = cs.counts.index(c)
        u[0] = j
        u[cs.offsets[j]:cs.offsets[j + 1]] = x
        xs.append(u)
    got = ev.many(xs)
    np.testing.assert_allclose(got, [e for e, _, _ in allp], rtol=0, atol=0)
    assert ev.n_evals == len(allp)
    # inactive variables do not make a new point (and cost nothing)
    y = xs[0].copy()
    y[cs.offsets[1]:] = 1                                        # count 2's point, count 3's variables set
    assert ev(y) == got[0] and ev.n_evals == len(allp)


def test_random_search_over_the_union_finds_the_enumerated_optimum_at_the_other_count(tiny):
    """With a budget above the union's 576 points, random search (which samples the count) must find
    the enumerated optimum, at 3 threadblocks; it can only if a point is counted once whatever its
    inactive variables hold (else its samples' random inactive variables would spend the budget)."""
    s, plan, P = tiny
    best = min(_enumerate(s, P), key=lambda r: r[0])
    r = optimize(s, plan, budget=600, seed=0, tbs_per_gpu="best", prepared=P, baselines=("random",),
                 n_simulate=1)
    b = r["baselines"]["random"]
    assert b["path_model_evals"] == 576
    assert b["estimate_ns"] == best[0] and b["tbs_per_gpu"] == 3
    assert r["tbs"]["nap_nar_count"] == 2 and r["tbs"]["counts"] == [2, 3]
    # NAP+NAR (the reference) is NAP+NAR at its own count: the union's all-zero point
    nap = make_scenario(s, collective="allgather", size_bytes=600_000, policy="nap+nar", tbs_per_gpu=2,
                        nar_granularity=2)
    from nuna_jax.sim import simulate
    assert r["nap_nar_simulated_ns"] == simulate(s, nap.traffic).completion_ns


def test_reference_count_is_make_scenarios_best():
    """Default counts (NUNA 5.1's k x (n_gpus - 1), k in 1, 4, 16): the union's option 0 is the count
    make_scenario(tbs_per_gpu="best") picks for NAP+NAR, and its all-zero point is that scenario's
    NAP+NAR row for row."""
    s = preset("mono", n_gpus=2)
    sc = make_scenario(s, collective="allgather", size_bytes=1_000_000, policy="nap+nar", tbs_per_gpu="best")
    P = prepare_counts(s, sc.plan)
    assert P["counts"][0] == P["ref"] == int(sc.plan.tbs_per_gpu.max())
    assert sorted(P["counts"]) == [1, 4, 16]
    assert set(P["costs"]) == {int(k) for k in sc.tbs_search}
    ev = CountEvaluator(s, P["sp"], P["preps"])
    a = ev.traffic(np.zeros(P["sp"].n_vars, np.int64))
    for k in FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(a, k)), np.asarray(getattr(sc.traffic, k)), err_msg=k)
    from nuna_jax.plans import make_plan      # slots not page-aligned: not a plan make_scenario builds
    with pytest.raises(ValueError, match="generated plans"):
        prepare_counts(s, make_plan("allgather", 2, 1_000_000, tbs_per_gpu=4))


# ---------------------------------------------------------------------------------------------
# the tied local search, by hand

class _StubEval:
    """f(x) by a Python function; counts distinct points; records every point asked for."""

    def __init__(self, sp, f, budget=None):
        self.sp, self.f, self.budget = sp, f, budget
        self.cache, self.n_evals, self.asked = {}, 0, []

    def left(self):
        return np.inf if self.budget is None else self.budget - self.n_evals

    def many(self, xs, label="?"):
        from nuna_jax.optim.point import BudgetExhausted
        out = []
        for x in xs:
            x = np.asarray(x, np.int64)
            self.asked.append(x.copy())
            k = self.sp.canonical(x).tobytes() if hasattr(self.sp, "canonical") else x.tobytes()
            if k not in self.cache:
                if self.left() <= 0:
                    raise BudgetExhausted
                self.cache[k] = float(self.f(x))
                self.n_evals += 1
            out.append(self.cache[k])
        return out

    def __call__(self, x, label="?"):
        return self.many([x], label)[0]


def _sp(var_n):
    var_n = np.asarray(var_n, np.int64)
    return types.SimpleNamespace(var_n=var_n, n_vars=len(var_n))


def test_tied_move_crosses_the_plateau_single_moves_cannot():
    """Two GPUs x one threadblock (role 0) and one page group each (role 1), 3 options each.  The
    time is the maximum over the GPUs, so moving one GPU's threadblock changes nothing: only the tied
    move (role 0 -> option 2 on both GPUs) improves.  The local search stops at the start; the tied
    local search takes that move, then the tied page-group move."""
    sp = _sp([3, 3, 3, 3])                 # x = [tb GPU0, tb GPU1, group GPU0, group GPU1]
    cls = np.array([0, 0, 1, 1])

    def f(x):
        per_gpu = [10.0 - 4.0 * (x[g] == 2) - 2.0 * (x[g] == 2 and x[2 + g] == 1) for g in range(2)]
        return max(per_gpu)

    x0 = np.zeros(4, np.int64)
    ls = local_search(_StubEval(sp, f), x0, np.random.default_rng(0))
    assert ls[1] == 10.0 and np.array_equal(ls[0], x0)
    ev = _StubEval(sp, f)
    x, est = tied_local_search(ev, cls, x0, np.random.default_rng(0))
    assert est == 4.0 and x.tolist() == [2, 2, 1, 1]
    assert ev.n_evals == len(ev.cache) < 3 ** 4           # each distinct point counted once
    # budget: stops when spent, never over
    ev = _StubEval(sp, f, budget=3)
    tied_local_search(ev, cls, x0, np.random.default_rng(0))
    assert ev.n_evals <= 3


def test_tied_local_search_over_a_count_union_moves_active_variables_only():
    """A union of two counts (1 and 2 variables, 2 options each): every point the tied local search
    asks for keeps the inactive count's variables as they were; the only improving single move is the
    count's, then only the tied move of count 1's role improves."""
    spaces = [types.SimpleNamespace(n_vars=1, var_n=np.array([2])),
              types.SimpleNamespace(n_vars=2, var_n=np.array([2, 2]))]
    cs = CountSpace((1, 2), spaces, [None, None])
    assert cs.n_vars == 4 and cs.var_n.tolist() == [2, 2, 2, 2]
    cls = np.array([0, 1, 2, 2])

    def f(x):   # count 0: 5 whatever its variable; count 1: 4.5, or 3 with both its variables on 1
        c, sub = cs.part(x)
        return 5.0 if c == 0 else 4.5 - 1.5 * (sub[0] == 1 and sub[1] == 1)

    ev = _StubEval(cs, f)
    x, est = tied_local_search(ev, cls, np.zeros(4, np.int64), np.random.default_rng(1))
    assert est == 3.0 and cs.part(x)[0] == 1
    # every point asked is one move from an earlier one, the move touching active variables only
    # (count 1's variables keep their values while count 0 is on: they move only at count 1)
    for i, y in enumerate(ev.asked[1:], 1):
        assert any(set(np.flatnonzero(y != z)) <= set(np.flatnonzero(cs.active_vars(z))) for z in ev.asked[:i]), y
    assert cs.canonical(np.array([0, 1, 1, 1])).tolist() == [0, 1, 0, 0]
    assert cs.active_vars(np.array([1, 0, 0, 0])).tolist() == [True, False, True, True]


def test_score_gradient_over_a_count_union_is_the_exact_gradient():
    """Weighting every point of a 2-count union by its probability, the masked score-function
    estimator equals the central-difference gradient of E[f] in every logit; f ignores the inactive
    count's variables (the unmasked estimator has the same mean, so also check the mask matters for
    a single sample: an inactive variable's term is 0)."""
    spaces = [types.SimpleNamespace(n_vars=1, var_n=np.array([3])),
              types.SimpleNamespace(n_vars=2, var_n=np.array([2, 3]))]
    cs = CountSpace((1, 2), spaces, [None, None])
    cls = np.array([0, 1, 2, 2])
    rng = np.random.default_rng(0)
    W = 3
    z_own, z_tie = rng.normal(size=(4, W)), rng.normal(size=(3, W))
    table = rng.normal(size=(2, 3, 3)) * 10

    def f(x):
        c, sub = cs.part(x)
        return table[0, sub[0], 0] if c == 0 else table[1, sub[0], sub[1]]

    pts = [np.array(q) for q in itertools.product(*[range(n) for n in cs.var_n])]

    def expect():
        p = score_probs(cs, cls, z_own, z_tie)
        return sum(np.prod([p[v, x[v]] for v in range(4)]) * f(x) for x in pts)

    p = score_probs(cs, cls, z_own, z_tie)
    w = np.array([np.prod([p[v, x[v]] for v in range(4)]) for x in pts])
    adv = len(pts) * w * np.array([f(x) for x in pts])
    g_own, g_tie = score_gradient(cs, cls, z_own, z_tie, np.array(pts), adv)
    h = 1e-5
    for z, g in ((z_own, g_own), (z_tie, g_tie)):
        for i, k in itertools.product(range(z.shape[0]), range(W)):
            if z is z_own and k >= cs.var_n[i]:
                continue
            z[i, k] += h
            up = expect()
            z[i, k] -= 2 * h
            dn = expect()
            z[i, k] += h
            assert g[i, k] == pytest.approx((up - dn) / (2 * h), rel=1e-4, abs=1e-7), (i, k)
    # one sample at count option 0: count 1's variables (2, 3) get no term
    g1, _ = score_gradient(cs, cls, z_own, z_tie, np.array([[0, 1, 1, 2]]), np.array([1.0]))
    assert np.all(g1[2:] == 0) and np.any(g1[:2] != 0)


def test_tied_local_search_is_a_baseline():
    assert BASELINES[:4] == ("random", "local_search", "annealing", "no_descent")   # stable (README)
    assert BASELINES[4] == "tied_local_search"


def test_cli_tbs_best_searches_the_count_and_saves_for_the_chosen_count(capsys, tmp_path):
    """``nuna-jax optimize --tbs best`` (the default): JSON with the counts searched (NAP+NAR's first),
    the chosen count and every baseline's; valid against the schema; the saved placement reads back
    with ``--tbs`` the chosen count to the estimate reported."""
    import json

    from nuna_jax.cli import main
    from nuna_jax.schemas import check
    f = tmp_path / "p.json"
    case = ["--system", "mono", "--gpus", "3", "--collective", "allgather", "--size", "30kB", "--nar-granularity", "3"]
    assert main(["optimize", *case, "--candidates", "3", "--budget", "60", "--save", str(f), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    check(d, "optimize")
    assert d["tbs_chosen_by"] == "optimize" and d["tbs"]["counts"] == [2, 8, 32]      # 2 x (1, 4, 16)
    assert d["tbs"]["counts"][0] == d["tbs"]["nap_nar_count"]
    assert d["tbs_per_gpu"] in d["tbs"]["counts"]
    assert set(d["baselines"]) == set(BASELINES)
    assert all(b["tbs_per_gpu"] in d["tbs"]["counts"] for b in d["baselines"].values())
    assert main(["estimate", *case, "--tbs", str(d["tbs_per_gpu"]), "--placement", str(f), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_ns"] == pytest.approx(d["estimate_ns"], rel=1e-6)
