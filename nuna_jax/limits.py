"""Work limits: the size of what a command is about to build, estimated from its inputs.

Every ``nuna-jax`` command estimates, before allocating anything, how big the
objects it will build are -- GPUs, mesh routers and CUs, threadblocks, plan
steps, traffic segments (the lowering's cost grows with the number of
*pages* moved, docs/policies.md "From a placed plan to traffic"), flits (the
simulator's cost grows with flits) and input file bytes -- and refuses with a
``WorkLimitError`` (a ``ValueError``: exit 2) naming the input and the limit
when one exceeds :data:`DEFAULT_LIMITS` times the ``--max-work`` factor.

The defaults cover every experiment of the papers: every socket is Table 2's
(or the smaller ``mono`` / ``quad`` presets); a 32x32 mesh of 4096 CUs, the
largest the limits allow, takes the path model ~70 s and 1.5 GB for an 8-GPU
1 MB All-Gather (2 cores); NUNA Figure 9 goes to 64
GPUs and 1 GB buffers (All-Reduce moves 2 * 63 * 1 GB = 126 GB = 30.8 M pages
of 4 KiB), the simulator runs 8 GPUs up to 1 GB (All-Reduce: 54.7 M flits).
``--max-work F`` multiplies every limit by ``F`` (``F < 1`` shrinks them, as the
fuzz tests do).
"""

from __future__ import annotations

import contextlib
import math

__all__ = ["DEFAULT_LIMITS", "WorkLimitError", "Limits", "generated_plan_work", "plan_work", "bytes_moved_bound",
           "active", "using", "check_generated_plan", "check_traffic_work", "MAX_NESTING_DEPTH", "nesting_depth",
           "check_nesting", "check_optimize_work", "check_e2e_work"]

#: Documented default limits (README "Limits and errors").
DEFAULT_LIMITS = {
    "gpus": 1024,                 # GPUs in the pod (--gpus, System.n_gpus, MSCCL ngpus)
    "mesh_routers": 1024,         # mesh_cols * mesh_rows (Table 2: 144)
    "cus": 16384,                 # mesh routers * cus_per_router (Table 2: 576)
    "io_ports": 1024,             # I/O ports per GPU (Table 2: 144)
    "threadblocks": 1 << 20,      # n_gpus * threadblocks per GPU
    "plan_steps": 1 << 22,        # steps of the plan (generated or MSCCL)
    "pages": 1 << 25,             # pages moved + steps: the lowering's segments (~300 B each)
    "flits": 1 << 26,             # flits simulated (simulate only; ~100 B each)
    "reference_flits": 1 << 18,   # flits simulated by the plain-Python reference engine
    "file_bytes": 1 << 24,        # one input file (TOML, MSCCL XML, ASTRA-sim YAML): 16 MiB
    "network_npus": 1 << 20,      # NPUs of an ASTRA-sim network (product over dimensions)
    "latency_combinations": 1 << 26,  # info: routers x stacks x ports x stacks (models.spread's transfer table)
    "axis_values": 1 << 20,       # sweep: values of one grid axis (a range's num, checked before expanding)
    "grid_points": 1 << 28,       # sweep: points of a whole grid (closed-form rows included)
    "model_points": 1 << 20,      # sweep: path-model and simulator points of a grid
    "static_systems": 1 << 12,    # sweep: distinct static systems a grid validates one by one
    "sim_flits": 1 << 28,         # sweep / optimize: flits simulated over all simulator runs of a command
    "search_threadblocks": 1 << 16,  # optimize: threadblocks the search places, GPUs x --tbs (64 x 1,008 = 64,512)
    "search_budget": 1 << 17,     # optimize: path-model evaluations per search (--budget; default 800)
    "search_steps": 1 << 16,      # optimize: Adam steps of the descent (--steps)
    "search_restarts": 1 << 10,   # optimize: restarts in one vmap (--seeds; default 2)
    "relaxed_elements": 1 << 26,  # optimize: restarts x threadblocks x candidates of the relaxed logits
    "e2e_configs": 1 << 22,       # e2e: configurations of one search (TP x EP x DP x PP x batches x lengths)
    "e2e_batch": 1 << 20,         # e2e: requests served at once (--batch, a config's batch)
    "e2e_seq_len": 1 << 24,       # e2e: prompt / context length in tokens (--seq-len, a config's seq_len)
}

#: Deepest nesting of arrays / tables an input TOML or JSON file may have (a system, model, e2e
#: config, grid or placement file); deeper is refused before anything walks it (not scaled by --max-work).
MAX_NESTING_DEPTH = 32


class WorkLimitError(ValueError):
    """An input asks for more work than the limits allow (exit 2)."""


class Limits:
    """The default limits scaled by a factor (``--max-work``).

    Library entry points (``plans.make_plan``, ``lowering.build_traffic``, ``scenario.make_scenario``,
    ``models.spread.nuna_spread``) take ``limits=``; without it they use :func:`active`'s.
    """

    def __init__(self, factor: float = 1.0):
        f = float(factor)
        if not math.isfinite(f) or f <= 0:
            raise ValueError(f"--max-work must be a finite number > 0, got {factor!r}")
        self.factor = f

    def limit(self, what: str) -> int:
        return max(1, int(DEFAULT_LIMITS[what] * self.factor))

    def check(self, what: str, value, source: str) -> None:
        """Raise :class:`WorkLimitError` if ``value`` (from ``source``) exceeds the limit on ``what``."""
        lim = self.limit(what)
        if value > lim:
            shown = f"{value:.3g}" if isinstance(value, float) else str(value)
            raise WorkLimitError(
                f"{source} asks for {shown} {what.replace('_', ' ')}, over the limit of {lim} "
                f"(--max-work {self.factor:g}); pass a larger --max-work to raise every limit deliberately")

    def check_system(self, system, source: str = "the system") -> None:
        """GPUs, mesh routers and CUs of a :class:`~nuna_jax.system.System`."""
        self.check("gpus", int(system.n_gpus), f"{source} (n_gpus={system.n_gpus})")
        routers = int(system.mesh_cols) * int(system.mesh_rows)
        self.check("mesh_routers", routers, f"{source} (mesh {system.mesh_cols}x{system.mesh_rows})")
        self.check("cus", routers * int(system.cus_per_router),
                   f"{source} ({routers} routers x cus_per_router={system.cus_per_router})")
        self.check("io_ports", int(system.n_io_ports), f"{source} (n_io_ports={system.n_io_ports})")

    def check_spread(self, system, source: str = "the system") -> None:
        """``info``'s zero-load spread (models.spread) tabulates every (CU router, local stack, port,
        destination stack): ``routers * stacks^2 * ports`` latencies (5.3 M for Table 2)."""
        routers = int(system.mesh_cols) * int(system.mesh_rows)
        n = routers * int(system.n_hbm_stacks) ** 2 * int(system.n_io_ports)
        self.check("latency_combinations", n,
                   f"{source} ({routers} routers x {system.n_hbm_stacks}^2 stacks x {system.n_io_ports} ports)")

    def check_file(self, path, source: str) -> None:
        """The size of an input file, before reading it (``ValueError`` if it is missing or not a file)."""
        import os
        import stat
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise ValueError(f"{source} {str(path)!r} does not exist") from None
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{source} {str(path)!r} is not a regular file")
        self.check("file_bytes", st.st_size, f"{source} {str(path)!r}")


def bytes_moved_bound(collective: str, algorithm: str, n_gpus: int, size_bytes: int) -> int:
    """Upper bound on the scale-up bytes a generated plan moves (plans.make_plan, NUNA 5.1).

    Direct: every GPU sends its ``n - 1`` peers their share of the buffer:
    ``(n - 1) * size`` in all (twice for the two-shot All-Reduce).  Ring moves
    the same except All-to-All, which forwards blocks hop by hop (at most
    ``n`` times as much).
    """
    n = int(n_gpus)
    per = (n - 1) * int(size_bytes)
    if collective == "allreduce":
        per *= 2
    if algorithm == "ring" and collective == "alltoall":
        per *= n
    return per


def generated_plan_work(collective: str, algorithm: str, n_gpus: int, tbs_per_gpu: int | None,
                        size_bytes: int) -> dict:
    """Threadblocks, plan steps and bytes of a generated plan, from its inputs only (no allocation).

    ``plans._Builder.add_streams`` gives every stream call ``max(m, T)``
    steps at most (``m`` concurrent streams, ``T`` threadblocks); direct
    makes one call per GPU and phase, ring one per GPU and round (``n - 1``
    rounds, twice for All-Reduce).
    """
    n = int(n_gpus)
    T = max(1, n - 1) if tbs_per_gpu is None else int(tbs_per_gpu)
    rounds = 1 if algorithm == "direct" else max(1, n - 1)
    if collective == "allreduce":
        rounds *= 2
    return {"threadblocks": n * T, "plan_steps": n * rounds * max(n - 1, T),
            "bytes": bytes_moved_bound(collective, algorithm, n, size_bytes)}


def plan_work(plan) -> dict:
    """Threadblocks, steps and bytes of a built :class:`~nuna_jax.plans.Plan` (exact)."""
    import numpy as np
    return {"threadblocks": int(len(plan.tb_gpu)), "plan_steps": int(len(plan.step_tb)),
            "bytes": int(np.sum(plan.nbytes, dtype=np.float64))}


def check_traffic_work(limits: Limits, work: dict, system, source: str, *, flits: bool) -> None:
    """Threadblocks, steps, pages (lowering) and, for the simulator, flits of a plan's traffic."""
    limits.check("threadblocks", work["threadblocks"], source)
    limits.check("plan_steps", work["plan_steps"], source)
    b = work["bytes"]
    pages = b / int(system.page_bytes) + 2 * work["plan_steps"]
    limits.check("pages", pages if pages > 2**62 else int(math.ceil(pages)), source)
    if flits:
        f = b / int(system.flit_bytes) + work["plan_steps"]
        limits.check("flits", f if f > 2**62 else int(math.ceil(f)), source)


_ACTIVE: list = []


def active(limits: Limits | None = None) -> Limits:
    """``limits`` if given, else the innermost :func:`using` (the command's ``--max-work``), else the defaults."""
    if limits is not None:
        return limits
    return _ACTIVE[-1] if _ACTIVE else Limits()


@contextlib.contextmanager
def using(limits: Limits):
    """Make ``limits`` the default of every library entry point inside the block (process-wide:
    the worker threads of a command see it too; a command's threads share one ``Limits``)."""
    _ACTIVE.append(limits)
    try:
        yield limits
    finally:                    # this block's own entry (threads may nest blocks at once)
        for i in range(len(_ACTIVE) - 1, -1, -1):
            if _ACTIVE[i] is limits:
                del _ACTIVE[i]
                break


def check_generated_plan(limits: Limits, collective: str, algorithm: str, n_gpus: int, tbs_per_gpu,
                         size_bytes: int, source: str) -> None:
    """GPUs, threadblocks and steps of a generated plan (plans.make_plan), from its inputs."""
    limits.check("gpus", int(n_gpus), f"{source} (n_gpus={n_gpus})")
    w = generated_plan_work(collective, algorithm, n_gpus, tbs_per_gpu, size_bytes)
    limits.check("threadblocks", w["threadblocks"], source)
    limits.check("plan_steps", w["plan_steps"], source)


def nesting_depth(obj, stop: int | None = None) -> int:
    """The deepest nesting of lists / tuples / dicts in ``obj`` (a scalar: 0), without recursion;
    stops counting past ``stop``."""
    deepest, todo = 0, [(obj, 0)]
    while todo:
        o, d = todo.pop()
        if isinstance(o, dict):
            o = list(o.values())
        elif not isinstance(o, (list, tuple)):
            continue
        d += 1
        deepest = max(deepest, d)
        if stop is not None and deepest > stop:
            return deepest
        todo.extend((x, d) for x in o if isinstance(x, (list, tuple, dict)))
    return deepest


def check_nesting(obj, source: str) -> None:
    """``ValueError`` naming ``source`` if ``obj`` (a parsed TOML / JSON document) nests deeper
    than :data:`MAX_NESTING_DEPTH`."""
    d = nesting_depth(obj, stop=MAX_NESTING_DEPTH)
    if d > MAX_NESTING_DEPTH:
        raise ValueError(f"{source}: nested more than {MAX_NESTING_DEPTH} levels deep")


def check_optimize_work(limits: Limits, *, budget: int, steps, seeds: int, n_tbs: int, n_candidates: int,
                        flits_per_run: int, n_runs: int, source: str) -> None:
    """``optimize``: the threadblocks it places, the budget, steps and restarts of the descent, its relaxed logits, and the
    simulator runs that judge the pool (each under ``simulate``'s flit limit; all of them together
    under ``sim_flits``)."""
    limits.check("search_threadblocks", int(n_tbs), f"{source} ({n_tbs} threadblocks to place)")
    limits.check("search_budget", int(budget), f"--budget {budget}")
    if steps is not None:
        limits.check("search_steps", int(steps), f"--steps {steps}")
    limits.check("search_restarts", int(seeds), f"--seeds {seeds}")
    limits.check("relaxed_elements", int(seeds) * int(n_tbs) * int(n_candidates),
                 f"--seeds {seeds} x {n_tbs} threadblocks x {n_candidates} candidates")
    limits.check("flits", int(flits_per_run), f"{source} (one simulator run)")
    limits.check("sim_flits", int(flits_per_run) * int(n_runs), f"{source} ({n_runs} simulator runs)")


def check_e2e_work(limits: Limits, *, n_configs: int, batches, seqs, source: str) -> None:
    """``e2e``: the configurations of one search and the largest batch and length."""
    if batches:
        limits.check("e2e_batch", max(int(b) for b in batches), f"{source} batch")
    if seqs:
        limits.check("e2e_seq_len", max(int(x) for x in seqs), f"{source} seq_len")
    limits.check("e2e_configs", int(n_configs), f"{source} ({n_configs} configurations)")
