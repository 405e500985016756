"""``optimize``: the placement search and its baselines at one budget, judged by the exact
simulator (issue 12; issue 19, items 3 and 4; docs/optim.md).

Budgets are counts, never the clock (a fixed seed gives the same placement on any machine):

* ``budget`` path-model evaluations per search.  One evaluation is the analytical estimate of
  one discrete placement (:class:`.search.Evaluator`, repeats free).  One Adam step of one
  restart is a value-and-gradient of the relaxed loss over the ``C`` stacked candidate slices
  and is charged :func:`vg_cost` ``= VG_COST_PER_CANDIDATE x C`` evaluations (measured on the
  2-core CPU: ``benchmarks/bench_optim.py --vg-cost``; docs/optim.md).
* ``n_simulate`` simulator calls per search: the search's best ``n_simulate`` evaluated
  placements by the estimate; its answer is the fastest of them on the simulator.

The search (``descent=True``):

1. candidates (:mod:`.candidates`) and the stacked expected-traffic tables (:mod:`.relaxed`);
2. Algorithm 1's own choice is evaluated first (label ``algorithm1``);
3. the Optax descent (:mod:`.descent`): ``seeds`` restarts in one ``vmap``, restart 0 a warm
   start on Algorithm 1, ``steps`` steps (by default as many as ``descent_share`` of the
   budget pays for);
4. rounding: every restart's argmax (``descent_argmax``) and ``n_samples`` samples
   (``descent_sample``), assembled and repaired (:func:`.candidates.assemble`);
5. the local search (:func:`.search.local_search`, ``local_search``) from the best
   ``search_starts`` distinct rounded placements with the rest of the budget;
6. the simulator on the best ``n_simulate``.

Baselines, each with the same ``budget`` and ``n_simulate``: ``random`` (uniform choices),
``local_search`` (Algorithm 1 + the local search), ``annealing`` (from Algorithm 1) and
``no_descent`` (steps 3's descent off: the starting logits are rounded and the descent's
evaluations go to the local search).  NAP+NAR and UA are simulated as references, outside
every pool.
"""

from __future__ import annotations

import time
import warnings

import jax
import numpy as np

from ..lowering import build_traffic
from ..placement import cu_demand, place
from ..sim import simulate_batch
from .candidates import check_capacities, make_candidates
from .descent import Schedule, descend
from .loss import capacity_table, loss_terms
from .relaxed import Relaxed, expected_tables, init_logits, probabilities
from .search import Evaluator, annealing, local_search, random_search, round_choices
from .search import BudgetExhausted

__all__ = ["optimize", "prepare", "KEYS", "BASELINES", "VG_COST_PER_CANDIDATE", "vg_cost"]

KEYS = ("relaxed_ns", "rounded_estimate_ns", "simulated_ns", "nap_nar_simulated_ns", "ua_simulated_ns",
        "speedup_vs_nap_nar", "speedup_vs_ua", "wall_s")
BASELINES = ("random", "local_search", "annealing", "no_descent")

# One value-and-gradient of the relaxed loss (C stacked slices, one restart) in forward
# evaluations of one discrete placement, per candidate slice.  Measured on the shared 2-core CPU
# (8-GPU 1 MB All-Gather, C = 4, jitted, steady state; benchmarks/bench_optim.py --vg-cost):
# 3.5-9.7 forward evaluations per restart-step in four runs under different load, i.e. 0.9-2.4
# per slice; 2 is charged (the upper end: the descent is not favoured; docs/optim.md, "Budget").
VG_COST_PER_CANDIDATE = 2


def vg_cost(n_candidates: int) -> int:
    """Forward-evaluation equivalents charged for one Adam step of one restart."""
    return VG_COST_PER_CANDIDATE * int(n_candidates)


_COMPILED: dict = {}


def _compiled_descent(s, tables, cap, z0, key, sched):
    """``descend`` compiled ahead of time (so compile and descent are timed apart), cached by shapes."""
    args = (s, tables, cap, z0, key)
    leaves, tree = jax.tree_util.tree_flatten(args)
    k = (tree, tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves), sched)
    if k not in _COMPILED:
        _COMPILED[k] = descend.lower(*args, sched=sched).compile()
    return _COMPILED[k]


def _relaxed_ns(s, tables, cap, z, sched: Schedule, temp) -> float:
    p = probabilities(Relaxed(z), temp)
    lt = loss_terms(s, tables, cap, p, tau_ns=sched.tau1_ns, lam=0.0, rho=0.0, beta=0.0)
    return float(lt.time_ns)


def prepare(s, plan, *, nar_granularity: int | None = None, n_candidates: int = 4):
    """Candidates, NAP+NAR, the stacked expected-traffic tables and the CU table of ``plan`` on ``s``."""
    cand, nap = make_candidates(s, plan, nar_granularity=nar_granularity, n_candidates=n_candidates)
    return cand, nap, expected_tables(s, plan, cand), capacity_table(s, plan, cand, cu_demand(s, plan))


def _pipeline(ctx, *, descent: bool, steps: int, T: dict, say) -> dict:
    """Steps 2-5 of the module docstring for one search; returns its evaluator and diagnostics."""
    s, plan, cand, tables, cap = ctx["s"], ctx["plan"], ctx["cand"], ctx["tables"], ctx["cap"]
    budget, B, sched, seed = ctx["budget"], ctx["seeds"], ctx["sched"], ctx["seed"]
    units = steps * B * vg_cost(cand.n_candidates) if descent else 0
    ev = Evaluator(s, plan, cand, min_rows=tables.max_slice_rows, budget=budget - units)
    warm = np.zeros(plan.n_tbs, np.int64)
    ev(warm, "algorithm1")
    key = jax.random.PRNGKey(seed)
    k0, k1 = jax.random.split(key)
    z = init_logits(k0, plan.n_tbs, cand.n_candidates, B)
    hist = {}
    if descent:
        sch = sched._replace(steps=int(steps))
        t0 = time.perf_counter()
        compiled = _compiled_descent(s, tables, cap, z, k1, sch)
        T["compile_s"] = time.perf_counter() - t0
        say("compiled")
        t0 = time.perf_counter()
        z, hist = compiled(s, tables, cap, z, k1)
        z = jax.block_until_ready(z)
        T["descent_s"] = time.perf_counter() - t0
        say("descended")
    kind = "descent" if descent else "init"
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    argmaxes = []   # (estimate, restart, choice)
    try:
        for b in range(B):
            p = np.asarray(probabilities(Relaxed(z[b]), sched.temp1))
            for j, ch in enumerate(round_choices(p, ctx["n_samples"], rng)):
                est = ev(ch, f"{kind}_argmax" if j == 0 else f"{kind}_sample")[2]
                if j == 0:
                    argmaxes.append((est, b, ch))
    except BudgetExhausted:
        pass
    T["rounding_s"] = T.get("rounding_s", 0.0) + time.perf_counter() - t0
    say("rounded")
    t0 = time.perf_counter()
    starts = [ch for _, _, ch in ev.best(max(1, ctx["search_starts"]))]
    ls_trace = []
    for i, st in enumerate(starts):
        share = int(ev.left() // (len(starts) - i)) if ev.budget is not None else None
        if share is not None and share <= 0:
            break
        _, _, tr = local_search(ev, st, max_evals=share)
        ls_trace.append(tr)
    T["local_search_s"] = T.get("local_search_s", 0.0) + time.perf_counter() - t0
    say("searched")
    best_arg = min(argmaxes, key=lambda r: (r[0], r[1])) if argmaxes else None
    relaxed = (_relaxed_ns(s, tables, cap, z[best_arg[1]], sched, sched.temp1) if best_arg is not None
               else float("nan"))
    return {"ev": ev, "descent_units": units, "steps": steps if descent else 0, "history": hist,
            "argmax": best_arg, "relaxed_ns": relaxed, "local_search_trace": ls_trace,
            "final_loss": (float(np.asarray(hist["loss"])[-1, best_arg[1]]) if hist and best_arg else None)}


def optimize(s, plan, *, budget: int = 800, steps: int | None = None, seeds: int = 2, n_candidates: int = 4,
             n_samples: int = 4, n_simulate: int = 3, descent: bool = True, baselines: bool = True,
             descent_share: float = 0.5, search_starts: int = 3, nar_granularity: int | None = None,
             seed: int = 0, progress=None, sched: Schedule | None = None,
             search_budget_s: float | None = None, baseline: bool | None = None,
             search_evals: int | None = None, prepared=None, straight_through: float | None = None) -> dict:
    """Optimize ``plan``'s placement on ``s`` with ``budget`` path-model evaluations and
    ``n_simulate`` simulator calls per search (module docstring).

    Returns a dict with :data:`KEYS` and more: ``placement`` (the chosen
    :class:`~nuna_jax.placement.Placement`), ``source``, ``estimate_ns``, ``baselines``,
    ``budget``, ``gap``, ``pool``, ``timing_s`` (diagnostic only: nothing is decided by the clock).
    ``search_budget_s`` and ``search_evals`` are accepted for old callers and ignored
    (a warning); ``baseline`` is the old name of ``baselines``.  ``prepared``: :func:`prepare`'s
    result for this ``s`` and ``plan`` (several seeds of one case share it).  ``straight_through``:
    the fraction of the descent after which the loss is the straight-through Gumbel-softmax of a hard
    sample (:class:`.descent.Schedule`; default off).
    """
    if search_budget_s is not None or search_evals is not None:
        warnings.warn("optimize: search_budget_s / search_evals are ignored; budgets are path-model "
                      "evaluations (budget=)", DeprecationWarning, stacklevel=2)
    if baseline is not None:
        baselines = baseline
    if seeds < 1 or (steps is not None and steps < 1):
        raise ValueError(f"--steps and --seeds must be >= 1, got {steps} and {seeds}")
    if n_simulate < 1:
        raise ValueError(f"n_simulate must be >= 1, got {n_simulate}")
    say = progress or (lambda *_: None)
    sched = sched or Schedule()
    if straight_through is not None:   # the descent's last (1 - f) evaluates hard Gumbel-max samples (descent.py)
        sched = sched._replace(straight_through_from=float(straight_through))
    T = {}
    t_all = time.perf_counter()

    t0 = time.perf_counter()
    cand, nap, tables, cap = prepared or prepare(s, plan, nar_granularity=nar_granularity,
                                                 n_candidates=n_candidates)
    T["tables_s"] = time.perf_counter() - t0
    say("tables")
    vgc = vg_cost(cand.n_candidates)
    if steps is None:
        steps = max(1, int(descent_share * budget) // (seeds * vgc))
    units = steps * seeds * vgc
    if descent and units >= budget:
        raise ValueError(f"--budget {budget} does not pay for {steps} steps x {seeds} restarts "
                         f"({units} evaluations at {vgc} per value-and-grad) and the rounding")
    ctx = {"s": s, "plan": plan, "cand": cand, "tables": tables, "cap": cap, "budget": int(budget),
           "seeds": int(seeds), "sched": sched, "seed": int(seed), "n_samples": int(n_samples),
           "search_starts": int(search_starts)}
    main = _pipeline(ctx, descent=descent, steps=steps, T=T, say=say)
    ev = main["ev"]

    base = {}
    if baselines:
        t0 = time.perf_counter()
        warm = np.zeros(plan.n_tbs, np.int64)
        for name in BASELINES:
            if name == "no_descent":
                if not descent:
                    continue
                bev = _pipeline(ctx, descent=False, steps=0, T={}, say=lambda *_: None)["ev"]
            else:
                bev = Evaluator(s, plan, cand, min_rows=tables.max_slice_rows, budget=int(budget))
                rng = np.random.default_rng([int(seed), BASELINES.index(name)])
                if name != "random":   # their start is Algorithm 1's own choice, labelled as such
                    bev(warm, "algorithm1")
                if name == "random":
                    random_search(bev, rng)
                elif name == "local_search":
                    local_search(bev, warm)
                else:
                    annealing(bev, warm, rng, n_evals=int(budget) - 1)
            base[name] = bev
        T["baselines_s"] = time.perf_counter() - t0
        say("baselines")

    # the simulator: each search's best n_simulate by the estimate, NAP+NAR and UA as references
    t0 = time.perf_counter()
    pools = {"search": ev.best(n_simulate), **{k: b.best(n_simulate) for k, b in base.items()}}
    evs = {"search": ev, **base}
    uniq, trs = {}, []
    for name, pool in pools.items():
        for _, _, ch in pool:
            k = Evaluator.key(ch)
            if k not in uniq:
                uniq[k] = len(trs)
                trs.append(evs[name](ch)[1])
    arg = main["argmax"]
    if arg is not None and Evaluator.key(arg[2]) not in uniq:   # the gap's argmax (a diagnostic, no pool)
        uniq[Evaluator.key(arg[2])] = len(trs)
        trs.append(ev(arg[2])[1])
    ua = place(s, plan, "ua")
    trs += [build_traffic(s, plan, nap), build_traffic(s, plan, ua)]
    sims = [r.completion_ns for r in simulate_batch(s, trs)]
    T["simulate_s"] = time.perf_counter() - t0
    say("simulated")
    nap_ns, ua_ns = float(sims[-2]), float(sims[-1])

    def judged(name):
        rows = [(float(sims[uniq[Evaluator.key(ch)]]), est, lab, ch) for est, lab, ch in pools[name]]
        k = min(range(len(rows)), key=lambda i: (rows[i][0], i))
        return rows[k], rows

    (sim_ns, est_ns, source, choice), rows = judged("search")
    pl = ev(choice)[0]
    baselines_out = {}
    for name, bev in base.items():
        (bs, be, bl, _), brows = judged(name)
        baselines_out[name] = {"simulated_ns": bs, "estimate_ns": be, "source": bl,
                               "speedup_vs_nap_nar": nap_ns / bs, "path_model_evals": bev.n_evals,
                               "simulator_calls": len(brows)}
    argmax_sim = float(sims[uniq[Evaluator.key(arg[2])]]) if arg is not None else None
    gap = {"relaxed_ns": main["relaxed_ns"], "final_loss_ns": main["final_loss"],
           "rounded_argmax_ns": None if arg is None else float(arg[0]),
           "argmax_simulated_ns": argmax_sim,
           "relaxed_vs_argmax_simulated": (None if arg is None else main["relaxed_ns"] / argmax_sim - 1.0),
           "best_estimate_ns": float(ev.best(1)[0][0]), "simulated_ns": float(sim_ns)}
    out = {
        "relaxed_ns": float(main["relaxed_ns"]),
        "rounded_estimate_ns": float(est_ns),     # the estimate of the placement returned
        "simulated_ns": float(sim_ns),
        "nap_nar_simulated_ns": nap_ns,
        "ua_simulated_ns": ua_ns,
        "speedup_vs_nap_nar": float(nap_ns / sim_ns),
        "speedup_vs_ua": float(ua_ns / sim_ns),
        "wall_s": time.perf_counter() - t_all,
        "source": source,
        "estimate_ns": float(est_ns),
        "nap_nar_estimate_ns": float(ev(np.zeros(plan.n_tbs, np.int64))[2]),
        "pool": [{"kind": lab, "estimate_ns": float(e), "simulated_ns": x} for x, e, lab, _ in rows],
        "baselines": baselines_out,
        "budget": {"path_model_evals": int(budget), "simulator_calls": int(n_simulate),
                   "vg_cost": vgc, "vg_cost_per_candidate": VG_COST_PER_CANDIDATE,
                   "steps": main["steps"], "seeds": int(seeds), "descent_evals": main["descent_units"],
                   "discrete_evals": ev.n_evals, "used": main["descent_units"] + ev.n_evals},
        "gap": gap,
        "granularity": cand.granularity, "n_candidates": cand.n_candidates,
        "n_rows_relaxed": tables.n_rows, "capacities": check_capacities(s, plan, pl),
        "timing_s": T, "n_evals": ev.n_evals,
        "history": {k: np.asarray(v).tolist() for k, v in main["history"].items()},
        "local_search_trace": main["local_search_trace"],
        "placement": pl, "choice": np.asarray(choice).tolist(),
    }
    return out
