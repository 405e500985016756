"""``nuna-jax info``: the system and its NUNA spread (NUNA section 1)."""

from __future__ import annotations

from .common import (add_plot_arg, add_system_args, check_plot_path, emit_json, limits_from_args, system_from_args,
                     system_labels, system_text, write_plot)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "info", help="summarize a system and its NUNA latency spread",
        description="Summarize the hardware (default: NUNA Table 2) and its zero-load NUNA "
                    "latency spread: best/mean/worst NoC latency CU->port and port->stack and "
                    "GPU-to-GPU store/transfer latency, beside the ratios stated in NUNA section 1.")
    add_system_args(p)
    add_plot_arg(p, "the zero-load latency map: CU -> nearest and farthest I/O port (NUNA Figure 4)")


#: derived quantities of a System that ``info`` reports beside its fields (``System`` properties, units in
#: their names: ns, bytes/ns)
DERIVED = ("n_routers", "n_cus", "cols_per_die", "n_directed_links", "hop_ns", "bisection_bw_bytes_per_ns",
           "hbm_total_bw_bytes_per_ns", "scaleup_bw_bytes_per_ns")


def system_fields(s) -> dict:
    """Every ``System`` field under its own name (docs/json.md: "System field names as they are"), then
    ``mesh`` ``[cols, rows]`` and :data:`DERIVED`; continuous fields as floats, counts as ints."""
    import dataclasses

    import numpy as np

    def plain(v):
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, str):
            return v
        return float(np.asarray(v))
    d = {f.name: plain(getattr(s, f.name)) for f in dataclasses.fields(s)}
    d["mesh"] = [int(s.mesh_cols), int(s.mesh_rows)]
    d.update({k: plain(getattr(s, k)) for k in DERIVED})
    return d


def info_dict(s) -> dict:
    from ..geometry import port_router, router_xy, stack_router
    from ..models.spread import nuna_spread
    d = system_fields(s)
    sp = nuna_spread(s)
    d["noc_latency_ns"] = {"cu_to_port": sp["cu_to_port"], "port_to_stack": sp["port_to_stack"]}
    d["gpu_to_gpu_latency_ns"] = {"store": sp["store"], "transfer": sp["transfer"]}
    d["ratios"] = sp["ratios"]
    d["paper_ratios"] = sp["paper_ratios"]
    sx, sy = router_xy(s, stack_router(s))
    px, py = router_xy(s, port_router(s))
    d["hbm_stack_xy"] = [[int(a), int(b)] for a, b in zip(sx, sy)]
    d["io_ports_per_edge_router"] = int(s.n_io_ports // 2 // s.mesh_rows)
    return d


def _x(ratio) -> str:
    """A spread ratio as printed: ``1.93x``, or ``n/a`` where the best path takes no time."""
    return "  n/a " if ratio is None else f"{ratio:5.2f}x"


def run(args) -> int:
    check_plot_path(args)
    s = system_from_args(args)
    limits_from_args(args).check_spread(s, f"--system {args.system}")
    d = {**info_dict(s), **system_labels(args, s)}
    from ..plots import latency_map_figure
    write_plot(args, lambda: latency_map_figure(s))
    if args.json:
        emit_json(d)
        return 0
    n, l, g, r, pr = d, d["noc_latency_ns"], d["gpu_to_gpu_latency_ns"], d["ratios"], d["paper_ratios"]
    print(f"system {system_text(d)}: {n['mesh'][0]}x{n['mesh'][1]} mesh over {n['n_dies']} compute dies, "
          f"{n['n_cus']} CUs ({n['cus_per_router']}/router), {n['n_hbm_stacks']} HBM stacks, "
          f"{n['n_io_ports']} I/O ports ({d['io_ports_per_edge_router']}/edge router), pod of {n['n_gpus']} GPUs")
    print(f"  NoC {n['noc_clock_ghz']:g} GHz, hop {n['hop_ns']:.3f} ns, link {n['link_bw_bytes_per_ns']:.1f} GB/s "
          f"(bisection {n['bisection_bw_bytes_per_ns'] / 1e3:.1f} TB/s); HBM {n['hbm_total_bw_bytes_per_ns'] / 1e3:.1f} "
          f"TB/s, {n['hbm_latency_ns']:g} ns; ports {n['port_bw_bytes_per_ns']:.1f} GB/s each "
          f"({n['scaleup_bw_bytes_per_ns'] / 1e3:.2f} TB/s), switch {n['switch_latency_ns']:g} ns")
    print("\nzero-load latency (ns)            best      mean     worst")
    for label, v in (("NoC CU -> port (incl. CU->NoC)", l["cu_to_port"]),
                     ("NoC port -> stack", l["port_to_stack"]),
                     ("one-way remote store", g["store"]),
                     ("transfer (local read + store)", g["transfer"])):
        print(f"  {label:30s} {v['min']:8.1f}  {v['mean']:8.1f}  {v['max']:8.1f}")
    print("\nNUNA spread                      ours   paper (section 1)")
    print(f"  NoC worst / best             {_x(r['noc_worst_over_best'])}  {pr['noc_worst_over_best']:.2f}x")
    print(f"  NoC mean / best              {_x(r['noc_mean_over_best'])}  {pr['noc_mean_over_best']:.2f}x")
    print(f"  transfer worst / best        {_x(r['transfer_worst_over_best'])}  {pr['transfer_worst_over_best']:.2f}x")
    print(f"  transfer mean / best         {_x(r['transfer_mean_over_best'])}  {pr['transfer_mean_over_best']:.2f}x")
    print(f"  (one-way store alone: worst {_x(r['store_worst_over_best']).strip()}, mean {_x(r['store_mean_over_best']).strip()})")
    return 0
