"""NUNA spread: best / mean / worst on-chip and GPU-to-GPU latencies of a socket.

NUNA section 1 states, for the Table 2 socket, that worst and average NoC
latencies are 3x and 2x the best, and that uncontended GPU-to-GPU transfers
are 1.8x and 1.45x slower than the best case.  :func:`nuna_spread` computes
ours under the definitions of docs/model.md ("NoC latency figures"), over
every combination of endpoints (CU, port, stack), at zero load.  A transfer's
data is interleaved over its stacks' channels (docs/model.md, "HBM
channels"), so a stack's latency is the mean over its channel routers.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..geometry import cu_router, hbm_endpoint_router, port_router
from ..path import head_latency_ns, path_tables, stack_mean
from ..system import System

PAPER_RATIOS = {
    "noc_worst_over_best": 3.0,
    "noc_mean_over_best": 2.0,
    "transfer_worst_over_best": 1.8,
    "transfer_mean_over_best": 1.45,
}


def _stats(a) -> dict:
    a = np.asarray(a, dtype=np.float64)
    return {"min": float(a.min()), "mean": float(a.mean()), "max": float(a.max())}


def _over_best(v: float, best: float) -> float | None:
    """``v / best``, or None where the best path takes no time (a system with ``cu_to_noc_ns = 0``
    and a CU on a port's router): the spread over a zero-latency path is undefined."""
    return v / best if best > 0 else None


def nuna_spread(s: System, *, limits=None) -> dict:
    """Zero-load latency statistics (ns) over all endpoint combinations.

    Keys: ``cu_to_port`` (CU->NoC + mesh to an egress port), ``port_to_stack``
    (mesh from an ingress port to an HBM stack), ``store`` (one-way remote
    store: store issue -> delivery, the simulator's store latency),
    ``transfer`` (local HBM read by the CU, then the store), each with
    ``min``/``mean``/``max``; and ``ratios`` beside the paper's.
    Routers stand for their CUs: every router carries the same number of CUs,
    so means over routers equal means over CUs.  ``limits`` (default :func:`limits.active`): the
    system and the table of ``routers x stacks^2 x ports`` latencies are checked first
    (``WorkLimitError``).
    """
    from ..limits import active
    lim = active(limits)
    lim.check_system(s, f"nuna_spread: system {s.name!r}")
    lim.check_spread(s, f"nuna_spread: system {s.name!r}")
    cu = jnp.asarray(np.unique(cu_router(s)))
    pt = jnp.asarray(port_router(s))
    st = jnp.asarray(hbm_endpoint_router(s))
    per_stack = lambda a: stack_mean(s, a)  # noqa: E731
    cu_to_port = s.cu_to_noc_ns + head_latency_ns(s, cu[:, None], pt[None, :])
    port_to_stack = per_stack(head_latency_ns(s, pt[:, None], st[None, :]))
    tab = path_tables(s)
    # store: [cu router, port, dst stack] = store issue + store leg + switch + delivery
    store = (s.cu_to_noc_ns + tab.to_port_ns[cu][:, :, None] + tab.switch_ns + per_stack(tab.deliver_ns)[None, :, :])
    # read: [cu router, local stack] = issue cycle + request + HBM + response
    read = per_stack(tab.read_ns[cu]) - s.cu_to_noc_ns
    # transfer = read + store, over [cu, local stack, port, dst stack]
    transfer = read[:, :, None, None] + store[:, None, :, :]

    out = {
        "cu_to_port": _stats(cu_to_port),
        "port_to_stack": _stats(port_to_stack),
        "store": _stats(store),
        "transfer": _stats(transfer),
    }
    c, t, w = out["cu_to_port"], out["transfer"], out["store"]
    out["ratios"] = {
        "noc_worst_over_best": _over_best(c["max"], c["min"]),
        "noc_mean_over_best": _over_best(c["mean"], c["min"]),
        "transfer_worst_over_best": _over_best(t["max"], t["min"]),
        "transfer_mean_over_best": _over_best(t["mean"], t["min"]),
        "store_worst_over_best": _over_best(w["max"], w["min"]),
        "store_mean_over_best": _over_best(w["mean"], w["min"]),
    }
    out["paper_ratios"] = dict(PAPER_RATIOS)
    return out
