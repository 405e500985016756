"""Validation study: analytical estimate (models.contention) vs the exact flit simulator.

Over collectives x sizes x GPU counts x policies (Table 2 system, direct
algorithm, default threadblocks), each scenario's traffic is (a) estimated
by ``contention.estimate_ns`` and bounded by ``contention.lower_bound_ns``
and (b) simulated flit by flit (nuna_jax.sim).  Reports the relative error
``(estimate - sim) / sim`` (median, worst, distribution) and how far the
simulation sits above the lower bound (``sim / bound``, never < 1 up to ps
rounding: ARCHITECTURE.md contract 2).

Usage: python experiments/validate_analytical.py [--quick]
  -> results/validation/validation.{json,png}, experiments/out/validation.{json,png}
"""
import argparse
import itertools
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from nuna_jax import sim  # noqa: E402
from nuna_jax.models import contention  # noqa: E402
from nuna_jax.scenario import make_scenario  # noqa: E402
from nuna_jax.presets import preset  # noqa: E402
from nuna_jax.plots.save import save_figure  # noqa: E402

COLLECTIVES = ("allgather", "alltoall", "allreduce")
SIZES = (100_000, 1_000_000, 4_000_000)
GPUS = (2, 4, 8)
POLICIES = ("ua", "ua+nar", "numa+nar", "nap+nar")


def main():
    from nuna_jax import cache
    cache.use_scenarios(True)      # scenarios built once are read back on the next run (nuna_jax.cache)
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a 2-GPU, 100 kB subset (smoke test)")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help="write the JSON and the plot into DIR (default: results/validation/ and experiments/out/)")
    a = ap.parse_args()
    grid = list(itertools.product(COLLECTIVES, SIZES, GPUS, POLICIES))
    if a.quick:
        grid = [g for g in grid if g[1] == 100_000 and g[2] == 2]
    rows = []
    t_start = time.perf_counter()
    for coll, size, n, pol in grid:
        s = preset("table2", n_gpus=n)
        sc = make_scenario(s, collective=coll, size_bytes=size, policy=pol)
        t0 = time.perf_counter()
        est = float(contention.estimate_ns(s, sc.traffic))
        lb = float(contention.lower_bound_ns(s, sc.traffic))
        t1 = time.perf_counter()
        r = sim.simulate(s, sc.traffic)
        t2 = time.perf_counter()
        simn = r.completion_ns
        row = {"collective": coll, "size_bytes": size, "gpus": n, "policy": pol,
               "flits": r.flits_delivered, "sim_ns": simn, "estimate_ns": est, "lower_bound_ns": lb,
               "rel_err": (est - simn) / simn, "sim_over_bound": simn / lb,
               "analytical_wall_s": t1 - t0, "sim_wall_s": t2 - t1}
        rows.append(row)
        print(f"{coll:9s} {size / 1e6:5.1f} MB {n:2d} GPUs {pol:8s}: sim {simn:9.1f}  est {est:9.1f} "
              f"({100 * row['rel_err']:+6.1f} %)  bound {lb:9.1f} (sim/bound {row['sim_over_bound']:.3f})  "
              f"[{t2 - t0:.1f} s]", flush=True)
    err = np.array([r["rel_err"] for r in rows])
    ratio = np.array([r["sim_over_bound"] for r in rows])
    summary = {"n_scenarios": len(rows), "rel_err_median": float(np.median(err)),
               "abs_rel_err_median": float(np.median(np.abs(err))),
               "rel_err_worst": float(err[np.argmax(np.abs(err))]), "rel_err_min": float(err.min()),
               "rel_err_max": float(err.max()), "abs_rel_err_p90": float(np.quantile(np.abs(err), 0.9)),
               "sim_over_bound_min": float(ratio.min()), "sim_over_bound_median": float(np.median(ratio)),
               "sim_over_bound_max": float(ratio.max()), "wall_s": time.perf_counter() - t_start}
    by = {}
    for key in ("collective", "policy", "gpus", "size_bytes"):
        by[key] = {str(v): float(np.median([abs(r["rel_err"]) for r in rows if r[key] == v]))
                   for v in sorted({r[key] for r in rows})}
    summary["abs_rel_err_median_by"] = by
    print(json.dumps(summary, indent=1))
    out = {"summary": summary, "model_version": _model_version(), "rows": rows, "grid": {"collectives": COLLECTIVES, "sizes": SIZES,
                                                      "gpus": GPUS, "policies": POLICIES}}
    name = "validation_quick" if a.quick else "validation"
    res = ROOT / "results" / "validation" if a.out is None else Path(a.out)
    res.mkdir(parents=True, exist_ok=True)
    (res / f"{name}.json").write_text(json.dumps(out, indent=1))
    plot(rows, summary, res / f"{name}.png")
    if not a.quick and a.out is None:
        dst = ROOT / "experiments" / "out"
        shutil.copy(res / f"{name}.json", dst / "validation.json")
        shutil.copy(res / f"{name}.png", dst / "validation.png")


def _model_version():
    """Commit of models/contention.py (and whether the working copy differs), for the record."""
    import subprocess
    try:
        h = subprocess.run(["git", "log", "-1", "--format=%h", "--", "nuna_jax/models/contention.py"],
                           cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "--", "nuna_jax/models/contention.py"],
                               cwd=ROOT).returncode != 0
        return {"contention_commit": h, "contention_uncommitted_changes": dirty}
    except OSError:
        return None


def plot(rows, summary, fname):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    err = np.array([r["rel_err"] for r in rows]) * 100
    axes[0].hist(err, bins=30, color="tab:blue", alpha=0.8)
    axes[0].axvline(np.median(err), color="k", ls="--", label=f"median {np.median(err):+.1f} %")
    axes[0].set_xlabel("(estimate - simulated) / simulated (%)")
    axes[0].set_ylabel("scenarios")
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"analytical estimate error, {len(rows)} scenarios")
    sims = np.array([r["sim_ns"] for r in rows])
    for pol, m in zip(POLICIES, "osD^"):
        sel = [i for i, r in enumerate(rows) if r["policy"] == pol]
        axes[1].scatter(sims[sel], np.array([rows[i]["estimate_ns"] for i in sel]), marker=m, s=18, label=pol)
    lo, hi = sims.min() * 0.8, sims.max() * 1.2
    axes[1].plot([lo, hi], [lo, hi], "k-", lw=0.8)
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("simulated completion (ns)")
    axes[1].set_ylabel("analytical estimate (ns)")
    axes[1].legend(fontsize=8)
    ratio = np.array([r["sim_over_bound"] for r in rows])
    axes[2].hist(ratio, bins=30, color="tab:green", alpha=0.8)
    axes[2].axvline(1.0, color="r", lw=1, label="simulated = lower bound (contract: never below)")
    axes[2].set_xlabel("simulated / analytical lower bound")
    axes[2].set_ylabel("scenarios")
    axes[2].legend(fontsize=8)
    axes[2].set_title(f"bound contract: min ratio {ratio.min():.3f}")
    fig.tight_layout()
    save_figure(fig, fname, dpi=110)


if __name__ == "__main__":
    main()
