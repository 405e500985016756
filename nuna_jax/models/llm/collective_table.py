"""Collective times for the end-to-end model: the ONE place that calls the NUNA collective model.

NUNA section 5.2 times each collective of an inference step with the NoC and
scale-up network model.  Here every distinct (collective, group size, policy)
is timed by ``models.contention.evaluate`` over a log-spaced grid of per-GPU
buffer sizes (nccl-tests convention, ``nuna_jax.plans``) and the search
interpolates in log-log (:func:`interp_time_ns`, jit/vmap-able).  A
collective among ``n`` GPUs of a larger pod is timed on an ``n``-GPU pod of
the same sockets (the single-level Clos switch of Table 2 isolates groups).

The Table 2 table ships as data (``data/table2_collectives.json``); rebuild it
in one command (``--jobs`` processes in parallel)::

    python -m nuna_jax.models.llm.collective_table --system table2 --jobs 2

Another ``--system`` is tabled on the fly for the group sizes a call needs
(:func:`load_table`, progress bar on stderr) and cached on disk.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["KINDS", "POLICIES", "GROUP_SIZES", "SIZE_GRID_BYTES", "time_collective_ns", "build_table",
           "load_table", "interp_time_ns", "DATA_DIR"]

KINDS = ("allreduce", "alltoall", "allgather")      # what an inference step issues (layers.py)
POLICIES = ("ua", "nap+nar")                        # NUNA section 5.3 baseline and full scheme
GROUP_SIZES = (2, 4, 8, 16, 32, 64)                 # NUNA section 6.7: 2-64 GPUs
SIZE_GRID_BYTES = tuple(int(round(10 ** (3 + k / 2))) // 2 * 2 for k in range(12))   # 1 kB .. ~316 MB
TBS_MULTIPLES = (1, 4, 16)      # threadblocks per GPU = m * (n - 1): 7, 28, 112 on 8 GPUs (as experiments/fig12)
DATA_DIR = Path(__file__).resolve().parent / "data"
_SHIPPED = {"table2": DATA_DIR / "table2_collectives.json"}


def time_collective_ns(system, kind: str, n_gpus: int, size_bytes: int, policy: str,
                       tbs_per_gpu: int | None = None) -> float:
    """Estimated time (ns) of one collective by the library's NUNA path model (direct algorithm)."""
    from ...models.contention import evaluate
    from ...scenario import make_scenario
    s = system.replace(n_gpus=int(n_gpus))
    sc = make_scenario(s, collective=kind, size_bytes=int(size_bytes), policy=policy, tbs_per_gpu=tbs_per_gpu)
    return float(evaluate(s, sc.traffic)["time_ns"])


def best_time_ns(system, kind: str, n_gpus: int, size_bytes: int, policy: str) -> tuple[float, int]:
    """NUNA 5.1: "the best-performing number of threadblocks": the fastest of ``TBS_MULTIPLES``
    (a count that cannot be placed is skipped).  Returns (time_ns, threadblocks per GPU)."""
    best = (float("inf"), 0)
    for m in TBS_MULTIPLES:
        tbs = m * (int(n_gpus) - 1)
        try:
            t = time_collective_ns(system, kind, n_gpus, size_bytes, policy, tbs)
        except ValueError:           # more threadblocks than the CUs hold
            continue
        best = min(best, (t, tbs))
    return best


def _job(args):
    system, kind, n, size, policy = args
    t0 = time.time()
    t, tbs = best_time_ns(system, kind, n, size, policy)
    return (kind, n, size, policy, t, tbs, time.time() - t0)


def build_table(system, *, groups=GROUP_SIZES, sizes=SIZE_GRID_BYTES, jobs: int = 1,
                progress: bool = True) -> dict:
    """Time every (kind, policy, group, size) on ``system`` (a System); the JSON-ready table."""
    tasks = [(system, k, n, sz, p) for k in KINDS for p in POLICIES for n in groups for sz in sizes]
    tasks.sort(key=lambda t: -t[2] * t[3])          # big ones first: better load balance
    times, tbs = {}, {}
    t0 = time.time()

    def note(r, i):
        times[r[:4]] = r[4]
        tbs[r[:4]] = r[5]
        if progress:
            done = int(30 * i / len(tasks))
            print(f"\r  collective table [{'#' * done}{'.' * (30 - done)}] {i}/{len(tasks)} "
                  f"({time.time() - t0:.0f} s)", end="", file=sys.stderr, flush=True)

    if jobs > 1:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(jobs) as pool:
            for i, r in enumerate(pool.imap_unordered(_job, tasks), 1):
                note(r, i)
    else:
        for i, t in enumerate(tasks, 1):
            note(_job(t), i)
    if progress:
        print(file=sys.stderr)
    arr = [[[[times[(k, n, sz, p)] for sz in sizes] for n in groups] for p in POLICIES] for k in KINDS]
    tb = [[[[tbs[(k, n, sz, p)] for sz in sizes] for n in groups] for p in POLICIES] for k in KINDS]
    return {"system": system.name, "system_summary": system.summary(), "kinds": list(KINDS),
            "policies": list(POLICIES), "groups": list(groups), "sizes_bytes": list(sizes), "time_ns": arr,
            "tbs_per_gpu": tb, "tbs_multiples": list(TBS_MULTIPLES),
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "build_wall_s": time.time() - t0,
            "command": f"python -m nuna_jax.models.llm.collective_table --system {system.name}"}


def _key(system) -> str:
    import hashlib
    summ = {k: v for k, v in system.summary().items() if k not in ("name", "n_gpus")}
    blob = json.dumps([summ, KINDS, POLICIES, SIZE_GRID_BYTES, TBS_MULTIPLES], sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def cache_dir() -> Path:
    import os
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nuna_jax" / "e2e_tables"


def load_table(system, groups=None, jobs: int = 1, progress: bool = True) -> dict:
    """The collective table of ``system`` (a System, or a preset name) covering ``groups``.

    Table 2: the shipped data.  Any other system: a cached table
    (``$XDG_CACHE_HOME/nuna_jax/e2e_tables``) or one built now (progress bar on
    stderr; ~15 s per entry per process on a 2-core CPU, so pass ``jobs``).
    """
    if isinstance(system, str):
        from ...presets import load_system
        system = load_system(system)
    groups = tuple(sorted(groups)) if groups else GROUP_SIZES
    key = _key(system)
    shipped = _SHIPPED["table2"]
    from ...presets import preset
    cands = [shipped] if key == _key(preset("table2")) else []
    cands.append(cache_dir() / f"{system.name}_{key}.json")
    d = None
    for path in cands:
        if path.is_file():
            got = json.loads(path.read_text())
            if set(groups) <= set(got["groups"]):
                d = got
                break
    if d is None:
        if progress:
            print(f"nuna-jax e2e: timing collectives for system {system.name!r} on groups of "
                  f"{', '.join(map(str, groups))} GPUs ({len(KINDS) * len(POLICIES) * len(groups) * len(SIZE_GRID_BYTES)}"
                  f" entries, {len(TBS_MULTIPLES)} runs each; cached afterwards)", file=sys.stderr)
        d = build_table(system, groups=groups, jobs=jobs, progress=progress)
        try:
            cands[-1].parent.mkdir(parents=True, exist_ok=True)
            cands[-1].write_text(json.dumps(d))
        except OSError:
            pass
    d = dict(d)
    d["time_ns"] = np.asarray(d["time_ns"], dtype=np.float64)
    return d


def interp_time_ns(log_sizes, log_times, size_bytes):
    """Log-log interpolation of one (kind, policy, group) row at ``size_bytes`` (jnp, vmap-able).

    Below the grid: the smallest size's time (latency-bound).  Above it: the
    last segment's slope, at least 1 (bandwidth-bound: time grows with bytes).
    Size 0 means "no collective" and gives 0.
    """
    import jax.numpy as jnp
    x = jnp.log(jnp.maximum(size_bytes, 1.0))
    y = jnp.interp(x, log_sizes, log_times)
    slope = jnp.maximum((log_times[-1] - log_times[-2]) / (log_sizes[-1] - log_sizes[-2]), 1.0)
    y = jnp.where(x > log_sizes[-1], log_times[-1] + slope * (x - log_sizes[-1]), y)
    return jnp.where(size_bytes > 0, jnp.exp(y), 0.0)


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(description="Build the collective time table for `nuna-jax e2e`.")
    p.add_argument("--system", default="table2")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", default=None, help="output JSON (default: the shipped data file for table2)")
    a = p.parse_args(argv)
    from ...presets import load_system
    out = Path(a.out) if a.out else _SHIPPED.get(a.system.lower(), Path(f"{a.system}_collectives.json"))
    d = build_table(load_system(a.system), jobs=a.jobs)
    out.write_text(json.dumps(d, indent=1))
    print(f"wrote {out} ({d['build_wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
