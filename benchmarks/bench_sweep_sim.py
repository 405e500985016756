"""Simulator points of a sweep on one worker and on two (``nuna-jax sweep --jobs``, docs/sweep.md
"Simulator points"): a 64-point grid (8-GPU direct All-Gather, UA, 28 threadblocks per GPU, one
size, 64 switch latencies: one traffic, 64 simulations), each run a fresh ``nuna-jax sweep``
process, as a user runs it, timed end to end and by its simulator phase (the summary's ``sim_s``).

The machine may be shared: both settings are measured in one run, interleaved A B B A ... so that a
change of load hits both alike, several times; the load average is read before and after every run
and reported beside it.  Every run's rows must be the same bytes (the rows do not depend on
``--jobs``).

    python benchmarks/bench_sweep_sim.py [--size 2MB] [--reps 2] [--jobs 1,2] [--out DIR]

Prints a table; writes ``sweep_sim_<host>_<date>.json`` to ``--out`` (default benchmarks/out).
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
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cpu_model() -> str:
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _grid(size: str, points: int) -> str:
    return ("[sweep]\ndescription = \"bench_sweep_sim: 64 simulator points, one traffic\"\n[axes]\n"
            "model = [\"sim\"]\ngpus = [8]\n"
            f"size = [\"{size}\"]\npolicy = [\"UA\"]\ntbs = [28]\n"
            f"switch_latency_ns = {{start = 100.0, stop = 1000.0, num = {points}}}\n")


def _run(grid: Path, out: Path, jobs: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    if out.exists():
        out.unlink()
    la0 = os.getloadavg()
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "nuna_jax", "sweep", str(grid), "--out", str(out), "--no-progress",
                        "--json", "--jobs", str(jobs)], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    la1 = os.getloadavg()
    if r.returncode != 0:
        raise SystemExit(f"nuna-jax sweep --jobs {jobs} failed:\n{r.stderr[-3000:]}")
    s = json.loads(r.stdout)
    rows = [ln for ln in out.read_text().splitlines() if not ln.startswith("#")]
    return {"jobs": jobs, "wall_s": wall, "sim_s": s["sim_s"], "sim_on_workers": s["sim_on_workers"],
            "sim_cpu_s": s["sim_cpu_s"], "sim_workers_cpu_s": s["sim_workers_cpu_s"],
            "points": s["n_points"], "loadavg_before": list(la0), "loadavg_after": list(la1), "rows": rows}


_REF_CHILD = r"""
import sys, time
mode, start_at, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
if mode == "sim":
    from nuna_jax.presets import preset
    from nuna_jax.scenario import make_scenario
    from nuna_jax.sim import simulate
    s = preset("table2", n_gpus=8)
    sc = make_scenario(s, collective="allgather", size_bytes=int(sys.argv[4]), policy="UA", tbs_per_gpu=28)
    simulate(s, sc.traffic)                                  # warm (numba)
while time.time() < start_at:
    time.sleep(0.01)
t0 = time.perf_counter()
for k in range(n):
    if mode == "sim":
        simulate(s.replace(switch_latency_ns=100.0 + k), sc.traffic)
    else:
        x = 0
        for i in range(2_000_000):
            x += i * i
print(time.perf_counter() - t0)
"""


def _reference(mode: str, n: int, size_bytes: int) -> dict:
    """The machine's own 1-vs-2-process speedup on the same work, without the sweep: ``n`` units in one
    process, and ``n / 2`` in each of two processes started together (after their imports and warm-up):
    the ceiling any pool can reach on this machine at this load."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}

    def launch(k, units, at):
        return subprocess.Popen([sys.executable, "-c", _REF_CHILD, mode, str(at), str(units), str(size_bytes)],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    la0 = os.getloadavg()[0]
    at = time.time() + (40 if mode == "sim" else 3)
    one = float(launch(0, n, at).communicate()[0].strip() or "nan")
    at = time.time() + (40 if mode == "sim" else 3)
    ps = [launch(k, n // 2, at) for k in range(2)]
    two = max(float(p.communicate()[0].strip() or "nan") for p in ps)
    return {"mode": mode, "units": n, "one_process_s": one, "two_processes_s": two, "speedup": one / two,
            "loadavg_before": la0, "loadavg_after": os.getloadavg()[0]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="2MB", help="per-GPU All-Gather size (default 2MB)")
    ap.add_argument("--points", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2, help="repetitions of each setting (interleaved)")
    ap.add_argument("--jobs", default="1,2", help="the two --jobs values compared")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the machine's own 1-vs-2-process speedup (a CPU loop, the bare simulator)")
    a = ap.parse_args(argv)
    j1, j2 = (int(x) for x in a.jobs.split(","))
    info = {"benchmark": "sweep_sim", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "cpu": _cpu_model(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "grid": {"model": "sim", "gpus": 8, "size": a.size, "policy": "UA",
                                                          "tbs": 28, "switch_latency_ns": f"100..1000, {a.points} values"},
            "note": "each run: a fresh `python -m nuna_jax sweep --jobs N` process, end to end; "
                    "settings interleaved A B B A ...; load average before/after each run"}
    print(json.dumps({k: v for k, v in info.items() if k != "grid"}), flush=True)
    order = []
    for r in range(a.reps):
        order += [j1, j2] if r % 2 == 0 else [j2, j1]
    runs = []
    with tempfile.TemporaryDirectory() as d:
        grid = Path(d) / "g.toml"
        grid.write_text(_grid(a.size, a.points))
        _run(grid, Path(d) / "warm.csv", j1)            # compile caches (numba, XLA) warm for everyone
        for jobs in order:
            r = _run(grid, Path(d) / f"j{jobs}.csv", jobs)
            runs.append(r)
            print(f"--jobs {jobs}: {r['wall_s']:7.1f} s end to end, simulator phase {r['sim_s']:7.1f} s "
                  f"({r['sim_on_workers']} points on workers); load {r['loadavg_before'][0]:.1f} -> "
                  f"{r['loadavg_after'][0]:.1f}", flush=True)
    refs = []
    if not a.no_reference:
        from nuna_jax.units import parse_size
        for mode, n in (("cpu", 16), ("sim", 8)):
            refs.append(_reference(mode, n, int(parse_size(a.size))))
            r = refs[-1]
            print(f"reference ({'pure-Python loop' if mode == 'cpu' else 'bare simulator, ' + a.size}): "
                  f"{r['one_process_s']:.1f} s in one process, {r['two_processes_s']:.1f} s in two -> "
                  f"{r['speedup']:.2f}x; load {r['loadavg_before']:.1f} -> {r['loadavg_after']:.1f}", flush=True)
    same_rows = all(r["rows"] == runs[0]["rows"] for r in runs)
    for r in runs:
        r.pop("rows")

    def med(jobs, key):
        return statistics.median(r[key] for r in runs if r["jobs"] == jobs)
    res = {"wall_s": {str(j): med(j, "wall_s") for j in (j1, j2)},
           "sim_s": {str(j): med(j, "sim_s") for j in (j1, j2)}}
    res["speedup_wall"] = res["wall_s"][str(j1)] / res["wall_s"][str(j2)]
    res["speedup_sim"] = res["sim_s"][str(j1)] / res["sim_s"][str(j2)]
    # CPU seconds: this process's simulator phase and its workers' (startup included).  On a machine
    # whose cores are free, the phase takes about its busiest process's CPU time: the projection
    # below is that, not a measurement of wall time
    cpu1 = statistics.median(r["sim_cpu_s"] + r["sim_workers_cpu_s"] for r in runs if r["jobs"] == j1)
    crit2 = statistics.median(max(r["sim_cpu_s"], r["sim_workers_cpu_s"] / max(1, j2 - 1))
                              for r in runs if r["jobs"] == j2)
    cpu2 = statistics.median(r["sim_cpu_s"] + r["sim_workers_cpu_s"] for r in runs if r["jobs"] == j2)
    res["cpu_s"] = {str(j1): cpu1, str(j2): cpu2}
    res["projected_speedup_free_cores"] = cpu1 / crit2
    pairs = [(runs[k], runs[k + 1]) for k in range(0, len(runs) - 1, 2)]
    res["speedup_wall_per_pair"] = [(p[0]["wall_s"] / p[1]["wall_s"]) if p[0]["jobs"] == j1 else
                                    (p[1]["wall_s"] / p[0]["wall_s"]) for p in pairs]
    loads = [x for r in runs for x in (r["loadavg_before"][0], r["loadavg_after"][0])]
    res["loadavg_1min"] = {"min": min(loads), "max": max(loads), "median": statistics.median(loads)}
    res["same_rows"] = same_rows
    res["machine_reference"] = refs
    res["target_speedup"] = 1.8
    print()
    print(f"{'':22s} {'--jobs ' + str(j1):>12s} {'--jobs ' + str(j2):>12s} {'speedup':>8s}")
    print(f"{'end to end (median)':22s} {res['wall_s'][str(j1)]:11.1f}s {res['wall_s'][str(j2)]:11.1f}s "
          f"{res['speedup_wall']:7.2f}x")
    print(f"{'simulator phase':22s} {res['sim_s'][str(j1)]:11.1f}s {res['sim_s'][str(j2)]:11.1f}s "
          f"{res['speedup_sim']:7.2f}x")
    print(f"{'CPU s (all processes)':22s} {cpu1:11.1f}s {cpu2:11.1f}s  projected on free cores: "
          f"{res['projected_speedup_free_cores']:.2f}x (CPU of one process / CPU of the busiest of {j2})")
    print(f"per pair (end to end): {', '.join(f'{x:.2f}x' for x in res['speedup_wall_per_pair'])}; "
          f"load average {res['loadavg_1min']['min']:.1f}-{res['loadavg_1min']['max']:.1f} "
          f"(median {res['loadavg_1min']['median']:.1f}) on {info['cpu_count']} CPUs; rows identical: {same_rows}")
    out = {**info, "runs": runs, "result": res}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    p = Path(a.out) / f"sweep_sim_{platform.node() or 'host'}_{info['date'][:10]}.json"
    p.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {p}")
    return 0 if same_rows else 1


if __name__ == "__main__":
    sys.exit(main())
