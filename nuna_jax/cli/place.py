"""``nuna-jax place``: summarize a placement (CUs per die, hop counts, port load).

Example::

    nuna-jax place --collective allgather --size 1MB --gpus 8 --policy nap+nar --json
"""

from __future__ import annotations

import numpy as np

from typing import TYPE_CHECKING

from .common import (add_plot_arg, add_system_args, check_plot_path, emit_json, format_size, padding_text,
                     system_from_args, system_labels, system_text, write_plot)
from .common import add_scenario_args, scenario_from_args

if TYPE_CHECKING:
    from ..scenario import Scenario

__all__ = ["add_parser", "run", "summary"]


def _stat(v, w=None) -> dict:
    v = np.asarray(v, dtype=np.float64)
    if v.size == 0:
        return {"mean": 0.0, "max": 0.0, "min": 0.0}
    mean = float(np.average(v, weights=w)) if w is not None and np.sum(w) > 0 else float(v.mean())
    return {"mean": mean, "max": float(v.max()), "min": float(v.min())}


def summary(sc: Scenario) -> dict:
    """Placement summary (JSON-ready).

    Hop statistics are flit-weighted over the traffic: ``hops_cu_to_port``
    (issuing CU router -> egress port router), ``hops_port_to_stack``
    (ingress port router -> destination stack router), ``hops_stack_to_cu``
    (local read stack -> CU).  Port load: bytes per egress port over every
    (GPU, port), idle ports included.
    """
    from ..geometry import cu_router, hops as hop_count, port_router, router_die, stack_router
    s, plan, pl, t = sc.system, sc.plan, sc.placement, sc.traffic.numpy()
    cr, pr, sr = cu_router(s), port_router(s), stack_router(s)
    w = t.flits
    cu_port = hop_count(s, cr[t.cu], pr[t.port])
    port_stack = hop_count(s, pr[t.port], sr[t.dst_stack])
    stack_cu = hop_count(s, sr[t.read_stack], cr[t.cu])

    used = pl.tb_cu >= 0
    pairs = np.unique(np.stack([plan.tb_gpu[used], pl.tb_cu[used]], axis=1), axis=0)
    die = router_die(s, cr[pairs[:, 1]]) if len(pairs) else np.zeros(0, np.int64)
    per_die = np.bincount(die, minlength=s.n_dies)

    eg = np.bincount(t.src_gpu * s.n_io_ports + t.port, weights=t.bytes,
                     minlength=s.n_gpus * s.n_io_ports).reshape(s.n_gpus, s.n_io_ports)
    ing = np.bincount(t.dst_gpu * s.n_io_ports + t.port, weights=t.bytes,
                      minlength=s.n_gpus * s.n_io_ports).reshape(s.n_gpus, s.n_io_ports)
    ports_per_gpu = (eg > 0).sum(axis=1)
    desc = sc.describe()
    return {
        "system": s.name,
        "n_gpus": s.n_gpus,
        "tbs_per_gpu": desc["tbs_per_gpu"],
        "tbs_chosen_by": desc["tbs_chosen_by"],
        "scenario": desc,
        "cus_used": int(len(pairs)),
        "cus_used_per_die": [int(x) for x in per_die],
        "cus_used_per_die_per_gpu": [float(x) / s.n_gpus for x in per_die],
        "hops_cu_to_port": _stat(cu_port, w),
        "hops_port_to_stack": _stat(port_stack, w),
        "hops_stack_to_cu": _stat(stack_cu, w),
        "ports_used": {"per_gpu_min": int(ports_per_gpu.min()), "per_gpu_mean": float(ports_per_gpu.mean()),
                       "per_gpu_max": int(ports_per_gpu.max()),
                       "distinct_ordinals": int(np.count_nonzero(eg.sum(axis=0)))},
        "egress_port_load_bytes": _stat(eg.reshape(-1)),
        "ingress_port_load_bytes": _stat(ing.reshape(-1)),
    }


def add_parser(sub) -> None:
    p = sub.add_parser("place", help="place a collective (policy + NAR) and summarize hops and port load",
                       description="Place a collective plan under a policy (UA, UA+NAR, NUMA, NUMA+NAR, "
                                   "NAP, NAP+NAR, NAP*) and summarize the result (NUNA sections 4-5).")
    add_system_args(p)
    add_scenario_args(p)
    add_plot_arg(p, "one GPU's mesh: CUs used by NAR domain, HBM bytes read / written, I/O port load")


def run(args) -> int:
    check_plot_path(args)
    from . import replay
    from .common import RUN
    # a store hit: the result of this same command, replayed (no System, no jax); not with --plot,
    # whose figure needs the scenario itself
    key = None if args.plot else replay.record_key("place", args)
    rec = replay.load_record(key)
    if rec is None or not {"out", "padding", "labels"} <= rec.keys():     # absent, or another layout
        system = system_from_args(args)
        sc = scenario_from_args(args, system)
        out = {**summary(sc), **system_labels(args, system)}

        def figure():
            from ..plots import socket_figure          # matplotlib: only when a plot is asked for
            return socket_figure(sc.system, sc.placement, sc.traffic)
        write_plot(args, figure)
        rec = {"out": out, "padding": padding_text(sc.plan), "labels": RUN["system"]}
        replay.store_record(key, rec)
    else:
        RUN["system"] = rec["labels"]
    return _show(args, rec["out"], rec["padding"])


def _show(args, out: dict, padding: str) -> int:
    """Print ``out`` (:func:`summary` and the system labels) as JSON or text."""
    if args.json:
        emit_json(out)
        return 0
    d = out["scenario"]
    pl = d["placement"]
    print(f"{d['plan']['collective']} ({d['plan']['algorithm']}) {format_size(d['plan']['size_bytes'])} "
          f"on {out['n_gpus']} GPUs ({system_text(out)}), {d['tbs_per_gpu']} threadblocks/GPU ({d['tbs_chosen_by']}), policy {pl['policy']} "
          f"(routing granularity {pl['routing_granularity']}, placement granularity {pl['placement_granularity']})")
    print(f"  flows: {d['traffic']['n_flows']}, flits: {d['traffic']['flits']:.0f}, "
          f"bytes: {format_size(d['traffic']['bytes'])}")
    if padding:
        print(padding)
    print(f"  CUs used: {out['cus_used']} (per die, all GPUs: {out['cus_used_per_die']})")
    for k in ("hops_cu_to_port", "hops_port_to_stack", "hops_stack_to_cu"):
        print(f"  {k:20s} mean {out[k]['mean']:.2f}  max {out[k]['max']:.0f}")
    pu = out["ports_used"]
    print(f"  egress ports used per GPU: min {pu['per_gpu_min']}, mean {pu['per_gpu_mean']:.1f}, "
          f"max {pu['per_gpu_max']}")
    ld = out["egress_port_load_bytes"]
    print(f"  egress load per port (bytes): min {ld['min']:.0f}, mean {ld['mean']:.0f}, max {ld['max']:.0f}")
    return 0
