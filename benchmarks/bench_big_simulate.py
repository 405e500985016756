"""``nuna-jax simulate`` of a 100 kB All-Gather on 1,024 GPUs (the speed goal: under 2 GB peak and 30 s
on the 2-core CPU), in a child process as ``bench_sim.py --big`` runs it (:func:`bench_sim.big_case`),
with the child's CPU seconds and the load average before and after.

    python benchmarks/bench_big_simulate.py [--out DIR] [--label cpu] [--store] [--code OLD_CHECKOUT]

By default the scenario store is off in the child (``NUNA_JAX_CACHE_DIR=""``: a cold build, no
persistent XLA cache); ``--store`` runs it twice on a fresh store (the second run reads the
scenario back).  Writes ``big_simulate_<label>_<date>.json`` to ``--out`` (default benchmarks/out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_sim  # noqa: E402


def _child_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--label", default="cpu")
    ap.add_argument("--store", action="store_true", help="two runs on a fresh scenario store")
    ap.add_argument("--code", default=None, help="run another checkout's nuna_jax (a before run)")
    a = ap.parse_args(argv)
    if a.code:
        bench_sim.ROOT = Path(a.code)       # big_case puts ROOT on the child's PYTHONPATH
        os.chdir(a.code)                    # and `python -c` puts the working directory before it
    runs = []
    with tempfile.TemporaryDirectory() as d:
        os.environ["NUNA_JAX_CACHE_DIR"] = d if a.store else ""
        for k in range(2 if a.store else 1):
            load0, c0 = os.getloadavg(), _child_cpu_s()
            r = bench_sim.big_case()
            r.update({"code": str(bench_sim.ROOT), "child_cpu_s": _child_cpu_s() - c0, "load_avg_before": load0, "load_avg_after": os.getloadavg(),
                      "scenario_store": "hit expected" if k else ("cold" if a.store else "off")})
            runs.append(r)
            print(json.dumps({k2: v for k2, v in r.items() if k2 != "stderr_tail"}), flush=True)
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "code": str(bench_sim.ROOT),
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
           "targets": {"peak_rss_gb": 2.0, "wall_s_2core_cpu": 30.0}, "runs": runs}
    out = Path(a.out) / f"big_simulate_{a.label}_{res['date'][:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
