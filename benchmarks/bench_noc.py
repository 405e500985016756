"""Speed of ``nuna-jax noc`` against BookSim2, side by side in one run on one machine.

BookSim2's own 8x8 uniform configuration (``mesh88_uniform.cfg``) at injection rate 0.2: each
tool runs ``--repeats`` times alternately (seeds 0, 1, ...); flit-hops per second = cycles x nodes
x accepted flit rate x hops average / wall seconds for both (BookSim2's README formula), wall
seconds being BookSim2's whole process and nuna-jax's simulation (``wall_s``: in-process, numba
loaded) -- the nuna-jax command's whole process (interpreter, imports, numba cache load) is
reported beside it.  CPU seconds (rusage of the BookSim2 child, ``time.process_time`` of the
simulation) are reported too: on a loaded machine they are steadier than wall seconds.  Prints a
table and writes benchmarks/out/bench_noc.json.  Not a test: the numbers depend on the machine
and its load (both tools see the same load, interleaved).

``--before DIR`` (an earlier commit's tree, e.g. ``mkdir /tmp/before && git archive main | tar -x -C /tmp/before``) runs
that tree's simulator and this one's, each in a child process per seed (one warm-up run, then the timed one),
interleaved with the others: the speed-up of a change and the ratio to BookSim2 in one run.

    python benchmarks/bench_noc.py [--repeats 3] [--rate 0.2] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rate", type=float, default=0.2)
    ap.add_argument("--booksim", default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "bench_noc.json"))
    ap.add_argument("--before", default=None, help="a checkout of an earlier commit to time beside this one")
    a = ap.parse_args(argv)
    from validate_booksim import find_booksim, run_booksim
    binary = Path(a.booksim) if a.booksim else find_booksim()
    if binary is None:
        print("bench_noc: BookSim2 binary not found; nothing to compare")
        return 0
    cfg = binary.parent / "configs" / "mesh88_uniform.cfg"
    from nuna_jax.noc import load_config
    from nuna_jax.noc.sim import simulate_noc
    nodes = load_config(cfg).nodes
    simulate_noc(path=cfg, overrides=[f"injection_rate={a.rate}"], seed=0)  # load numba's compiled loop
    rows = []
    env = dict(os.environ, PYTHONPATH=str(ROOT), NUNA_JAX_CACHE_DIR="")
    def child_cpu():
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    for rep in range(a.repeats):
        ov = [f"injection_rate={a.rate}"]
        c0 = child_cpu()
        b = run_booksim(binary, cfg, ov + [f"seed={rep}"])
        b_cpu = child_cpu() - c0
        b_fhs = b["flit_hops"] / b["wall_s"]
        c0 = time.process_time()
        n = simulate_noc(path=cfg, overrides=ov, seed=rep)
        n_cpu = time.process_time() - c0
        n_fh = n["cycles"] * nodes * n["accepted_flit_rate"] * n["hops_avg"]
        t0, c0 = time.perf_counter(), child_cpu()
        subprocess.run([sys.executable, "-m", "nuna_jax", "noc", str(cfg), *ov, "--seed", str(rep), "--json"],
                       env=env, capture_output=True, check=True)
        proc, proc_cpu = time.perf_counter() - t0, child_cpu() - c0
        before = after = None
        if a.before:
            code = ("import json, sys, time; import nuna_jax.noc.sim as m; f = m.simulate_noc; "
                    f"a = dict(path={str(cfg)!r}, overrides={ov!r}, seed={rep}); f(**a); "
                    "c = time.process_time(); r = f(**a); c = time.process_time() - c; "
                    "print(json.dumps({'wall_s': r['wall_s'], 'cpu_s': c, 'cycles': r['cycles'], "
                    "'accepted_flit_rate': r['accepted_flit_rate'], 'hops_avg': r['hops_avg'], "
                    "'packet_latency_avg_cycles': r['packet_latency_avg_cycles'], 'module': m.__file__}))")
            def child(tree):   # one warm-up run, then the timed one, in a fresh process on ``tree``
                # run in ``tree``: ``python -c`` puts the working directory first on sys.path, before
                # PYTHONPATH (run from this checkout, the "before" child imported this tree's code)
                tree = Path(tree).resolve()
                out = subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONPATH=str(tree)), cwd=str(tree),
                                     capture_output=True, text=True, check=True).stdout
                d = json.loads(out.strip().splitlines()[-1])
                if not Path(d["module"]).resolve().is_relative_to(tree):
                    raise RuntimeError(f"bench_noc: the child for {tree} imported {d['module']}")
                fh = d["cycles"] * nodes * d["accepted_flit_rate"] * d["hops_avg"]
                d.update(flit_hops=fh, flit_hops_per_s=fh / d["wall_s"], flit_hops_per_cpu_s=fh / d["cpu_s"],
                         speedup_vs_booksim=(fh / d["wall_s"]) / b_fhs,
                         speedup_vs_booksim_cpu=(fh / d["cpu_s"]) / (b["flit_hops"] / b_cpu))
                return d
            # this tree in a child process too: the before / after ratio compares like with like
            trees = [(a.before, "before"), (ROOT, "after")] if rep % 2 == 0 else [(ROOT, "after"), (a.before, "before")]
            got = {name: child(tree) for tree, name in trees}
            before, after = got["before"], got["after"]
        rows.append({"seed": rep, "before": before, "after_child": after, "booksim": {"wall_s": b["wall_s"], "cpu_s": b_cpu, "cycles": b["cycles"],
                                              "flit_hops": b["flit_hops"], "flit_hops_per_s": b_fhs,
                                              "flit_hops_per_cpu_s": b["flit_hops"] / b_cpu,
                                              "packet_latency_avg_cycles": b["packet_latency_avg_cycles"]},
                     "nuna_jax": {"wall_s": n["wall_s"], "cpu_s": n_cpu, "process_wall_s": proc,
                                  "process_cpu_s": proc_cpu, "cycles": n["cycles"], "flit_hops": n_fh,
                                  "flit_hops_counted": n["flit_hops"], "flit_hops_per_s": n_fh / n["wall_s"],
                                  "flit_hops_per_cpu_s": n_fh / n_cpu, "flit_hops_per_s_process": n_fh / proc,
                                  "packet_latency_avg_cycles": n["packet_latency_avg_cycles"]},
                     "speedup": (n_fh / n["wall_s"]) / b_fhs, "speedup_cpu": (n_fh / n_cpu) / (b["flit_hops"] / b_cpu),
                     "speedup_process": (n_fh / proc) / b_fhs})
        r = rows[-1]
        print(f"seed {rep}: booksim {b['wall_s']:.2f} s ({b_cpu:.2f} CPU s) {b_fhs / 1e3:.0f} k flit-hops/s | nuna-jax "
              f"{n['wall_s']:.3f} s ({n_cpu:.3f} CPU s) {r['nuna_jax']['flit_hops_per_s'] / 1e3:.0f} k flit-hops/s "
              f"(x{r['speedup']:.1f} wall, x{r['speedup_cpu']:.1f} CPU); whole command {proc:.2f} s ({proc_cpu:.2f} CPU s, "
              f"x{r['speedup_process']:.1f})"
              + ("" if before is None else "".join(
                  f"; {k} (child): {d['wall_s']:.3f} s ({d['cpu_s']:.3f} CPU s, x{d['speedup_vs_booksim']:.1f} wall, "
                  f"x{d['speedup_vs_booksim_cpu']:.1f} CPU)" for k, d in (("before", before), ("after", after)))), flush=True)
    med = sorted(r["speedup"] for r in rows)[len(rows) // 2]
    medc = sorted(r["speedup_cpu"] for r in rows)[len(rows) // 2]
    medp = sorted(r["speedup_process"] for r in rows)[len(rows) // 2]
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    doc = {"config": cfg.name, "injection_rate": a.rate, "cpus": os.cpu_count(), "loadavg": load,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": os.uname().nodename,
           "rows": rows, "median_speedup": med, "median_speedup_cpu": medc, "median_speedup_process": medp}
    if a.before:
        doc["before"] = str(a.before)
        doc["before_median_speedup"] = sorted(r["before"]["speedup_vs_booksim"] for r in rows)[len(rows) // 2]
        doc["before_median_speedup_cpu"] = sorted(r["before"]["speedup_vs_booksim_cpu"] for r in rows)[len(rows) // 2]
        doc["after_child_median_speedup"] = sorted(r["after_child"]["speedup_vs_booksim"] for r in rows)[len(rows) // 2]
        doc["after_child_median_speedup_cpu"] = sorted(r["after_child"]["speedup_vs_booksim_cpu"] for r in rows)[len(rows) // 2]
        doc["median_gain_vs_before_cpu"] = sorted(r["before"]["cpu_s"] / r["after_child"]["cpu_s"] for r in rows)[len(rows) // 2]
        doc["median_gain_vs_before_wall"] = sorted(r["before"]["wall_s"] / r["after_child"]["wall_s"] for r in rows)[len(rows) // 2]
        print(f"child processes: before ({a.before}) median x{doc['before_median_speedup']:.1f} wall, "
              f"x{doc['before_median_speedup_cpu']:.1f} CPU; this tree x{doc['after_child_median_speedup']:.1f} wall, "
              f"x{doc['after_child_median_speedup_cpu']:.1f} CPU; this tree / before: x{doc['median_gain_vs_before_cpu']:.2f} "
              f"CPU s, x{doc['median_gain_vs_before_wall']:.2f} wall s (medians of per-seed ratios)")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"median speedup in flit-hops/s: x{med:.1f} (simulation, wall), x{medc:.1f} (simulation, CPU), "
          f"x{medp:.1f} (whole command, wall); load average {load}; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
