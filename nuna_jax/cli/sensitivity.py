"""``nuna-jax sensitivity --collective C --size S --gpus N --policy P [--json] [--plot FILE.png|.pdf|.svg]``.

d(time)/d(parameter) and the elasticity of the path model's estimate for every
continuous hardware parameter, by ``jax.grad`` (``nuna_jax.sweep.sensitivity``),
ranked by how much time a 1 % change buys.
"""

from __future__ import annotations

from .common import add_plot_arg, add_scenario_args, add_system_args, check_plot_path, emit_json, format_size, \
    parse_size, scenario_from_args, system_from_args, system_labels, system_text


def add_parser(sub) -> None:
    p = sub.add_parser(
        "sensitivity", help="d(time)/d(hardware parameter) and elasticities by jax.grad",
        description="Differentiate the path model's time for one collective with respect to every "
                    "continuous hardware parameter; rank the knobs by elasticity.")
    add_system_args(p)
    add_scenario_args(p)
    add_plot_arg(p, "a bar chart of the elasticities")


def run(args) -> int:
    from ..sweep.sensitivity import plot_sensitivity, sensitivity
    import sys

    from ..progress import Stages
    check_plot_path(args)
    s = system_from_args(args)
    with Stages("sensitivity", enabled=not args.json) as stages:
        with stages.stage("planning", 1, "scenarios") as st:
            sc = scenario_from_args(args, s)
            st.advance()
        with stages.stage("evaluating") as st:      # jax.grad of the path model (compiles, then runs)
            r = sensitivity(sc.system, sc.traffic)
    what = args.collective or args.plan
    head = {"collective": args.collective, "plan_file": getattr(args, "plan", None),
            "size_bytes": parse_size(args.size), "n_gpus": sc.system.n_gpus, "policy": sc.placement.policy,
            **system_labels(args, s)}
    if args.plot:
        try:       # matplotlib picks the format by the suffix (.png, .pdf, .svg: check_plot_path)
            plot_sensitivity(r, args.plot, f"{what} {format_size(head['size_bytes'])}, {head['n_gpus']} GPUs, "
                                           f"{head['policy']}: T = {r['time_ns']:.0f} ns")
        except OSError as e:
            raise ValueError(f"cannot write --plot {args.plot!r}: {e.strerror or e}") from None
        print(f"plot written to {args.plot}", file=sys.stderr)
    if args.json:
        emit_json({**head, **r})
        return 0
    print(f"{what} {format_size(head['size_bytes'])} on {head['n_gpus']} GPUs ({system_text(head)}), policy "
          f"{head['policy']}: path-model time {r['time_ns']:.1f} ns; knobs ranked by elasticity")
    print(f"  {'parameter':22s} {'value':>12s} {'dT/dx (ns/unit)':>16s} {'elasticity':>11s} {'ns per +1%':>11s}")
    for row in r["rows"]:
        mark = "  (placement fixed)" if row["placement_fixed"] else ""
        print(f"  {row['field']:22s} {row['value']:12.6g} {row['d_time_ns_per_unit']:16.6g} "
              f"{row['elasticity']:11.4f} {row['ns_per_1pct']:11.3f}{mark}")
    return 0
