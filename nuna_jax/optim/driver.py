"""``optimize``: the placement search and its baselines at one budget, judged by the exact
simulator (docs/optim.md).

The space (:mod:`.space`): per threadblock ``C`` candidates (a NAR domain and a CU near its
ports), per page group ``K`` candidate HBM stacks; the all-zero point is NAP+NAR.

Budgets are counts, never the clock (a fixed seed gives the same placement on any machine):

* ``budget`` path-model evaluations per search.  One evaluation is the analytical estimate of
  one repaired point (:class:`.point.Evaluator`, repeats free).  One Adam step of one restart is
  a value-and-gradient of the straight-through loss and is charged :func:`.point.vg_cost`
  evaluations (``2 x`` its rows over one evaluation's rows).
* ``n_simulate`` simulator calls per search: the search's best ``n_simulate`` evaluated points by
  the estimate; its answer is the fastest of them and of NAP+NAR (the all-zero point, simulated once
  as the reference, in the pool of every search that evaluated it: all but ``random``) on the
  simulator, so no answer but ``random``'s is slower than NAP+NAR.

The search (``descent=True``):

1. NAP+NAR (the all-zero point) is evaluated first (label ``algorithm1``);
2. the descent, ``estimator="score"`` (default, :mod:`.score`): Adam on the logits against the
   score-function gradient of the expected estimate, from batches of sampled points (one
   evaluation each) until ``descent_share`` of the budget is spent (default
   :data:`SCORE_DESCENT_SHARE`, 3/4); or ``"straight_through"``
   (:func:`.point.descend`): ``seeds`` restarts in one ``vmap`` (restart 0 warm on NAP+NAR),
   ``steps`` Adam steps (by default as many as ``descent_share``, default 1/2, of the budget pays for);
3. rounding: the argmax (every restart's) (``descent_argmax``) and ``n_samples`` samples
   (``descent_sample``, as the score descent's own samples), repaired and evaluated;
4. the local search (:func:`.point.local_search`, gradient-free) from the best ``search_starts``
   distinct evaluated points with the rest of the budget;
5. the simulator on the best ``n_simulate`` (and NAP+NAR, the reference).

Baselines, each with the same ``budget`` and ``n_simulate``: ``random``, ``local_search``
(NAP+NAR + the local search), ``annealing`` (from NAP+NAR), ``no_descent`` (step 2 off: the
starting logits are rounded and the descent's evaluations go to the local search) and
``tied_local_search`` (from NAP+NAR, tied and single moves: :func:`.point.tied_local_search`).

``tbs_per_gpu="best"`` (:mod:`.counts`): the space is the union over the threadblock counts of
``scenario.tbs_candidates``, the count a variable of its own (option 0: NAP+NAR's count, the
reference); every method searches the same union at the same budget.  UA is
simulated as a reference outside every pool; NAP+NAR is the reference and the fallback of every
pool but ``random``'s.
"""

from __future__ import annotations

import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from ..lowering import build_traffic
from ..models.contention import smooth_estimate_ns
from ..placement import place
from ..sim import simulate_batch
from .point import (EVAL_BATCH, BudgetExhausted, Evaluator, Schedule, _descend, annealing, argmax_point, init_logits,
                    local_search, random_search, sample_points, st_tables, tied_local_search, vg_cost)
from .score import ScoreSchedule, init_score_logits, roles, score_argmax, score_descent, score_sample
from .space import check_point, estimate_points, hard_table, hard_traffic, make_space, repair
from .counts import CountEvaluator, prepare_counts
from .gemm import search_background

__all__ = ["optimize", "prepare", "KEYS", "BASELINES", "vg_cost", "OPTIMIZE_STEPS"]

#: the steps :func:`optimize` reports to its ``progress`` callback, in order (``progress(step)`` after each)
OPTIMIZE_STEPS = ("tables", "compiled", "descended", "rounded", "searched", "baselines", "simulated")

KEYS = ("relaxed_ns", "rounded_estimate_ns", "simulated_ns", "nap_nar_simulated_ns", "ua_simulated_ns",
        "speedup_vs_nap_nar", "speedup_vs_ua", "wall_s")
BASELINES = ("random", "local_search", "annealing", "no_descent", "tied_local_search")

_COMPILED: dict = {}

#: the score descent's share of the budget (the rest: its argmax, samples and the local search);
#: chosen on the tuning set (experiments/optim_tune.py: 2 cases x 2 seeds, docs/optim.md "Settings")
SCORE_DESCENT_SHARE = 0.75


def _compiled_descent(s, tt, zt, zg, key, sched):
    """``descend`` compiled ahead of time (compile and descent timed apart), cached by shapes and
    step count (the other schedule values are traced)."""
    hp = {k: jnp.asarray(v, jnp.float32) for k, v in sched._asdict().items() if k != "steps"}
    args = (s, tt, zt, zg, key, hp)
    leaves, tree = jax.tree_util.tree_flatten(args)
    k = (tree, tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves), int(sched.steps))
    if k not in _COMPILED:
        _COMPILED[k] = _descend.lower(*args, steps=int(sched.steps)).compile()
    c = _COMPILED[k]
    return lambda s, tt, zt, zg, key: c(s, tt, zt, zg, key, hp)


@jax.jit
def _smooth_point(s, ht, xt, tb_cu, gstack, tau, bl=None):
    return smooth_estimate_ns(s, hard_traffic(ht, xt, tb_cu, gstack), tau, n_phases=ht.n_phases, background=bl)


def prepare(s, plan, *, nar_granularity: int | None = None, n_candidates: int = 4, n_stack_candidates: int = 4,
            group_pages: int | None = None, pages: bool = True) -> dict:
    """The space of ``plan`` on ``s``, its factored tables and the straight-through tables."""
    sp, gid = make_space(s, plan, nar_granularity=nar_granularity, n_candidates=n_candidates,
                         n_stack_candidates=n_stack_candidates, group_pages=group_pages, pages=pages)
    ht = hard_table(s, plan, sp, gid)
    return {"sp": sp, "gid": gid, "ht": ht, "tt": st_tables(s, plan, sp, ht)}


def _new_evaluator(ctx, budget):
    """An evaluator of the search space with ``budget`` evaluations: a fixed count's
    (:class:`.point.Evaluator`) or the union of counts' (:class:`.counts.CountEvaluator`)."""
    P, bl = ctx["prep"], ctx["bl"]
    if "preps" in P:
        return CountEvaluator(ctx["s"], P["sp"], P["preps"], budget=budget, bl=bl)
    return Evaluator(ctx["s"], ctx["plan"], P["sp"], P["gid"], P["ht"], budget=budget, bl=bl)


def _roles(ctx, sp, groups):
    """The score descent's (and the tied local search's) roles of every variable."""
    if "preps" in ctx["prep"]:
        return sp.roles([pl.tb_gpu for pl in sp.plans], groups)
    return roles(sp, ctx["plan"].tb_gpu, groups)


def _score_stage(ctx, ev, descent, steps, T, say, kind, rng):
    """The score-function descent (:mod:`.score`) on ``ev``'s budget, then its argmax and samples
    evaluated.  Returns (history, descent evaluations, [(est, 0, argmax)], steps taken)."""
    sp, ssch, seed = ev.sp, ctx["score_sched"], ctx["seed"]
    cls = _roles(ctx, sp, ssch.group_roles)
    hist, units = {}, 0
    if descent:
        say("compiled")            # nothing of its own to compile: the estimate is (``optimize``)
        t0 = time.perf_counter()
        n0 = ev.n_evals
        z_own, z_tie, hist = score_descent(ev, cls, np.random.default_rng([seed, 11]),
                                           n_evals=int(ctx["descent_share"] * ctx["budget"]), sched=ssch)
        units = ev.n_evals - n0
        T["descent_s"] = time.perf_counter() - t0
        say("descended")
    else:
        z_own, z_tie = init_score_logits(sp, cls, ssch.warm_logit)
    t0 = time.perf_counter()
    argmaxes = []
    try:
        xa = ev.canonical(score_argmax(sp, cls, z_own, z_tie))
        argmaxes.append((ev(xa, f"{kind}_argmax"), 0, xa))
        ev.many(list(score_sample(sp, cls, z_own, z_tie, ctx["n_samples"], rng)), f"{kind}_sample")
    except BudgetExhausted:
        pass
    T["rounding_s"] = time.perf_counter() - t0
    return hist, units, argmaxes, len(hist.get("mean_ns", ()))


def _straight_through_stage(ctx, ev, descent, steps, T, say, kind, rng):
    """The straight-through descent (``seeds`` restarts in one vmap, :func:`.point.descend`), then
    every restart's argmax and samples evaluated.  Returns (history, charged evaluations,
    [(est, restart, argmax)], steps)."""
    s, sp, B, sched = ctx["s"], ev.sp, ctx["seeds"], ctx["sched"]
    tt, ht = ctx["tt"], ctx["prep"]["ht"]
    k0, k1 = jax.random.split(jax.random.PRNGKey(ctx["seed"]))
    zt, zg = init_logits(k0, sp, B)
    hist, units = {}, 0
    if descent:
        units = steps * B * vg_cost(ht)
        ev.charge(units)
        sch = sched._replace(steps=int(steps))
        t0 = time.perf_counter()
        compiled = _compiled_descent(s, tt, zt, zg, k1, sch)
        T["compile_s"] = time.perf_counter() - t0
        say("compiled")
        t0 = time.perf_counter()
        zt, zg, hist = compiled(s, tt, zt, zg, k1)
        zt = jax.block_until_ready(zt)
        T["descent_s"] = time.perf_counter() - t0
        say("descended")
    t0 = time.perf_counter()
    argmaxes = []
    try:
        for b in range(B):
            xa = argmax_point(sp, zt[b], zg[b])
            argmaxes.append((ev(xa, f"{kind}_argmax"), b, xa))
            ev.many(sample_points(sp, zt[b], zg[b], sched.temp1, ctx["n_samples"], rng), f"{kind}_sample")
    except BudgetExhausted:
        pass
    T["rounding_s"] = time.perf_counter() - t0
    return hist, units, argmaxes, steps


def _pipeline(ctx, *, descent: bool, steps: int, T: dict, say) -> dict:
    """Steps 1-4 of the module docstring for one search (the descent and rounding: ``_score_stage`` or
    ``_straight_through_stage``)."""
    seed = ctx["seed"]
    ev = _new_evaluator(ctx, ctx["budget"])
    sp = ev.sp
    x0 = np.zeros(sp.n_vars, np.int64)
    ev(x0, "algorithm1")
    kind = "descent" if descent else "init"
    rng = np.random.default_rng(seed)
    stage = _score_stage if ctx["estimator"] == "score" else _straight_through_stage
    hist, units, argmaxes, n_steps = stage(ctx, ev, descent, steps, T, say, kind, rng)
    say("rounded")
    t0 = time.perf_counter()
    starts = [x for _, _, x in ev.best(max(1, ctx["search_starts"]))]
    traces = []
    for i, st in enumerate(starts):
        share = int(ev.left() // (len(starts) - i))
        if share <= 1:
            break
        traces.append(local_search(ev, st, np.random.default_rng([seed, 7, i]), max_evals=share)[2])
    T["local_search_s"] = time.perf_counter() - t0
    say("searched")
    best_arg = min(argmaxes, key=lambda r: (r[0], r[1])) if argmaxes else None
    return {"ev": ev, "descent_units": units, "steps": n_steps if descent else 0, "history": hist,
            "argmax": best_arg, "local_search_trace": traces}


def optimize(s, plan, *, budget: int = 800, steps: int | None = None, seeds: int = 1, n_candidates: int = 4,
             n_stack_candidates: int = 4, group_pages: int | None = None, pages: bool = True, n_samples: int = 4,
             n_simulate: int = 3, descent: bool = True, baselines: bool = True, descent_share: float | None = None,
             search_starts: int = 2, nar_granularity: int | None = None, seed: int = 0, progress=None,
             sched: Schedule | None = None, search_budget_s: float | None = None, baseline: bool | None = None,
             search_evals: int | None = None, prepared=None, straight_through: float | None = None,
             estimator: str = "score", score_sched: ScoreSchedule | None = None,
             tbs_per_gpu: str | None = None, gemm_mb_per_gpu: float | None = None) -> dict:
    """Optimize ``plan``'s placement on ``s`` with ``budget`` path-model evaluations and
    ``n_simulate`` simulator calls per search (module docstring).

    Returns a dict with :data:`KEYS` and more: ``placement``, ``source``, ``estimate_ns``,
    ``baselines``, ``budget``, ``gap``, ``pool``, ``timing_s`` (diagnostic only).  ``baselines``:
    ``True`` (all of :data:`BASELINES`), ``False``, or a tuple of their names.  ``prepared``:
    :func:`prepare`'s result for this ``s`` and ``plan`` (with ``tbs_per_gpu="best"``:
    :func:`.counts.prepare_counts`'s).  ``tbs_per_gpu``: ``None`` (the plan's own count) or ``"best"``:
    the union over the counts of ``scenario.tbs_candidates`` (:mod:`.counts`; ``plan`` a generated plan
    of one of them, the score descent only); NAP+NAR is then NAP+NAR at its own best count, and
    ``tbs_per_gpu`` in the result (and in each baseline's) is the chosen count.  ``search_budget_s``, ``search_evals`` and
    ``straight_through`` are accepted for old callers and ignored (the loss is always the
    straight-through one); ``baseline`` is the old name of ``baselines``.  ``gemm_mb_per_gpu``: a
    concurrent 100-tile GEMM moving that many MB of HBM traffic per GPU (NUNA 6.6, :mod:`.gemm`):
    built once, on CUs no point of the space can use; every estimate (hard and smooth) and every
    simulator run (the searches', NAP+NAR's and UA's) takes it; ``gemm`` in the result describes it
    (``None`` without one: then every number is as without the argument).
    """
    if search_budget_s is not None or search_evals is not None or straight_through is not None:
        warnings.warn("optimize: search_budget_s / search_evals / straight_through are ignored", DeprecationWarning,
                      stacklevel=2)
    if baseline is not None:
        baselines = baseline
    if seeds < 1 or (steps is not None and steps < 1):
        raise ValueError(f"--steps and --seeds must be >= 1, got {steps} and {seeds}")
    if n_simulate < 1:
        raise ValueError(f"n_simulate must be >= 1, got {n_simulate}")
    say = progress or (lambda *_: None)
    if descent_share is None:   # docs/optim.md, "Settings": 3/4 chosen on the tuning set for the score descent
        descent_share = SCORE_DESCENT_SHARE if estimator == "score" else 0.5
    sched = sched or Schedule()
    union = tbs_per_gpu is not None
    if union and str(tbs_per_gpu).strip().lower() != "best":
        raise ValueError(f"tbs_per_gpu must be None or 'best', got {tbs_per_gpu!r}")
    if union and estimator != "score":
        raise ValueError("tbs_per_gpu='best' (the threadblock count as a variable) needs estimator='score'")
    T = {}
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    space_kw = dict(nar_granularity=nar_granularity, n_candidates=n_candidates,
                    n_stack_candidates=n_stack_candidates, group_pages=group_pages, pages=pages)
    if union:
        prep = prepared or prepare_counts(s, plan, **space_kw)
        if "preps" not in prep:
            raise ValueError("tbs_per_gpu='best': prepared must come from counts.prepare_counts")
        plan = prep["sp"].plans[0]          # the reference: NAP+NAR's own count
    else:
        prep = prepared or prepare(s, plan, **space_kw)
    sp, ht = prep["sp"], prep["ht"]
    gemm = None
    if gemm_mb_per_gpu is not None:   # one GEMM per (prepared space, size): every seed the same
        gemms = prep.setdefault("_gemm", {})
        if float(gemm_mb_per_gpu) not in gemms:
            gemms[float(gemm_mb_per_gpu)] = search_background(s, prep, plan, gemm_mb_per_gpu)
        gemm = gemms[float(gemm_mb_per_gpu)]
    bl = None if gemm is None else gemm["bl"]
    T["tables_s"] = time.perf_counter() - t0
    say("tables")
    vgc = vg_cost(ht)
    if steps is None:
        steps = max(1, int(descent_share * budget) // (seeds * vgc))
    units = steps * seeds * vgc
    if estimator not in ("score", "straight_through"):
        raise ValueError(f"estimator must be 'score' or 'straight_through', got {estimator!r}")
    if estimator == "score":
        steps = None
    elif descent and units >= budget:
        raise ValueError(f"--budget {budget} does not pay for {steps} steps x {seeds} restarts "
                         f"({units} evaluations at {vgc} per value-and-grad) and the rounding")
    ctx = {"s": s, "plan": plan, "prep": prep, "budget": int(budget), "seeds": int(seeds), "sched": sched,
           "seed": int(seed), "n_samples": int(n_samples), "search_starts": int(search_starts),
           "estimator": estimator, "score_sched": score_sched or ScoreSchedule(), "descent_share": float(descent_share),
           "bl": bl, "tt": prep["tt"] if bl is None else prep["tt"].replace(bl=bl)}
    if estimator == "score":   # compile the estimate for the batch sizes the searches use (not an evaluation)
        t0 = time.perf_counter()
        for pl_c, P_c in (zip(sp.plans, prep["preps"]) if union else [(plan, prep)]):
            sp_c, ht_c = P_c["sp"], P_c["ht"]
            x0 = np.zeros(sp_c.n_vars, np.int64)
            cu0, st0 = repair(s, pl_c, sp_c, x0)
            for n in (1, EVAL_BATCH):
                estimate_points(s, ht_c, np.repeat(x0[None, :sp_c.n_tbs], n, 0), np.repeat(cu0[None], n, 0),
                                np.repeat(st0[None], n, 0), bl)
        T["compile_s"] = time.perf_counter() - t0
    main = _pipeline(ctx, descent=descent, steps=steps, T=T, say=say)
    ev = main["ev"]
    x0 = np.zeros(sp.n_vars, np.int64)

    base = {}
    names = BASELINES if baselines is True else tuple(b for b in BASELINES if b in (baselines or ()))
    if names:
        t0 = time.perf_counter()
        for name in names:
            if name == "no_descent":
                if not descent:
                    continue
                bev = _pipeline(ctx, descent=False, steps=0, T={}, say=lambda *_: None)["ev"]
            else:
                bev = _new_evaluator(ctx, int(budget))
                rng = np.random.default_rng([int(seed), BASELINES.index(name)])
                if name != "random":
                    bev(x0, "algorithm1")
                if name == "random":
                    random_search(bev, rng)
                elif name == "local_search":
                    local_search(bev, x0, rng)
                elif name == "tied_local_search":
                    tied_local_search(bev, _roles(ctx, sp, ctx["score_sched"].group_roles), x0, rng)
                else:
                    annealing(bev, x0, rng, n_evals=int(budget) - 1)
            base[name] = bev
        T["baselines_s"] = time.perf_counter() - t0
        say("baselines")

    # the simulator: each search's best n_simulate by the estimate, and NAP+NAR (the all-zero point,
    # simulated once as the reference) in the pool of every search that evaluated it, so no answer is
    # slower than NAP+NAR on the simulator; UA as a reference outside every pool
    t0 = time.perf_counter()
    k0 = Evaluator.key(x0)

    def pool_of(e):
        rows = e.best(n_simulate)
        if k0 in e.cache and all(Evaluator.key(x) != k0 for _, _, x in rows):
            rows.append((e.cache[k0], e.label[k0], x0))
        return rows

    pools = {"search": pool_of(ev), **{k: pool_of(b) for k, b in base.items()}}
    uniq, trs = {}, []
    # NAP+NAR and UA: the same for every seed, simulated once (per GEMM)
    ref_key = "_reference_ns" if gemm is None else f"_reference_ns_gemm_{float(gemm_mb_per_gpu)!r}"
    refs = prep.get(ref_key)

    def add(x):
        k = Evaluator.key(x)
        if k not in uniq and not (refs is not None and k == k0):
            uniq[k] = len(trs)
            trs.append(ev.traffic(x))

    if refs is None:
        add(x0)
    for pool in pools.values():
        for _, _, x in pool:
            add(x)
    arg = main["argmax"]
    if arg is not None:
        add(arg[2])
    if refs is None:
        trs.append(build_traffic(s, plan, place(s, plan, "ua")))
    if gemm is None:
        sims = [float(r.completion_ns) for r in simulate_batch(s, trs)]
    else:      # beside the GEMM: the collective's own completion (the GEMM may outlast it)
        sims = [r.traffic_completion_ps / 1000 for r in
                simulate_batch(s, trs, backgrounds=[gemm["bg"]] * len(trs), stop_after_traffic=True)]
    if refs is None:
        refs = prep[ref_key] = (sims[uniq[k0]], sims[-1])
    uniq.setdefault(k0, len(sims))
    sims.append(refs[0])
    T["simulate_s"] = time.perf_counter() - t0
    say("simulated")
    nap_ns, ua_ns = refs

    def judged(name):
        rows = [(float(sims[uniq[Evaluator.key(x)]]), est, lab, x) for est, lab, x in pools[name]]
        k = min(range(len(rows)), key=lambda i: (rows[i][0], i))
        return rows[k], rows

    (sim_ns, est_ns, source, choice), rows = judged("search")
    pl = ev.placement(choice)
    plan_c, sp_c, x_c, _ = ev.part(choice)
    ht_c = prep["preps"][int(choice[0])]["ht"] if union else ht
    baselines_out = {}
    for name, bev in base.items():
        (bs, be, bsrc, bx), brows = judged(name)
        baselines_out[name] = {"simulated_ns": bs, "estimate_ns": be, "source": bsrc,
                               "speedup_vs_nap_nar": nap_ns / bs, "path_model_evals": bev.n_evals,
                               "simulator_calls": sum(Evaluator.key(x) != k0 for *_, x in brows),
                               "tbs_per_gpu": bev.tbs_per_gpu(bx)}
    # the gap: the loss at the end of the descent, evaluated at its argmax (the
    # straight-through loss's forward value there: the smooth estimate at the last temperature; the
    # penalties are 0 at a repaired point), against the simulated time of that argmax
    gap = {"relaxed_ns": None, "argmax_simulated_ns": None, "relaxed_vs_argmax_simulated": None,
           "argmax_estimate_ns": None, "best_estimate_ns": float(ev.best(1)[0][0]), "simulated_ns": float(sim_ns),
           "final_sampled_loss_ns": None}
    relaxed = float("nan")
    if arg is not None:
        if estimator == "score":   # the loss is the expected hard estimate: at the argmax, its estimate
            relaxed = float(arg[0])
        else:
            cu, st = repair(s, plan, sp, arg[2])
            relaxed = float(_smooth_point(s, ht, jnp.asarray(arg[2][:sp.n_tbs]), jnp.asarray(cu), jnp.asarray(st),
                                          float(sched.tau1_ns), bl))
        a_sim = float(sims[uniq[Evaluator.key(arg[2])]])
        gap.update(relaxed_ns=relaxed, argmax_simulated_ns=a_sim, relaxed_vs_argmax_simulated=relaxed / a_sim - 1.0,
                   argmax_estimate_ns=float(arg[0]), argmax_source="descent" if descent else "init",
                   argmax_tbs_per_gpu=ev.tbs_per_gpu(arg[2]))
        if main["history"] and "loss" in main["history"]:
            gap["final_sampled_loss_ns"] = float(np.asarray(main["history"]["loss"])[-1, arg[1]])
    out = {
        "relaxed_ns": relaxed,
        "rounded_estimate_ns": float(est_ns),
        "simulated_ns": float(sim_ns),
        "nap_nar_simulated_ns": nap_ns,
        "ua_simulated_ns": ua_ns,
        "speedup_vs_nap_nar": float(nap_ns / sim_ns),
        "speedup_vs_ua": float(ua_ns / sim_ns),
        "wall_s": time.perf_counter() - t_all,
        "source": source,
        "estimate_ns": float(est_ns),
        "nap_nar_estimate_ns": float(ev(x0)),
        "pool": [{"kind": lab, "estimate_ns": float(e), "simulated_ns": x} for x, e, lab, _ in rows],
        "baselines": baselines_out,
        "budget": {"path_model_evals": int(budget), "simulator_calls": int(n_simulate), "vg_cost": vgc,
                   "steps": main["steps"], "seeds": int(seeds), "descent_evals": main["descent_units"],
                   "descent_share": float(descent_share),
                   "discrete_evals": ev.n_evals - main["descent_units"], "used": ev.n_evals},
        "gap": gap,
        "granularity": sp_c.cand.granularity, "n_candidates": sp_c.C, "n_stack_candidates": sp_c.K,
        "n_page_groups": sp_c.n_grp, "n_rows_table": ht_c.n_rows, "n_rows_point": ht_c.n_hard,
        "capacities": check_point(s, plan_c, sp_c, pl),
        "tbs_per_gpu": ev.tbs_per_gpu(choice), "plan": plan_c,
        "tbs": ({"counts": list(sp.counts), "nap_nar_count": int(prep["ref"]),
                 "nap_nar_estimate_ns": {str(k): float(v) for k, v in sorted(prep["costs"].items())}}
                if union else None),
        "gemm_mb_per_gpu": None if gemm is None else float(gemm_mb_per_gpu),
        "gemm": None if gemm is None else gemm["info"],
        "timing_s": T, "n_evals": ev.n_evals,
        "history": {k: np.asarray(v).tolist() for k, v in main["history"].items()},
        "local_search_trace": main["local_search_trace"],
        "placement": pl, "choice": np.asarray(choice).tolist(), "choice_in_count": np.asarray(x_c).tolist(),
    }
    return out
