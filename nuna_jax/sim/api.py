"""``simulate``: the one entry point of the exact flit simulator."""

from __future__ import annotations

from ..system import System
from ..traffic import Traffic
from .credit_kernel import run_credit_fast
from .fast import run_fast
from .flow_control import flow_control as make_flow_control
from .program import compile_program
from .reference import run_reference
from .reference_credit import run_reference_credit
from .result import SimResult

__all__ = ["simulate", "simulate_batch", "ENGINES"]

ENGINES = ("fast", "reference")


def simulate(system: System, traffic: Traffic, *, background=None, engine: str = "fast",
             max_time_ns: float | None = None, progress: bool = False,
             stop_after_traffic: bool = False, trace_services: int = 0, flow_control=None) -> SimResult:
    """Simulate every flit of ``traffic`` (and optional on-chip ``background`` flows) exactly.

    Semantics: docs/model.md ("The path of a flit", "Issue and the
    outstanding-request window", "Completion time") and docs/simulator.md.
    ``engine``: ``"fast"`` (compiled event loop; numba if installed, else
    the same loop in plain Python) or ``"reference"`` (plain heapq loop).
    ``max_time_ns``: bound on simulated time; a run that cannot finish by
    then raises :class:`SimulationError` (as does a lost flit).
    ``progress``: a text progress bar on stderr when it is a terminal.
    ``stop_after_traffic`` (fast engine): end at the last traffic delivery,
    leaving background flows unfinished (``result.background_complete`` is
    False); the traffic's timing is unaffected.
    ``trace_services``: record up to that many resource services for a timeline
    (``result.trace``; :func:`nuna_jax.sim.trace.write_trace` writes it as a Perfetto trace).

    ``flow_control``: None or ``"none"`` (unbounded FCFS queues, docs/model.md), ``"credit"``
    or a :class:`nuna_jax.sim.flow_control.FlowControl` (finite buffers, credits;
    docs/simulator.md, "Credit flow control"); credit mode takes neither ``stop_after_traffic``
    nor ``trace_services``.

    Times (s): ``result.loop_s`` is the event loop alone, ``result.wall_s`` the engine run;
    neither counts building the integer program (:func:`compile_program`, done here first).

    Example (an 8-GPU All-Gather of 1 MB under NAP+NAR, NUNA section 6)::

        from nuna_jax import preset, make_scenario, simulate
        sc = make_scenario(preset("table2", n_gpus=8), collective="allgather",
                           size_bytes=10**6, policy="nap+nar")
        r = simulate(sc.system, sc.traffic)
        print(r.completion_ns, r.summary()["store_latency_ns"]["p99"])   # ns
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if max_time_ns is not None and not max_time_ns > 0:
        raise ValueError(f"max_time_ns must be > 0, got {max_time_ns!r}")
    bound = None if max_time_ns is None else int(round(max_time_ns * 1000))
    fc = make_flow_control(flow_control)
    if fc.credit:
        if stop_after_traffic or trace_services:
            raise ValueError("credit flow control takes neither stop_after_traffic nor trace_services")
        if engine == "reference":
            return run_reference_credit(system, traffic, background, fc, max_time_ps=bound)
        return run_credit_fast(compile_program(system, traffic, background), system, fc, max_time_ps=bound)
    if engine == "reference":
        if stop_after_traffic:
            raise ValueError("stop_after_traffic is a fast-engine option")
        return run_reference(system, traffic, background, max_time_ps=bound, trace_services=trace_services)
    prog = compile_program(system, traffic, background)
    return run_fast(prog, max_time_ps=bound, progress=progress, stop_after_traffic=stop_after_traffic,
                    trace_services=trace_services)


def simulate_batch(system: System, traffics, *, backgrounds=None, threads: int | None = None,
                   max_time_ns: float | None = None, stop_after_traffic: bool = False) -> list[SimResult]:
    """Simulate several candidate traffics (e.g. placements) in one call, in parallel threads.

    Each candidate is compiled, then run by the fast engine; the compiled
    event loop releases the GIL (numba ``nogil``), so ``threads`` candidates
    run at once on as many cores (default: ``os.cpu_count()``).  Results are
    in input order and identical to one :func:`simulate` call per candidate.
    """
    import os
    from concurrent.futures import ThreadPoolExecutor

    traffics = list(traffics)
    bgs = [None] * len(traffics) if backgrounds is None else list(backgrounds)
    if len(bgs) != len(traffics):
        raise ValueError("backgrounds must match traffics one to one")
    if max_time_ns is not None and not max_time_ns > 0:
        raise ValueError(f"max_time_ns must be > 0, got {max_time_ns!r}")
    bound = None if max_time_ns is None else int(round(max_time_ns * 1000))
    progs = [compile_program(system, t, b) for t, b in zip(traffics, bgs)]   # JAX/numpy: serial
    n = max(1, min(len(progs), threads or os.cpu_count() or 1))
    run = lambda p: run_fast(p, max_time_ps=bound, stop_after_traffic=stop_after_traffic)  # noqa: E731
    if n == 1:
        return [run(p) for p in progs]
    with ThreadPoolExecutor(max_workers=n) as ex:
        return list(ex.map(run, progs))
