"""Hardware sweep through the path model, end to end (``nuna_jax.sweep.run_sweep``): one traffic
(8-GPU 1 MB All-Gather, 1,008 threadblocks per GPU) x a grid of hardware variants (link bandwidth
x hop cycles), from grid to finished CSV, cold (first run in the process: traffic, compilation)
and warm (the same grid again to a new file: what a user's second sweep pays).

    python benchmarks/bench_hw_sweep.py [--variants 4096] [--policy UA] [--out benchmarks/out] [--tag T]

Prints a table and writes ``hw_sweep_<tag>_<date>.json``: seconds by stage and variants/s.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=4096, help="hardware variants (a square grid)")
    ap.add_argument("--policy", default="UA")
    ap.add_argument("--tbs", type=int, default=1008)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--tag", default=None)
    a = ap.parse_args(argv)
    import jax
    from nuna_jax.cli.common import parse_size
    from nuna_jax.sweep import grid_from_dict, run_sweep
    k = max(1, int(round(math.sqrt(a.variants))))
    d = {"sweep": {"chunk": 1 << 14},
         "axes": {"model": ["path"], "gpus": [8], "size": ["1MB"], "policy": [a.policy], "tbs": [a.tbs],
                  "link_bw_bytes_per_ns": {"start": 400.0, "stop": 2000.0, "num": k},
                  "hop_cycles": {"start": 0.5, "stop": 4.0, "num": k}}}
    grid = grid_from_dict(d, parse_size=parse_size)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in ("cold", "warm"):
            t0 = time.perf_counter()
            s = run_sweep(grid, Path(tmp) / f"{run}.csv", progress=False).attrs["summary"]
            wall = time.perf_counter() - t0
            rows[run] = {"wall_s": wall, "plan_s": s["plan_s"], "compile_s": s["compile_s"], "eval_s": s["eval_s"],
                         "points": s["written"], "variants_per_s": s["written"] / wall}
    dev = jax.devices()[0]
    tag = a.tag or dev.platform
    print(f"{grid.n_points} variants, {a.policy}, {a.tbs} threadblocks per GPU, on {dev.device_kind} ({dev.platform})")
    print(f"{'run':5s} {'wall s':>8s} {'plan s':>8s} {'compile s':>10s} {'eval s':>8s} {'variants/s':>12s}")
    for run, r in rows.items():
        print(f"{run:5s} {r['wall_s']:8.2f} {r['plan_s']:8.2f} {r['compile_s']:10.2f} {r['eval_s']:8.2f} "
              f"{r['variants_per_s']:12.0f}")
    out = {"benchmark": "hw_sweep", "date": datetime.date.today().isoformat(), "host": platform.node(),
           "cpus": os.cpu_count(), "device": f"{dev.device_kind} ({dev.platform})", "variants": grid.n_points,
           "policy": a.policy, "tbs_per_gpu": a.tbs, "runs": rows}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    p = Path(a.out) / f"hw_sweep_{tag}_{out['date']}.json"
    p.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
