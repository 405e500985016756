"""``nuna-jax simulate``: run a collective through the exact flit simulator (docs/simulator.md)."""

from __future__ import annotations

import sys
import time

from .common import (add_plot_arg, add_system_args, check_plot_path, emit_json, limits_from_args, number,
                     system_from_args, system_labels, system_text, write_plot)


def add_parser(sub) -> None:
    from .common import add_scenario_args
    from .names import SIM_ENGINES as ENGINES
    p = sub.add_parser(
        "simulate", help="simulate a collective flit by flit (exact, integer ps)",
        description="Build the collective's traffic (plan -> placement -> traffic, as `place` and "
                    "`estimate` do) and run every 256 B flit through the discrete simulator: FCFS on "
                    "every mesh link, HBM stack, CU and I/O port, 700 outstanding requests per CU, "
                    "integer picoseconds. Prints the completion time and the one-way store latency "
                    "(NUNA Figure 10). A progress bar goes to stderr when it is a terminal.")
    add_system_args(p)
    add_scenario_args(p)
    p.add_argument("--engine", default="fast", choices=ENGINES,
                   help="fast (compiled event loop, default) or reference (plain Python, small cases)")
    p.add_argument("--max-time-ns", type=number(0.0, 1e15, lo_open=True, what="max_time_ns"), default=None,
                   metavar="NS", help="give up (error, exit 2) if the run has not finished by this simulated "
                                      "time, ns in (0, 1e15]")
    add_plot_arg(p, "the directed-link utilization heat map and the store-latency histogram")


def run(args) -> int:
    from .common import scenario_from_args
    from ..sim import SimulationError, simulate
    t0 = time.perf_counter()
    check_plot_path(args)
    s = system_from_args(args)
    sc = scenario_from_args(args, s, flits=True)
    if args.engine == "reference":  # plain Python: a far smaller budget than the compiled engine's
        limits_from_args(args).check("reference_flits", int(sc.traffic.total_flits), "--engine reference")
    try:
        r = simulate(sc.system, sc.traffic, engine=args.engine, max_time_ns=args.max_time_ns,
                     progress=not args.json)
    except SimulationError as e:  # no partial answer
        if args.max_time_ns is not None and "time bound" in str(e):  # the user's bound: a user error
            print(f"nuna-jax simulate: error: --max-time-ns {args.max_time_ns:g} is too small: {e}",
                  file=sys.stderr)
            return 2
        raise  # anything else (flit conservation) is a bug: the boundary shows the traceback
    from ..plots import simulation_figure
    write_plot(args, lambda: simulation_figure(sc.system, sc.traffic, r))
    d = r.summary()
    d["wall_s"] = time.perf_counter() - t0
    d["sim_wall_s"] = r.wall_s
    d.update(system_labels(args, s))
    d["scenario"] = {"collective": getattr(args, "collective", None) or getattr(args, "plan", None),
                     "size": args.size, "gpus": sc.system.n_gpus, "policy": sc.placement.policy,
                     "flows": sc.traffic.n_flows}
    desc = sc.describe()
    d["tbs_per_gpu"], d["tbs_chosen_by"] = desc["tbs_per_gpu"], desc["tbs_chosen_by"]
    if args.json:
        emit_json(d)
        return 0
    lat = d["store_latency_ns"]
    print(f"system {system_text(d)}, {sc.system.n_gpus} GPUs; {d['scenario']['collective']} {args.size}, "
          f"policy {sc.placement.policy}, {d['tbs_per_gpu']} threadblocks/GPU ({d['tbs_chosen_by']}): "
          f"{sc.traffic.n_flows} flows, {r.flits_injected} flits")
    print(f"completion_ns     {d['completion_ns']:.3f}")
    print(f"store_latency_ns  mean {lat['mean']:.1f}  p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}  "
          f"max {lat['max']:.1f}")
    print(f"flits_injected    {d['flits_injected']}")
    print(f"flits_delivered   {d['flits_delivered']}")
    print(f"flit_hops         {d['flit_hops']}  ({d['engine']}, {d['flit_hops'] / max(r.wall_s, 1e-9):.3g}"
          f" flit-hops/s)")
    print(f"wall_s            {d['wall_s']:.2f}")
    return 0
