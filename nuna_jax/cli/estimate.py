"""``nuna-jax estimate``: the analytical model's time for a collective (docs/analytical.md).

Builds the scenario (plan -> placement -> traffic, ``nuna_jax.scenario``) and
runs the path model (``models.contention``): the estimate ``time_ns``, the
``lower_bound_ns`` and a breakdown (latency, CU issue, link, HBM, port and
window terms), beside the closed-form alpha-beta time (``models.collectives``)
with the best / mean / worst NUNA path as alpha.  ``--policy all`` tables the
seven configurations of NUNA section 5.3 with their speedup over UA.
``--network FILE.yml`` instead evaluates the closed form on an ASTRA-sim
analytical network (``nuna_jax.astra``); with ``--backend unaware|aware`` it times the
collective (or ``--collective send --src A --dst B``, one message) with ASTRA-sim's
congestion-unaware or congestion-aware analytical backend (docs/traces.md).
"""

from __future__ import annotations

from .common import (add_plot_arg, add_system_args, check_plot_path, emit_json, format_size, limits_from_args,
                     number, padding_fields, padding_text, parse_size, system_from_args, system_labels, system_text,
                     write_plot)


def add_parser(sub) -> None:
    from .common import add_scenario_args
    p = sub.add_parser(
        "estimate", help="analytical time of a collective (path model + closed form)",
        description="Estimate a collective's completion time with the analytical NUNA path model "
                    "(estimate, lower bound, breakdown) and the closed-form alpha-beta model. "
                    "--policy all compares the seven configurations of NUNA section 5.3; "
                    "--network FILE.yml evaluates the closed form on an ASTRA-sim network instead.")
    add_system_args(p)
    add_scenario_args(p)
    p.add_argument("--temperature", type=number(1e-3, 1e6, what="temperature"), default=10.0, metavar="NS",
                   help="temperature of the smooth estimate, ns, in [1e-3, 1e6] (default 10; below 1e-3 the "
                        "float32 log-sum-exp underflows to NaN)")
    p.add_argument("--network", default=None, metavar="FILE.yml",
                   help="ASTRA-sim analytical network YAML: closed-form time on that network "
                        "(--policy, --tbs and --nar-granularity do not apply)")
    p.add_argument("--backend", default=None, choices=("unaware", "aware"),
                   help="with --network: time every message as ASTRA-sim's congestion_unaware or congestion_aware "
                        "analytical backend (integer ns; docs/traces.md); default: the closed form "
                        "(--collective send: unaware)")
    p.add_argument("--src", type=int, default=None, metavar="A", help="with --network --collective send: source NPU")
    p.add_argument("--dst", type=int, default=None, metavar="B", help="with --network --collective send: destination NPU")
    p.add_argument("--network-algorithm", default=None, metavar="A[,A...]",
                   help="with --network: direct, ring, recursive or tree for every dimension (with --backend: "
                        "also one per dimension, e.g. ring,direct,recursive; no tree) "
                        "(default: ring on Ring, direct on FullyConnected, recursive on Switch)")
    p.add_argument("--simulate", action="store_true",
                   help="with --policy all: also run the exact flit simulator on every configuration "
                        "(simulated_ns, sim_speedup_over_ua)")
    p.add_argument("--optimize", action="store_true",
                   help="with --policy all --simulate: add the gradient-searched placement (nuna-jax optimize, "
                        "default settings; about a minute on a 2-core CPU) as an OPTIMIZED row")
    add_plot_arg(p, "with --policy all: UA beside NAP+NAR (and the optimized placement) on one GPU's mesh "
                    "(CUs, HBM bytes, port load)")


def _closed_form(s, collective: str, size: int, algorithm: str) -> dict:
    from ..models import collectives as C
    out = {}
    _, beta, gamma = C.alpha_beta_gamma(s, "mean")
    for stat in C.STATS:
        a = C.alpha_ns(s, stat)
        out[stat] = float(C.cost_ns(C.collective_code(collective), C.algorithm_code(algorithm),
                                    s.n_gpus, float(size), a, beta, gamma))
    return out


def _model_row(args, label: str, system, traffic) -> dict:
    """The path model's report row of one placement's traffic (``models.contention.evaluate``)."""
    from ..models.contention import evaluate
    r = evaluate(system, traffic, args.temperature)
    return {"policy": label, **{k: r[k] for k in ("time_ns", "lower_bound_ns", "smooth_estimate_ns", "temperature_ns")},
            "breakdown": r["breakdown"], "n_flows": r["n_flows"], "flits": traffic.total_flits,
            "n_gpus": system.n_gpus}


def _scenario(s, args, policy: str, simulate: bool = False):
    """The scenario of one policy (``simulate``: the simulator's flits are checked against the limits)."""
    import copy

    from .common import scenario_from_args
    a = copy.copy(args)
    a.policy = policy
    return scenario_from_args(a, s, flits=simulate)   # with --plan and no --gpus: the file's GPU count


def _row(args, sc) -> dict:
    """The report row of one scenario (the path model's estimate, the padding and bandwidths)."""
    # the placement's own name: a --placement file is labelled by the policy saved in it (OPT), not by --policy
    desc = sc.describe()
    row = _model_row(args, sc.placement.policy, sc.system, sc.traffic)
    return {**row, "tbs_per_gpu": desc["tbs_per_gpu"], "tbs_chosen_by": desc["tbs_chosen_by"],
            **padding_fields(sc.plan, row["time_ns"]), "scenario": desc}


def _simulated_ns(sc) -> float:
    from ..sim import simulate as run_sim
    return float(run_sim(sc.system, sc.traffic).completion_ns)


def _one(s, args, policy: str, simulate: bool = False, stages=None):
    """(report row, scenario) of one policy; ``simulate`` adds the exact simulator's completion time."""
    from ..progress import Stages
    stages = stages or Stages(enabled=False)
    with stages.stage("planning", 1, "policies") as st:
        sc = _scenario(s, args, policy, simulate)
        st.advance(note=policy)
    with stages.stage("evaluating", 1, "policies") as st:
        d = _row(args, sc)
        st.advance(note=policy)
    if simulate:
        with stages.stage("simulating", 1, "policies") as st:
            d["simulated_ns"] = _simulated_ns(sc)
            st.advance(note=policy)
    return d, sc


def _all_policies(s, args, policies, stages):
    """[(report row, scenario)] of every policy, stage by stage: planning (plan, placement, the
    threadblock and NAR-granularity searches; the first compiles the path model), evaluating,
    simulating (with ``--simulate``)."""
    n = len(policies)
    scs = []
    with stages.stage("planning", n, "policies") as st:
        for k, p in enumerate(policies):
            st.note(f"{p} (compiling the path model)" if k == 0 else p)
            scs.append(_scenario(s, args, p, args.simulate))
            st.advance()
    rows = []
    with stages.stage("evaluating", n, "policies") as st:
        for p, sc in zip(policies, scs):
            st.note(p)
            rows.append(_row(args, sc))
            st.advance()
    if args.simulate:
        with stages.stage("simulating", n, "policies") as st:
            for p, sc, r in zip(policies, scs, rows):
                st.note(p)
                r["simulated_ns"] = _simulated_ns(sc)
                st.advance()
    return list(zip(rows, scs))


def _optimized(args, nap, ua_row, stages=None):
    """(report row, plot panel) of the gradient-searched placement on NAP+NAR's plan (``optim.optimize``)."""
    from ..lowering import build_traffic
    from ..optim.driver import OPTIMIZE_STEPS, optimize
    from ..progress import Stages
    stages = stages or Stages(enabled=False)
    st, step = stages.callback("optimizing", [k for k in OPTIMIZE_STEPS if k != "baselines"])
    with st:
        o = optimize(nap.system, nap.plan, baselines=False, progress=step)   # `optimize` reports baselines
    t = build_traffic(nap.system, nap.plan, o["placement"])
    d = _model_row(args, "OPTIMIZED", nap.system, t)
    d.update({"tbs_per_gpu": int(nap.plan.tbs_per_gpu.max(initial=0)), "tbs_chosen_by": "NAP+NAR's plan"})
    d.update({"simulated_ns": float(o["simulated_ns"]), "speedup_over_ua": ua_row["time_ns"] / d["time_ns"],
              "sim_speedup_over_ua": ua_row["simulated_ns"] / float(o["simulated_ns"]),
              "optimize": {k: o[k] for k in ("relaxed_ns", "rounded_estimate_ns", "speedup_vs_nap_nar", "wall_s",
                                             "source", "granularity")}})
    return d, ("optimized", nap.system, o["placement"], t)


def bottleneck_text(b: dict, short: bool = False) -> str:
    """How the estimate's bottleneck was decided (docs/analytical.md, "Which term sets the
    estimate"): ``link (resource-bound: its queue adds 240.1 ns; link 12% busy)`` or ``latency
    (latency-bound; busiest: port 3% busy)``; ``short``: ``link (12% busy)``."""
    pct = 100.0 * b.get("bottleneck_utilization", 0.0)
    if b.get("bound") == "latency":
        kind = b.get("busiest_kind")
        return (f"latency ({kind} {pct:.0f}% busy)" if short
                else f"latency (latency-bound; busiest: {kind} {pct:.0f}% busy)")
    kind = b["bottleneck"]
    if short:
        return f"{kind} ({pct:.0f}% busy)"
    return (f"{kind} (resource-bound: its queue adds {b.get('bottleneck_backlog_ns', 0.0):.1f} ns; "
            f"{kind} {pct:.0f}% busy)")


def run(args) -> int:
    if args.network:
        return _run_network(args)
    check_plot_path(args)
    if (args.simulate or args.plot or args.optimize) and str(args.policy).strip().lower() != "all":
        raise ValueError("--simulate, --optimize and --plot go with --policy all (use `nuna-jax simulate` / "
                         "`place --plot` / `optimize` for one policy)")
    if getattr(args, "placement", None) and str(args.policy).strip().lower() == "all":
        raise ValueError("--placement gives one placement: it goes with one policy, not --policy all")
    if args.optimize and not args.simulate:
        raise ValueError("--optimize needs --simulate (the optimized placement is judged by the simulator)")
    s = system_from_args(args)
    size = parse_size(args.size)
    pol = str(args.policy).strip().lower()
    head = {"collective": args.collective, "plan_file": getattr(args, "plan", None), "size_bytes": size,
            "n_gpus": s.n_gpus, "algorithm": args.algorithm, "tbs_requested": args.tbs,
            "nar_granularity": args.nar_granularity, **system_labels(args, s)}
    if args.collective:
        head["closed_form_ns"] = _closed_form(s, args.collective, size, args.algorithm)
    if pol == "all":
        from ..placement import FIGURE11_ORDER as POLICY_ORDER
        from ..progress import Stages
        with Stages("estimate", enabled=not args.json) as stages:
            done = _all_policies(s, args, POLICY_ORDER, stages)
            rows = [d for d, _ in done]
            head["n_gpus"] = rows[0]["n_gpus"]
            ua = rows[0]["time_ns"]
            for r in rows:
                r["speedup_over_ua"] = ua / r["time_ns"]
                if args.simulate:
                    r["sim_speedup_over_ua"] = rows[0]["simulated_ns"] / r["simulated_ns"]
            scs = dict(zip(POLICY_ORDER, (sc for _, sc in done)))
            panels = [(k, scs[k].system, scs[k].placement, scs[k].traffic) for k in ("UA", "NAP+NAR")]
            if args.optimize:
                row, panel = _optimized(args, scs["NAP+NAR"], rows[0], stages)
                rows.append(row)
                panels.append(panel)
            if args.plot:
                from ..plots import compare_figure
                with stages.stage("plotting"):
                    write_plot(args, lambda: compare_figure(panels))
        out = {**head, "policies": rows}
        if args.json:
            emit_json(out)
            return 0
        what = args.collective or args.plan
        print(f"{what} {format_size(size)} on {head['n_gpus']} GPUs ({system_text(head)}), {args.algorithm}, "
              f"analytical path model; threadblocks per GPU: "
              + ("the best of " + ", ".join(rows[0]["scenario"]["tbs_search_ns"]) + " per policy"
                 if rows[0]["tbs_chosen_by"] == "search" else rows[0]["tbs_chosen_by"]))
        if padding_text(scs["UA"].plan):
            print(padding_text(scs["UA"].plan))
        sim_head = f" {'simulated_ns':>12s} {'sim speedup':>11s}" if args.simulate else ""
        print(f"  {'policy':9s} {'tbs':>5s} {'time_ns':>10s} {'bound_ns':>10s} {'speedup':>8s}{sim_head}  bottleneck")
        for r in rows:
            sim_cols = (f" {r['simulated_ns']:12.1f} {r['sim_speedup_over_ua']:10.3f}x" if args.simulate else "")
            print(f"  {r['policy']:9s} {r.get('tbs_per_gpu', 0):5d} {r['time_ns']:10.1f} {r['lower_bound_ns']:10.1f} "
                  f"{r['speedup_over_ua']:7.3f}x{sim_cols}  {bottleneck_text(r['breakdown'], short=True)}")
        if "closed_form_ns" in head:
            cf = head["closed_form_ns"]
            print(f"  closed form (alpha = best/mean/worst path): {cf['best']:.1f} / {cf['mean']:.1f} / "
                  f"{cf['worst']:.1f} ns")
        return 0
    r, sc = _one(s, args, pol)
    out = {**head, **r}
    if args.json:
        emit_json(out)
        return 0
    b = r["breakdown"]
    what = args.collective or args.plan
    print(f"{what} {format_size(size)} on {r['n_gpus']} GPUs ({system_text(head)}), policy {r['policy']}, {args.algorithm}, "
          f"{r['tbs_per_gpu']} threadblocks/GPU ({r['tbs_chosen_by']}): {r['n_flows']} flows, {r['flits']:.0f} flits")
    print(f"  time_ns         {r['time_ns']:12.1f}   (estimate; bottleneck: {bottleneck_text(b)})")
    print(f"  lower_bound_ns  {r['lower_bound_ns']:12.1f}")
    if r["algbw_bytes_per_ns"] is not None:
        bus = "" if r["busbw_bytes_per_ns"] is None else f", busbw {r['busbw_bytes_per_ns']:.1f} GB/s"
        print(f"  algbw {r['algbw_bytes_per_ns']:.1f} GB/s{bus} (nccl-tests' definitions, of the estimate)")
    if padding_text(sc.plan):
        print(padding_text(sc.plan))
    print(f"  smooth (tau={r['temperature_ns']:g} ns) {r['smooth_estimate_ns']:9.1f}")
    print("  breakdown (ns, summed over phases): "
          f"latency {b['latency_ns']:.1f}, CU issue {b['cu_issue_ns']:.1f}, link {b['link_ns']:.1f}, "
          f"HBM {b['hbm_ns']:.1f}, port {b['port_ns']:.1f}, window {b['window_ns']:.1f}")
    if "closed_form_ns" in head:
        cf = head["closed_form_ns"]
        print(f"  closed form (alpha = best/mean/worst path): {cf['best']:.1f} / {cf['mean']:.1f} / "
              f"{cf['worst']:.1f} ns")
    return 0


def _run_network(args) -> int:
    from ..astra import collective_time_ns, load_network
    if not args.collective:
        raise ValueError("--network needs --collective (an MSCCL --plan has no closed form)")
    lim = limits_from_args(args)
    lim.check_file(args.network, "--network file")
    net = load_network(args.network)
    lim.check("network_npus", net.n_npus, f"--network {args.network} ({net.n_npus} NPUs)")
    if args.gpus is not None and args.gpus != net.n_npus:
        raise ValueError(f"--gpus {args.gpus} disagrees with the network file's {net.n_npus} NPUs")
    size = parse_size(args.size)
    if str(args.collective).strip().lower() == "send" or args.backend:
        return _run_backend(args, net, size)
    from ..plans import canonical_collective
    r = collective_time_ns(net, args.collective, size, args.network_algorithm)
    # the command's vocabulary (docs/json.md): the collective as the plans name it, the NPUs as n_gpus
    r = {**r, "collective": canonical_collective(args.collective), "size_bytes": size,
         # a dimension's message is a model quantity (may be fractional): not a size_bytes
         "dims": [{("message_bytes" if k == "size_bytes" else k): v for k, v in d.items()} for d in r["dims"]]}
    r["n_gpus"] = r.pop("n_npus")
    out = {"network_file": args.network, "network": _network_json(net), **r}
    if args.json:
        emit_json(out)
        return 0
    print(f"{r['collective']} {format_size(size)} on ASTRA-sim network {args.network} ({net.n_npus} NPUs): "
          f"{r['time_ns']:.1f} ns (closed form, hierarchical)")
    for k, d in enumerate(r["dims"]):
        print(f"  dim {k}: {d['topology']:14s} p={d['p']:<4d} {d['algorithm']:9s} alpha {d['alpha_ns']:.1f} ns, "
              f"{1 / d['beta_ns_per_byte']:.2f} B/ns, {format_size(d['message_bytes'])} -> {d['time_ns']:.1f} ns")
    return 0


def _network_json(net) -> dict:
    """An ASTRA-sim network in the command's vocabulary (docs/json.md: NPUs are ``n_gpus``)."""
    nd = net.describe()
    nd["n_gpus"] = nd.pop("n_npus")
    return nd


def _run_backend(args, net, size: int) -> int:
    """``--network F --backend unaware|aware``: ASTRA-sim's analytical backends (``nuna_jax.astra``)."""
    from ..astra import backend_collective_ns, send_time_ns
    backend = args.backend or "unaware"
    if str(args.collective).strip().lower() == "send":
        if args.src is None or args.dst is None:
            raise ValueError("--collective send needs --src A and --dst B (NPU ids of the --network)")
        r = send_time_ns(net, args.src, args.dst, size, backend)
        out = {"network_file": args.network, "network": _network_json(net), "collective": "send", **r}
        if args.json:
            emit_json(out)
            return 0
        print(f"send {format_size(size)} NPU {r['src']} -> {r['dst']} on ASTRA-sim network {args.network} "
              f"({backend} backend): {r['time_ns']} ns ({r['hops']} hops, dims {r['dims']})")
        return 0
    if args.src is not None or args.dst is not None:
        raise ValueError("--src and --dst go with --collective send")
    r = backend_collective_ns(net, args.collective, size, backend, args.network_algorithm, limits_from_args(args))
    out = {"network_file": args.network, "network": _network_json(net), **r}
    if args.json:
        emit_json(out)
        return 0
    print(f"{r['collective']} {format_size(size)} on ASTRA-sim network {args.network} ({net.n_npus} NPUs), "
          f"{backend} backend: {r['time_ns']} ns")
    for ph in r["phases"]:
        print(f"  dim {ph['dim']}: {ph['topology']:14s} p={ph['p']:<4d} {ph['op']:14s} {ph['algorithm']:9s} "
              f"{ph['rounds']} rounds of {ph['message_bytes']} B -> {ph['time_ns']} ns")
    return 0
