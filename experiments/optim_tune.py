"""Tuning set for the score descent's settings (docs/optim.md, "Settings"): a few (case, seed)
pairs, the search under each setting beside the no-descent ablation (which no setting changes),
simulated.  The grid (experiments/optim_grid.py) is then run once with the chosen setting, as a
prediction: no setting is chosen per case.

    python experiments/optim_tune.py --cases 1,4 --seeds 0,1 --settings base,share75 --out OUT.json
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

#: setting name -> (ScoreSchedule fields, optimize keyword arguments)
SETTINGS = {
    "base": ({}, {}),
    "share75": ({}, {"descent_share": 0.75}),
    "lr1": ({"learning_rate": 1.0}, {}),
    "warm3": ({"warm_logit": 3.0}, {}),
    "batch16": ({"batch": 16}, {}),
    "share75lr1": ({"learning_rate": 1.0}, {"descent_share": 0.75}),
    "batch16_75": ({"batch": 16}, {"descent_share": 0.75}),
    "warm3_75": ({"warm_logit": 3.0}, {"descent_share": 0.75}),
    "key": ({"group_roles": "key"}, {}),
    "key75": ({"group_roles": "key"}, {"descent_share": 0.75}),
}


def main(argv=None):
    import numpy as np
    from optim_grid import CASES, build
    from nuna_jax.optim.driver import optimize, prepare
    from nuna_jax.optim.score import ScoreSchedule
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="1,4")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--settings", default="base,share75")
    ap.add_argument("--budget", type=int, default=800)
    ap.add_argument("--space", default="", help="prepare() keyword arguments, e.g. n_stack_candidates=16")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "out" / "optim_tune.json"))
    a = ap.parse_args(argv)
    kw = {k: int(v) for k, v in (p.split("=") for p in a.space.split(",") if p)}
    res = {"meta": {"date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "machine": platform.node(),
                    "load_start": os.getloadavg(), "budget": a.budget, "space": kw}, "rows": []}
    for c in (int(x) for x in a.cases.split(",")):
        s, plan = build(CASES[c])
        prep = prepare(s, plan, **kw)
        for seed in (int(x) for x in a.seeds.split(",")):
            nd = None
            for name in a.settings.split(","):
                sch, okw = SETTINGS[name]
                r = optimize(s, plan, budget=a.budget, seed=seed, prepared=prep, score_sched=ScoreSchedule(**sch),
                             baselines=("no_descent",) if nd is None else False, **okw)
                if nd is None:
                    nd = r["baselines"]["no_descent"]["simulated_ns"]
                row = {"case": CASES[c][0], "seed": seed, "setting": name, "simulated_ns": r["simulated_ns"],
                       "estimate_ns": r["estimate_ns"], "no_descent_ns": nd, "nap_nar_ns": r["nap_nar_simulated_ns"],
                       "source": r["source"], "wall_s": r["wall_s"]}
                res["rows"].append(row)
                print(f"{row['case']:24s} seed {seed} {name:10s} search {r['simulated_ns']:8.1f} (est {r['estimate_ns']:8.1f}) "
                      f"no_descent {nd:8.1f} ratio {nd / r['simulated_ns']:.3f} vs NAP {r['nap_nar_simulated_ns'] / r['simulated_ns']:.3f} "
                      f"{r['wall_s']:.0f}s load {os.getloadavg()[0]:.1f}", flush=True)
                res["meta"]["load_end"] = os.getloadavg()
                Path(a.out).parent.mkdir(parents=True, exist_ok=True)
                Path(a.out).write_text(json.dumps(res, indent=1))
    by = {}
    for r in res["rows"]:
        by.setdefault(r["setting"], []).append(r["no_descent_ns"] / r["simulated_ns"])
    for k, v in by.items():
        print(f"{k:10s} mean no_descent/search {np.mean(v):.4f} over {len(v)}")


if __name__ == "__main__":
    main()
