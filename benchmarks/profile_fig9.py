"""Where NUNA Figure 9's grid spends its time: the sweep (``sweep.run.execute``) of
``examples/grids/fig9.toml`` (or a reduced grid) under cProfile, with XLA compilations counted
(``jax.monitoring``'s backend-compile event, their seconds summed over threads).

    python benchmarks/profile_fig9.py [--gpus 2,8,64] [--sizes 100kB,1MB,10MB,64MB] [--top 40] [--label L]
                                      [--build-jobs N] [--merge-factor F] [--no-profile] [--compare FILE]
    python benchmarks/profile_fig9.py --one 64,64MB,NAP+NAR [--tbs best|N] [--label L]   # one scenario build
    python benchmarks/profile_fig9.py --split-tasks 64,64MB [--label L]   # a point's build-worker tasks here
    BENCH_CODE_ROOT=/path/to/old/checkout python benchmarks/profile_fig9.py ...   # the same on other code

Prints the sweep's own split (traffic, compile, evaluate), the compilations, and the functions
with the most time (cumulative and own); writes ``profile_fig9_<backend>_<date>.json`` (the
split, compilations and the top functions, and every row) to ``--out`` (default benchmarks/out).
The scenario store is off (every traffic built).  ``--build-jobs N``: the traffics are built on N
worker processes (``run_sweep(build_jobs=N)``, ``sweep.trafficpool``; their XLA compilations and CPU
time are not in the counts, ``children_cpu_s`` has their CPU seconds); ``--merge-factor``: the
sweep's shape merging (default: the sweep's own); ``--no-profile``: no cProfile (its overhead off);
``--compare FILE``: the rows compared with those of another run (this script's JSON, or
``bench_sweep.py``'s: its ``fig9`` rows), by grid index: equal bit for bit or not, and the largest
relative difference of ``time_ns`` / ``lower_bound_ns`` (written under ``compare``).

``--one GPUS,SIZE,POLICY``: instead of the grid, one ``make_scenario`` of that All-Gather (``--tbs``,
default ``best``: the three threadblock candidates, each with NAP's granularity search), its CPU
seconds (user and system: on these VMs first-touching fresh memory is much of it) split over the
phases (plan, placement, lowering, the estimate's padding/stacking on the host, the estimate's XLA
call, XLA compilations), with page faults and peak memory; writes ``profile_fig9_one_<label>_<date>.json``.

``--split-tasks GPUS,SIZE``: the tasks the sweep's build workers run for that NAP+NAR All-Gather point
(``sweep.trafficpool``: one ``nap_candidate`` per threadblock count and granularity, then the rebuild of
each count's fastest), one after another in this process, each task's CPU seconds; run it with the
workers' allocator settings (``trafficpool.MALLOC_ENV`` in the environment) to see what a worker
spends.  Writes ``fig9_split_tasks_<label>_<date>.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import io
import json
import os
import platform
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, os.environ.get("BENCH_CODE_ROOT", str(ROOT)))   # another checkout: before/after runs
os.environ["NUNA_JAX_CACHE_DIR"] = ""            # no scenario store, no persistent XLA cache

import jax  # noqa: E402

from nuna_jax.cli.common import parse_size  # noqa: E402
from nuna_jax.sweep import grid_from_dict  # noqa: E402
from nuna_jax.sweep.run import execute  # noqa: E402


def count_compiles() -> dict:
    """``{"n": XLA compilations, "s": their summed seconds}`` from now on in this process (a
    ``jax.monitoring`` listener, kept up to date as compilations happen)."""
    comp = {"n": 0, "s": 0.0}

    def listen(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            comp["n"] += 1
            comp["s"] += duration
    jax.monitoring.register_event_duration_secs_listener(listen)
    return comp


def compare_rows(rows: list, path: str) -> dict:
    """This run's rows against another run's (``rows``, or ``fig9`` -> first entry -> ``rows``), matched by
    the axis values (GPUs, size, policy; grid indices differ between grids): how many are bit-identical, differ, are missing; the largest relative
    difference of the times."""
    d = json.loads(Path(path).read_text())
    other = d.get("rows") or next(iter(d["fig9"].values()))["rows"]
    axes = ("n_gpus", "size", "policy")
    by = {tuple(r[k] for k in axes): r for r in other}
    out = {"against": str(path), "equal": 0, "differ": 0, "missing": 0, "max_rel_time": 0.0, "max_rel_lb": 0.0,
           "differing": []}
    for r in rows:
        o = by.get(tuple(r[k] for k in axes))
        if o is None:
            out["missing"] += 1
            continue
        same = all(r.get(k) == o.get(k) for k in ("time_ns", "lower_bound_ns", "n_flows", "tbs_used") if k in o)
        out["equal" if same else "differ"] += 1
        for k, m in (("time_ns", "max_rel_time"), ("lower_bound_ns", "max_rel_lb")):
            if o.get(k):
                out[m] = max(out[m], abs(r[k] - o[k]) / abs(o[k]))
        if not same:
            out["differing"].append({"index": r["index"], **{k: r[k] for k in axes},
                                     "here": [r.get(k) for k in ("time_ns", "tbs_used", "n_flows")],
                                     "there": [o.get(k) for k in ("time_ns", "tbs_used", "n_flows")]})
    return out


class _Phases:
    """CPU seconds (user, system), page faults and calls of the functions wrapped by :meth:`wrap`,
    the outermost call of each phase counted (a phase inside another is not subtracted from it)."""

    def __init__(self):
        self.acc, self.depth = {}, {}

    def wrap(self, mod, name, phase):
        fn = getattr(mod, name)

        def timed(*a, **kw):
            d = self.depth.get(phase, 0)
            self.depth[phase] = d + 1
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            try:
                return fn(*a, **kw)
            finally:
                self.depth[phase] = d
                if d == 0:
                    r1 = resource.getrusage(resource.RUSAGE_SELF)
                    v = self.acc.setdefault(phase, {"user_s": 0.0, "sys_s": 0.0, "faults": 0, "calls": 0})
                    v["user_s"] += r1.ru_utime - r0.ru_utime
                    v["sys_s"] += r1.ru_stime - r0.ru_stime
                    v["faults"] += r1.ru_minflt - r0.ru_minflt
                    v["calls"] += 1
        setattr(mod, name, timed)


def one_build(a) -> int:
    """``--one``: one scenario build, its CPU time split by phase (module doc)."""
    from nuna_jax import lowering, placement, scenario
    from nuna_jax.models.contention import report
    from nuna_jax.presets import preset
    gpus, size, policy = a.one.split(",")
    ph = _Phases()
    ph.wrap(scenario, "generated_plan", "plan")
    ph.wrap(scenario, "place", "placement")
    ph.wrap(scenario, "build_traffic", "lowering")
    ph.wrap(report, "_stack_host", "estimate: pad + stack (host)")
    ph.wrap(report, "estimate_batch_jit", "estimate: XLA call")
    ph.wrap(report, "estimate_batch_quick_jit", "estimate: XLA call")
    from nuna_jax.models import contention
    ph.wrap(contention, "estimate_many", "estimate (all)")
    comp = count_compiles()
    s = preset("table2", n_gpus=int(gpus))
    tbs = a.tbs if a.tbs == "best" else int(a.tbs)
    load0 = os.getloadavg()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    sc = scenario.make_scenario(s, collective="allgather", size_bytes=int(parse_size(size)), policy=policy,
                                tbs_per_gpu=tbs)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "backend": jax.default_backend(),
                       "jax": jax.__version__},
           "code": str(Path(sys.modules["nuna_jax"].__file__).parent), "case": a.one, "tbs": a.tbs,
           "wall_s": wall, "user_s": r1.ru_utime - r0.ru_utime, "sys_s": r1.ru_stime - r0.ru_stime,
           "faults": r1.ru_minflt - r0.ru_minflt, "peak_rss_gb": r1.ru_maxrss / 1e6,
           "load_avg_before": load0, "load_avg_after": os.getloadavg(),
           "xla_compilations": comp["n"], "xla_compile_s_summed": comp["s"], "phases": ph.acc,
           "chosen": {"tbs_per_gpu": int(sc.plan.tbs_per_gpu.max()),
                      "granularity": int(sc.placement.routing_granularity), "n_flows": sc.traffic.n_flows},
           "tbs_search_ns": {str(k): float(v) for k, v in (sc.tbs_search or {}).items()},
           "granularity_search_ns": {str(k): float(v).hex() for k, v in
                                     (sc.placement.granularity_search or {}).items()}}
    print(f"{a.one} tbs={a.tbs}: wall {wall:.1f} s, CPU {res['user_s']:.1f} user + {res['sys_s']:.1f} sys, "
          f"{res['faults']} page faults, peak {res['peak_rss_gb']:.2f} GB, {comp['n']} XLA compilations "
          f"({comp['s']:.1f} s), load {load0[0]:.1f}-{res['load_avg_after'][0]:.1f}")
    for k, v in ph.acc.items():
        print(f"  {k:30s} {v['user_s']:7.2f} user {v['sys_s']:7.2f} sys {v['faults']:9d} faults {v['calls']:4d} calls")
    print("  chosen", res["chosen"])
    label = f"_{a.label}" if a.label else ""
    out = Path(a.out) / f"profile_fig9_one{label}_{res['date'][:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


def split_tasks(a) -> int:
    """``--split-tasks``: a point's build-worker tasks, one after another here (module doc)."""
    from nuna_jax.presets import preset
    from nuna_jax.scenario import tbs_candidates
    from nuna_jax.sweep import trafficpool
    gpus, size = a.split_tasks.split(",")
    n, size = int(gpus), int(parse_size(size))
    s = preset("table2", n_gpus=n)
    comp = count_compiles()

    def cpu(a_, b_):
        return b_.ru_utime - a_.ru_utime + b_.ru_stime - a_.ru_stime
    ru = lambda: resource.getrusage(resource.RUSAGE_SELF)  # noqa: E731
    tasks, load0 = [], os.getloadavg()
    r0, w0 = ru(), time.perf_counter()
    for tbs in tbs_candidates(n):
        pt = {"collective": "allgather", "size": size, "policy": "NAP+NAR", "tbs_per_gpu": tbs,
              "algorithm": "direct", "nar_granularity": None}
        est = {}
        for g in trafficpool.nap_granularities(s):
            x = ru()
            _, _, st, v = trafficpool.nap_candidate((0, s, pt, g))
            y = ru()
            est[g] = v
            tasks.append({"tbs": tbs, "g": g, "cpu_s": cpu(x, y), "sys_s": y.ru_stime - x.ru_stime,
                          "estimate_ns": float(v).hex()})
        gb = min(est, key=lambda x: (est[x], x))
        x = ru()
        trafficpool.build_task((0, s, dict(pt, nar_granularity=gb)))
        y = ru()
        tasks.append({"tbs": tbs, "g": gb, "rebuild": True, "cpu_s": cpu(x, y), "sys_s": y.ru_stime - x.ru_stime})
    r1 = ru()
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "backend": jax.default_backend()},
           "case": f"{n} GPUs {size} B NAP+NAR", "code": str(Path(sys.modules["nuna_jax"].__file__).parent),
           "malloc_env": {k: os.environ.get(k) for k in getattr(trafficpool, "MALLOC_ENV", {})},
           "wall_s": time.perf_counter() - w0, "cpu_s": cpu(r0, r1), "sys_s": r1.ru_stime - r0.ru_stime,
           "largest_task_cpu_s": max(t["cpu_s"] for t in tasks), "xla_compilations": comp["n"],
           "xla_compile_s": comp["s"], "peak_rss_gb": r1.ru_maxrss / 1e6, "load_before": load0,
           "load_after": os.getloadavg(), "tasks": tasks}
    print({k: v for k, v in res.items() if k != "tasks"})
    label = f"_{a.label}" if a.label else ""
    out = Path(a.out) / f"fig9_split_tasks{label}_{res['date'][:10]}.json"
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="2,8,64")
    ap.add_argument("--sizes", default="100kB,1MB,10MB,64MB")
    ap.add_argument("--policies", default="UA,UA+NAR,NUMA+NAR,NAP+NAR")
    ap.add_argument("--tbs", default="best", help="threadblocks per GPU: best (NUNA 5.1) or an integer")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--label", default="", help="added to the output file name (e.g. before / after)")
    ap.add_argument("--build-jobs", type=int, default=1, help="worker processes building the traffics")
    ap.add_argument("--merge-factor", type=float, default=None, help="the sweep's merge_factor (default: its own)")
    ap.add_argument("--no-profile", action="store_true", help="no cProfile")
    ap.add_argument("--compare", default=None, help="a JSON with the rows of another run")
    ap.add_argument("--build-platform", default="cpu", choices=("cpu", "gpu"),
                    help="JAX platform of the build workers (NUNA_JAX_BUILD_PLATFORM; gpu: experimental)")
    ap.add_argument("--one", default=None, metavar="GPUS,SIZE,POLICY",
                    help="one make_scenario of that All-Gather instead of the grid, split by phase (e.g. 64,64MB,NAP+NAR)")
    ap.add_argument("--split-tasks", default=None, metavar="GPUS,SIZE",
                    help="a NAP+NAR point's build-worker tasks run here one after another (e.g. 64,64MB)")
    a = ap.parse_args(argv)
    if a.one:
        return one_build(a)
    if a.split_tasks:
        return split_tasks(a)
    comp = count_compiles()
    axes = {"model": ["path"], "collective": ["allgather"], "gpus": [int(x) for x in a.gpus.split(",")],
            "size": a.sizes.split(","), "policy": a.policies.split(",")}
    if a.tbs != "best":
        axes["tbs"] = [int(a.tbs)]
    g = grid_from_dict({"sweep": {"system": "table2"}, "axes": axes}, parse_size=parse_size)
    kw = {}
    os.environ["NUNA_JAX_BUILD_PLATFORM"] = a.build_platform
    if a.build_jobs != 1:
        kw["build_jobs"] = a.build_jobs
    if a.merge_factor is not None:
        kw["merge_factor"] = a.merge_factor
    import threading
    stop = threading.Event()
    t_start = time.perf_counter()

    def heartbeat():            # a run cut short by a time limit still says how far it got
        while not stop.wait(15.0):
            print(f"... {time.perf_counter() - t_start:.0f} s, {comp['n']} XLA compilations here, "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    threading.Thread(target=heartbeat, daemon=True).start()
    pr = cProfile.Profile()
    ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, c0 = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as d:
        if not a.no_profile:
            pr.enable()
        summary = execute(g, Path(d) / "fig9.csv", progress=False, **kw)
        pr.disable()
        from nuna_jax.sweep.writer import read_rows, to_columns
        cols = to_columns(*read_rows(Path(d) / "fig9.csv"))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    stop.set()
    ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rows = [{k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in cols.items()}
            for i in range(len(cols["index"]))]
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "backend": jax.default_backend(),
                       "devices": [str(x) for x in jax.devices()], "jax": jax.__version__,
                       "load_avg": os.getloadavg()},
           "code": str(Path(sys.modules["nuna_jax"].__file__).parent), "grid": axes, "points": g.n_points, "wall_s": wall, "cpu_s": cpu,
           "children_cpu_s": (ch1.ru_utime + ch1.ru_stime) - (ch0.ru_utime + ch0.ru_stime),
           "options": kw, "build_platform": a.build_platform, "path_groups": summary.get("path_groups"),
           "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
           "traffic_s": summary.get("plan_s"), "compile_s": summary.get("compile_s"), "eval_s": summary.get("eval_s"),
           "xla_compilations": comp["n"], "xla_compile_s_summed": comp["s"]}
    res["load_avg_after"] = os.getloadavg()
    if a.compare:
        res["compare"] = compare_rows(rows, a.compare)
    print({k: v for k, v in res.items() if k != "machine"}, flush=True)
    tops = {}
    for key in ("cumulative", "tottime") if not a.no_profile else ():
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).sort_stats(key).print_stats(a.top)
        tops[key] = buf.getvalue()
        print(tops[key])
    res["top"] = tops
    res["rows"] = rows
    label = f"_{a.label}" if a.label else ""
    out = Path(a.out) / f"profile_fig9_{jax.default_backend()}{label}_{res['date'][:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
