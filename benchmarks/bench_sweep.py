"""Speed of nuna_jax.sweep (docs/sweep.md): closed-form and path-model evaluations per second
through the sweep's own evaluators, and the NUNA Figure 9 grid end to end, on every
device count from 1 to ``len(jax.devices())`` that divides it (the same code on CPU,
one GPU or several).

* closed form: one block (All-Gather, direct, 8 GPUs) with 2^28 points on a GPU
  (2^18 sizes x 64 switch latencies x 16 hop latencies; 2^12 sizes on CPU), generated on the
  device chunk by chunk; evaluations per second = chunk / time per chunk (results
  stay on the device: the throughput of the evaluator, not of writing a file).
* path model: one traffic (8-GPU 1 MB All-Gather, UA) x hardware variants, vmapped.
* Figure 9: ``examples/grids/fig9.toml`` (path model) end to end, including
  traffic construction and compilation, to a CSV in a temporary folder (``--build-jobs N``: the
  traffics built on N worker processes, ``sweep.trafficpool``).

    python benchmarks/bench_sweep.py [--out DIR] [--quick]

Writes ``sweep_<device>_<date>.json`` to ``--out`` (default benchmarks/out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from nuna_jax.cli.common import parse_size  # noqa: E402
from nuna_jax.sweep import closed_eval, grid_from_dict, load_grid  # noqa: E402
from nuna_jax.sweep.run import execute as run_sweep  # noqa: E402  (the summary; rows read from the file)
from nuna_jax.sweep.groups import blocks  # noqa: E402
from nuna_jax.sweep.shard import device_mesh, put_replicated  # noqa: E402


def _time(fn, min_s=1.0, min_calls=5):
    jax.block_until_ready(fn(0))
    ts, k, t_all = [], 0, time.perf_counter()
    while len(ts) < min_calls or time.perf_counter() - t_all < min_s:
        t0 = time.perf_counter()
        jax.block_until_ready(fn(k))
        ts.append(time.perf_counter() - t0)
        k += 1
        if len(ts) > 2000:
            break
    return min(ts), float(np.median(ts)), len(ts)


def bench_closed_form(devs, chunk: int, sizes: int) -> dict:
    g = grid_from_dict({"axes": {"model": ["closed_form"], "gpus": [8],
                                 "size": {"start": 10**6, "stop": 10**10, "num": sizes, "scale": "log",
                                          "integer": True},
                                 "switch_latency_ns": {"start": 100.0, "stop": 1000.0, "num": 64},
                                 "hop_cycles": {"start": 2.0, "stop": 20.0, "num": 16}}})
    mesh = device_mesh(devs)
    b = blocks(g)[0]
    t0 = time.perf_counter()
    static, tables = closed_eval.block_args(b, g.system_of(dict(b.fixed)), g, mesh)
    setup = time.perf_counter() - t0
    L = b.free_lens[-1]
    n_rows = b.n_points // L
    rows = max(len(devs), min(chunk // L, n_rows) // len(devs) * len(devs))
    chunk = rows * L
    fn = closed_eval.closed_form_fn(rows=rows, mesh=mesh, **static)
    starts = [put_replicated(np.int32((k * rows) % max(1, n_rows - rows + 1)), mesh) for k in range(8)]
    best, med, calls = _time(lambda k: fn(starts[k % 8], *tables))
    return {"block_points": b.n_points, "chunk": chunk, "hw_variants": int(len(tables[1])),
            "tables_setup_s": setup, "best_s": best, "median_s": med, "calls": calls,
            "evals_per_s": chunk / best, "evals_per_s_median": chunk / med}


def bench_path(devs, n_hw: int) -> dict:
    g = grid_from_dict({"sweep": {"chunk": n_hw},
                        "axes": {"model": ["path"], "gpus": [8], "size": [10**6], "policy": ["UA"],
                                 "switch_latency_ns": {"start": 100.0, "stop": 1000.0, "num": n_hw}}})
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        s1 = run_sweep(g, Path(d) / "p.csv", progress=False, devices=devs, max_rows=1 << 30)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        s2 = run_sweep(g, Path(d) / "p2.csv", progress=False, devices=devs, max_rows=1 << 30)
        second = time.perf_counter() - t0
    return {"points": g.n_points, "flows": 27384, "padded_rows": 32768, "first_run_s": first,
            "warm_run_s": second, "evals_per_s_warm_end_to_end": g.n_points / second,
            "plan_s": s2["plan_s"]}


def bench_fig9(devs, build_jobs: int = 1) -> dict:
    g = load_grid(ROOT / "examples" / "grids" / "fig9.toml", parse_size=parse_size)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "fig9.csv"
        t0 = time.perf_counter()
        kw = {"build_jobs": build_jobs} if build_jobs != 1 else {}
        s = run_sweep(g, out, progress=False, devices=devs, max_rows=1 << 24, **kw)
        wall = time.perf_counter() - t0
        from nuna_jax.sweep.writer import read_rows, to_columns
        cols = to_columns(*read_rows(out))
    rows = [{k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in cols.items()}
            for i in range(len(cols["index"]))]
    return {"points": g.n_points, "seconds": wall, "plan_s": s["plan_s"], "compile_s": s["compile_s"],
            "eval_s": s["eval_s"], "path_groups": s["path_groups"],
            "distinct_traffic": s["distinct_traffic"], "build_jobs": build_jobs, "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--quick", action="store_true", help="small sizes (CPU smoke run)")
    ap.add_argument("--no-fig9", action="store_true")
    ap.add_argument("--fig9-only", action="store_true")
    ap.add_argument("--build-jobs", type=int, default=1,
                    help="Figure 9: worker processes building the traffics (run_sweep(build_jobs=))")
    ap.add_argument("--tag", default=None, help="device tag in the file name (default: backend)")
    a = ap.parse_args(argv)
    devs = jax.devices()
    backend = jax.default_backend()
    gpu = backend == "gpu"
    info = {"devices": [str(d) for d in devs], "device_kind": devs[0].device_kind, "backend": backend,
            "jax": jax.__version__, "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "date": datetime.date.today().isoformat()}
    print(info, flush=True)
    counts = [k for k in (1, 2, 4, 8) if k <= len(devs)]
    res = {"info": info, "closed_form": {}, "path_model": {}, "fig9": {}}
    cf_chunk = (1 << 28) if gpu else (1 << 22)
    for k in counts if not a.fig9_only else []:
        r = bench_closed_form(devs[:k], cf_chunk, (1 << 18) if gpu else 4096)
        res["closed_form"][str(k)] = r
        print(f"closed form, {k} device(s): chunk {r['chunk']}: {r['best_s'] * 1e3:.3f} ms -> "
              f"{r['evals_per_s']:.3e} evals/s (median {r['evals_per_s_median']:.3e})", flush=True)
    for k in counts if not a.fig9_only else []:
        r = bench_path(devs[:k], 256 if gpu else 16)
        res["path_model"][str(k)] = r
        print(f"path model, {k} device(s): {r['points']} points, warm {r['warm_run_s']:.2f} s -> "
              f"{r['evals_per_s_warm_end_to_end']:.1f} evals/s end to end (first {r['first_run_s']:.1f} s)",
              flush=True)
    if not a.no_fig9:
        for k in counts:
            r = bench_fig9(devs[:k], a.build_jobs)
            res["fig9"][str(k)] = r
            print(f"fig9 grid, {k} device(s): {r['points']} points in {r['seconds']:.1f} s "
                  f"(traffic {r['plan_s']:.1f} s, compile {r['compile_s']:.1f} s, {r['path_groups']} shape groups)", flush=True)
    if len(counts) > 1 and res["closed_form"]:
        c1 = res["closed_form"]["1"]["evals_per_s"]
        res["scaling"] = {k: res["closed_form"][k]["evals_per_s"] / c1 for k in res["closed_form"]}
    res["targets"] = {"closed_form_1xH200": 3e11, "closed_form_2xH200_ratio": 1.8, "closed_form_2core_cpu": 1e9,
                      "fig9_path_model_1xH200_s": 60}
    tag = a.tag or backend
    outdir = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"sweep_{tag}{'_fig9' if a.fig9_only else ''}_{info['date']}.json"
    path.write_text(json.dumps(res, indent=1, default=str))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
