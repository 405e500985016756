"""Issue 12, item 7: the placement search on the simulator, case by case.

For every case of the grid (All-Gather 100 kB / 1 MB / 10 MB, All-Reduce and
All-to-All 1 MB at 8 GPUs, All-Gather 10 MB at 64 GPUs; 7 and 1,008
threadblocks per GPU): ``optim.optimize`` (descent, rounding, local search,
simulator), NAP+NAR, UA and the equal-time baseline (Algorithm 1 + the same
local search for the same wall time), all simulated; the relaxed -> rounded
-> searched -> simulated gap; and, on the 8-GPU cases, how well the
analytical estimate ranks placements against the simulator (Kendall tau over
``--rank-n`` placements: uniformly random candidate choices plus the pool).

Cases run in parallel processes (``--workers``), JAX on the CPU.  Output:
``experiments/out/optim_grid.json`` (rewritten as each case finishes) and
``optim_grid.png`` (``--plot`` reads the JSON).

    python experiments/optim_grid.py --workers 12 --out experiments/out
    python experiments/optim_grid.py --plot experiments/out/optim_grid.json
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
from nuna_jax.plots.save import save_figure  # noqa: E402
os.environ.setdefault("PYTHONPATH", str(ROOT))   # the spawned workers import this checkout too

CASES = [  # (collective, size bytes, gpus, tbs per GPU or None = n_gpus - 1)
    ("allgather", 100_000, 8, None), ("allgather", 1_000_000, 8, None), ("allgather", 10_000_000, 8, None),
    ("allreduce", 1_000_000, 8, None), ("alltoall", 1_000_000, 8, None),
    ("allgather", 100_000, 8, 1008), ("allgather", 1_000_000, 8, 1008), ("allgather", 10_000_000, 8, 1008),
    ("allreduce", 1_000_000, 8, 1008), ("alltoall", 1_000_000, 8, 1008),
    ("allgather", 10_000_000, 64, 7),
]
TIE = 0.005   # |ratio - 1| below this is a tie (0.5 %)


def kendall_tau(a, b) -> float:
    """Kendall tau-b of two sequences (O(n^2), ties counted as neither)."""
    import numpy as np
    a, b = np.asarray(a, float), np.asarray(b, float)
    da = np.sign(a[:, None] - a[None, :])
    db = np.sign(b[:, None] - b[None, :])
    iu = np.triu_indices(len(a), 1)
    s = (da * db)[iu].sum()
    na, nb = (da[iu] != 0).sum(), (db[iu] != 0).sum()
    return float(s / np.sqrt(na * nb)) if na and nb else float("nan")


def run_case(case, steps, seeds, rank_n, search_s):
    import numpy as np

    from nuna_jax.optim.candidates import make_candidates
    from nuna_jax.optim.driver import optimize
    from nuna_jax.optim.search import Evaluator
    from nuna_jax.presets import preset
    from nuna_jax.sim import simulate_batch
    coll, size, gpus, tbs = case
    s = preset("table2", n_gpus=gpus)
    from nuna_jax.scenario import generated_plan
    plan = generated_plan(s, coll, size, tbs_per_gpu=tbs)   # page-aligned slots, as every scenario (D3)
    t0 = time.perf_counter()
    big = gpus > 8
    r = optimize(s, plan, steps=steps, seeds=seeds, search_budget_s=search_s, n_simulate=1 if big else 3)
    r.pop("placement")
    out = {"case": {"collective": coll, "size_bytes": size, "n_gpus": gpus, "tbs_per_gpu": tbs or gpus - 1,
                    "tbs_arg": tbs},
           **{k: v for k, v in r.items() if k not in ("choice",)}}
    eq = r["equal_time"]
    out["ratio_vs_nap_nar"] = r["nap_nar_simulated_ns"] / r["simulated_ns"]
    out["ratio_vs_ua"] = r["ua_simulated_ns"] / r["simulated_ns"]
    out["ratio_vs_equal_time"] = eq["simulated_ns"] / r["simulated_ns"] if eq else None
    out["equal_time_ratio_vs_nap_nar"] = r["nap_nar_simulated_ns"] / eq["simulated_ns"] if eq else None
    if rank_n and not big:
        cand, _ = make_candidates(s, plan)
        ev = Evaluator(s, plan, cand)
        rng = np.random.default_rng(0)
        chs = [rng.integers(0, cand.n_candidates, plan.n_tbs) for _ in range(rank_n)]
        # also mixtures near NAP+NAR: each threadblock leaves candidate 0 with probability q
        for q in (0.05, 0.2):
            chs += [np.where(rng.random(plan.n_tbs) < q, rng.integers(0, cand.n_candidates, plan.n_tbs), 0)
                    for _ in range(rank_n // 4)]
        res = [ev(c) for c in chs]
        sims = [x.completion_ns for x in simulate_batch(s, [t for _, t, _ in res])]
        ests = [e for _, _, e in res]
        out["ranking"] = {"n": len(chs), "kendall_tau": kendall_tau(ests, sims),
                          "estimate_ns": ests, "simulated_ns": sims}
    out["case_wall_s"] = time.perf_counter() - t0
    import subprocess
    out["git_commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True).stdout.strip()
    out["load_avg"] = os.getloadavg()
    return out


def _worker(args):
    case, steps, seeds, rank_n, search_s = args
    try:
        return run_case(case, steps, seeds, rank_n, search_s)
    except Exception as e:  # report, keep the grid going
        return {"case": {"collective": case[0], "size_bytes": case[1], "n_gpus": case[2], "tbs_per_gpu": case[3],
                         "tbs_arg": case[3]},
                "error": f"{type(e).__name__}: {e}"}


def verdict(ratio):
    return "win" if ratio > 1 + TIE else ("loss" if ratio < 1 - TIE else "tie")


def plot(path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    d = json.load(open(path))
    rows = [r for r in d["cases"] if "error" not in r]
    fig, ax = plt.subplots(1, 3, figsize=(17, 4.8))
    for r in rows:
        h = np.asarray(r["history"]["loss"]).min(axis=1)        # [K, B] -> best restart per step
        tm = np.asarray(r["history"]["time_ns"]).min(axis=1)
        lab = f"{r['case']['collective']} {r['case']['size_bytes'] / 1e6:g}MB t{r['case']['tbs_per_gpu']}"
        ln, = ax[0].plot(h / r["nap_nar_simulated_ns"], label=lab)
        ax[0].plot(tm / r["nap_nar_simulated_ns"], ls=":", color=ln.get_color())
        ax[0].plot([len(h) - 1], [r["simulated_ns"] / r["nap_nar_simulated_ns"]], "*", color=ln.get_color())
    ax[0].set_xlabel("Adam step"); ax[0].set_ylabel("ns / NAP+NAR simulated")
    ax[0].set_title("loss (solid), smooth time (dotted), final simulated (*)"); ax[0].legend(fontsize=6)
    names = [f"{r['case']['collective'][:4]} {r['case']['size_bytes'] / 1e6:g}MB\n{r['case']['n_gpus']}g t{r['case']['tbs_per_gpu']}"
             for r in rows]
    x = np.arange(len(rows))
    for k, (key, lab) in enumerate((("nap_nar_simulated_ns", "NAP+NAR"), ("ua_simulated_ns", "UA"),
                                    ("simulated_ns", "optimized"))):
        ax[1].bar(x + (k - 1) * 0.27, [r[key] / r["nap_nar_simulated_ns"] for r in rows], 0.27, label=lab)
    eqs = [r["equal_time"]["simulated_ns"] / r["nap_nar_simulated_ns"] if r.get("equal_time") else np.nan for r in rows]
    ax[1].plot(x, eqs, "k_", ms=14, label="equal-time baseline")
    ax[1].set_xticks(x); ax[1].set_xticklabels(names, fontsize=6); ax[1].axhline(1, color="gray", lw=0.5)
    ax[1].set_ylabel("simulated time / NAP+NAR"); ax[1].legend(fontsize=7); ax[1].set_title("simulator")
    for r in rows:
        tr = r.get("local_search_trace") or []
        g = r["gap"]
        seq = [g["relaxed_ns"], g["rounded_argmax_ns"], g["best_rounded_ns"], g["local_search_ns"], g["simulated_ns"]]
        ax[2].plot(range(5), np.asarray(seq) / r["nap_nar_simulated_ns"], marker="o", lw=0.8)
    ax[2].set_xticks(range(5)); ax[2].set_xticklabels(["relaxed", "argmax", "best rounded", "searched", "simulated"])
    ax[2].set_ylabel("ns / NAP+NAR simulated"); ax[2].set_title("relaxed -> rounded -> searched -> simulated")
    fig.tight_layout()
    save_figure(fig, os.path.splitext(path)[0], dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--rank-n", type=int, default=60)
    ap.add_argument("--search-s", type=float, default=5.0)
    ap.add_argument("--cases", default=None, help="comma-separated case indices (default all)")
    ap.add_argument("--out", default="experiments/out")
    ap.add_argument("--plot", default=None, metavar="JSON")
    a = ap.parse_args(argv)
    if a.plot:
        plot(a.plot)
        return 0
    idx = range(len(CASES)) if a.cases is None else [int(i) for i in a.cases.split(",")]
    jobs = [(CASES[i], a.steps, a.seeds, a.rank_n, a.search_s) for i in idx]
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "optim_grid.json")
    t0 = time.perf_counter()
    done = []
    keys = {tuple(CASES[i]) for i in idx}
    if os.path.exists(path):   # keep the cases of earlier runs that this run does not redo
        old = json.load(open(path)).get("cases", [])
        done = [r for r in old if (r["case"]["collective"], r["case"]["size_bytes"], r["case"]["n_gpus"],
                                   r["case"].get("tbs_arg")) not in keys]
    meta = {"steps": a.steps, "seeds": a.seeds, "rank_n": a.rank_n, "search_s": a.search_s,
            "workers": a.workers, "cpu_count": os.cpu_count(), "tie": TIE}

    def dump():
        summ = []
        for r in done:
            if "error" in r:
                summ.append({**r["case"], "error": r["error"]})
                continue
            summ.append({**r["case"], "ratio_vs_nap_nar": r["ratio_vs_nap_nar"],
                         "verdict": verdict(r["ratio_vs_nap_nar"]), "ratio_vs_ua": r["ratio_vs_ua"],
                         "ratio_vs_equal_time": r["ratio_vs_equal_time"],
                         "kendall_tau": r.get("ranking", {}).get("kendall_tau"), "wall_s": r["wall_s"],
                         "source": r["source"]})
        with open(path, "w") as f:
            json.dump({"meta": {**meta, "elapsed_s": time.perf_counter() - t0}, "summary": summ, "cases": done},
                      f, default=float)

    if a.workers > 1:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(a.workers, maxtasksperchild=1) as pool:
            for r in pool.imap_unordered(_worker, jobs):
                done.append(r)
                dump()
                print(json.dumps({**r["case"], **{k: r.get(k) for k in ("ratio_vs_nap_nar", "ratio_vs_equal_time",
                                                                         "wall_s", "error")}}), flush=True)
    else:
        for j in jobs:
            done.append(_worker(j))
            dump()
            print(json.dumps(done[-1].get("case")), done[-1].get("ratio_vs_nap_nar"), done[-1].get("error"), flush=True)
    dump()
    try:
        plot(path)
    except Exception as e:  # the JSON is the result; the plot is a convenience
        print("plot failed:", e, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
