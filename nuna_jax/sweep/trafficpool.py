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


class _shared_xla:
    """Where the caller keeps no XLA compilation cache (``NUNA_JAX_CACHE_DIR=""``), the workers of one
    run share one in ``tmp`` (empty at the start, removed at the end): a program one worker compiled
    is loaded, not compiled again, by the others (the same executable, the same numbers)."""

    def __init__(self, tmp: str):
        self.want = {}
        if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
            self.want = {"JAX_COMPILATION_CACHE_DIR": tmp, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}

    def __enter__(self):
        self.old = {k: os.environ.get(k) for k in self.want}
        os.environ.update(self.want)
        return self

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def build_all(tasks: list, jobs: int) -> dict:
    """Build every task ``(key_no, system, point)``; ``{key_no: ("ok", PaddedTraffic) or ("error",
    exception)}``.  ``jobs = 1``: here, in order; else on ``jobs`` spawned workers, largest first."""
    if jobs <= 1 or len(tasks) <= 1:
        return {k: (st, v) for k, st, v in (build_task(t) for t in tasks)}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    import tempfile
    order = sorted(tasks, key=lambda t: -work_of(t[1], t[2]))
    out: dict = {}
    with simpool._Env(), tempfile.TemporaryDirectory(prefix="nuna_jax_build_xla_") as tmp, _shared_xla(tmp):
        ex = ProcessPoolExecutor(min(int(jobs), len(tasks)), mp_context=multiprocessing.get_context("spawn"),
                                 initializer=simpool._worker_init)
        ok = False
        try:
            with simpool._without_main():         # workers start on these submits
                futs = [ex.submit(build_task, t) for t in order]
            for f in as_completed(futs):
                k, st, v = f.result()
                out[k] = (st, v)
            ok = True
        finally:
            if ok:
                ex.shutdown(wait=True)
            else:                                 # an error or ^C: the workers are killed, not waited for
                simpool._stop(ex)
    return out
