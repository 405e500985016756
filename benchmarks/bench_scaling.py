"""Scaling of nuna_jax.sweep over devices and processes (docs/multi_gpu.md): the
closed form and the path-model hardware sweep, evaluations per second on 1, 2, ..., N devices of
one host in one run, and the same run as P processes through ``jax.distributed`` (one device
each), with the speedup over one device.

    python benchmarks/bench_scaling.py --devices N [--processes P] [--counts 1,2,4,8] [--quick]
        [--emulate] [--rows DIR] [--out DIR] [--tag TAG]

What is timed (per device count ``k``, the first ``k`` of ``jax.devices()``):

* ``closed_form``: the sweep's closed-form evaluator (``sweep.closed_eval``) on one block
  (All-Gather, direct, 8 GPUs; sizes x 64 switch latencies x 16 hop latencies), one chunk of a
  fixed total size (strong scaling: 2^30 points on GPUs, 2^20 on CPUs, 2^16 with ``--quick``)
  generated on the devices; ``evals_per_s = chunk / time per chunk`` (results stay on the
  devices: the evaluator's throughput, not a file's).  Best and median of >= 5 calls and >= 1 s.
* ``closed_form_sweep``: ``run_sweep(..., devices=...)`` of a small closed-form grid to CSV, end
  to end (warm: the second of two runs; host-bound: it writes every row), for the row check.
* ``path``: ``run_sweep(..., devices=...)`` of a path-model hardware sweep (one traffic -- 8-GPU
  1 MB All-Gather, UA, on GPUs; 2-GPU 100 kB on CPUs -- x switch-latency variants in one chunk,
  256 on GPUs, 8 on CPUs), warm; ``evals_per_s = points / eval_s`` (``eval_s`` of the sweep's
  summary: evaluation incl. the tables' upload, excluding the traffic build ``plan_s``), and
  ``evals_per_s_end_to_end = points / wall``.

``speedup`` = evals/s at ``k`` / evals/s at 1 device.  The rows written at every device count (and
by the P processes) are compared with the 1-device rows: ``rows_equal`` in the JSON (exact
equality of every column; ``--rows DIR`` keeps the CSV files).

This process never imports JAX: it starts one child for the device counts and P children for
the processes (``CUDA_VISIBLE_DEVICES=i`` each on GPUs; one CPU device each otherwise), then
merges their parts.  ``--emulate``: CPU check run on N emulated devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=N``), which checks the code, not the speed.

Writes ``scaling_<tag>_<date>.json`` to ``--out`` (default benchmarks/out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = ["main", "compare_rows", "speedups"]

CHILD_TIMEOUT_S = 3600


# ---------------------------------------------------------------------------------------------
# measurements (in a child process, JAX imported)
# ---------------------------------------------------------------------------------------------
def _sizes(gpu: bool, quick: bool) -> dict:
    if quick:
        return {"cf_sizes": 64, "cf_chunk": 1 << 16, "path_gpus": 2, "path_size": 10**5, "path_hw": 8,
                "sweep_sizes": 16, "min_s": 0.2}
    if gpu:
        return {"cf_sizes": 1 << 20, "cf_chunk": 1 << 30, "path_gpus": 8, "path_size": 10**6, "path_hw": 256,
                "sweep_sizes": 256, "min_s": 1.0}
    return {"cf_sizes": 1024, "cf_chunk": 1 << 20, "path_gpus": 2, "path_size": 10**5, "path_hw": 8,
            "sweep_sizes": 64, "min_s": 1.0}


def _sync(name: str) -> None:
    import jax
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


def _time_calls(fn, min_s: float = 1.0, min_calls: int = 5, max_calls: int = 2000):
    import jax
    import numpy as np
    jax.block_until_ready(fn(0))
    _sync("bench_scaling: timed calls")
    ts, t_all = [], time.perf_counter()
    while len(ts) < min_calls or (time.perf_counter() - t_all < min_s and len(ts) < max_calls):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(len(ts)))
        ts.append(time.perf_counter() - t0)
    return min(ts), float(np.median(ts)), len(ts)


def _closed_form_evaluator(devs, n_sizes: int, chunk: int, min_s: float) -> dict:
    import numpy as np
    from nuna_jax.sweep import closed_eval, grid_from_dict
    from nuna_jax.sweep.groups import blocks
    from nuna_jax.sweep.shard import device_mesh, put_replicated
    from nuna_jax.limits import Limits
    # the GPU grid (2^20 sizes x 64 x 16 = 2^30 points) is over the default 2^28 grid points on purpose:
    # only chunks of it are evaluated, to time the evaluator (found on the H200: WorkLimitError)
    g = grid_from_dict(limits=Limits(8.0), data={"axes": {"model": ["closed_form"], "gpus": [8],
                                 "size": {"start": 10**6, "stop": 10**10, "num": n_sizes, "scale": "log",
                                          "integer": True},
                                 "switch_latency_ns": {"start": 100.0, "stop": 1000.0, "num": 64},
                                 "hop_cycles": {"start": 2.0, "stop": 20.0, "num": 16}}})
    mesh = device_mesh(devs)
    b = blocks(g)[0]
    static, tables = closed_eval.block_args(b, g.system_of(dict(b.fixed)), g, mesh)
    L = b.free_lens[-1]
    n_rows = b.n_points // L
    k = len(devs)
    rows = max(k, min(chunk // L, n_rows) // k * k)
    fn = closed_eval.closed_form_fn(rows=rows, mesh=mesh, **static)
    starts = [put_replicated(np.int32((j * rows) % max(1, n_rows - rows + 1)), mesh) for j in range(8)]
    best, med, calls = _time_calls(lambda j: fn(starts[j % 8], *tables), min_s=min_s)
    pts = rows * L
    return {"chunk": pts, "block_points": b.n_points, "best_s": best, "median_s": med, "calls": calls,
            "evals_per_s": pts / best, "evals_per_s_median": pts / med}


def _sweep_twice(grid, devs, out: Path, **kw) -> dict:
    """``run_sweep`` twice (the first compiles), each to a fresh file; the second's summary and wall."""
    from nuna_jax.sweep.run import execute as run_sweep   # the summary (run_sweep returns the rows)
    import jax
    warm = out.with_name(out.stem + "_warm.csv")
    if jax.process_index() == 0:            # fresh files: an existing one would be resumed, not re-run
        for f in (warm, out):
            f.unlink(missing_ok=True)
    _sync("bench_scaling: files ready")
    t0 = time.perf_counter()
    run_sweep(grid, warm, progress=False, devices=devs, **kw)
    first = time.perf_counter() - t0
    _sync("bench_scaling: warm run done")
    t0 = time.perf_counter()
    s = run_sweep(grid, out, progress=False, devices=devs, **kw)
    wall = time.perf_counter() - t0
    return {"first_run_s": first, "wall_s": wall, "eval_s": s["eval_s"], "plan_s": s["plan_s"],
            "compile_s": s["compile_s"], "points": s["n_points"], "devices": s["devices"],
            "processes": s["processes"]}


def _closed_form_sweep(devs, n_sizes: int, out: Path) -> dict:
    from nuna_jax.sweep import grid_from_dict
    g = grid_from_dict({"sweep": {"closed_form_chunk": 1 << 16},
                        "axes": {"model": ["closed_form"], "gpus": [8],
                                 "collective": ["allgather", "reducescatter", "allreduce", "alltoall"],
                                 "size": {"start": 10**3, "stop": 10**9, "num": n_sizes, "scale": "log",
                                          "integer": True},
                                 "switch_latency_ns": {"start": 100.0, "stop": 1000.0, "num": 16}}})
    r = _sweep_twice(g, devs, out)
    r["evals_per_s_end_to_end"] = r["points"] / r["wall_s"]
    return r


def _path_sweep(devs, gpus: int, size: int, n_hw: int, out: Path) -> dict:
    from nuna_jax.sweep import grid_from_dict
    g = grid_from_dict({"sweep": {"chunk": n_hw},
                        "axes": {"model": ["path"], "gpus": [gpus], "size": [size], "policy": ["UA"],
                                 "switch_latency_ns": {"start": 100.0, "stop": 1000.0, "num": n_hw}}})
    r = _sweep_twice(g, devs, out, max_rows=1 << 30)
    r["evals_per_s"] = r["points"] / r["eval_s"]
    r["evals_per_s_end_to_end"] = r["points"] / r["wall_s"]
    r.update(gpus=gpus, size_bytes=size, hw_variants=n_hw)
    return r


def _measure(devs, sz: dict, rows_dir: Path, name: str) -> dict:
    res = {"n_devices": len(devs)}
    res["closed_form"] = _closed_form_evaluator(devs, sz["cf_sizes"], sz["cf_chunk"], sz["min_s"])
    res["closed_form_sweep"] = _closed_form_sweep(devs, sz["sweep_sizes"], rows_dir / f"closed_{name}.csv")
    res["path"] = _path_sweep(devs, sz["path_gpus"], sz["path_size"], sz["path_hw"], rows_dir / f"path_{name}.csv")
    return res


def _child(a) -> int:
    import jax
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_collectives import machine_info
    if a._role == "process":
        from nuna_jax.sweep.distributed import initialize
        initialize(f"localhost:{a._port}", a.processes, a._rank)
    devs = jax.devices()
    gpu = jax.default_backend() == "gpu"
    sz = _sizes(gpu, a.quick)
    rows_dir = Path(a.rows)
    part = {"info": machine_info(), "sizes": sz, "runs": {}}
    if a._role == "devices":
        counts = a._counts
        if max(counts) > len(devs):
            print(f"bench_scaling: --devices {max(counts)} but JAX sees {len(devs)} device(s) "
                  "(on a CPU, --emulate)", file=sys.stderr)
            return 2
        for k in counts:
            r = _measure(devs[:k], sz, rows_dir, f"k{k}")
            part["runs"][str(k)] = r
            print(f"{k} device(s): closed form {r['closed_form']['evals_per_s']:.3e} evals/s, "
                  f"path {r['path']['evals_per_s']:.1f} evals/s", flush=True)
    else:
        r = _measure(devs, sz, rows_dir, f"p{a.processes}")
        part["runs"][str(a.processes)] = r
        if jax.process_index() == 0:
            print(f"{a.processes} processes: closed form {r['closed_form']['evals_per_s']:.3e} evals/s, "
                  f"path {r['path']['evals_per_s']:.1f} evals/s", flush=True)
    if jax.process_index() == 0:
        Path(a._part).write_text(json.dumps(part, indent=1))
    if a._role == "process":
        from nuna_jax.sweep.distributed import shutdown
        shutdown()
    return 0


# ---------------------------------------------------------------------------------------------
# the launcher (no JAX)
# ---------------------------------------------------------------------------------------------
def compare_rows(a: Path, b: Path) -> bool:
    """Every column of two sweep CSV files equal (same points, same order, same values; NaN, the
    closed form's missing lower bound, equals NaN)."""
    from nuna_jax.sweep.writer import read_rows, to_columns
    import numpy as np
    ca, cb = to_columns(*read_rows(a)), to_columns(*read_rows(b))
    if set(ca) != set(cb):
        return False
    def same(x, y):
        x, y = np.asarray(x), np.asarray(y)
        return x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind == "f" and y.dtype.kind == "f")
    return all(same(ca[k], cb[k]) for k in ca)


def speedups(runs: dict, base: dict) -> dict:
    """Per run: evals/s over the 1-device run's, for the closed-form evaluator and the path sweep."""
    out = {}
    for k, r in runs.items():
        out[k] = {"closed_form": r["closed_form"]["evals_per_s"] / base["closed_form"]["evals_per_s"],
                  "closed_form_median": (r["closed_form"]["evals_per_s_median"]
                                         / base["closed_form"]["evals_per_s_median"]),
                  "path": r["path"]["evals_per_s"] / base["path"]["evals_per_s"],
                  "path_end_to_end": (r["path"]["evals_per_s_end_to_end"]
                                      / base["path"]["evals_per_s_end_to_end"]),
                  "closed_form_sweep_end_to_end": (r["closed_form_sweep"]["evals_per_s_end_to_end"]
                                                   / base["closed_form_sweep"]["evals_per_s_end_to_end"])}
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _child_args(a, role: str, part: Path, rows: Path) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--devices", str(a.devices), "--_role", role,
           "--_part", str(part), "--rows", str(rows)]
    if a.processes:
        cmd += ["--processes", str(a.processes)]
    if a.quick:
        cmd.append("--quick")
    return cmd


def _env(extra: dict) -> dict:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _parse_counts(text, n: int) -> list[int]:
    if text is None:
        return list(range(1, n + 1))
    try:
        c = sorted({int(v) for v in str(text).split(",") if v.strip()})
    except ValueError:
        raise ValueError(f"--counts must be comma-separated integers, got {text!r}") from None
    if not c or c[0] != 1 or c[-1] > n:
        raise ValueError(f"--counts must include 1 and lie in [1, --devices={n}], got {text!r}")
    return c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, required=True, help="largest device count N (1..N are measured)")
    ap.add_argument("--processes", type=int, default=None, help="also run as P jax.distributed processes, one device each")
    ap.add_argument("--counts", default=None, help="device counts to measure (default 1..N), e.g. 1,2,4,8")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--emulate", action="store_true", help="CPU: N emulated devices (checks the code, not the speed)")
    ap.add_argument("--rows", default=None, help="keep the sweeps' CSV files in this folder")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--tag", default=None, help="name tag (default: backend + device count)")
    ap.add_argument("--_role", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_part", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_port", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_counts", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        if a.devices < 1:
            raise ValueError(f"--devices must be >= 1, got {a.devices}")
        if a.processes is not None and a.processes < 2:
            raise ValueError(f"--processes must be >= 2, got {a.processes}")
        counts = _parse_counts(a.counts, a.devices)
    except ValueError as e:
        print(f"bench_scaling: {e}", file=sys.stderr)
        return 2
    if a._role:
        a._counts = [int(v) for v in a._counts.split(",")] if a._counts else counts
        return _child(a)

    with tempfile.TemporaryDirectory(prefix="bench_scaling_") as tmp:
        rows = Path(a.rows) if a.rows else Path(tmp) / "rows"
        rows.mkdir(parents=True, exist_ok=True)
        # ---- device counts 1..N: one child ------------------------------------------------------
        part = Path(tmp) / "devices.json"
        extra = ({"XLA_FLAGS": f"--xla_force_host_platform_device_count={a.devices}", "JAX_PLATFORMS": "cpu"}
                 if a.emulate else {})
        cmd = _child_args(a, "devices", part, rows) + ["--_counts", ",".join(map(str, counts))]
        r = subprocess.run(cmd, env=_env(extra), timeout=CHILD_TIMEOUT_S)
        if r.returncode != 0:
            print(f"bench_scaling: the device-count run failed (exit {r.returncode})", file=sys.stderr)
            return r.returncode if r.returncode == 2 else 1
        dev = json.loads(part.read_text())
        info = dev["info"]
        res = {"info": info, "date": info["date"], "sizes": dev["sizes"], "devices": dev["runs"],
               "speedup": speedups(dev["runs"], dev["runs"]["1"]),
               "rows_equal": {}, "targets": {"speedup_2_devices": 1.9}}
        for k in dev["runs"]:
            res["rows_equal"][f"devices_{k}"] = {w: compare_rows(rows / f"{w}_k1.csv", rows / f"{w}_k{k}.csv")
                                                  for w in ("closed", "path")}
        # ---- P processes, one device each --------------------------------------------------------
        if a.processes:
            P = a.processes
            port = _free_port()
            ppart = Path(tmp) / "processes.json"
            gpu = info["backend"] == "gpu"
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            visible = visible.split(",") if visible else [str(i) for i in range(P)]
            if gpu and len(visible) < P:
                print(f"bench_scaling: --processes {P} but only {len(visible)} GPUs are visible", file=sys.stderr)
                return 2
            procs = []
            for i in range(P):
                extra = ({"CUDA_VISIBLE_DEVICES": visible[i]} if gpu else
                         {"XLA_FLAGS": "--xla_force_host_platform_device_count=1", "JAX_PLATFORMS": "cpu"})
                cmd = _child_args(a, "process", ppart, rows) + ["--_rank", str(i), "--_port", str(port)]
                procs.append(subprocess.Popen(cmd, env=_env(extra)))
            codes = []
            t_end = time.time() + CHILD_TIMEOUT_S
            for p in procs:
                try:
                    codes.append(p.wait(timeout=max(1.0, t_end - time.time())))
                except subprocess.TimeoutExpired:
                    p.kill()
                    codes.append(-9)
            if any(codes):
                print(f"bench_scaling: the {P}-process run failed (exit codes {codes})", file=sys.stderr)
                return 1
            pr = json.loads(ppart.read_text())
            res["processes"] = pr["runs"]
            res["processes_info"] = pr["info"]
            res["speedup_processes"] = speedups(pr["runs"], dev["runs"]["1"])
            res["rows_equal"][f"processes_{P}"] = {w: compare_rows(rows / f"{w}_k1.csv", rows / f"{w}_p{P}.csv")
                                                   for w in ("closed", "path")}
    res["emulated"] = bool(a.emulate)
    _print_table(res)
    tag = a.tag or f"{info['backend']}{'_emulated' if a.emulate else ''}_{a.devices}dev"
    outdir = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"scaling_{tag}_{datetime.date.today().isoformat()}.json"
    path.write_text(json.dumps(res, indent=1))
    print(f"wrote {path}")
    return 0


def _print_table(res: dict) -> None:
    print(f"{'run':>12s} {'closed form evals/s':>20s} {'speedup':>8s} {'path evals/s':>13s} {'speedup':>8s}  rows equal")
    groups = [("devices", "speedup", "devices_{}", "{} dev")]
    if "processes" in res:
        groups.append(("processes", "speedup_processes", "processes_{}", "{} proc"))
    for key, sp, eq, label in groups:
        for k, r in res[key].items():
            e = res["rows_equal"][eq.format(k)]
            print(f"{label.format(k):>12s} {r['closed_form']['evals_per_s']:20.3e} {res[sp][k]['closed_form']:8.2f} "
                  f"{r['path']['evals_per_s']:13.1f} {res[sp][k]['path']:8.2f}  {all(e.values())}")


if __name__ == "__main__":
    sys.exit(main())
