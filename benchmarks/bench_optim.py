"""Speed of the placement search (issue 12): the 8-GPU 1 MB All-Gather optimization with its
simulator checks, timed end to end, split into tables, compile, descent, rounding, local
search, equal-time baseline and simulation.  Two runs in one process: the first pays the
compiles (JAX and numba), the second shows the warm cost.

    python benchmarks/bench_optim.py [--out benchmarks/out/optim_cpu.json]
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


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "optim_cpu.json"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--tbs", type=int, default=None)
    a = ap.parse_args(argv)
    import jax

    from nuna_jax.optim.driver import optimize
    from nuna_jax.scenario import generated_plan
    from nuna_jax.presets import preset
    s = preset("table2")
    plan = generated_plan(s, "allgather", 10**6, tbs_per_gpu=a.tbs)   # as nuna-jax optimize builds it
    runs = []
    for i in range(2):
        t0 = time.perf_counter()
        r = optimize(s, plan, steps=a.steps, seeds=a.seeds)
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
