"""Speed of the placement search (docs/optim.md): the 8-GPU 1 MB All-Gather optimization with its
simulator checks, timed end to end, split into tables, compile, descent, rounding, local
search, the equal-budget baselines and simulation.  Two runs in one process: the first pays the
compiles (JAX and numba), the second shows the warm cost.

``--vg-cost``: instead, measure what one Adam step of one restart (a value-and-gradient of the
relaxed loss over the C stacked candidate slices, inside the compiled descent) costs in forward
evaluations of one discrete placement (``estimate_ns`` on its padded traffic, jitted, steady
state), the ratio ``optim.driver.VG_COST_PER_CANDIDATE`` stands for (docs/optim.md, "Budget").

    python benchmarks/bench_optim.py [--out benchmarks/out/optim_cpu.json]
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
    """Median time of one restart-step of the compiled descent over the median time of one
    discrete forward evaluation, for 1 and 4 restarts."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from nuna_jax.models.contention import bucket_rows, estimate_ns, resolve_n_phases
    from nuna_jax.optim.candidates import assemble
    from nuna_jax.optim.descent import Schedule, descend
    from nuna_jax.optim.driver import VG_COST_PER_CANDIDATE, prepare
    from nuna_jax.optim.search import pad_np
    from nuna_jax.lowering import build_traffic
    cand, _, tab, cap = prepare(s, plan)
    t = build_traffic(s, plan, assemble(s, plan, cand, np.zeros(plan.n_tbs, np.int64)))
    tp = jax.tree_util.tree_map(jnp.asarray, pad_np(t, bucket_rows(max(t.n_flows, tab.max_slice_rows))))
    npz = resolve_n_phases(t)

    def fwd():
        t0 = time.perf_counter()
        for _ in range(20):
            estimate_ns(s, tp, n_phases=npz).block_until_ready()
        return (time.perf_counter() - t0) / 20

    fwd()
    out = {"n_candidates": cand.n_candidates, "rows_discrete": int(tp.flits.shape[0]),
           "rows_relaxed": int(tab.traffic.flits.shape[0]), "assumed_per_candidate": VG_COST_PER_CANDIDATE}
    K = 40
    for B in (1, 4):
        z0 = jnp.zeros((B, plan.n_tbs, cand.n_candidates))
        key = jax.random.PRNGKey(0)
        c = descend.lower(s, tab, cap, z0, key, sched=Schedule(steps=K)).compile()
        jax.block_until_ready(c(s, tab, cap, z0, key))
        steps, fwds = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(c(s, tab, cap, z0, key))
            steps.append((time.perf_counter() - t0) / (K * B))
            fwds.append(fwd())
        ratio = float(np.median(steps) / np.median(fwds))
        out[f"restarts_{B}"] = {"step_ms": 1e3 * float(np.median(steps)), "forward_ms": 1e3 * float(np.median(fwds)),
                                "forward_evals_per_step": ratio, "per_candidate": ratio / cand.n_candidates}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "optim_cpu.json"))
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--tbs", type=int, default=None)
    ap.add_argument("--budget", type=int, default=800)
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
        t0 = time.perf_counter()
        r = optimize(s, plan, budget=a.budget, steps=a.steps, seeds=a.seeds)
        wall = time.perf_counter() - t0
        runs.append({"run": i, "wall_s": wall, "timing_s": r["timing_s"],
                     **{k: r[k] for k in ("simulated_ns", "nap_nar_simulated_ns", "speedup_vs_nap_nar",
                                          "ua_simulated_ns", "source")}})
        print(json.dumps(runs[-1]), flush=True)
    out = {"case": "allgather 1MB, 8 GPUs, tbs " + str(a.tbs or 7), "steps": a.steps, "seeds": a.seeds,
           "jax_devices": [str(d) for d in jax.devices()], "cpu_count": os.cpu_count(),
           "python": platform.python_version(), "date_utc": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
           "load_avg": os.getloadavg(), "runs": runs}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
