"""The placement search beside its equal-budget baselines, case by case.

Every case is run with ``--seeds-run`` seeds (3 by default); each seed runs
``optim.optimize`` once: the search (descent, ``--estimator``: ``score`` by default, or
``straight_through``; rounding; local search) and the four baselines
(``random``, ``local_search`` = Algorithm 1 + the local search, ``annealing``, ``no_descent``
= the same pipeline without the descent), each with ``--budget`` path-model evaluations and 3
simulator calls; NAP+NAR and UA simulated as references.  Every (case, seed) is one job; jobs
run in ``--jobs`` processes, the costliest first.

The grid (``CASES``, 33 cases): 8 GPUs, All-Gather / All-Reduce / All-to-All at 100 kB, 1 MB and
10 MB with 7 threadblocks per GPU; the three at 1 MB with 28 and 112; All-Gather 100 kB and
10 MB with 28; 64 GPUs (63 threadblocks): All-Gather 1 MB and 10 MB, All-Reduce and All-to-All
1 MB; the three MSCCL files in ../shared/data/msccl at 1 MB; the ``quad`` socket, All-Gather and
All-Reduce 1 MB; the threadblock count searched (``tbs`` "best": ``optimize(..., tbs_per_gpu="best")``,
the union over 7, 28 and 112), All-Gather, All-Reduce, All-to-All 1 MB and All-Gather 10 MB on 8
GPUs (indices 26-29, ``BEST``); All-Gather 1 MB (7 threadblocks) beside the Figure 14 GEMM of 8
and 32 MB per GPU (indices 30-31, ``GEMM``: a case's optional 7th field,
``optimize(..., gemm_mb_per_gpu=X)``), and at 8 MB with the threadblock count searched (index 32,
Figure 14's setting).  ``--quick``: All-Gather and All-to-All 100 kB on 8 GPUs, 2 seeds.

Output: ``OUT/optim_grid.json`` (rewritten as each case finishes), ``OUT/optim_grid.md`` (the
table: simulated ns, mean over seeds, and each seed) and ``OUT/optim_grid.png`` (per case,
NAP+NAR / x for the search and every baseline; ``--plot JSON`` redraws it).

    python experiments/optim_grid.py --quick --jobs 2 --out experiments/out/optim_grid_quick
    python experiments/optim_grid.py --jobs 16 --budget 800 --budget-large 300 --msccl-dir DIR \
        --cases 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,19,20,21,22,23,24,25 --out OUT   # 16 CPUs, one call
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYTHONPATH", str(ROOT))   # the spawned workers import this checkout too
os.environ.setdefault("JAX_PLATFORMS", "cpu")     # many small processes: the path model on CPU, not one GPU each

MSCCL_ENV = "NUNA_OPTIM_MSCCL_DIR"   # --msccl-dir, passed to the spawned workers through the environment
MSCCL_DEFAULT = ROOT.parent / "shared" / "data" / "msccl"
# (name, system preset, collective or MSCCL file, size bytes, gpus (None: the file's), tbs per GPU)
CASES = (
    [(f"{c} {sz / 1e6:g}MB 8g t7", "table2", c, sz, 8, 7)
     for c in ("allgather", "allreduce", "alltoall") for sz in (100_000, 1_000_000, 10_000_000)]
    + [(f"{c} 1MB 8g t{t}", "table2", c, 1_000_000, 8, t) for t in (28, 112)
       for c in ("allgather", "allreduce", "alltoall")]
    + [(f"allgather {sz / 1e6:g}MB 8g t28", "table2", "allgather", sz, 8, 28) for sz in (100_000, 10_000_000)]
    + [("allgather 1MB 64g t63", "table2", "allgather", 1_000_000, 64, 63),
       ("allgather 10MB 64g t63", "table2", "allgather", 10_000_000, 64, 63),
       ("allreduce 1MB 64g t63", "table2", "allreduce", 1_000_000, 64, 63),
       ("alltoall 1MB 64g t63", "table2", "alltoall", 1_000_000, 64, 63)]
    + [(f"msccl {f} 1MB", "table2", f, 1_000_000, None, None)
       for f in ("ndv4_ag-1m.xml", "ndv4_a2a2ll.xml", "ncv4_ag_hier_4_LL.xml")]
    + [(f"quad {c} 1MB 8g t7", "quad", c, 1_000_000, 8, 7) for c in ("allgather", "allreduce")]
    # session 9: the threadblock count searched (tbs "best": the union over 7, 28, 112; NAP+NAR at its
    # own best count is the reference), indices 26-29
    + [(f"{c} 1MB 8g tbest", "table2", c, 1_000_000, 8, "best") for c in ("allgather", "allreduce", "alltoall")]
    + [("allgather 10MB 8g tbest", "table2", "allgather", 10_000_000, 8, "best")]
    # session 9: All-Gather beside the Figure 14 GEMM (NUNA 6.6): a 7th field, the GEMM's MB of HBM
    # traffic per GPU (``optimize(..., gemm_mb_per_gpu=X)``, optim/gemm.py); indices 30-32, ``GEMM``
    + [(f"allgather 1MB 8g t7 + GEMM {mb}MB", "table2", "allgather", 1_000_000, 8, 7, mb) for mb in (8, 32)]
    # and Figure 14's own setting: the threadblock count searched too (index 32)
    + [("allgather 1MB 8g tbest + GEMM 8MB", "table2", "allgather", 1_000_000, 8, "best", 8)]
)
BEST = [i for i, c in enumerate(CASES) if c[5] == "best"]


def case_gemm_mb(case):
    """The case's concurrent GEMM, MB of HBM traffic per GPU (its optional 7th field; None: none)."""
    return case[6] if len(case) > 6 else None


GEMM = [i for i, c in enumerate(CASES) if case_gemm_mb(c) is not None]
QUICK = [0, 6]   # All-Gather and All-to-All 100 kB, 8 GPUs, 7 threadblocks
BASELINES = ("random", "local_search", "annealing", "no_descent", "tied_local_search")
#: the gradient-free baselines the search is compared with ("vs best gradient-free"); the tied local
#: search joined in session 9 (grids before it lack it: their rows use the other three)
GRADIENT_FREE = ("random", "local_search", "annealing", "tied_local_search")


def tbs_weight(case) -> int:
    """A case's threadblocks per GPU for ordering jobs by cost ("best" and MSCCL plans rank as 112)."""
    return case[5] if isinstance(case[5], int) else 112


def parse_cases(spec: str) -> list[int]:
    """Case indices from ``"0-17,19,21-25"`` (ranges inclusive)."""
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return out


def msccl_dir() -> Path:
    return Path(os.environ.get(MSCCL_ENV) or MSCCL_DEFAULT)


def missing_plan(case) -> str | None:
    """The MSCCL plan file a case needs when it is not on this machine (else None)."""
    what = case[2]
    if what.endswith(".xml") and not (msccl_dir() / what).is_file():
        return str(msccl_dir() / what)
    return None


def build(case):
    """(system, plan) of a case, as ``nuna-jax optimize`` builds them (NAP+NAR's scenario)."""
    from nuna_jax.presets import preset
    from nuna_jax.scenario import make_scenario
    _, sysname, what, size, gpus, tbs = case[:6]
    if what.endswith(".xml"):
        what = str(msccl_dir() / what)
        from nuna_jax.msccl import load_msccl
        gpus = load_msccl(what, size).n_gpus
        sc = make_scenario(preset(sysname, n_gpus=gpus), plan_file=what, size_bytes=size, policy="nap+nar")
    else:
        sc = make_scenario(preset(sysname, n_gpus=gpus), collective=what, size_bytes=size, policy="nap+nar",
                           tbs_per_gpu=tbs)
    return sc.system, sc.plan


def case_budget(case, budget: int, budget_large: int | None, split_gpus: int) -> int:
    """The budget of a case: ``budget_large`` for cases of more than ``split_gpus`` GPUs (every
    method of one case has the same budget)."""
    return int(budget_large) if budget_large is not None and (case[4] or 8) > split_gpus else int(budget)


def run_case(case, seeds, budget, estimator="score", opts=None):
    """Every seed of one case in one process (the space, its tables and the compiled programs are
    shared by the seeds): ``optimize`` (search + the four baselines) per seed; ``estimator``: the
    descent's (``score`` or ``straight_through``); ``opts``: ``descent_share`` and ``group_roles``
    (None: ``optimize``'s defaults)."""
    from nuna_jax.optim.counts import prepare_counts
    from nuna_jax.optim.driver import optimize, prepare
    from nuna_jax.optim.score import ScoreSchedule
    opts = opts or {}
    kw = {}
    if opts.get("descent_share") is not None:
        kw["descent_share"] = float(opts["descent_share"])
    if opts.get("group_roles"):
        kw["score_sched"] = ScoreSchedule(group_roles=opts["group_roles"])
    t0 = time.perf_counter()
    s, plan = build(case)
    best = case[5] == "best"
    if best:
        kw["tbs_per_gpu"] = "best"
    if case_gemm_mb(case) is not None:
        kw["gemm_mb_per_gpu"] = case_gemm_mb(case)
    prep = prepare_counts(s, plan) if best else prepare(s, plan)
    t_prep = time.perf_counter() - t0
    out = []
    for seed in seeds:
        t1 = time.perf_counter()
        r = optimize(s, plan, budget=budget, seed=seed, prepared=prep, estimator=estimator, **kw)
        run = {"seed": seed, "simulated_ns": r["simulated_ns"], "estimate_ns": r["estimate_ns"],
               "source": r["source"], "nap_nar_simulated_ns": r["nap_nar_simulated_ns"],
               "nap_nar_estimate_ns": r["nap_nar_estimate_ns"],
               "ua_simulated_ns": r["ua_simulated_ns"], "baselines": r["baselines"], "gap": r["gap"],
               "budget": r["budget"], "timing_s": {**r["timing_s"], "build_prepare_s": t_prep},
               "wall_s": r["wall_s"], "job_wall_s": time.perf_counter() - t1, "choice": r["choice"],
               "capacities": r["capacities"], "tbs_per_gpu": r["tbs_per_gpu"], "tbs": r["tbs"],
               "gemm": r.get("gemm")}
        out.append({"case": case[0], "n_gpus": int(plan.n_gpus),
                    "tbs_per_gpu": "best" if best else int(plan.tbs_per_gpu.max(initial=0)),
                    "n_page_groups": r["n_page_groups"], "run": run})
    return out


def _worker(job):
    case, seeds, budget, estimator, opts = job
    try:
        return run_case(case, seeds, budget, estimator, opts)
    except Exception as e:  # report, keep the grid going
        return [{"case": case[0], "seed": sd, "error": f"{type(e).__name__}: {e}"} for sd in seeds]


def merge(results):
    """Per-seed results -> one record per case (``runs`` sorted by seed)."""
    by = {}
    for r in results:
        c = by.setdefault(r["case"], {"case": r["case"], "runs": [], "errors": []})
        if "error" in r:
            c["errors"].append({"seed": r["seed"], "error": r["error"]})
        else:
            c.update(n_gpus=r["n_gpus"], tbs_per_gpu=r["tbs_per_gpu"])
            c["runs"].append(r["run"])
    for c in by.values():
        c["runs"].sort(key=lambda x: x["seed"])
    return list(by.values())


def summary(r):
    """Mean simulated ns over seeds: NAP+NAR, the search, every baseline; ratios NAP+NAR / x."""
    import numpy as np
    runs = r["runs"]
    if not runs:
        return {"case": r["case"], "error": "; ".join(e["error"] for e in r["errors"])}
    row = {"case": r["case"], "seeds": len(runs), "nap_nar": runs[0]["nap_nar_simulated_ns"],
           "budget": runs[0]["budget"]["path_model_evals"],
           "search": float(np.mean([x["simulated_ns"] for x in runs])),
           "search_each": [x["simulated_ns"] for x in runs], "sources": [x["source"] for x in runs],
           "gap": float(np.median([x["gap"]["relaxed_vs_argmax_simulated"] for x in runs
                                   if x["gap"]["relaxed_vs_argmax_simulated"] is not None] or [np.nan]))}
    for b in BASELINES:
        vals = [x["baselines"][b]["simulated_ns"] for x in runs if b in x["baselines"]]
        row[b] = float(np.mean(vals)) if vals else None
        row[b + "_each"] = vals
        row[b + "_tbs"] = [x["baselines"][b].get("tbs_per_gpu") for x in runs if b in x["baselines"]]
    if runs[0].get("tbs"):       # the threadblock count searched: the count each method chose, per seed
        row["tbs"] = {"nap_nar": runs[0]["tbs"]["nap_nar_count"], "counts": runs[0]["tbs"]["counts"],
                      "search": [x["tbs_per_gpu"] for x in runs]}
    row["wall_s_per_seed"] = float(np.mean([x["wall_s"] for x in runs]))
    return row


def table_md(rows) -> str:
    head = ("| case | seeds | budget | NAP+NAR | search (mean; each) | " + " | ".join(BASELINES)
            + " | search vs no_descent | search vs best gradient-free | vs NAP+NAR | loss/argmax-sim - 1 (median) |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | error: {r['error']} |")
            continue
        free = min(r[b] for b in GRADIENT_FREE if r.get(b) is not None)
        nd = r["no_descent"]
        out.append(f"| {r['case']} | {r['seeds']} | {r.get('budget', '-')} | {r['nap_nar']:.1f} | {r['search']:.1f}; "
                   + " / ".join(f"{v:.1f}" for v in r["search_each"]) + " | "
                   + " | ".join("-" if r.get(b) is None else f"{r[b]:.1f}" for b in BASELINES)
                   + " | " + ("-" if nd is None else f"{nd / r['search']:.3f}") + f" | {free / r['search']:.3f} | "
                   f"{r['nap_nar'] / r['search']:.3f} | {r['gap']:+.3f} |")
    return "\n".join(out) + "\n\n" + criteria_md(rows) + tbs_md(rows)


def tbs_md(rows) -> str:
    """The threadblock count each method chose, per seed, on the cases that search it."""
    rows = [r for r in rows if "error" not in r and r.get("tbs")]
    if not rows:
        return ""
    head = "| case | counts | NAP+NAR's | search | " + " | ".join(BASELINES) + " |"
    out = ["", "Threadblocks per GPU chosen (per seed):", "", head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        out.append(f"| {r['case']} | {'/'.join(map(str, r['tbs']['counts']))} | {r['tbs']['nap_nar']} | "
                   + " / ".join(map(str, r["tbs"]["search"])) + " | "
                   + " | ".join(" / ".join(map(str, r[b + "_tbs"])) or "-" for b in BASELINES) + " |")
    return "\n".join(out) + "\n"


def criteria(rows) -> dict:
    """The acceptance criteria, counted over the cases (means over seeds of simulated ns)."""
    import numpy as np
    ok = [r for r in rows if "error" not in r]
    nd = [r["no_descent"] / r["search"] for r in ok if r["no_descent"]]
    free = [min(r[b] for b in GRADIENT_FREE if r.get(b) is not None) for r in ok]
    nap = [r["nap_nar"] / r["search"] for r in ok]
    gaps = [r["gap"] for r in ok if np.isfinite(r["gap"])]
    return {"cases": len(ok),
            "descent_beats_ablation_by_3pct": sum(x >= 1.03 for x in nd),
            "descent_worse_than_ablation_by_1pct": sum(x < 1 / 1.01 for x in nd),
            "beats_or_ties_best_gradient_free": sum(r["search"] <= f * (1 + 1e-3) for r, f in zip(ok, free)),
            "faster_than_nap_nar_1_2x": sum(x >= 1.2 for x in nap),
            "slower_than_nap_nar": sum(x < 1 - 1e-9 for x in nap),
            "median_abs_gap": float(np.median(np.abs(gaps))) if gaps else None}


def criteria_md(rows) -> str:
    c = criteria(rows)
    n = c["cases"]
    return (f"Criteria over {n} cases (means over seeds, simulated): descent >= 3 % faster than its no-descent "
            f"ablation on {c['descent_beats_ablation_by_3pct']} (target >= {(n + 1) // 2}), > 1 % slower on "
            f"{c['descent_worse_than_ablation_by_1pct']} (target 0); beats or ties (0.1 %) the best gradient-free "
            f"baseline on {c['beats_or_ties_best_gradient_free']} (target >= {-(-2 * n // 3)}); >= 1.2x faster "
            f"than NAP+NAR on {c['faster_than_nap_nar_1_2x']} (target >= 3), slower on {c['slower_than_nap_nar']} "
            f"(target 0); median |loss / argmax simulated - 1| = "
            + ("-" if c["median_abs_gap"] is None else f"{c['median_abs_gap']:.3f}") + " (target <= 0.05).\n")


def plot(path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from nuna_jax.plots.save import save_figure
    d = json.load(open(path))
    rows = [x for x in (summary(r) for r in d["cases"]) if "error" not in x]
    if not rows:
        return
    names = ["search"] + list(BASELINES)
    x = np.arange(len(rows))
    w = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows) + 2), 5.5))
    for k, n in enumerate(names):
        ys = [r["nap_nar"] / r[n] if r.get(n) else np.nan for r in rows]
        ax.bar(x + (k - (len(names) - 1) / 2) * w, ys, w, label=n)
        for i, r in enumerate(rows):   # each seed as a dot
            each = r["search_each"] if n == "search" else r.get(n + "_each", [])
            ax.plot([x[i] + (k - (len(names) - 1) / 2) * w] * len(each), [r["nap_nar"] / v for v in each],
                    "k.", ms=3)
    ax.axhline(1, color="gray", lw=0.5)
    ax.set_xticks(x)
    ax.set_xticklabels([r["case"] for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("NAP+NAR simulated / simulated\n(higher is faster)")
    budgets = "/".join(str(b) for b in sorted({r.get("budget") or d["meta"]["budget"] for r in rows}, reverse=True))
    ax.set_title(f"search vs equal-budget baselines ({budgets} path-model evaluations, "
                 "3 simulator calls each; bars: mean over seeds, dots: seeds)", fontsize=9)
    lo = min(min(r["nap_nar"] / r[n] for n in names if r.get(n)) for r in rows)
    ax.set_ylim(min(0.95, lo - 0.02), None)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, os.path.splitext(path)[0], dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1, help="processes (one case each at a time)")
    ap.add_argument("--seeds-run", type=int, default=None, help="seeds per case (default 3; 2 with --quick)")
    ap.add_argument("--budget", type=int, default=800, help="path-model evaluations per search (default 800)")
    ap.add_argument("--budget-large", type=int, default=None,
                    help="path-model evaluations per search for the cases of more than --split-gpus GPUs "
                         "(default: --budget); every method of a case gets the same budget")
    ap.add_argument("--msccl-dir", default=None,
                    help=f"folder of the MSCCL plan files (default {MSCCL_DEFAULT}); cases whose file is "
                         "missing are skipped with a message")
    ap.add_argument("--quick", action="store_true", help="2 small cases, 2 seeds")
    ap.add_argument("--estimator", default="score", choices=("score", "straight_through"),
                    help="the descent's gradient (default score; docs/optim.md)")
    ap.add_argument("--descent-share", type=float, default=None,
                    help="the descent's share of the budget (default: optimize's, 0.75 for the score descent)")
    ap.add_argument("--group-roles", default=None, choices=("rank", "key"),
                    help="how the score descent ties page groups across GPUs (default: ScoreSchedule's)")
    ap.add_argument("--split-gpus", type=int, default=8,
                    help="cases with more GPUs than this (and the 112-threadblock, 10 MB and MSCCL ones) run one job per seed "
                         "(default 8)")
    ap.add_argument("--min-gpus", type=int, default=None, help="only cases with at least this many GPUs")
    ap.add_argument("--cases", default=None, help="comma-separated case indices or ranges, e.g. 0-17,19-25 (default all)")
    ap.add_argument("--max-gpus", type=int, default=None, help="only cases with at most this many GPUs")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--out", default="experiments/out/optim_grid")
    ap.add_argument("--plot", default=None, metavar="JSON[,JSON...]",
                    help="redraw the plot (several JSONs: merged into OUT/optim_grid.{json,md,png})")
    a = ap.parse_args(argv)
    if a.list:
        for i, c in enumerate(CASES):
            print(i, c[0])
        return 0
    if a.plot:
        paths = a.plot.split(",")
        if len(paths) > 1:   # merge the parts of one grid (e.g. --max-gpus 8 and --min-gpus 64 runs)
            ds = [json.load(open(p)) for p in paths]
            by = {}   # one record per case name: a later part's record with runs replaces an earlier one
            for d in ds:
                for c in d["cases"]:
                    if c["runs"] or c["case"] not in by:
                        by[c["case"]] = c
            merged = {"meta": {**ds[0]["meta"], "parts": [d["meta"] for d in ds], "cases": list(by)},
                      "cases": list(by.values())}
            os.makedirs(a.out, exist_ok=True)
            path = os.path.join(a.out, "optim_grid.json")
            with open(path, "w") as f:
                json.dump(merged, f, default=float)
            with open(os.path.join(a.out, "optim_grid.md"), "w") as f:
                f.write(table_md([summary(r) for r in merged["cases"]]))
            print(open(os.path.join(a.out, "optim_grid.md")).read())
            paths = [path]
        plot(paths[0])
        return 0
    if a.msccl_dir:
        os.environ[MSCCL_ENV] = str(Path(a.msccl_dir).resolve())
    seeds = a.seeds_run or (2 if a.quick else 3)
    idx = QUICK if a.quick else (range(len(CASES)) if a.cases is None else parse_cases(a.cases))
    if a.max_gpus is not None:
        idx = [i for i in idx if (CASES[i][4] or 8) <= a.max_gpus]
    if a.min_gpus is not None:
        idx = [i for i in idx if (CASES[i][4] or 8) >= a.min_gpus]
    # one job per case (its seeds share the space, the tables and the compiled programs); cases of more
    # than --split-gpus GPUs one job per seed (they are the long poles)
    jobs, skipped = [], []
    opts = {"descent_share": a.descent_share, "group_roles": a.group_roles}
    for i in idx:
        miss = missing_plan(CASES[i])
        if miss:   # e.g. on the lent device, which gets the repository's working tree only, not ../shared
            print(f"skipping case {i} ({CASES[i][0]}): plan file {miss} not found; run it where the file "
                  f"exists (python experiments/optim_grid.py --cases {i} ...) or pass --msccl-dir", flush=True)
            skipped.append({"case": CASES[i][0], "index": i, "missing": miss})
            continue
        b = case_budget(CASES[i], a.budget, a.budget_large, a.split_gpus)
        if ((CASES[i][4] or 8) > a.split_gpus or tbs_weight(CASES[i]) >= 112 or CASES[i][3] >= 10_000_000
                or CASES[i][2].endswith(".xml")):
            jobs += [(CASES[i], [sd], b, a.estimator, opts) for sd in range(seeds)]
        else:
            jobs.append((CASES[i], list(range(seeds)), b, a.estimator, opts))
    # the costliest first (64 GPUs, then many threadblocks), so the pool ends together
    jobs.sort(key=lambda j: -((j[0][4] or 8) ** 2 * tbs_weight(j[0])))   # an MSCCL plan (no tbs) or "best" ranks as 112
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "optim_grid.json")
    t0 = time.perf_counter()
    done = []
    import subprocess
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    meta = {"estimator": a.estimator, "options": opts, "budget": a.budget, "budget_large": a.budget_large, "skipped": skipped, "seeds": seeds, "jobs": a.jobs, "cpu_count": os.cpu_count(), "git_commit": commit,
            "cases": [CASES[i][0] for i in idx]}

    def dump():
        order = {CASES[i][0]: k for k, i in enumerate(idx)}
        cases = sorted(merge(done), key=lambda r: order[r["case"]])
        with open(path, "w") as f:
            json.dump({"meta": {**meta, "elapsed_s": time.perf_counter() - t0, "load_avg": os.getloadavg()},
                       "cases": cases}, f, default=float)
        rows = [summary(r) for r in cases]
        with open(os.path.join(a.out, "optim_grid.md"), "w") as f:
            f.write(table_md(rows))
            for sk in skipped:
                f.write(f"\nSkipped {sk['case']}: {sk['missing']} not found on this machine.\n")

    if a.jobs > 1:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(min(a.jobs, len(jobs)), maxtasksperchild=1) as pool:  # noqa: SIM117
            for rs in pool.imap_unordered(_worker, jobs):
                done.extend(rs)
                dump()
                for r in rs:
                    print(r["case"], r.get("error") or f"seed {r['run']['seed']}: {r['run']['job_wall_s']:.0f} s",
                          flush=True)
    else:
        for j in jobs:
            rs = _worker(j)
            done.extend(rs)
            dump()
            for r in rs:
                print(r["case"], r.get("error") or f"seed {r['run']['seed']}: {r['run']['job_wall_s']:.0f} s",
                      flush=True)
    dump()
    print(open(os.path.join(a.out, "optim_grid.md")).read())
    print(f"elapsed {time.perf_counter() - t0:.0f} s")
    try:
        plot(path)
    except Exception as e:  # the JSON is the result; the plot is a convenience
        print("plot failed:", e, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
