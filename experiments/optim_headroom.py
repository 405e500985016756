"""Headroom of the placement search space: how far below NAP+NAR a long search gets, inside the
default space and in wider ones (docs/optim.md, "Headroom").

For each case and space variant: simulated annealing from NAP+NAR with ``--evals`` path-model
evaluations (20x the grid's budget by default) and a *tied* local search
(:func:`nuna_jax.optim.point.tied_local_search`, since session 9 also the grid's
``tied_local_search`` baseline: a move sets one role's option on every GPU at once,
:func:`nuna_jax.optim.score.roles`, or one variable), each seeded;
the best ``--simulate`` distinct points by the estimate are simulated beside NAP+NAR.  No budget
parity here: this measures the space, not a search.

    python experiments/optim_headroom.py --cases 1,4 --variants default,K16 --evals 4000 --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("PYTHONPATH", str(ROOT))   # the spawned workers import this checkout

#: space variants: keyword arguments of ``optim.driver.prepare``
VARIANTS = {
    "default": {},
    "K8": {"n_stack_candidates": 8},
    "K16": {"n_stack_candidates": 16},
    "C8": {"n_candidates": 8},
    "gp2": {"group_pages": 2},
    "gp2K16": {"group_pages": 2, "n_stack_candidates": 16},
    "C8K16": {"n_candidates": 8, "n_stack_candidates": 16},
    "g4": {"nar_granularity": 4},
    "g2": {"nar_granularity": 2},
}


def run(case_i, variant, evals, seeds, n_sim):
    import numpy as np
    from optim_grid import CASES, build
    from nuna_jax.lowering import build_traffic
    from nuna_jax.optim.driver import prepare
    from nuna_jax.optim.point import Evaluator, annealing, tied_local_search
    from nuna_jax.optim.score import roles
    from nuna_jax.sim import simulate_batch
    case = CASES[case_i]
    s, plan = build(case)
    t0 = time.perf_counter()
    P = prepare(s, plan, **VARIANTS[variant])
    sp = P["sp"]
    cls = roles(sp, plan.tb_gpu)
    x0 = np.zeros(sp.n_vars, np.int64)
    out = {"case": case[0], "variant": variant, "evals": evals, "C": sp.C, "K": sp.K, "n_grp": sp.n_grp,
           "granularity": sp.cand.granularity, "methods": {}}
    pts = {}
    for method in ("annealing", "tied"):
        for seed in range(seeds):
            ev = Evaluator(s, plan, sp, P["gid"], P["ht"], budget=evals)
            ev(x0, "algorithm1")
            rng = np.random.default_rng([seed, 99])
            if method == "annealing":
                annealing(ev, x0, rng, n_evals=evals - 1)
            else:
                tied_local_search(ev, cls, x0, rng, max_evals=evals - 1, label="tied")
            for e, _, x in ev.best(n_sim):
                pts.setdefault(Evaluator.key(x), (e, x, f"{method}/{seed}"))
            out["methods"][f"{method}/{seed}"] = {"best_estimate_ns": float(ev.best(1)[0][0]), "evals": ev.n_evals}
    ev = Evaluator(s, plan, sp, P["gid"], P["ht"])
    out["nap_nar_estimate_ns"] = float(ev(x0))
    cand = sorted(pts.values(), key=lambda r: r[0])[: n_sim * 2]
    trs = [build_traffic(s, plan, ev.placement(x0))] + [build_traffic(s, plan, ev.placement(x)) for _, x, _ in cand]
    sims = [float(r.completion_ns) for r in simulate_batch(s, trs)]
    out["nap_nar_simulated_ns"] = sims[0]
    out["points"] = [{"from": lab, "estimate_ns": float(e), "simulated_ns": sm,
                      "moved_tbs": int(np.count_nonzero(x[:sp.n_tbs])), "moved_groups": int(np.count_nonzero(x[sp.n_tbs:])),
                      "x": x.tolist()}
                     for (e, x, lab), sm in zip(cand, sims[1:])]
    out["best_simulated_ns"] = min(sims)
    out["wall_s"] = time.perf_counter() - t0
    return out


def _job(j):
    try:
        return run(*j)
    except Exception as e:  # report, keep the others going
        return {"case_index": j[0], "variant": j[1], "error": f"{type(e).__name__}: {e}"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="1,4,2,7,10")
    ap.add_argument("--variants", default="default")
    ap.add_argument("--evals", type=int, default=16000)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--simulate", type=int, default=3)
    ap.add_argument("--evals-large", type=int, default=None, help="evaluations for the 10 MB cases (default --evals)")
    ap.add_argument("--jobs", type=int, default=1, help="processes (one (case, variant) each)")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "out" / "optim_headroom.json"))
    a = ap.parse_args(argv)
    res = []
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "machine": platform.node(),
            "cpu_count": os.cpu_count(), "jobs": a.jobs, "evals": a.evals, "seeds": a.seeds,
            "load_start": os.getloadavg()}
    from optim_grid import CASES, parse_cases
    ev_of = lambda c: a.evals_large if (a.evals_large and CASES[c][3] >= 10_000_000) else a.evals  # noqa: E731
    jobs = [(c, v, ev_of(c), a.seeds, a.simulate) for v in a.variants.split(",") for c in parse_cases(a.cases)]
    if a.jobs > 1:
        import multiprocessing as mp
        pool = mp.get_context("spawn").Pool(min(a.jobs, len(jobs)), maxtasksperchild=1)
        it = pool.imap_unordered(_job, jobs)
    else:
        it = (_job(j) for j in jobs)
    for r in it:
        res.append(r)
        if "error" in r:
            print(r["case_index"], r["variant"], r["error"], flush=True)
        else:
            v = r["variant"]
            print(f"{r['case']:28s} {v:8s} NAP+NAR sim {r['nap_nar_simulated_ns']:9.1f} est {r['nap_nar_estimate_ns']:9.1f} | "
                  + " ".join(f"{k} {m['best_estimate_ns']:.1f}" for k, m in r["methods"].items())
                  + f" | best sim {r['best_simulated_ns']:.1f} ({r['nap_nar_simulated_ns'] / r['best_simulated_ns']:.3f}x) "
                  f"{r['wall_s']:.0f}s load {os.getloadavg()[0]:.1f}", flush=True)
        meta["load_end"] = os.getloadavg()
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"meta": meta, "results": res}, separators=(",", ":")))


if __name__ == "__main__":
    main()
