"""Where users wait around the compiled kernels: building a scenario
(plan -> placement -> NAP's NAR granularity search -> traffic) and starting the command line.

* ``make_scenario`` of the 8-GPU 1 MB All-Gather under NAP+NAR, cold (first call in a fresh
  process: every XLA compilation included, no persistent compilation cache) and warm (the same
  call again), with the XLA compilations of each counted (``jax.monitoring``'s backend-compile
  event) and the time spent in them;
* a subset of the Figure 9 grid's traffic building (``--grid``: collectives x GPU counts x
  sizes under NAP+NAR, one fresh process, points in order), with compilations;
* NUNA Figure 9's grid (``examples/grids/fig9.toml``: All-Gather, 4 sizes, 4 policies) on some of
  its GPU counts (``--sweep-gpus``, default 2 and 8), end to end through ``run_sweep``;
* ``nuna-jax --help`` (``python -m nuna_jax --help``) wall time, best and median of several runs,
  and whether jax / flax / numba were imported by it.

Every part runs in its own subprocess (so "cold" is cold).

    python benchmarks/bench_scenario.py [--label cpu_after] [--grid quick|fig9-small|none]

Writes ``scenario_<label>_<date>.json`` to ``--out`` (default benchmarks/out) and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

GRIDS = {
    # (collective, gpus, size) under NAP+NAR
    "quick": [("allgather", 8, 10**5), ("allgather", 8, 10**6), ("allreduce", 8, 10**6),
              ("alltoall", 8, 10**6)],
    "fig9-small": [(c, g, s) for c in ("allgather", "allreduce", "alltoall") for g in (2, 8)
                   for s in (10**5, 10**6, 10**7)],
}


# ---------------------------------------------------------------------------
# children (one fresh process each)
# ---------------------------------------------------------------------------
class _Compiles:
    def __init__(self):
        import jax
        self.n, self.s = 0, 0.0

        def listen(event, duration, **kw):
            if event == "/jax/core/compile/backend_compile_duration":
                self.n += 1
                self.s += duration
        jax.monitoring.register_event_duration_secs_listener(listen)

    def snap(self):
        return self.n, self.s


def _timed_scenario(cnt, system, collective, size):
    from nuna_jax.scenario import make_scenario
    n0, s0 = cnt.snap()
    t0, c0 = time.perf_counter(), time.process_time()
    sc = make_scenario(system, collective=collective, size_bytes=size, policy="nap+nar")
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    n1, s1 = cnt.snap()
    return {"collective": collective, "gpus": system.n_gpus, "size": size, "s": dt, "cpu_s": dc, "compiles": n1 - n0,
            "compile_s": s1 - s0, "granularity": sc.placement.domains.granularity,
            "n_flows": sc.traffic.n_flows,
            "estimates_ns": {str(k): v for k, v in (sc.placement.granularity_search or {}).items()}}


def child_scenario() -> dict:
    t0 = time.perf_counter()
    from nuna_jax.presets import preset
    t_import = time.perf_counter() - t0
    cnt = _Compiles()
    s = preset("table2", n_gpus=8)
    cold = _timed_scenario(cnt, s, "allgather", 10**6)
    warm = [_timed_scenario(cnt, s, "allgather", 10**6) for _ in range(3)]
    import jax
    return {"backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
            "import_s": t_import, "cold": cold, "warm": warm,
            "warm_best_s": min(w["s"] for w in warm), "warm_compiles": sum(w["compiles"] for w in warm)}


def child_grid(name: str) -> dict:
    from nuna_jax.presets import preset
    cnt = _Compiles()
    rows, t0, c0 = [], time.perf_counter(), time.process_time()
    systems = {}
    for coll, g, size in GRIDS[name]:
        s = systems.setdefault(g, preset("table2", n_gpus=g))
        rows.append(_timed_scenario(cnt, s, coll, size))
    n, cs = cnt.snap()
    return {"grid": name, "points": rows, "total_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "compiles": n, "compile_s": cs}


def child_sweep(gpus: str) -> dict:
    """``examples/grids/fig9.toml`` with its ``gpus`` axis cut to ``gpus``, end to end (run_sweep)."""
    import tempfile
    import tomllib
    from nuna_jax.cli.common import parse_size
    from nuna_jax.sweep import grid_from_dict, run_sweep
    data = tomllib.loads((ROOT / "examples" / "grids" / "fig9.toml").read_text())
    data["axes"]["gpus"] = [int(g) for g in gpus.split(",")]
    g = grid_from_dict(data, parse_size=parse_size)
    cnt = _Compiles()
    with tempfile.TemporaryDirectory() as d:
        t0, c0 = time.perf_counter(), time.process_time()
        run_sweep(g, Path(d) / "fig9.csv", progress=False, max_rows=1 << 24)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        rows = (Path(d) / "fig9.csv").read_text().splitlines()
    n, cs = cnt.snap()
    return {"gpus": data["axes"]["gpus"], "points": len(rows) - 1, "total_s": dt, "cpu_s": dc, "compiles": n, "compile_s": cs,
            "csv": rows}


def child_help() -> dict:
    from nuna_jax.cli import main
    try:
        main(["--help"])
    except SystemExit:
        pass
    return {"heavy_imported": sorted(m for m in ("jax", "flax", "numba") if m in sys.modules)}


# ---------------------------------------------------------------------------
def _run_child(part: str, *extra) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    r = subprocess.run([sys.executable, __file__, "--child", part, *extra], env=env, cwd=ROOT,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"child {part} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def bench_help(n: int = 7) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), NUNA_JAX_CACHE_DIR="")
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "nuna_jax", "--help"], env=env, cwd=ROOT, capture_output=True,
                       check=True)
        ts.append(time.perf_counter() - t0)
    env_py = dict(env)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env_py, check=True)
    bare = time.perf_counter() - t0
    return {"runs": n, "best_s": min(ts), "median_s": statistics.median(ts), "python_startup_s": bare,
            **_run_child("help")}


def _git(*a) -> str:
    try:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--label", default="cpu_after")
    ap.add_argument("--grid", default="quick", choices=[*GRIDS, "none"])
    ap.add_argument("--sweep-gpus", default="2,8", help="Figure 9 grid (run_sweep) on these GPU counts; 'none': skip")
    ap.add_argument("--parts", default="help,scenario,grid,sweep", help="which parts to run (comma-separated)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("child_args", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        fn = {"scenario": child_scenario, "grid": child_grid, "sweep": child_sweep, "help": child_help}[a.child]
        print(json.dumps(fn(*a.child_args)))
        return 0

    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                       "cpus": os.cpu_count(), "python": platform.python_version(),
                       "loadavg_start": list(os.getloadavg())},
           "commit": _git("rev-parse", "--short", "HEAD"), "dirty": bool(_git("status", "--porcelain", "nuna_jax")),
           "label": a.label}
    parts = set(a.parts.split(","))
    if "help" in parts:
        res["help"] = bench_help()
    if "scenario" in parts:
        res["scenario"] = _run_child("scenario")
        res["machine"]["backend"] = res["scenario"]["backend"]
    if a.grid != "none" and "grid" in parts:
        res["grid"] = _run_child("grid", a.grid)
    if a.sweep_gpus != "none" and "sweep" in parts:
        res["sweep"] = _run_child("sweep", a.sweep_gpus)
    res["machine"]["loadavg_end"] = list(os.getloadavg())

    print(f"{'what':58s} {'seconds':>9s} {'compiles':>9s} {'cpu s':>8s}  (wall s; CPU s of the process)")
    if "help" in res:
        h = res["help"]
        print(f"{'nuna-jax --help (best / median of ' + str(h['runs']) + ')':58s} "
              f"{h['best_s']:6.3f}/{h['median_s']:.3f}  heavy imports: {h['heavy_imported'] or 'none'}")
    if "scenario" in res:
        sc = res["scenario"]
        c = sc["cold"]
        print(f"{'make_scenario 8 GPU 1 MB AG NAP+NAR, cold':58s} {c['s']:9.2f} {c['compiles']:9d} {c['cpu_s']:8.2f}"
              f"  ({c['compile_s']:.2f} s compiling; g={c['granularity']})")
        print(f"{'make_scenario, warm (best of 3)':58s} {sc['warm_best_s']:9.3f} {sc['warm_compiles']:9d}")
    if "grid" in res:
        gr = res["grid"]
        for p in gr["points"]:
            what = f"  {p['collective']} {p['gpus']} GPU {p['size']} B (g={p['granularity']}, {p['n_flows']} flows)"
            print(f"{what:58s} {p['s']:9.2f} {p['compiles']:9d} {p['cpu_s']:8.2f}")
        print(f"{'grid ' + gr['grid'] + ' traffic building, total':58s} {gr['total_s']:9.2f} {gr['compiles']:9d}"
              f" {gr['cpu_s']:8.2f}"
              f"  ({gr['compile_s']:.2f} s compiling)")
    if "sweep" in res:
        sw = res["sweep"]
        print(f"{'Figure 9 grid on ' + str(sw['gpus']) + ' GPUs, run_sweep (' + str(sw['points']) + ' points)':58s} "
              f"{sw['total_s']:9.2f} {sw['compiles']:9d} {sw['cpu_s']:8.2f}  ({sw['compile_s']:.2f} s compiling)")
    day = res["date"][:10]
    out = Path(a.out) / f"scenario_{a.label}_{day}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
