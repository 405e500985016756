"""``nuna-jax simulate``: run a collective through the exact flit simulator (docs/simulator.md)."""

from __future__ import annotations

import os
import sys
import time

from .common import (add_plot_arg, add_system_args, check_plot_path, emit_json, format_size, limits_from_args, number,
                     padding_text, system_from_args, system_labels, system_text, write_plot)


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
    p.add_argument("--trace", default=None, metavar="FILE.json",
                   help="also write the run's timeline as Chrome/Perfetto trace-event JSON: a track per CU, "
                        "HBM stack, mesh link and I/O port of each GPU, a slice per run of back-to-back "
                        "flits (open it in https://ui.perfetto.dev; docs/plots.md)")
    fc = p.add_argument_group("flow control (docs/simulator.md, \"Credit flow control\")")
    fc.add_argument("--flow-control", default="none", choices=("none", "credit"),
                    help="none: unbounded FCFS queues (default, the model of docs/model.md); credit: finite "
                         "router, port and injection buffers with credit flow control")
    for flag, what, hi, dflt in (("--num-vcs", "virtual channels per router input port and class", 64, 2),
                                 ("--vc-buf-flits", "depth of one virtual channel, flits", 1 << 20, 8),
                                 ("--port-buf-flits", "depth of an I/O port's FIFO, flits", 1 << 20, 16),
                                 ("--inj-buf-flits", "depth of a CU's injection buffer, flits", 1 << 20, 8),
                                 ("--credit-delay", "cycles for a credit to reach the sender", 1 << 20, 1)):
        lo = 0 if flag == "--credit-delay" else 1
        fc.add_argument(flag, type=number(lo, hi, integer=True, what=flag[2:].replace("-", "_")), default=None,
                        metavar="N", help=f"credit mode: {what}, integer in [{lo}, {hi}] (default {dflt})")
    fc.add_argument("--router-cycles", type=_router_cycles, default=None, metavar="R,VA,SA,ST,L",
                    help="credit mode: routing, VC allocation, switch allocation, switch traversal and link "
                         "cycles of a mesh hop, whose sum replaces the system's hop_cycles (default: hop_cycles)")
    p.add_argument("--trace-max-slices", type=number(1, 1e8, integer=True, what="trace_max_slices"),
                   default=None, metavar="N",
                   help="bound on the trace's slices (default 1,000,000, about 140 MB); past it the trace keeps "
                        "the slices that start before a cut time and says so")


def _router_cycles(text: str) -> tuple:
    import argparse
    try:
        vals = tuple(int(x) for x in text.split(","))
    except ValueError:
        vals = ()
    if len(vals) != 5 or not all(0 <= v <= 1000 for v in vals):
        raise argparse.ArgumentTypeError(f"router_cycles must be 5 integers in [0, 1000], comma separated: {text!r}")
    return vals


def flow_control_from_args(args):
    """The :class:`nuna_jax.sim.flow_control.FlowControl` of the command line (``ValueError`` when a credit
    setting is given without ``--flow-control credit``)."""
    from ..sim.flow_control import flow_control
    opts = {"num_vcs": args.num_vcs, "vc_buf_flits": args.vc_buf_flits, "port_buf_flits": args.port_buf_flits,
            "inj_buf_flits": args.inj_buf_flits, "credit_delay_cycles": args.credit_delay,
            "router_cycles": args.router_cycles}
    given = [k for k, v in opts.items() if v is not None]
    if args.flow_control != "credit" and given:
        raise ValueError(f"{', '.join(given)} need --flow-control credit")
    return flow_control(args.flow_control, **opts)


def process_age_s() -> float | None:
    """Seconds since this process started (interpreter start-up and imports included), from
    ``/proc`` on Linux; None elsewhere."""
    try:
        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as fh:
            up = float(fh.read().split()[0])
        return max(up - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def run(args) -> int:
    from .common import scenario_from_args
    from ..sim import SimulationError, simulate
    t0 = time.perf_counter()
    check_plot_path(args)
    max_slices = None
    if args.trace:                       # the output path is checked before any work
        from ..sim.trace import DEFAULT_MAX_SLICES, check_trace_path
        check_trace_path(args.trace)
        max_slices = int(args.trace_max_slices or DEFAULT_MAX_SLICES)
    elif args.trace_max_slices is not None:
        raise ValueError("--trace-max-slices needs --trace FILE.json")
    fc = flow_control_from_args(args)
    if fc.credit and args.trace:
        raise ValueError("--trace is not available with --flow-control credit")
    s = system_from_args(args)
    from ..progress import Stages
    with Stages("simulate", enabled=not args.json) as stages, stages.stage("planning", 1, "scenarios") as st:
        sc = scenario_from_args(args, s, flits=True)    # the simulator's own bar follows (flits, ETA)
        st.advance()
    t_scenario = time.perf_counter() - t0
    if args.engine == "reference":  # plain Python: a far smaller budget than the compiled engine's
        limits_from_args(args).check("reference_flits", int(sc.traffic.total_flits), "--engine reference")
    from ..sim.trace import RECORD_PER_SLICE
    t1 = time.perf_counter()
    try:
        r = simulate(sc.system, sc.traffic, engine=args.engine, max_time_ns=args.max_time_ns,
                     progress=not args.json,
                     trace_services=RECORD_PER_SLICE * max_slices if max_slices else 0, flow_control=fc)
    except SimulationError as e:  # no partial answer
        if args.max_time_ns is not None and "time bound" in str(e):  # the user's bound: a user error
            print(f"nuna-jax simulate: error: --max-time-ns {args.max_time_ns:g} is too small: {e}",
                  file=sys.stderr)
            return 2
        raise  # anything else (flit conservation) is a bug: the boundary shows the traceback
    t_call = time.perf_counter() - t1
    trace_info = None
    t2 = time.perf_counter()
    if args.trace:
        from ..sim.trace import write_trace
        trace_info = write_trace(args.trace, sc.system, sc.traffic, r, max_slices=max_slices,
                                 meta={**system_labels(args, s),
                                       "collective": getattr(args, "collective", None) or getattr(args, "plan", None),
                                       "size_bytes": int(sc.plan.size_bytes), "n_gpus": int(sc.system.n_gpus),
                                       "policy": sc.placement.policy})
        print(f"trace written to {args.trace} ({trace_info['slices']:,d} slices, "
              f"{trace_info['bytes'] / 1e6:.1f} MB; open it in https://ui.perfetto.dev)", file=sys.stderr)
        if trace_info["truncated"]:
            print(f"nuna-jax simulate: trace bounded at --trace-max-slices {max_slices:,d}: it holds every "
                  f"service that starts before {trace_info['cut_ns']:.3f} ns of the {trace_info['completion_ns']:.3f} "
                  f"ns run; raise --trace-max-slices, or simulate a smaller case, for the rest", file=sys.stderr)
    t_trace = time.perf_counter() - t2
    t3 = time.perf_counter()
    from ..plots import simulation_figure
    write_plot(args, lambda: simulation_figure(sc.system, sc.traffic, r))
    t_plot = time.perf_counter() - t3
    d = r.summary()
    d["wall_s"] = time.perf_counter() - t0      # the whole command (after its imports)
    d["sim_wall_s"] = r.wall_s                  # the engine run (packing + loading the loop + the loop)
    d["sim_s"] = r.loop_s                       # the event loop alone
    d["process_s"] = process_age_s()           # since the interpreter started (imports included)
    d["time_s"] = {"scenario": t_scenario, "program": max(t_call - r.wall_s, 0.0),
                   "engine_setup": max(r.wall_s - r.loop_s, 0.0), "event_loop": r.loop_s,
                   "trace": t_trace, "plot": t_plot}
    d["flit_hops_per_s"] = d["flit_hops"] / r.loop_s if r.loop_s > 0 else None
    from ..sim.flow_control import settings
    d["flow_control"] = settings(fc)
    if trace_info is not None:
        d["trace"] = trace_info
    d.update(system_labels(args, s))
    d["scenario"] = {"collective": sc.plan.collective, "plan_file": getattr(args, "plan", None),
                     "size_bytes": int(sc.plan.size_bytes), "pad_bytes": int(sc.plan.pad_bytes),
                     "n_gpus": int(sc.system.n_gpus), "policy": sc.placement.policy,
                     "n_flows": int(sc.traffic.n_flows)}
    desc = sc.describe()
    d["tbs_per_gpu"], d["tbs_chosen_by"] = desc["tbs_per_gpu"], desc["tbs_chosen_by"]
    if args.json:
        emit_json(d)
        return 0
    lat = d["store_latency_ns"]
    print(f"system {system_text(d)}, {sc.system.n_gpus} GPUs; {args.collective or args.plan} "
          f"{format_size(sc.plan.size_bytes)}, "
          f"policy {sc.placement.policy}, {d['tbs_per_gpu']} threadblocks/GPU ({d['tbs_chosen_by']}): "
          f"{sc.traffic.n_flows} flows, {r.flits_injected} flits")
    if padding_text(sc.plan):
        print(padding_text(sc.plan))
    print(f"completion_ns     {d['completion_ns']:.3f}")
    print(f"store_latency_ns  mean {lat['mean']:.1f}  p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}  "
          f"max {lat['max']:.1f}")
    if fc.credit:
        print("flow_control      " + ", ".join(f"{k} {v}" for k, v in d["flow_control"].items()))
    print(f"flits_injected    {d['flits_injected']}")
    print(f"flits_delivered   {d['flits_delivered']}")
    rate = f"{d['flit_hops_per_s']:.3g} flit-hops/s in the event loop" if d["flit_hops_per_s"] else "-"
    print(f"flit_hops         {d['flit_hops']}  ({d['engine']}, {rate})")
    ts = d["time_s"]
    print(f"sim_s             {d['sim_s']:.3f}  (the event loop alone)")
    print(f"wall_s            {d['wall_s']:.2f}  (the whole command: scenario {ts['scenario']:.2f}, program "
          f"{ts['program']:.2f}, engine setup {ts['engine_setup']:.2f}, event loop {ts['event_loop']:.3f}"
          + (f", trace {ts['trace']:.2f}" if args.trace else "") + (f", plot {ts['plot']:.2f}" if args.plot else "")
          + ")")
    if d["process_s"] is not None:
        print(f"process_s         {d['process_s']:.2f}  (since the interpreter started: imports included)")
    return 0
