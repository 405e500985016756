"""``nuna-jax optimize``: the differentiable NAP/NAR placement search (docs/optim.md).

Descends a relaxed placement with Optax through the analytical model, rounds
and repairs it, runs a local search, and judges its best candidates on the
exact simulator, beside four baselines with the same budget (``--budget``
path-model evaluations, three simulator calls each): random search, Algorithm 1
+ the local search, simulated annealing, and the same pipeline without the
descent, and the tied local search; NAP+NAR and UA are simulated as references.  ``--tbs best``
(the default, generated plans, score descent): the threadblock count per GPU is searched too, over
the counts NAP's "best" tries (``optim.counts``); NAP+NAR is NAP+NAR at its own best count.
``--gemm-mb X``: beside a concurrent 100-tile GEMM moving ``X`` MB of HBM traffic per GPU (NUNA 6.6,
``optim.gemm``), on CUs no point of the search can use; every estimate and simulator run takes it.
``--save FILE.json`` writes the chosen placement; ``place``, ``estimate`` and ``simulate`` read it
back with ``--placement`` (and ``--tbs`` set to the count it was saved for).
"""

from __future__ import annotations

import sys

from .common import (add_system_args, add_tbs_arg, emit_json, format_size, limits_from_args, number, parse_size,
                     system_from_args, system_labels, system_text)

#: simulator calls per search (``optim.driver.optimize``'s ``n_simulate``)
N_SIMULATE = 3


def add_parser(sub) -> None:
    from ..plans import ALGORITHMS, COLLECTIVES
    p = sub.add_parser(
        "optimize", help="search a placement (Optax, relaxed NAP/NAR) and check it on the simulator",
        description="Gradient search over threadblock domains/CUs and page placement (relaxed, "
                    "annealed, vmapped restarts), rounded, repaired and locally improved; the best "
                    "candidates are simulated exactly and compared with NAP+NAR and UA.")
    add_system_args(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--collective", metavar="NAME", help=f"generated collective: {', '.join(COLLECTIVES)}")
    src.add_argument("--plan", metavar="FILE.xml", help="an MSCCL XML algorithm file instead of --collective")
    p.add_argument("--size", required=True, metavar="SIZE", help="per-GPU buffer size, e.g. 1MB")
    add_tbs_arg(p)
    p.add_argument("--nar-granularity", type=number(1, 10**9, integer=True, what="--nar-granularity"), default=None,
                   metavar="G",
                   help="NAR domains of the search (default: NAP's default granularity)")
    p.add_argument("--algorithm", default="direct", choices=ALGORITHMS, help="generated plan algorithm")
    p.add_argument("--budget", type=number(1, 2**62, integer=True, what="--budget"), default=800, metavar="N",
                   help="path-model evaluations per search and per baseline (default 800; an Adam step of one "
                        "restart counts 2 x candidates)")
    p.add_argument("--steps", type=number(1, 2**62, integer=True, what="--steps"), default=None, metavar="K",
                   help="Adam steps (default: as many as half the budget pays for)")
    p.add_argument("--seeds", type=number(1, 2**62, integer=True, what="--seeds"), default=2, metavar="B",
                   help="restarts in one vmap (default 2)")
    p.add_argument("--no-descent", action="store_true",
                   help="the ablation: the same pipeline without the gradient descent")
    p.add_argument("--no-baselines", action="store_true", help="skip the equal-budget baselines")
    p.add_argument("--estimator", default="score", choices=("score", "straight-through"),
                   help="the descent's gradient: score (REINFORCE with a baseline over batches of sampled "
                        "placements, logits tied across GPUs; default) or straight-through (Gumbel-softmax "
                        "through the smooth estimate)")
    p.add_argument("--straight-through", type=number(0.0, 1.0, what="--straight-through"), default=None, metavar="F",
                   help="evaluate hard Gumbel-max samples (straight-through gradient) from this fraction of "
                        "the descent on (default off)")
    p.add_argument("--candidates", type=number(1, 2**20, integer=True, what="--candidates"), default=4, metavar="C",
                   help="candidate domains per threadblock (default 4, at most the granularity)")
    p.add_argument("--search-s", type=str, default=None, metavar="S",
                   help="ignored (kept for old scripts): budgets are counts, see --budget")
    p.add_argument("--seed", type=number(0, 2**32 - 1, integer=True, what="--seed"), default=0,
                   help="random seed, 0 .. 2^32 - 1 (default 0)")
    p.add_argument("--gemm-mb", type=number(0.0, 1e6, lo_open=True, what="--gemm-mb"), default=None, metavar="X",
                   help="search beside a concurrent 100-tile GEMM moving X MB of HBM traffic per GPU (NUNA 6.6, "
                        "Fig. 14; on CUs no point of the search can use); every estimate and simulator run "
                        "takes it (default: none)")
    p.add_argument("--save", default=None, metavar="FILE.json", help="write the chosen placement here")


def _plan(args, s):
    from argparse import Namespace

    from .common import scenario_from_args
    ns = Namespace(**{**vars(args), "policy": "nap+nar", "placement": None})
    sc = scenario_from_args(ns, s)    # --plan without --gpus takes the file's GPU count
    return sc.system, sc.plan, sc


def run(args) -> int:
    from ..optim.driver import KEYS, optimize
    from ..optim.io import save_placement
    if args.candidates < 1:
        raise ValueError(f"--candidates must be >= 1, got {args.candidates}")
    if args.budget < 1:
        raise ValueError(f"--budget must be >= 1, got {args.budget}")
    if args.search_s is not None:
        print("nuna-jax optimize: --search-s is ignored; budgets are path-model evaluations (--budget)",
              file=sys.stderr)
    s = system_from_args(args)
    size = parse_size(args.size)
    if args.collective:                 # from the inputs, before NAP+NAR's scenario is built
        from ..limits import generated_plan_work
        from ..plans import canonical_collective
        from .common import tbs_for_work
        _check_work(args, s, generated_plan_work(canonical_collective(args.collective), args.algorithm, s.n_gpus,
                                                 tbs_for_work(args, s.n_gpus, args.algorithm), size))
    from ..optim.driver import OPTIMIZE_STEPS
    from ..progress import Stages
    steps = [k for k in OPTIMIZE_STEPS if not (k == "baselines" and args.no_baselines)
             and not (k == "descended" and args.no_descent)]
    union = args.tbs == "best" and args.plan is None
    if union and args.estimator == "straight-through":
        union = False
        print("nuna-jax optimize: --estimator straight-through searches one threadblock count: NAP+NAR's "
              "best (use the score estimator to search the count too)", file=sys.stderr)
    with Stages("optimize", enabled=not args.json) as stages:
        with stages.stage("planning", 1, "plans") as st:
            s, plan, nap_sc = _plan(args, s)     # NAP+NAR's scenario (its searches compile the path model)
            st.advance()
        _check_work(args, s, None, plan)
        st, bar = stages.callback("optimizing", steps)
        with st:
            r = optimize(s, plan, budget=args.budget, steps=args.steps, seeds=args.seeds,
                         n_candidates=args.candidates, descent=not args.no_descent, baselines=not args.no_baselines,
                         nar_granularity=args.nar_granularity, seed=args.seed, progress=bar,
                         straight_through=args.straight_through, estimator=args.estimator.replace("-", "_"),
                         tbs_per_gpu="best" if union else None, gemm_mb_per_gpu=args.gemm_mb)
    pl = r.pop("placement")
    plan = r.pop("plan")                 # the plan of the chosen count
    r = _finite_or_none(r)
    if args.save:
        save_placement(args.save, s, plan, pl, meta={k: r[k] for k in KEYS})
    out = {k: r[k] for k in KEYS}
    out.update({k: r[k] for k in ("source", "estimate_ns", "baselines", "budget", "pool", "gap", "granularity",
                                  "n_candidates", "capacities", "timing_s", "tbs", "gemm_mb_per_gpu", "gemm")})
    out.update({"collective": args.collective, "plan_file": args.plan, "size_bytes": size,
                "n_gpus": s.n_gpus, "tbs_per_gpu": int(plan.tbs_per_gpu.max(initial=0)),
                "tbs_chosen_by": "optimize" if union else nap_sc.tbs_chosen_by, "steps": r["budget"]["steps"],
                "seeds": args.seeds,
                "seed": args.seed, "descent": not args.no_descent, "estimator": args.estimator.replace("-", "_"),
                "saved": args.save, **system_labels(args, s)})
    if args.json:
        emit_json(out)
        return 0
    what = args.collective or args.plan
    tbs_text = (f"threadblocks/GPU searched over {r['tbs']['counts']} (NAP+NAR's: {r['tbs']['nap_nar_count']}), "
                f"chosen {out['tbs_per_gpu']}" if union else
                f"{out['tbs_per_gpu']} threadblocks/GPU ({out['tbs_chosen_by']}, NAP+NAR's)")
    print(f"{what} {format_size(size)} on {s.n_gpus} GPUs ({system_text(out)}), {tbs_text}: g={r['granularity']}, "
          f"{r['n_candidates']} candidates/threadblock, {out['steps']} steps x {args.seeds} restarts, "
          f"budget {args.budget} path-model evaluations, seed {args.seed}"
          + (f"; beside a {r['gemm']['n_tiles']}-tile GEMM of {args.gemm_mb:g} MB per GPU "
             f"({r['gemm']['n_avoided_cus']} CUs avoided)" if r["gemm"] else ""))
    for k in KEYS:
        print(f"  {k:22s} {out[k]:12.3f}" if out[k] is not None else f"  {k:22s} {'-':>12s}")
    for name, b in r["baselines"].items():
        print(f"  baseline {name:17s} {b['simulated_ns']:12.3f} ns simulated, {b['estimate_ns']:.3f} estimated "
              f"({b['speedup_vs_nap_nar']:.3f}x NAP+NAR)" + (f", {b['tbs_per_gpu']} threadblocks/GPU" if union else ""))
    print(f"  chosen: {r['source']}; capacities ok: {r['capacities']['ok']}"
          + (f"; saved to {args.save}" + (f" (read it back with --tbs {out['tbs_per_gpu']})" if union else "")
             if args.save else ""))
    return 0


def _check_work(args, s, work, plan=None) -> None:
    """``--budget``, ``--steps``, ``--seeds`` and the simulator runs within the work limits
    (:func:`nuna_jax.limits.check_optimize_work`): each run under ``simulate``'s flit limit.  ``work``:
    the plan's threadblocks, steps and bytes from the inputs (:func:`limits.generated_plan_work`),
    checked before anything is built; else those of the built ``plan``."""
    import math

    from ..limits import check_optimize_work, plan_work
    from ..optim.driver import BASELINES
    w = work if work is not None else plan_work(plan)
    flits = int(math.ceil(w["bytes"] / int(s.flit_bytes))) + w["plan_steps"]
    if getattr(args, "gemm_mb", None):      # the GEMM's flits run in every simulator call too
        flits += int(s.n_gpus) * int(math.ceil(args.gemm_mb * 1e6 / int(s.flit_bytes)))
    searches = 1 + (0 if args.no_baselines else len(BASELINES))
    runs = searches * N_SIMULATE + 3          # each search's best, the rounded argmax, NAP+NAR and UA
    what = args.collective or args.plan
    check_optimize_work(limits_from_args(args), budget=args.budget, steps=args.steps, seeds=args.seeds,
                        n_tbs=int(w["threadblocks"]), n_candidates=args.candidates, flits_per_run=flits, n_runs=runs,
                        source=f"optimize {what} of --size {args.size} on {s.n_gpus} GPUs")


def _finite_or_none(obj):
    """The result with every NaN / infinite number (a diagnostic that could not be computed, e.g.
    the relaxed time when no restart was rounded) as None (JSON null, "-" in the text)."""
    import math
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    return obj
