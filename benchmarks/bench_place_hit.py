"""The second ``nuna-jax place`` of a case (a scenario-store hit), before and after, side by side.

    python benchmarks/bench_place_hit.py [--before PATH] [--runs 5] [--out benchmarks/out] [--tag T]
        [-- PLACE ARGS...]   (default: --collective allgather --size 1MB --gpus 8 --policy nap+nar)

For this tree and, with ``--before``, another checkout of the package (e.g. ``git archive <commit>``
unpacked somewhere), each in its own fresh cache directory (``NUNA_JAX_CACHE_DIR``): one cold
``python -m nuna_jax place ...`` (fills the store), then ``--runs`` warm ones, the trees taking turns
(so that both see the same load); wall seconds and CPU seconds (user + system of the child), the
median and the least; one more warm run under ``python -X importtime`` (modules imported, and
whether jax, flax or numba are among them) and ``nuna-jax --help``'s wall time.  The stdout of
every warm run is compared with the cold run's of the same tree, and this tree's with the
other's.  Prints a table and writes ``place_hit_<tag>_<date>.json`` with the load average.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CASE = ["--collective", "allgather", "--size", "1MB", "--gpus", "8", "--policy", "nap+nar"]
HEAVY = ("jax", "flax", "numba")


def _run(tree: Path, cache: Path, argv: list[str], importtime: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), NUNA_JAX_CACHE_DIR=str(cache))
    cmd = [sys.executable] + (["-X", "importtime"] if importtime else []) + ["-m", "nuna_jax", *argv]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} in {tree}: exit {p.returncode}\n{p.stderr[-2000:]}")
    out = {"wall_s": wall, "cpu_s": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), "stdout": p.stdout}
    if importtime:
        mods = [ln.rsplit("|", 1)[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")]
        mods = [m for m in mods if m and m != "package"]
        out["modules"] = len(mods)
        out["heavy"] = sorted({m.split(".")[0] for m in mods} & set(HEAVY))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=None, help="another checkout of the package to compare with")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--tag", default="cpu")
    ap.add_argument("case", nargs="*", help="place arguments (after --)")
    a = ap.parse_args(argv)
    case = ["place", *(a.case or DEFAULT_CASE)]
    trees = {"after": ROOT}
    if a.before:
        trees = {"before": Path(a.before).resolve(), **trees}
    res: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        caches = {k: Path(tmp) / k for k in trees}
        for k, tree in trees.items():
            cold = _run(tree, caches[k], case)
            res[k] = {"cold_wall_s": cold["wall_s"], "cold_cpu_s": cold["cpu_s"], "warm": [], "stdout": cold["stdout"],
                      "same_output": True}
        for _ in range(a.runs):
            for k, tree in trees.items():
                w = _run(tree, caches[k], case)
                res[k]["warm"].append({"wall_s": w["wall_s"], "cpu_s": w["cpu_s"], "load": os.getloadavg()[0]})
                res[k]["same_output"] &= w["stdout"] == res[k]["stdout"]
        for k, tree in trees.items():
            it = _run(tree, caches[k], case, importtime=True)
            res[k]["modules_imported"], res[k]["heavy_imported"] = it["modules"], it["heavy"]
            res[k]["same_output"] &= it["stdout"] == res[k]["stdout"]
            hl = [_run(tree, caches[k], ["--help"])["wall_s"] for _ in range(3)]
            res[k]["help_wall_s"] = min(hl)
    same_across = len({r["stdout"] for r in res.values()}) == 1
    print(f"nuna-jax {' '.join(case)}: cold once, then {a.runs} warm runs each (trees taking turns); "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'tree':7s} {'cold s':>8s} {'warm wall med':>14s} {'min':>6s} {'warm CPU med':>13s} {'min':>6s} "
          f"{'modules':>8s} {'jax/flax/numba':>15s} {'--help s':>9s} {'same out':>9s}")
    for k, r in res.items():
        ww = [x["wall_s"] for x in r["warm"]]
        wc = [x["cpu_s"] for x in r["warm"]]
        r["warm_wall_median_s"], r["warm_wall_min_s"] = statistics.median(ww), min(ww)
        r["warm_cpu_median_s"], r["warm_cpu_min_s"] = statistics.median(wc), min(wc)
        print(f"{k:7s} {r['cold_wall_s']:8.1f} {r['warm_wall_median_s']:14.2f} {r['warm_wall_min_s']:6.2f} "
              f"{r['warm_cpu_median_s']:13.2f} {r['warm_cpu_min_s']:6.2f} {r['modules_imported']:8d} "
              f"{','.join(r['heavy_imported']) or '-':>15s} {r['help_wall_s']:9.2f} {str(r['same_output']):>9s}")
    print(f"same output in every tree: {same_across}")
    out = {"benchmark": "place_hit", "date": datetime.date.today().isoformat(),
           "time_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M"), "host": platform.node(),
           "cpus": os.cpu_count(), "command": ["nuna-jax", *case], "runs": a.runs,
           "load_average_end": os.getloadavg(), "same_output_across_trees": same_across,
           "trees": {k: {kk: v for kk, v in r.items() if kk != "stdout"} for k, r in res.items()},
           "before_path": a.before}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    p = Path(a.out) / f"place_hit_{a.tag}_{out['date']}.json"
    p.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
