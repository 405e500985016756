"""A sweep's simulator points over local worker processes and over every process of a
``jax.distributed`` run (docs/sweep.md "Simulator points").

A simulator point is one task: build its scenario (plan, placement, traffic:
``path_eval.traffic_for``, on the system of the first point of its traffic key, as a serial sweep
does) and run the flit simulator on the point's own system (``path_eval.simulate_ns``).  Tasks are
independent and deterministic, so where a task runs does not change its row.

* ``jobs = 1``: tasks run in this process, one after another (the serial sweep).
* ``jobs = N > 1``: this process and a pool of N - 1 worker processes
  (``concurrent.futures.ProcessPoolExecutor``, *spawn* start: JAX is multithreaded and must not
  be forked) take tasks from one queue, largest first (estimated flits); rows are written as
  tasks finish.  Workers run JAX on the CPU
  (``JAX_PLATFORMS=cpu``: N workers must not each claim the accelerator) and share compiled
  programs through JAX's persistent cache; they ignore SIGINT, which the parent handles by
  killing them (the rows written so far are whole; the points in flight are redone on resume).
* several processes (``jax.distributed``): tasks are dealt in rounds of
  ``processes x jobs x ROUND_PER_WORKER``; each process runs its share of a round (with its own
  ``jobs``), the results are all-gathered (``multihost_utils.process_allgather``, float64 times
  carried bit for bit as int32 pairs) and process 0 writes the round's rows.

Why a process pool and not Ray or Dask: the work is a flat list of independent tasks on the hosts
the run already has; every host of a ``jax.distributed`` run is already joined (and its collectives
carry the results), so a cluster engine would add a second scheduler, a second way to start hosts
and a large dependency for what ``concurrent.futures`` and one all-gather per round do.
"""

from __future__ import annotations

import numpy as np

from ..workers import WARM_TARGET, _call, _Env, _stop, _without_main, _worker_init, take_early  # noqa: F401  (light: no jax)

__all__ = ["ROUND_PER_WORKER", "share", "run_sim_tasks", "sim_task"]

#: multi-process runs: tasks per worker per round (more: fewer all-gathers, coarser resume)
ROUND_PER_WORKER = 2

#: False: with ``jobs > 1`` every task goes to the workers (tests: the rows of the workers alone)
MAIN_TAKES_TASKS = True

_CACHE: dict = {}        # a worker's traffic cache (traffic_key -> PaddedTraffic), for its lifetime



def warm_worker() -> int:
    """A worker's first task (``workers.WARM_TARGET``): import what a simulator task needs (jax,
    the scenario builder, the simulator) and load the compiled event loop on a tiny case (2 GPUs,
    20 kB All-Gather, UA), while the parent is still importing and planning."""
    import os

    from . import path_eval  # noqa: F401
    from .. import sim
    try:
        from ..presets import preset
        from ..scenario import make_scenario
        s = preset("table2", n_gpus=2)
        sim.simulate(s, make_scenario(s, collective="allgather", size_bytes=20_000, policy="ua").traffic)
    except Exception:  # noqa: BLE001  (a warm-up only: a real task reports its own errors)
        pass
    return os.getpid()


def sim_task(task, cache: dict | None = None) -> tuple:
    """``task = (index, build_system, system, point)`` -> ``(index, "ok", (time_ns, n_flows, tbs))``,
    or ``(index, "error", message)`` when the scenario cannot be built (``ValueError``)."""
    from . import path_eval
    i, build, s, pt = task
    try:
        tr = path_eval.traffic_for(build, pt, _CACHE if cache is None else cache)
        return i, "ok", (path_eval.simulate_ns(s, tr), int(tr.n_flows), int(tr.tbs_per_gpu))
    except ValueError as e:
        return i, "error", str(e)


def share(n: int, n_proc: int, proc: int) -> np.ndarray:
    """Positions ``0 .. n-1`` that process ``proc`` of ``n_proc`` runs: every ``n_proc``-th, from
    ``proc`` (tasks are sorted largest first, so each process gets large and small ones)."""
    return np.arange(proc, n, n_proc, dtype=np.int64)


class LocalRunner:
    """Runs task lists on ``jobs`` processes: this one and ``jobs - 1`` spawned workers (kept for the
    run).  This process runs tasks too, so no core idles while the workers start (importing jax and
    loading the simulator takes seconds); every worker has two tasks queued, so it never waits for
    this process to hand it the next one."""

    def __init__(self, jobs: int):
        self.jobs = int(jobs)
        self._ex = None
        self._env = None
        self._busy = False
        self._warming: list = []
        self._cache: dict = {}
        self.on_workers = 0          # results that came from a worker
        self.done_here = 0           # results of this process and its workers
        import resource
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._children0 = r.ru_utime + r.ru_stime

    def _pool(self):
        if self._ex is None:
            early = take_early(self.jobs)        # workers the command line started before its imports
            if early is not None:
                self._ex, self._env, self._warming = early
                return self._ex
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor
            self._env = _Env().__enter__()      # kept until close(): workers may start on a later submit
            self._ex = ProcessPoolExecutor(self.jobs - 1, mp_context=multiprocessing.get_context("spawn"),
                                           initializer=_worker_init)
        return self._ex

    def prestart(self) -> None:
        """Start the workers now (each imports what a task needs), so that they are ready when the
        simulator points come; a no-op with ``jobs = 1``."""
        if self.jobs > 1 and self._ex is None:
            ex = self._pool()
            if self._warming:                    # started early: already warming
                return
            with _without_main():
                self._warming = [ex.submit(_call, WARM_TARGET) for _ in range(self.jobs - 1)]

    def imap(self, tasks):
        """Results of ``tasks`` as they finish (in order when ``jobs = 1``)."""
        for r in self._imap(tasks):
            self.done_here += 1
            yield r

    def _imap(self, tasks):
        if self.jobs <= 1 or len(tasks) <= 1:
            for t in tasks:
                yield sim_task(t, self._cache)
            return
        from collections import deque
        from concurrent.futures import FIRST_COMPLETED, wait
        ex = self._pool()
        queue, inflight, got, redone = deque(tasks), {}, set(), set()
        try:
            while len(got) < len(tasks):
                with _without_main():                # workers start on these submits
                    while queue and len(inflight) < 2 * (self.jobs - 1):
                        t = queue.popleft()
                        inflight[ex.submit(sim_task, t)] = t
                for f in [f for f in inflight if f.done()]:
                    t = inflight.pop(f)
                    if t[0] not in got:
                        got.add(t[0])
                        self.on_workers += 1
                        yield f.result()
                if len(got) == len(tasks):
                    break
                if not MAIN_TAKES_TASKS:
                    if inflight:
                        wait(list(inflight), return_when=FIRST_COMPLETED)
                    continue
                if queue:                            # this process takes the next task itself
                    t = queue.popleft()
                else:       # the queue is empty: redo here a task still queued on a worker (the last
                    # handed out: the one most likely waiting behind another, or on a worker still
                    # starting); tasks are deterministic, so whichever copy ends first gives the row
                    left = [t for t in reversed(list(inflight.values())) if t[0] not in got | redone]
                    if not left:
                        wait(list(inflight), return_when=FIRST_COMPLETED)
                        continue
                    t = left[0]
                    redone.add(t[0])
                r = sim_task(t, self._cache)
                if t[0] not in got:
                    got.add(t[0])
                    yield r
        finally:   # (no Future.cancel: Python 3.11's pool sets an exception on cancelled futures when
            # its workers are killed, an InvalidStateError in its thread; a killed pool fails them all)
            self._busy = any(not f.done() for f in inflight)   # copies still running: killed at close

    def workers_cpu_s(self) -> float:
        """CPU seconds (user + system) of the workers that have ended, startup included (0 with none)."""
        import resource
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime - self._children0

    def close(self, abort: bool = False) -> None:
        if self._ex is not None:
            if abort or self._busy or any(not f.done() for f in self._warming):
                _stop(self._ex)
            else:
                self._ex.shutdown(wait=True)
            self._ex = None
        if self._env is not None:
            self._env.__exit__()
            self._env = None


def _pack(results: list, m: int) -> np.ndarray:
    """``m`` rows ``[time_ns, n_flows, tbs, status]`` (float64; status 1: error, -1: padding) as int32 pairs."""
    a = np.zeros((m, 4), np.float64)
    a[:, 3] = -1
    for k, (_, status, val) in enumerate(results):
        if status == "ok":
            a[k] = (val[0], val[1], val[2], 0)
        else:
            a[k, 3] = 1
    return a.view(np.int32)


def _unpack(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.float64)


def run_sim_tasks(tasks: list, runner: LocalRunner, emit, budget_left, describe) -> bool:
    """Run every task (``(index, build, system, point)``, largest first) and ``emit(i, time_ns,
    n_flows, tbs)`` each result (arrays); ``budget_left()`` is asked before each chunk (one result
    with one process, one round with several) and False stops early.  A scenario that cannot be
    built raises ``ValueError`` (``describe(i)`` names the point), on every process alike.
    Returns True when every task ran."""
    import jax
    n_proc, me = jax.process_count(), jax.process_index()

    def fail(i, msg):
        raise ValueError(f"{describe(i)}: {msg}")

    if n_proc == 1:
        if not tasks or not budget_left():
            return not tasks
        it = runner.imap(tasks)
        got = 0
        for i, status, val in it:
            if status != "ok":
                it.close()
                fail(i, val)
            emit(np.asarray([i], np.int64), np.asarray([val[0]]), np.asarray([val[1]], np.int64),
                 np.asarray([val[2]], np.int64))
            got += 1
            if got < len(tasks) and not budget_left():
                it.close()
                return False
        return True
    from jax.experimental import multihost_utils
    r = n_proc * max(1, runner.jobs) * ROUND_PER_WORKER
    for lo in range(0, len(tasks), r):
        if not budget_left():
            return False
        rnd = tasks[lo:lo + r]
        mine = [rnd[k] for k in share(len(rnd), n_proc, me)]
        res = {i: (i, st, v) for i, st, v in runner.imap(mine)}
        res = [res[t[0]] for t in mine]
        m = -(-len(rnd) // n_proc)
        allr = _unpack(np.asarray(multihost_utils.process_allgather(_pack(res, m))))   # [n_proc, m, 4]
        idx, t, nf, tb = [], [], [], []
        for p in range(n_proc):
            pos = share(len(rnd), n_proc, p)
            for k, j in enumerate(pos):
                row = allr[p, k]
                i = rnd[int(j)][0]
                if row[3] != 0:
                    own = [v for ii, st, v in res if ii == i and st != "ok"]
                    fail(i, own[0] if own else f"its scenario could not be built on process {p} (the message "
                                                   "is on that process's standard error)")
                idx.append(i)
                t.append(row[0])
                nf.append(int(row[1]))
                tb.append(int(row[2]))
        emit(np.asarray(idx, np.int64), np.asarray(t, np.float64), np.asarray(nf, np.int64), np.asarray(tb, np.int64))
    return True

