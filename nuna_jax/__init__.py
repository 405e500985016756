"""nuna_jax: collective communication on multi-die GPU scale-up pods, in JAX.

Models (alpha-beta collectives, XY mesh latency, port and link contention,
the ParallelKittens kernel model), the NUNA placement (NAP) and routing (NAR)
policies, and an exact flit simulator.  See README.md, docs/model.md and
docs/api.md (the entry points below, generated from these docstrings).

The entry points a library user needs:

* systems: :func:`preset`, :func:`preset_names`, :func:`from_toml`, :func:`from_params`
  (a :class:`System`, the hardware description);
* :func:`make_scenario`: a collective on a system under a policy (plan, placement, traffic);
* :func:`estimate`: the analytical path model's time (ns) and breakdown;
* :func:`simulate`: the exact flit simulator's completion time (ns), optionally a timeline;
* :func:`optimize`: the gradient-based placement search, judged by the simulator;
* :func:`sweep`: a declarative design-space grid, jit + vmap in chunks;
* :func:`sensitivity`: d(time)/d(parameter) of every continuous hardware knob, by ``jax.grad``.

Everything loads on first use, so ``import nuna_jax`` and the command line's ``--help``
do not import jax, flax or numba.
"""

import importlib

__version__ = "0.1.0"
__all__ = ["System", "preset", "preset_names", "from_params", "from_toml", "make_scenario", "estimate",
           "simulate", "optimize", "sweep", "sensitivity", "__version__"]

# name -> submodule that defines it (loaded by module ``__getattr__`` on first use)
_LAZY = {"System": "system", "preset": "presets", "preset_names": "presets", "from_params": "presets",
         "from_toml": "presets", "sweep": "sweep.api"}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def make_scenario(system, collective=None, size="1MB", policy="nap+nar", *, tbs_per_gpu="best",
                  plan_file=None, nar_granularity=None, algorithm="direct"):
    """A collective on ``system`` under a placement/routing policy: plan, placement and traffic.

    ``collective``: ``"allgather"``, ``"reducescatter"``, ``"allreduce"`` or ``"alltoall"``
    (or give ``plan_file``, an MSCCL XML algorithm; then the GPU count comes from the file).
    ``size``: the per-GPU buffer the collective names, as in nccl-tests, in bytes (an int) or a
    string with decimal units like the paper (``"100kB"`` = 10^5 B, ``"1MB"`` = 10^6 B) or binary
    ones (``"1MiB"``).  ``policy``: ``ua``, ``ua+nar``, ``numa``, ``numa+nar``, ``nap``,
    ``nap+nar``, ``nap*`` (NUNA section 5.3).  ``tbs_per_gpu``: threadblocks per GPU, an int or
    ``"best"`` (the fastest of ``k x (n_gpus - 1)``, ``k`` in 1, 4, 16, by the path model: NUNA
    5.1's best-performing count; costs one build per candidate).  ``nar_granularity``: NAR domains
    (default: NAP policies search it, NUNA 4.1.2).  ``algorithm``: ``"direct"`` or ``"ring"``.

    Returns a :class:`nuna_jax.scenario.Scenario` (``system``, ``plan``, ``placement``,
    ``traffic``: one row per flow, sizes in bytes and 256 B flits; ``describe()`` for a summary).

    Example::

        import nuna_jax as nj
        sc = nj.make_scenario(nj.preset("table2", n_gpus=8), "allgather", "1MB", "nap+nar")
        print(sc.describe()["tbs_per_gpu"], sc.traffic.n_flows, sc.traffic.total_flits)
    """
    from .scenario import make_scenario as _make
    from .units import parse_size
    return _make(system, collective=collective, plan_file=plan_file, size_bytes=parse_size(size), policy=policy,
                 tbs_per_gpu=tbs_per_gpu, nar_granularity=nar_granularity, algorithm=algorithm)


def estimate(scenario, *, temperature_ns=None) -> dict:
    """The analytical path model's estimate of a scenario's completion time (docs/analytical.md).

    ``scenario``: from :func:`make_scenario`.  ``temperature_ns``: the log-sum-exp temperature of
    the smooth estimate, ns (default 10 ns).  Returns a dict of plain floats: ``time_ns`` (the
    estimate, ns), ``lower_bound_ns`` (ns), ``smooth_estimate_ns`` (ns, differentiable),
    ``breakdown`` (``latency_ns``, per-kind backlogs ``cu_issue_ns``, ``hbm_ns``, ``link_ns``,
    ``port_ns``, ``window_ns`` in ns; ``bottleneck`` and ``bound``: latency- or resource-bound, with
    ``utilization`` fractions; docs/analytical.md "Which term sets the estimate"), ``n_flows``,
    ``policy`` and ``tbs_per_gpu``.  Milliseconds once compiled (the first call compiles, seconds).

    Example::

        import nuna_jax as nj
        sc = nj.make_scenario(nj.preset("table2", n_gpus=8), "allgather", "1MB", "ua", tbs_per_gpu=28)
        r = nj.estimate(sc)
        print(r["time_ns"], r["breakdown"]["bottleneck"])      # ns, e.g. link
    """
    from .models.contention import evaluate
    from .models.contention.api import TEMPERATURE_NS
    r = evaluate(scenario.system, scenario.traffic,
                 TEMPERATURE_NS if temperature_ns is None else float(temperature_ns))
    r["policy"] = scenario.placement.policy
    r["tbs_per_gpu"] = int(scenario.plan.tbs_per_gpu.max(initial=0))
    return r


def simulate(scenario, *, engine="fast", max_time_ns=None, trace=None, trace_max_slices=None):
    """Run every 256 B flit of a scenario through the exact discrete simulator (docs/simulator.md).

    FCFS on every mesh link, HBM stack, CU and I/O port, the CU's outstanding-request window,
    integer picoseconds.  ``engine``: ``"fast"`` (compiled event loop) or ``"reference"`` (plain
    Python, small cases).  ``max_time_ns``: give up (:class:`nuna_jax.sim.SimulationError`) past
    this simulated time, ns.  ``trace``: a ``.json`` path: also write the run's timeline as a
    Chrome/Perfetto trace (a track per resource, a slice per run of back-to-back flits; at most
    ``trace_max_slices``, default 1,000,000; docs/plots.md); then the call returns
    ``(result, trace_info)``, ``trace_info`` saying what the file holds (``slices``, ``bytes``,
    ``truncated``, ``cut_ns``: every service starting before it is in the file, ns).

    Returns a :class:`nuna_jax.sim.SimResult`: ``completion_ns`` (ns), per-flit ``issue_ps``,
    ``deliver_ps``, ``store_ps`` (ps), ``busy_ps`` per resource (ps), ``flits_injected``,
    ``flits_delivered``, ``flit_hops``, ``loop_s`` (seconds in the event loop), ``wall_s``
    (seconds of the engine run); ``summary()`` gives the ``nuna-jax simulate`` keys
    (``store_latency_ns`` mean / p50 / p99 / max, ns).

    Example::

        import nuna_jax as nj
        sc = nj.make_scenario(nj.preset("table2", n_gpus=8), "allgather", "1MB", "nap+nar")
        r = nj.simulate(sc)
        print(r.completion_ns, r.summary()["store_latency_ns"]["p99"])   # ns, ns
        r, info = nj.simulate(sc, trace="ag.json")    # open ag.json in https://ui.perfetto.dev
    """
    from .sim import simulate as _simulate
    from .sim.trace import DEFAULT_MAX_SLICES, RECORD_PER_SLICE, check_trace_path, write_trace
    n = int(trace_max_slices or DEFAULT_MAX_SLICES)
    if trace is not None:
        check_trace_path(trace)
    r = _simulate(scenario.system, scenario.traffic, engine=engine, max_time_ns=max_time_ns,
                  trace_services=RECORD_PER_SLICE * n if trace is not None else 0)
    if trace is None:
        return r
    return r, write_trace(trace, scenario.system, scenario.traffic, r, max_slices=n,
                          meta={"policy": scenario.placement.policy, "gpus": scenario.system.n_gpus})


def optimize(scenario, *, budget=800, seed=0, baselines=True, **options) -> dict:
    """Search the threadblock and page placement of a scenario's plan (docs/optim.md).

    A score-function descent over sampled placements (or, ``estimator="straight_through"``, a
    relaxed placement descended with Optax through the smooth path model), rounded, repaired and
    improved by local search; the best few by the estimate are simulated and the fastest
    simulated one is returned, beside NAP+NAR and UA (and, with ``baselines``, random search,
    local search, annealing, no-descent and the tied local search at the same budget).
    ``tbs_per_gpu="best"`` searches the threadblock count too (NUNA 5.1's candidates);
    ``gemm_mb_per_gpu=X`` puts a concurrent 100-tile GEMM of ``X`` MB of HBM traffic per GPU
    beside every estimate and simulator run (NUNA 6.6).  ``scenario``: from
    :func:`make_scenario` (only its system and plan are used; NAP+NAR is the usual start).
    ``budget``: path-model evaluations (a value-and-grad counts 2 x candidates); ``seed``: the
    random seed; ``options``: :func:`nuna_jax.optim.driver.optimize`'s keywords (``steps``,
    ``seeds``, ``n_candidates``, ``estimator``, ``tbs_per_gpu``, ``gemm_mb_per_gpu``, ...).

    Returns a dict: ``placement`` (a :class:`nuna_jax.placement.Placement`), ``estimate_ns`` (the
    path model's estimate of that placement, ns; ``rounded_estimate_ns`` is the same number),
    ``simulated_ns`` (ns), ``nap_nar_simulated_ns``, ``ua_simulated_ns`` (ns),
    ``speedup_vs_nap_nar``, ``speedup_vs_ua`` (ratios), ``relaxed_ns`` (the relaxed optimum, ns),
    ``source``, ``baselines``, ``budget``, ``wall_s`` (s), ``timing_s``.  Tens of seconds.

    Example::

        import nuna_jax as nj
        sc = nj.make_scenario(nj.preset("table2", n_gpus=8), "allgather", "1MB", "nap+nar")
        r = nj.optimize(sc, budget=800)
        print(r["simulated_ns"], r["speedup_vs_nap_nar"])    # ns, ratio
    """
    from .optim.driver import optimize as _optimize
    return _optimize(scenario.system, scenario.plan, budget=budget, seed=seed, baselines=baselines, **options)


def sensitivity(scenario) -> dict:
    """Which hardware knob buys the most time: d(time)/d(parameter) by ``jax.grad`` through the
    path model, for every continuous ``System`` field, the scenario's traffic fixed.

    Returns ``time_ns`` (the estimate, ns) and ``rows`` ranked by ``|elasticity|``: ``field``,
    ``value`` (in the field's unit: ns, bytes/ns, GHz, cycles, ...), ``d_time_ns_per_unit`` (ns
    per unit of the field), ``elasticity`` (relative change of time per relative change of the
    field: -0.3 means +1 % of it makes the collective 0.3 % faster), ``ns_per_1pct`` (ns gained or
    lost per +1 %), ``placement_fixed``.

    Example::

        import nuna_jax as nj
        sc = nj.make_scenario(nj.preset("table2", n_gpus=8), "allgather", "1MB", "ua", tbs_per_gpu=28)
        for row in nj.sensitivity(sc)["rows"][:3]:
            print(row["field"], row["elasticity"])
    """
    from .sweep.sensitivity import sensitivity as _sensitivity
    return _sensitivity(scenario.system, scenario.traffic)
