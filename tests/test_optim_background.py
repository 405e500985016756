"""The placement search beside a concurrent GEMM (nuna_jax.optim.gemm, NUNA 6.6).

Independent references: ``lowering.build_traffic`` of the assembled placement estimated by the public
``estimate_ns(..., background=sim.Background)`` (not the search's ``BackgroundLoad``), the GEMM
rebuilt from ``sim.gemm_background`` with only its recorded CUs free, the simulator called directly
on NAP+NAR's traffic, and a physical invariant: a GEMM that loads the mesh and the HBM stacks slows
NAP+NAR down on the simulator.
"""

import json

import numpy as np
import pytest

from nuna_jax import sim
from nuna_jax.lowering import build_traffic
from nuna_jax.models.contention import estimate_ns
from nuna_jax.optim.driver import optimize, prepare
from nuna_jax.optim.gemm import search_background, space_cus
from nuna_jax.optim.point import Evaluator
from nuna_jax.optim.space import assemble_point, repair
from nuna_jax.placement import place
from nuna_jax.presets import preset
from nuna_jax.scenario import generated_plan

T3 = preset("table2", n_gpus=3)


@pytest.fixture(scope="module")
def small():
    """Table 2, 3 GPUs, All-Gather 300 kB, 4 threadblocks per GPU (some candidate CUs shared by two
    threadblocks of one GPU, each needing a whole CU: repair falls back): its space and a 16 MB GEMM."""
    plan = generated_plan(T3, "allgather", 300_000, tbs_per_gpu=4)
    P = prepare(T3, plan, n_candidates=4, n_stack_candidates=3)
    return plan, P, search_background(T3, P, plan, 16)


def _points(sp, n, seed):
    rng = np.random.default_rng(seed)
    pts = [np.zeros(sp.n_vars, np.int64), np.where(sp.var_n > 1, 1, 0)]   # NAP+NAR; every tb on candidate 1
    return pts + [np.where(sp.var_n > 1, rng.integers(0, sp.var_n), 0) for _ in range(n)]


def rebuilt_gemm(s, info):
    """The GEMM from ``sim.gemm_background`` alone: every CU but the recorded ones avoided (round robin
    over the dies then takes exactly those, in the same order)."""
    keep = set(info["gemm_cus"])
    return sim.gemm_background(s, gemm_bytes=int(round(info["gemm_mb_per_gpu"] * 1e6)), n_tiles=info["n_tiles"],
                               avoid_cus=[c for c in range(s.n_cus) if c not in keep])


def test_search_estimate_with_gemm_equals_lowered_estimate(small):
    """The search's hard estimate of a point (factored tables + the BackgroundLoad computed once)
    equals ``estimate_ns(build_traffic(assemble_point(x)), background=bg)``, the GEMM rebuilt from
    ``sim.gemm_background``; and the GEMM raises the estimate (the check is not vacuous)."""
    plan, P, g = small
    sp, gid = P["sp"], P["gid"]
    bg = rebuilt_gemm(T3, g["info"])
    np.testing.assert_array_equal(np.asarray(bg.flits), np.asarray(g["bg"].flits))
    ev = Evaluator(T3, plan, sp, gid, P["ht"], bl=g["bl"])
    ev0 = Evaluator(T3, plan, sp, gid, P["ht"])
    pts = _points(sp, 4, 0)
    fast, fast0 = ev.many(pts), ev0.many(pts)
    for x, f, f0 in zip(pts, fast, fast0):
        t = build_traffic(T3, plan, assemble_point(T3, plan, sp, gid, x))
        assert f == pytest.approx(float(estimate_ns(T3, t, background=bg)), rel=1e-5), x
        assert f0 == pytest.approx(float(estimate_ns(T3, t)), rel=1e-5), x
    assert all(f > f0 * 1.02 for f, f0 in zip(fast, fast0))          # a 16 MB GEMM is felt by every point
    assert len(set(np.round(fast, 2))) > 2


def test_gemm_avoids_every_cu_a_point_can_use(small):
    """No repaired point nor UA puts a threadblock with steps on a GEMM CU: random points, and every
    point where two threadblocks of one GPU pick the same candidate CU (each needs a whole CU, so
    repair moves one to the first free CU of its domain's order, which is no candidate CU: the
    rule's fallback part is exercised, not only its candidate part)."""
    plan, P, g = small
    sp = P["sp"]
    gemm = set(g["info"]["gemm_cus"])
    assert len(gemm) == 100 and g["info"]["n_avoided_cus"] + 100 <= T3.n_cus
    act = np.asarray(sp.cand.active, bool)
    cu, gpu = np.asarray(sp.cand.cu), np.asarray(plan.tb_gpu)
    assert np.all(sp.demand[act] == T3.max_outstanding_per_cu)
    crowded = []
    for a in range(plan.n_tbs):
        for b in range(a + 1, plan.n_tbs):
            for ca in range(sp.C):
                for cb in range(sp.C):
                    if act[a] and act[b] and gpu[a] == gpu[b] and cu[a, ca] == cu[b, cb]:
                        x = np.zeros(sp.n_vars, np.int64)
                        x[a], x[b] = ca, cb
                        crowded.append(x)
    assert len(crowded) >= 3
    cands = set(np.unique(cu[act]).tolist())
    off_candidate = set()
    for x in _points(sp, 20, 1) + crowded:
        tb_cu, _ = repair(T3, plan, sp, x)
        used = {int(c) for c in tb_cu[act]}
        assert not gemm & used, x
        off_candidate |= used - cands
    assert off_candidate                       # repair's fallback reached CUs outside the candidates
    ua = build_traffic(T3, plan, place(T3, plan, "ua"))
    assert not gemm & {int(c) for c in np.asarray(ua.cu)}
    assert set(space_cus(T3, plan, sp).tolist()) >= cands | off_candidate


def test_too_few_free_cus_is_a_clear_error():
    """The single-die ``mono`` socket has 96 CUs: no 100-tile GEMM fits beside any search."""
    s = preset("mono", n_gpus=3)
    plan = generated_plan(s, "allgather", 30_000, tbs_per_gpu=2)
    P = prepare(s, plan, nar_granularity=3, n_candidates=3)
    with pytest.raises(ValueError, match="100-tile GEMM .* needs 100 CUs"):
        search_background(s, P, plan, 1)
    with pytest.raises(ValueError, match="positive"):
        search_background(T3, P, plan, 0)


def test_gemm_slows_nap_nar_on_the_simulator(small):
    """With a 16 MB GEMM every simulator call runs it: NAP+NAR (and UA) are much slower than alone
    (a physical invariant), and the reference equals the simulator called directly beside the
    rebuilt GEMM (``stop_after_traffic``); the result records the GEMM."""
    plan, P, g = small
    kw = dict(budget=24, baselines=False, n_simulate=1, seed=0, prepared=P)
    alone = optimize(T3, plan, **kw)
    beside = optimize(T3, plan, gemm_mb_per_gpu=16, **kw)
    assert alone["gemm"] is None and alone["gemm_mb_per_gpu"] is None
    assert beside["gemm_mb_per_gpu"] == 16.0 and beside["gemm"]["gemm_cus"] == g["info"]["gemm_cus"]
    assert beside["nap_nar_simulated_ns"] > 1.3 * alone["nap_nar_simulated_ns"]
    assert beside["ua_simulated_ns"] > 1.3 * alone["ua_simulated_ns"]
    assert beside["nap_nar_estimate_ns"] > alone["nap_nar_estimate_ns"]
    x0 = np.zeros(P["sp"].n_vars, np.int64)
    t0 = build_traffic(T3, plan, assemble_point(T3, plan, P["sp"], P["gid"], x0))
    r = sim.simulate(T3, t0, background=rebuilt_gemm(T3, g["info"]), stop_after_traffic=True)
    assert beside["nap_nar_simulated_ns"] == pytest.approx(r.traffic_completion_ps / 1000, rel=1e-12)
    assert alone["nap_nar_simulated_ns"] == pytest.approx(sim.simulate(T3, t0).completion_ns, rel=1e-12)


def test_cli_gemm_flag_json(capsys, tmp_path):
    """``nuna-jax optimize --gemm-mb 8``: JSON valid against the schema, records the GEMM and its
    avoid rule; the saved placement's CUs are not the GEMM's; on ``mono`` the flag is refused
    with a message (exit 2)."""
    from nuna_jax.cli import main
    from nuna_jax.schemas import check
    f = tmp_path / "p.json"
    case = ["--gpus", "3", "--collective", "allgather", "--size", "300kB", "--tbs", "2"]
    assert main(["optimize", *case, "--budget", "24", "--no-baselines", "--gemm-mb", "8", "--save", str(f),
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    check(d, "optimize")
    assert d["gemm_mb_per_gpu"] == 8.0
    assert d["gemm"]["n_tiles"] == 100 and len(d["gemm"]["gemm_cus"]) == 100
    assert "repair" in d["gemm"]["avoid_rule"] and "UA" in d["gemm"]["avoid_rule"]
    tb_cu = json.loads(f.read_text())["tb_cu"]
    assert not set(d["gemm"]["gemm_cus"]) & {int(c) for c in np.ravel(tb_cu) if c >= 0}
    assert main(["optimize", "--system", "mono", *case, "--budget", "24", "--no-baselines", "--gemm-mb", "8"]) == 2
    assert "CUs" in capsys.readouterr().err


def test_straight_through_loss_takes_the_gemm(small):
    """The smooth side: ``move_gradient``'s value (the straight-through loss's forward pass) with the
    GEMM in ``StTables.bl`` equals ``smooth_estimate_ns`` of the same rows (``st_traffic``) beside the
    GEMM rebuilt from ``sim.gemm_background``, and is well above the value without it (the rows
    differ from the lowered point's by the weight-``P_MIN`` alternatives, so the lowered traffic is
    not the reference here); ``optimize`` with the straight-through descent runs beside the GEMM and
    its loss at the argmax (the gap's ``relaxed_ns``) takes the GEMM too."""
    import jax
    import jax.numpy as jnp

    from nuna_jax.models.contention import smooth_estimate_ns
    from nuna_jax.optim.point import move_gradient, st_traffic
    plan, P, g = small
    sp, tt = P["sp"], P["tt"]
    bg = rebuilt_gemm(T3, g["info"])
    tau = 20.0
    for x in _points(sp, 2, 5)[1:]:
        cu, st = repair(T3, plan, sp, x)
        xt, xg = jnp.asarray(x[:sp.n_tbs]), jnp.asarray(x[sp.n_tbs:])
        v_bg = float(move_gradient(T3, tt.replace(bl=g["bl"]), xt, xg, tau, jnp.asarray(cu), jnp.asarray(st))[0])
        v0 = float(move_gradient(T3, tt, xt, xg, tau, jnp.asarray(cu), jnp.asarray(st))[0])
        rows = st_traffic(tt, xt, xg, jax.nn.one_hot(xt, sp.C), jax.nn.one_hot(xg, sp.K), jnp.asarray(cu),
                          jnp.asarray(st))
        ref = float(smooth_estimate_ns(T3, rows, tau, n_phases=tt.ht.n_phases, background=bg))
        assert v_bg == pytest.approx(ref, rel=1e-5)
        assert v_bg > 1.5 * v0        # a 16 MB GEMM more than doubles this collective's estimate
    r = optimize(T3, plan, budget=60, baselines=False, n_simulate=1, prepared=P, estimator="straight_through",
                 gemm_mb_per_gpu=16)
    assert r["gemm_mb_per_gpu"] == 16.0 and r["budget"]["steps"] >= 1
    # the gap's loss is the smooth estimate at the argmax beside the GEMM: a smooth maximum is at least
    # the hard one (without the GEMM it would be less than half of this hard estimate)
    gap = r["gap"]
    assert gap["argmax_estimate_ns"] <= gap["relaxed_ns"] <= 1.1 * gap["argmax_estimate_ns"]
    # and the descent's loss (every step's sampled smooth time) is beside the GEMM: without it every
    # point of this space estimates below 0.6 x NAP+NAR's estimate beside it
    assert min(np.ravel(r["history"]["time_ns"])) > 0.7 * r["nap_nar_estimate_ns"]
