"""``nuna-jax noc``: synthetic traffic through BookSim2's input-queued VC router (docs/noc.md)."""

from __future__ import annotations

import math
import sys


def add_parser(sub) -> None:
    from .common import add_plot_arg, number
    p = sub.add_parser(
        "noc", help="synthetic traffic on a mesh/torus NoC from a BookSim2 configuration file",
        description="Read a BookSim2 configuration file (plus key=value overrides, as booksim takes them) and "
                    "simulate it cycle by cycle as BookSim2's input-queued virtual-channel router does: "
                    "dimension-order routing, credit flow control, iSLIP VC and switch allocation, router "
                    "pipeline delays, Bernoulli sources with unbounded injection queues, warm-up / sample / "
                    "drain periods (sim_type latency). Unknown or unsupported keys are refused (exit 2).")
    p.add_argument("config", metavar="CONFIG.cfg", help="a BookSim2 configuration file")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="BookSim2 keys overriding the file's")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: the file's seed, else 0)")
    p.add_argument("--sweep-rate", default=None, metavar="START:STOP:STEP",
                   help="run every injection_rate of the range (packets/node/cycle) and report the latency-vs-load "
                        "curve and its saturation point (latency above 3 x zero-load); --plot draws it")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--max-work", type=number(0.0, 1e6, lo_open=True), default=1.0, metavar="F",
                   help="multiply the work limits (nodes k^n <= 1,024; buffer slots, router-cycles and flits simulated "
                        "<= 2^26 each; file bytes) by F (default 1)")
    add_plot_arg(p, "the latency-vs-load curve with the saturation point (with --sweep-rate)")


def _clean(r: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}


REPORT = ("packet_latency_avg_cycles", "network_latency_avg_cycles", "accepted_flit_rate", "hops_avg",
          "cycles", "flit_hops", "wall_s")


def run(args) -> int:
    from .common import check_plot_path, emit_json, write_plot
    from ..noc.config import load_config
    check_plot_path(args)
    if args.plot and not args.sweep_rate:
        raise ValueError("--plot draws the --sweep-rate curve: give --sweep-rate START:STOP:STEP")
    if args.seed is not None and not 0 <= args.seed < 2 ** 31:
        raise ValueError(f"--seed {args.seed}: want an integer in [0, 2^31)")
    cfg = load_config(args.config, args.overrides)
    rates = None
    if args.sweep_rate:
        from ..noc.sweep import parse_rate_range
        rates = parse_rate_range(args.sweep_rate)
    from ..noc.sim import simulate_noc, zero_load_latency
    if rates is None:
        r = _clean(simulate_noc(cfg, seed=args.seed))
        if args.json:
            emit_json({"config": args.config, "overrides": list(args.overrides), **r})
            return 0
        for k in REPORT + ("zero_load_latency_cycles", "packets_measured", "seed", "unstable"):
            v = r[k]
            print(f"{k:28s} {v:.6g}" if isinstance(v, float) else f"{k:28s} {v}")
        return 0
    from ..noc.sweep import saturation_point, sweep_figure
    rows = []
    for rate in rates:
        c = load_config(args.config, list(args.overrides) + [f"injection_rate={rate!r}"])
        r = _clean(simulate_noc(c, seed=args.seed))
        rows.append(r)
        if not args.json:
            lat = r["packet_latency_avg_cycles"]
            print(f"rate {rate:<10.6g} latency {'-' if lat is None else f'{lat:.3f}':>10} accepted "
                  f"{r['accepted_flit_rate']:.5f}{'  unstable' if r['unstable'] else ''}", file=sys.stdout, flush=True)
    z = zero_load_latency(cfg)
    sat = saturation_point(rows, z)
    if args.plot:
        write_plot(args, lambda: sweep_figure(rows, z, sat, f"{args.config} {' '.join(args.overrides)}".strip()))
    if args.json:
        emit_json({"config": args.config, "overrides": list(args.overrides), "zero_load_latency_cycles": z,
                   "saturation": sat, "points": rows})
    else:
        print(f"zero-load latency {z:.3f} cycles; saturation (latency > 3 x zero load): "
              + (f"injection rate {sat['injection_rate']:.5g}, accepted {sat['accepted_flit_rate']:.5g} flits/node/cycle"
                 if sat else "not reached in the range"))
    return 0
