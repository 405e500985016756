"""Hardware sweep through the path model, end to end (``nuna_jax.sweep.run_sweep``): one traffic
(8-GPU 1 MB All-Gather, 1,008 threadblocks per GPU) x a grid of hardware variants (link bandwidth
x hop cycles), from grid to finished CSV, cold (first run in the process: traffic, compilation)
and warm (the same grid again to a new file: what a user's second sweep pays).

    python benchmarks/bench_hw_sweep.py [--variants 4096] [--policy UA] [--out benchmarks/out] [--tag T]
        [--max-rows N] [--cpu-devices N] [--no-plans]

Prints a table and writes ``hw_sweep_<tag>_<date>.json``: seconds by stage, CPU seconds of this
process, variants/s (wall and per CPU second) and the load average.  ``--max-rows`` (the sweep's
points x padded rows per chunk; default 2^20 on a CPU, where the batch is mapped
``path_eval.MAP_BATCH`` variants at a time and the bound does not apply, 2^26 on an accelerator: 2,048 variants of
32,768 rows per vmap).  ``--cpu-devices`` (default: every core): a CPU is split into that many
JAX devices (``--xla_force_host_platform_device_count``) over which the sweep shards its batch.
``--no-plans``: an accelerator's vmap without the hoisted segment structure (the A/B of
``path_eval.HOIST_PLANS``).
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
    ap.add_argument("--max-rows", type=int, default=None)
    ap.add_argument("--cpu-devices", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-plans", action="store_true")
    a = ap.parse_args(argv)
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={a.cpu_devices}").strip()
    import jax
    from nuna_jax.cli.common import parse_size
    from nuna_jax.sweep import grid_from_dict, path_eval, run_sweep
    path_eval.HOIST_PLANS = not a.no_plans
    dev = jax.devices()[0]
    max_rows = a.max_rows or (1 << 20 if dev.platform == "cpu" else 1 << 26)
    k = max(1, int(round(math.sqrt(a.variants))))
    d = {"sweep": {"chunk": 1 << 14},
         "axes": {"model": ["path"], "gpus": [8], "size": ["1MB"], "policy": [a.policy], "tbs": [a.tbs],
                  "link_bw_bytes_per_ns": {"start": 400.0, "stop": 2000.0, "num": k},
                  "hop_cycles": {"start": 0.5, "stop": 4.0, "num": k}}}
    grid = grid_from_dict(d, parse_size=parse_size)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in ("cold", "warm"):
            t0, c0 = time.perf_counter(), time.process_time()
            s = run_sweep(grid, Path(tmp) / f"{run}.csv", progress=False, max_rows=max_rows).attrs["summary"]
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            rows[run] = {"wall_s": wall, "cpu_s": cpu, "plan_s": s["plan_s"], "compile_s": s["compile_s"],
                         "eval_s": s["eval_s"], "points": s["written"], "variants_per_s": s["written"] / wall,
                         "variants_per_cpu_s": s["written"] / cpu, "load_average_after": os.getloadavg()}
    tag = a.tag or dev.platform
    n_dev = len(jax.devices())
    print(f"{grid.n_points} variants, {a.policy}, {a.tbs} threadblocks per GPU, on {n_dev} x {dev.device_kind} "
          f"({dev.platform}), max_rows {max_rows}, plans {'off' if a.no_plans else 'on'} ({'vmap' if path_eval.vectorize(jax.sharding.Mesh(jax.devices(), ('d',))) else 'CPU lax.map: no plans'}), load {os.getloadavg()[0]:.1f}")
    print(f"{'run':5s} {'wall s':>8s} {'CPU s':>8s} {'plan s':>8s} {'compile s':>10s} {'eval s':>8s} {'variants/s':>12s} "
          f"{'per CPU s':>10s}")
    for run, r in rows.items():
        print(f"{run:5s} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} {r['plan_s']:8.2f} {r['compile_s']:10.2f} {r['eval_s']:8.2f} "
              f"{r['variants_per_s']:12.0f} {r['variants_per_cpu_s']:10.0f}")
    out = {"benchmark": "hw_sweep", "date": datetime.date.today().isoformat(),
           "time_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M"), "host": platform.node(),
           "cpus": os.cpu_count(), "device": f"{dev.device_kind} ({dev.platform})", "devices": n_dev,
           "variants": grid.n_points, "policy": a.policy, "tbs_per_gpu": a.tbs, "max_rows": max_rows,
           "plans": not a.no_plans, "runs": rows}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    p = Path(a.out) / f"hw_sweep_{tag}_{out['date']}{'_noplans' if a.no_plans else ''}.json"
    p.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
