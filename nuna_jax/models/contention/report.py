"""Reports and batching around the path model: plain-float breakdowns for CLIs, padding to a few
shape buckets (few compiles), stacking same-shape Traffic for ``vmap``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...system import System
from ...traffic import Traffic
from .api import TEMPERATURE_NS, PathCosts, analyze
from .tables import CHUNK_FLOWS, KINDS, pad_traffic, resolve_n_phases


def breakdown(c: PathCosts) -> dict:
    """Plain-float report of one :class:`PathCosts` (sums over phases).

    ``latency_ns``: longest zero-load flow latency; ``<kind>_ns``: the largest backlog
    ``(B - svc)^+`` on a resource of that kind (``port_ns`` = max of egress and ingress;
    ``window_ns`` the CU window's ``(B_cu - Lbar)^+``); ``busy_max_ns``: the largest busy time per
    kind; ``bottleneck``: the kind whose term ``Lmax + backlog`` sets the estimate (of the longest
    phase).
    """
    f = lambda v: float(np.asarray(v))  # noqa: E731
    kx = np.asarray(c.kind_excess_ns).sum(axis=0)
    kb = np.asarray(c.kind_busy_ns).max(axis=0)
    kt = np.asarray(c.kind_term_ns)
    worst = int(np.argmax(np.asarray(c.phase_estimate_ns)))
    names = list(KINDS) + ["window"]
    row = kt[worst]
    # the bottleneck: the kind with the largest term; ties (pure latency) -> "latency"
    k = int(np.argmax(row))
    lat = f(np.asarray(c.phase_latency_ns)[worst])
    bott = names[k] if row[k] > lat * (1 + 1e-6) + 1e-9 else "latency"
    if bott in ("egress", "ingress"):
        bott = "port"
    return {
        "latency_ns": f(np.sum(np.asarray(c.phase_latency_ns))),
        "cu_issue_ns": float(kx[0]),
        "hbm_ns": float(kx[1]),
        "link_ns": float(kx[2]),
        "port_ns": float(max(kx[3], kx[4])),
        "egress_port_ns": float(kx[3]),
        "ingress_port_ns": float(kx[4]),
        "window_ns": float(kx[5]),
        "busy_max_ns": {n: float(v) for n, v in zip(names, kb)},
        "bottleneck": bott,
        "n_phases": int(np.asarray(c.phase_estimate_ns).shape[0]),
    }


def bucket_rows(n_flows: int, chunk_flows: int = CHUNK_FLOWS) -> int:
    """Row count a flow table is padded to: the next power of two (>= 256) up to ``chunk_flows``,
    then the next multiple of ``chunk_flows`` (few shapes, few compiles)."""
    n = max(int(n_flows), 1)
    if n <= chunk_flows:
        return max(256, 1 << (n - 1).bit_length())
    return -(-n // chunk_flows) * chunk_flows


def pad_flows(t: Traffic, n_rows: int) -> Traffic:
    """``t`` with zero rows appended up to ``n_rows`` (they change no result)."""
    return pad_traffic(t, n_rows)


def stack_traffic(traffics, n_rows: int | None = None) -> Traffic:
    """Several Traffic tables padded to one row count (default: the bucket of the longest) and
    stacked along a new leading axis, for ``jax.vmap`` over :func:`~.api.path_costs`."""
    traffics = list(traffics)
    if not traffics:
        raise ValueError("stack_traffic: need at least one Traffic")
    n = bucket_rows(max(int(np.shape(t.flits)[0]) for t in traffics)) if n_rows is None else int(n_rows)
    return jax.tree_util.tree_map(lambda *v: jnp.stack(v), *[pad_traffic(t, n) for t in traffics])


def evaluate(s: System, t: Traffic, temperature_ns: float = TEMPERATURE_NS, *, engine: str = "runs",
             chunk_flows: int = CHUNK_FLOWS) -> dict:
    """Run the jitted :func:`~.api.analyze` on (bucket-padded) concrete traffic; plain-float report.

    Keys: ``time_ns`` (the estimate), ``lower_bound_ns``, ``smooth_estimate_ns`` (at
    ``temperature_ns``), ``temperature_ns``, ``breakdown`` (:func:`breakdown`), ``n_flows``.
    """
    n_phases = resolve_n_phases(t)
    tp = pad_traffic(t, bucket_rows(t.n_flows, chunk_flows))
    c = analyze(s, tp, n_phases=n_phases, temperature_ns=float(temperature_ns), engine=engine,
                chunk_flows=chunk_flows)
    return {"time_ns": float(c.estimate_ns), "lower_bound_ns": float(c.lower_bound_ns),
            "smooth_estimate_ns": float(c.smooth_estimate_ns), "temperature_ns": float(temperature_ns),
            "breakdown": breakdown(c), "n_flows": t.n_flows}
