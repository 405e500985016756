"""Speed of ``nuna-jax noc`` across commits, like with like: each tree's simulator in fresh child
processes, interleaved (the order reversed every round), on BookSim2's ``mesh88_uniform.cfg`` at
injection rate 0.2 (bench_noc.py's run).  Each child loads numba's compiled loop with one run, then
times ``--runs`` runs (seeds 0, 1, ...) in CPU seconds (``time.process_time``); the table gives
each tree's minimum and median over all its runs and the median's ratio to the first tree.  On a
loaded machine single runs scatter by 20-30 %: use several rounds.

    mkdir -p /tmp/t/old && git archive 26dfe76 | tar -x -C /tmp/t/old
    python benchmarks/bench_noc_trees.py /tmp/t/old . [--rounds 5] [--runs 5]

Writes benchmarks/out/bench_noc_trees.json (``--out``) with date, machine and load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CFG = "/work/shared/tools/booksim2/configs/mesh88_uniform.cfg"

CHILD = """import json, sys, time
import nuna_jax.noc.sim as m
f = m.simulate_noc
a = dict(path=sys.argv[1], overrides=["injection_rate=" + sys.argv[2]])
f(seed=0, **a)
ts = []
for s in range(int(sys.argv[3])):
    c = time.process_time(); f(seed=s, **a); ts.append(time.process_time() - c)
print(json.dumps(ts))
print(m.__file__)
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="+", help="repository roots (the first is the reference)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rate", default="0.2")
    ap.add_argument("--config", default=CFG)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "bench_noc_trees.json"))
    a = ap.parse_args(argv)
    if not Path(a.config).is_file():
        print(f"bench_noc_trees: {a.config} not found (BookSim2's configurations); nothing to run")
        return 0
    trees = [str(Path(t).resolve()) for t in a.trees]
    times = {t: [] for t in trees}
    load0 = os.getloadavg()
    for r in range(a.rounds):
        for t in (trees if r % 2 == 0 else trees[::-1]):
            # in the tree: ``python -c`` puts the working directory first on sys.path, ahead of PYTHONPATH (run
            # from a checkout, every child imported that checkout's code before session 9)
            out = subprocess.run([sys.executable, "-c", CHILD, a.config, a.rate, str(a.runs)], cwd=t,
                                 env=dict(os.environ, PYTHONPATH=t), capture_output=True, text=True, check=True).stdout
            lines = out.strip().splitlines()
            if not Path(lines[-1]).resolve().is_relative_to(Path(t)):
                raise RuntimeError(f"bench_noc_trees: the child for {t} imported {lines[-1]}")
            times[t].extend(json.loads(lines[-2]))
    ref = statistics.median(times[trees[0]])
    rows = []
    print(f"{'tree':50s} {'min ms':>8s} {'median ms':>10s} {'x vs first (median)':>20s}")
    for t in trees:
        med = statistics.median(times[t])
        rows.append({"tree": t, "cpu_s": times[t], "min_s": min(times[t]), "median_s": med, "gain_vs_first": ref / med})
        print(f"{t[-50:]:50s} {1e3 * min(times[t]):8.1f} {1e3 * med:10.1f} {ref / med:20.2f}")
    load1 = os.getloadavg()
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": os.uname().nodename, "cpus": os.cpu_count(), "loadavg_start": load0, "loadavg_end": load1,
           "config": a.config, "injection_rate": float(a.rate), "rounds": a.rounds, "runs_per_child": a.runs,
           "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"load average {load0} -> {load1}; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
