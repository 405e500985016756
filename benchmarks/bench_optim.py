"""Speed of the placement search: the 8-GPU 1 MB All-Gather search with its simulator checks
(``--baselines``: and the five equal-budget baselines, four before session 9), timed end to end (wall and CPU seconds),
split into tables, compile, descent, rounding, local search, baselines and simulation.  Two runs in
one process: the first pays the compiles (JAX and numba), the second shows the warm cost.

``--vg-cost``: instead, measure one value-and-gradient of the straight-through loss in
evaluations of one point (both jitted, steady state) beside what ``point.vg_cost`` charges.

    python benchmarks/bench_optim.py [--budget 800] [--estimator score] [--baselines] [--out benchmarks/out/optim_cpu.json]
    python benchmarks/bench_optim.py --vg-cost [--repeats 5]
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


def vg_cost(s, plan, repeats: int = 5) -> dict:
    """Median time of one value-and-gradient of the straight-through loss (``point.move_gradient``,
    jitted, steady state) over the median time of one evaluation (``space.estimate_points``, one
    point), against the rows ratio ``point.vg_cost`` charges (2 x rows / rows)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from nuna_jax.optim.driver import prepare
    from nuna_jax.optim.point import move_gradient, st_rows, vg_cost as charged
    from nuna_jax.optim.space import estimate_points, repair
    P = prepare(s, plan)
    sp, ht, tt = P["sp"], P["ht"], P["tt"]
    x = np.zeros(sp.n_vars, np.int64)
    cu, st = repair(s, plan, sp, x)
    xt, xg = jnp.asarray(x[:sp.n_tbs]), jnp.asarray(x[sp.n_tbs:])
    jax.block_until_ready(move_gradient(s, tt, xt, xg, 5.0, jnp.asarray(cu), jnp.asarray(st)))
    estimate_points(s, ht, x[None, :sp.n_tbs], cu[None], st[None])
    vgs, fwds = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(move_gradient(s, tt, xt, xg, 5.0, jnp.asarray(cu), jnp.asarray(st)))
        vgs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        estimate_points(s, ht, x[None, :sp.n_tbs], cu[None], st[None])
        fwds.append(time.perf_counter() - t0)
    return {"rows_point": ht.n_hard, "rows_value_and_grad": st_rows(ht), "charged_evals": charged(ht),
            "vg_ms": 1e3 * float(np.median(vgs)), "forward_ms": 1e3 * float(np.median(fwds)),
            "measured_evals_per_vg": float(np.median(vgs) / np.median(fwds))}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "optim_cpu.json"))
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--tbs", type=int, default=None)
    ap.add_argument("--budget", type=int, default=800)
    ap.add_argument("--estimator", default="score", choices=("score", "straight_through"))
    ap.add_argument("--baselines", action="store_true",
                    help="also the five equal-budget baselines (four before session 9: the tied local search joined)")
    ap.add_argument("--vg-cost", action="store_true", help="measure a value-and-grad in forward evaluations")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    import jax

    from nuna_jax.optim.driver import optimize
    from nuna_jax.scenario import generated_plan
    from nuna_jax.presets import preset
    s = preset("table2")
    plan = generated_plan(s, "allgather", 10**6, tbs_per_gpu=a.tbs)   # as nuna-jax optimize builds it
    if a.vg_cost:
        res = {"case": "allgather 1MB, 8 GPUs, tbs " + str(a.tbs or 7), **vg_cost(s, plan, a.repeats),
               "cpu_count": os.cpu_count(), "load_avg": os.getloadavg(),
               "date_utc": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())}
        print(json.dumps(res, indent=1))
        out = os.path.join(os.path.dirname(a.out), "optim_vg_cost.json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
        return 0
    runs = []
    for i in range(2):
        t0, c0 = time.perf_counter(), time.process_time()
        r = optimize(s, plan, budget=a.budget, steps=a.steps, seeds=a.seeds, baselines=a.baselines,
                     estimator=a.estimator)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        runs.append({"run": i, "wall_s": wall, "cpu_s": cpu, "timing_s": r["timing_s"],
                     **{k: r[k] for k in ("simulated_ns", "nap_nar_simulated_ns", "speedup_vs_nap_nar",
                                          "ua_simulated_ns", "source")}})
        print(json.dumps(runs[-1]), flush=True)
    out = {"case": "allgather 1MB, 8 GPUs, tbs " + str(a.tbs or 7), "steps": a.steps, "seeds": a.seeds,
           "budget": a.budget, "estimator": a.estimator, "baselines": a.baselines,
           "jax_devices": [str(d) for d in jax.devices()], "cpu_count": os.cpu_count(),
           "python": platform.python_version(), "date_utc": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
           "load_avg": os.getloadavg(), "runs": runs}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    stages = ("tables_s", "compile_s", "descent_s", "rounding_s", "local_search_s", "baselines_s", "simulate_s")
    print("| run | wall s | CPU s | " + " | ".join(k[:-2] for k in stages) + " | simulated ns | source |")
    print("|---" * (len(stages) + 5) + "|")
    for r in runs:
        print(f"| {'cold' if r['run'] == 0 else 'warm'} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
              + " | ".join(f"{r['timing_s'].get(k, 0.0):.1f}" for k in stages)
              + f" | {r['simulated_ns']:.1f} | {r['source']} |")
    print("wrote", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
