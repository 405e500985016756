"""NAP's NAR granularity search, batched (``contention.estimate_many``) against the search as it
was (every candidate placed, lowered and estimated by itself with ``estimate_ns`` on
``pad_flows(t, bucket_rows(t.n_flows))``): the chosen granularity and every candidate's estimate,
for All-Gather / All-Reduce / All-to-All on 2 / 8 / 64 GPUs at 100 kB / 1 MB / 10 MB.

    python benchmarks/check_nar_search.py [--gpus 2,8,64] [--label cpu]

Writes ``nar_search_check_<label>_<date>.json`` to ``--out`` (default benchmarks/out): per case the
two choices, the largest difference in float32 units in the last place (ulp) and both times.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from nuna_jax.lowering import build_traffic  # noqa: E402
from nuna_jax.models import contention as K  # noqa: E402
from nuna_jax.nar import max_useful_granularity  # noqa: E402
from nuna_jax.placement import PolicyOptions, place  # noqa: E402
from nuna_jax.presets import preset  # noqa: E402
from nuna_jax.scenario import generated_plan, search_nar_granularity  # noqa: E402


def one_at_a_time(s, plan, policy="nap+nar"):
    costs, best = {}, None
    for g in range(1, min(max_useful_granularity(s), s.n_io_ports) + 1):
        t = build_traffic(s, plan, place(s, plan, policy, PolicyOptions(nar_granularity=g)))
        costs[g] = float(K.estimate_ns(s, K.pad_flows(t, K.bucket_rows(t.n_flows)), n_phases=K.resolve_n_phases(t)))
        if best is None or costs[g] < costs[best]:
            best = g
    return costs, best


def ulps(a: float, b: float) -> float:
    return abs(a - b) / float(np.spacing(np.float32(abs(b))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="2,8,64")
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--collectives", default="allgather,allreduce,alltoall")
    ap.add_argument("--label", default=jax.default_backend())
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    a = ap.parse_args()
    rows = []
    for n in map(int, a.gpus.split(",")):
        s = preset("table2", n_gpus=n)
        for coll in a.collectives.split(","):
            for size in map(int, a.sizes.split(",")):
                plan = generated_plan(s, coll, size)
                t0 = time.perf_counter()
                ref, ref_g = one_at_a_time(s, plan)
                t1 = time.perf_counter()
                pl, _ = search_nar_granularity(s, plan, "nap+nar")
                t2 = time.perf_counter()
                new = pl.granularity_search
                d = [ulps(new[g], ref[g]) for g in ref]
                row = {"collective": coll, "gpus": n, "size": size, "granularity_one_at_a_time": ref_g,
                       "granularity_batched": pl.routing_granularity, "same_choice": ref_g == pl.routing_granularity,
                       "bit_identical": all(new[g] == ref[g] for g in ref), "max_ulp": max(d),
                       "n_candidates_differing": sum(x > 0 for x in d), "one_at_a_time_s": t1 - t0,
                       "batched_s": t2 - t1, "estimates_ns": {str(g): [ref[g], new[g]] for g in ref}}
                rows.append(row)
                print(f"{coll:10s} {n:3d} GPU {size:>9d} B  g {ref_g:2d} / {pl.routing_granularity:2d}  "
                      f"max {max(d):.0f} ulp ({row['n_candidates_differing']} of {len(d)} differ)  "
                      f"{t1 - t0:7.2f} s / {t2 - t1:7.2f} s", flush=True)
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "backend": jax.default_backend(),
                       "devices": [str(d) for d in jax.devices()]},
           "all_same_choice": all(r["same_choice"] for r in rows), "max_ulp": max(r["max_ulp"] for r in rows),
           "cases": rows}
    out = Path(a.out) / f"nar_search_check_{a.label}_{res['date'][:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"same choice in every case: {res['all_same_choice']}; largest difference {res['max_ulp']:.0f} ulp; "
          f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
