"""A sweep's path-model traffic built over local worker processes (``build_jobs``).

Building a path point's traffic (plan -> placement -> NAP's granularity search -> lowering,
``path_eval.traffic_for``) is host work: numpy, the compiled Algorithm 1 loop and, for the NAP
policies, the path model's estimate of every granularity candidate.  The distinct traffics of a
grid are independent, so they can be built side by side:

* ``build_jobs = 1`` (the default): one after another in this process (the serial sweep).
* ``build_jobs = N > 1``: N spawned worker processes (``concurrent.futures.ProcessPoolExecutor``,
  the environment, start and SIGINT handling of ``sweep.simpool``: *spawn*, ``JAX_PLATFORMS=cpu``)
  build every traffic, largest first (:func:`work_of`); this process only waits and collects.

Where the traffic is built does not change it on a CPU host (every build runs the same numpy and
the same CPU XLA programs).  On an accelerator host the workers still run JAX on the host CPU, so
NAP's granularity search estimates its candidates with the CPU's path model instead of the
accelerator's: a candidate whose estimate is within float32 rounding of the best may be chosen
differently from a one-process run on the accelerator (the placements and traffics are those of a
run on the CPU).  Every build of one run runs on the CPU, so two runs with ``build_jobs > 1`` give
the same traffic whichever worker builds which point.
"""

from __future__ import annotations

import os

from . import simpool
from ..workers import set_environ

__all__ = ["build_task", "build_all", "work_of"]


def build_task(task) -> tuple:
    """``task = (key_no, system, point)`` -> ``(key_no, "ok", PaddedTraffic)`` or ``(key_no, "error",
    exception)`` when the scenario cannot be built (``ValueError``, e.g. more threadblocks than the CUs
    hold; re-raised where the traffic is filed, as a serial build would raise it)."""
    from . import path_eval
    k, s, pt = task
    try:
        return k, "ok", path_eval.traffic_for(s, pt, {})
    except ValueError as e:
        return k, "error", _picklable(e)


def _picklable(e: Exception) -> Exception:
    import pickle
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:   # an exception class whose constructor does not take its message back
        return ValueError(str(e))


def work_of(s, pt) -> float:
    """A rough cost of building a point's traffic (scheduling only, largest first): the plan's steps
    (``limits.generated_plan_work``), times the granularity candidates NAP's search builds."""
    from ..limits import generated_plan_work
    from ..nar import max_useful_granularity
    from ..placement import canonical_policy, policy_parts
    w = generated_plan_work(pt["collective"], pt["algorithm"], int(s.n_gpus), pt["tbs_per_gpu"], int(pt["size"]))
    cost = float(w["plan_steps"]) + float(w["bytes"]) / float(s.page_bytes)
    if policy_parts(canonical_policy(pt["policy"]))[0] == "nap" and pt["nar_granularity"] is None:
        cost *= min(max_useful_granularity(s), int(s.n_io_ports))
    return cost


#: the JAX platform of the build workers: "cpu" (the default, as ``sweep.simpool``'s workers), or, set
#: from the environment variable ``NUNA_JAX_BUILD_PLATFORM`` (benchmarks: ``profile_fig9.py
#: --build-platform``), "gpu": every worker opens the accelerator too (no preallocation), so NAP's
#: searches estimate on it as a one-process run does (several contexts on one device; experimental)
def build_platform() -> str:
    return os.environ.get("NUNA_JAX_BUILD_PLATFORM", "cpu").strip().lower() or "cpu"


class _platform:
    """Workers' JAX platform (:func:`build_platform`); inside ``simpool._Env`` (which sets the CPU):
    "gpu" unsets ``JAX_PLATFORMS`` (JAX's own choice, the accelerator first) and preallocation."""

    def __enter__(self):
        p = build_platform()
        self.want = {} if p == "cpu" else {"JAX_PLATFORMS": None, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        self.old = set_environ(self.want)
        return self

    def __exit__(self, *exc):
        set_environ(self.old)


#: glibc's allocator in the build workers (set where the caller set none of them): one arena, no
#: ``mmap`` per large block and no trimming, so the memory an estimate or a lowering frees is reused
#: by the next one instead of being returned to the kernel and faulted in (zeroed) again.  On the VMs
#: measured a fault costs much more than on bare metal: the 64-GPU 64 MB 1,008-threadblock estimate
#: (12.6 M rows) took 2.0-3.0 CPU s of system time and 1.09 M page faults a call, 0.10-0.14 s and
#: 12-25 k faults with these (2-core VM, load 6-7; user time unchanged, 3.6-3.8 s).  A worker then
#: holds its peak memory until the pool ends (each worker exits at the end of ``build_all``).
MALLOC_ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 46)}


class _malloc:
    """:data:`MALLOC_ENV` for the workers spawned inside (none of it where the caller set any)."""

    def __enter__(self):
        self.want = {} if any(k in os.environ for k in MALLOC_ENV) else dict(MALLOC_ENV)
        self.old = set_environ(self.want)
        return self

    def __exit__(self, *exc):
        set_environ(self.old)


class _shared_xla:
    """Where the caller keeps no XLA compilation cache (``NUNA_JAX_CACHE_DIR=""``), the workers of one
    run share one in ``tmp`` (empty at the start, removed at the end): a program one worker compiled
    is loaded, not compiled again, by the others (the same executable, the same numbers)."""

    def __init__(self, tmp: str):
        self.want = {}
        if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
            self.want = {"JAX_COMPILATION_CACHE_DIR": tmp, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}

    def __enter__(self):
        self.old = set_environ(self.want)
        return self

    def __exit__(self, *exc):
        set_environ(self.old)


def nap_granularities(s) -> range:
    """The granularities NAP's search tries on ``s`` (``scenario.search_nar_granularity``: 1 ..
    ``min(max_useful_granularity, n_io_ports)``; tests/test_sweep_build.py checks the split search
    against it)."""
    from ..nar import max_useful_granularity
    return range(1, min(max_useful_granularity(s), int(s.n_io_ports)) + 1)


def searches_granularity(pt) -> bool:
    """Whether the point's scenario runs NAP's granularity search (a NAP policy, no forced granularity;
    the sweep builds with the default ``PolicyOptions``, ``nap_granularity="search"``)."""
    from ..placement import canonical_policy, policy_parts
    return pt["nar_granularity"] is None and policy_parts(canonical_policy(pt["policy"]))[0] == "nap"


def nap_candidate(task) -> tuple:
    """One granularity of NAP's search, ``task = (key_no, system, point, g)`` -> ``(key_no, g, "ok",
    estimate_ns)`` or ``(key_no, g, "error", exception)``: the scenario at granularity ``g``
    (``make_scenario(nar_granularity=g)``: the placement and traffic the search builds for ``g``) and its
    path-model estimate alone (``models.contention.estimate_many`` of the one table)."""
    from ..models.contention import estimate_many
    from ..scenario import make_scenario
    k, s, pt, g = task
    try:
        sc = make_scenario(s, collective=pt["collective"], size_bytes=int(pt["size"]), policy=pt["policy"],
                           tbs_per_gpu=pt["tbs_per_gpu"], nar_granularity=int(g), algorithm=pt["algorithm"])
        return k, g, "ok", float(estimate_many(s, [sc.traffic])[0])
    except ValueError as e:
        return k, g, "error", _picklable(e)


def _run(kind, task):
    return (kind, build_task(task)) if kind == "full" else (kind, nap_candidate(task))


def build_all(tasks: list, jobs: int, split_nap: bool = True) -> dict:
    """Build every task ``(key_no, system, point)``; ``{key_no: ("ok", PaddedTraffic) or ("error",
    exception)}``.  ``jobs = 1``: here, in order; else on ``jobs`` spawned workers, largest first.

    ``split_nap`` (workers only): a point whose scenario searches NAP's granularity is split into one
    task per granularity (:func:`nap_candidate`), so that one large search does not hold the run: the
    fastest (ties: the smaller granularity, as the search) is then built again as a task of its own
    with that granularity, before any task still waiting.  Each candidate is estimated alone (padded to
    its own row bucket), where the search estimates the candidates together (padded to the longest's):
    on a CPU zero rows change no estimate (48 of 48 candidates bit-identical, 2 and 8 GPUs, 100 kB -
    10 MB, LEAD_NOTES of the fig9 branch), so the choice is the search's."""
    if jobs <= 1 or len(tasks) <= 1:
        return {k: (st, v) for k, st, v in (build_task(t) for t in tasks)}
    import multiprocessing
    import tempfile
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    queue = []                        # (priority, kind, task); lower first
    cands: dict = {}                  # key_no -> [system, point, candidates left, {g: estimate}, {g: error}]
    for t in tasks:
        k, s, pt = t
        w = work_of(s, pt)
        if split_nap and searches_granularity(pt):
            gs = nap_granularities(s)
            cands[k] = [s, pt, len(gs), {}, {}]
            queue.extend((-w / len(gs), "cand", (k, s, pt, g)) for g in gs)
        else:
            queue.append((-w, "full", t))
    queue.sort(key=lambda q: q[0])
    out: dict = {}
    n_proc = min(int(jobs), len(queue))
    with simpool._Env(), _platform(), _malloc(), tempfile.TemporaryDirectory(prefix="nuna_jax_build_xla_") as tmp, \
            _shared_xla(tmp):
        ex = ProcessPoolExecutor(n_proc, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=simpool._worker_init)
        ok = False
        try:
            inflight: set = set()
            while queue or inflight:
                with simpool._without_main():     # workers start on these submits
                    while queue and len(inflight) < n_proc + 2:   # a short queue: late tasks go first
                        _, kind, task = queue.pop(0)
                        inflight.add(ex.submit(_run, kind, task))
                done, inflight = wait(inflight, return_when=FIRST_COMPLETED)
                for f in done:
                    kind, r = f.result()
                    if kind == "full":
                        k, st, v = r
                        out[k] = (st, v)
                        continue
                    k, g, st, v = r
                    c = cands[k]
                    (c[3] if st == "ok" else c[4])[g] = v
                    c[2] -= 1
                    if c[2] == 0:
                        if c[4]:                  # the search raises at its first failing granularity
                            out[k] = ("error", c[4][min(c[4])])
                        else:
                            g_best = min(c[3], key=lambda gg: (c[3][gg], gg))
                            queue.insert(0, (0.0, "full", (k, c[0], dict(c[1], nar_granularity=g_best))))
            ok = True
        finally:
            if ok:
                ex.shutdown(wait=True)
            else:                                 # an error or ^C: the workers are killed, not waited for
                simpool._stop(ex)
    return out
