"""Reports and batching around the path model: plain-float breakdowns for CLIs, padding to a few
shape buckets (few compiles), stacking same-shape Traffic for ``vmap``, and the estimate of many
traffic tables in one compiled call per shape (:func:`estimate_many`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...system import System
from ...traffic import Traffic
from ...traffic import FIELDS
from .api import TEMPERATURE_NS, PathCosts, analyze, estimate_batch_jit, estimate_batch_quick_jit
from .tables import CHUNK_FLOWS, KINDS, _on_host, check_engine, pad_traffic, resolve_n_phases

#: flow rows (batch x rows) per call of :func:`estimate_many` (bounds its memory; a bigger list is split)
MAX_BATCH_ROWS = 1 << 18
#: the fewest rows :func:`estimate_many` pads a table to: one compiled shape for every small table
#: (12 tables of 4,096 rows: 33 ms per call on a 2-core CPU, 2-GPU Table 2; a compile: 2-10 s)
MIN_BATCH_ROWS = 1 << 12
#: on a CPU, calls of at most this many rows in all compile with ``api.QUICK_COMPILE`` (half the
#: compile time; at most about 0.12 s more run time a call)
QUICK_COMPILE_ROWS = 1 << 16


def breakdown(c: PathCosts) -> dict:
    """Plain-float report of one :class:`PathCosts` (sums over phases).

    ``latency_ns``: longest zero-load flow latency; ``<kind>_ns``: the largest backlog
    ``(B - svc)^+`` on a resource of that kind (``port_ns`` = max of egress and ingress;
    ``window_ns`` the CU window's ``(B_cu - Lbar)^+``); ``busy_max_ns``: the largest busy time per
    kind; ``bottleneck``: the kind whose term ``Lmax + backlog`` sets the estimate (of the longest
    phase), or ``"latency"`` when no kind's term exceeds that phase's longest zero-load flow
    latency by more than 1e-6 relative (docs/analytical.md, "Which term sets the estimate").

    How it was decided, from the longest phase (the one with the largest estimate):
    ``bound`` is ``"latency"`` or ``"resource"``; ``bottleneck_term_ns`` the largest kind term
    ``Lmax + backlog`` (ns) and ``bottleneck_backlog_ns`` its excess over the phase's latency (ns, 0
    when latency-bound); ``utilization`` per kind (``cu``, ``hbm``, ``link``, ``egress``, ``ingress``,
    ``window``): the busiest resource's busy time over the phase's estimate (a fraction, 1.0 = busy
    the whole phase); ``bottleneck_utilization`` that of the bottleneck kind (the larger of egress and
    ingress for ``port``), or, when latency-bound, of the busiest kind, named by ``busiest_kind``.
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
    resource_bound = bool(row[k] > lat * (1 + 1e-6) + 1e-9)
    bott = names[k] if resource_bound else "latency"
    if bott in ("egress", "ingress"):
        bott = "port"
    phase_est = f(np.asarray(c.phase_estimate_ns)[worst])
    busy_w = np.asarray(c.kind_busy_ns)[worst]
    util = {n: (float(v) / phase_est if phase_est > 0 else 0.0) for n, v in zip(names, busy_w)}
    busiest = max(util, key=util.get)
    if resource_bound:
        kinds = ("egress", "ingress") if bott == "port" else (names[k],)
        b_util = max(util[n] for n in kinds)
    else:
        b_util = util[busiest]
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
        "bound": "resource" if resource_bound else "latency",
        "bottleneck_term_ns": float(row[k]),
        "bottleneck_backlog_ns": float(max(row[k] - lat, 0.0)) if resource_bound else 0.0,
        "utilization": util,
        "bottleneck_utilization": float(b_util),
        "busiest_kind": busiest,
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


def batch_bucket(n: int) -> int:
    """Batch size a list of ``n`` traffic tables is padded to: the next of 1, 2, 3, 4, 6, 8, 12,
    16, 24, ... (powers of two and 1.5 times them: at most a third wasted, few shapes)."""
    n = max(int(n), 1)
    p = 1 << (n - 1).bit_length()
    return 3 * p // 4 if p >= 4 and 3 * p // 4 >= n else p


def batch_rows(n_flows: int, chunk_flows: int = CHUNK_FLOWS) -> int:
    """Row count :func:`estimate_many` pads a group of tables to: at least ``MIN_BATCH_ROWS``,
    :func:`bucket_rows` up to ``chunk_flows``, then :func:`batch_bucket` (two shapes per doubling,
    at most a third padding) instead of every multiple of ``chunk_flows`` (32 shapes between 1 M
    and 2 M flows)."""
    n = max(int(n_flows), 1)
    if n <= chunk_flows:
        return max(bucket_rows(n, chunk_flows), MIN_BATCH_ROWS)
    return max(batch_bucket(n), bucket_rows(chunk_flows, chunk_flows))


def _stack_host(traffics, n_rows: int, n_batch: int) -> Traffic:
    """Concrete tables zero-padded to ``n_rows`` and stacked ``[n_batch, n_rows]`` in numpy (rows
    and tables past the given ones are zero; dtypes as ``jnp.asarray`` gives them)."""
    out = {}
    for k in FIELDS:
        cols = [np.asarray(getattr(t, k)) for t in traffics]
        a = np.zeros((n_batch, n_rows), jax.dtypes.canonicalize_dtype(cols[0].dtype))
        for i, v in enumerate(cols):
            a[i, :len(v)] = v
        out[k] = a
    return Traffic(**out)


def stack_traffic(traffics, n_rows: int | None = None) -> Traffic:
    """Several Traffic tables padded to one row count (default: the bucket of the longest) and
    stacked along a new leading axis, for ``jax.vmap`` over :func:`~.api.path_costs` (numpy
    leaves when every table is numpy, else jnp)."""
    traffics = list(traffics)
    if not traffics:
        raise ValueError("stack_traffic: need at least one Traffic")
    n = bucket_rows(max(int(np.shape(t.flits)[0]) for t in traffics)) if n_rows is None else int(n_rows)
    if all(_on_host(t) for t in traffics):
        return _stack_host(traffics, n, len(traffics))
    return jax.tree_util.tree_map(lambda *v: jnp.stack(v), *[pad_traffic(t, n) for t in traffics])


def estimate_many(s: System, traffics, n_phases: int | None = None, *, engine: str = "runs",
                  chunk_flows: int = CHUNK_FLOWS, max_batch_rows: int = MAX_BATCH_ROWS,
                  vectorize: bool | None = None) -> np.ndarray:
    """The path model's estimate (:func:`~.api.estimate_ns`) of every concrete Traffic of the list
    on ``s``, ns, numpy float64 ``[len(traffics)]``, in a few compiled calls.

    Tables are grouped by phase count (``n_phases``, else each table's own); a group is padded
    in numpy to one row count (:func:`batch_rows` of its longest table) and one batch size
    (:func:`batch_bucket`), copied to the device once and estimated by one program
    (:func:`~.api.estimate_batch_jit`: ``vmap`` on an accelerator, ``lax.map`` on a CPU, or as
    ``vectorize`` says; small calls on a CPU compiled for compile speed, ``QUICK_COMPILE_ROWS``), split
    into equal calls of at most ``max_batch_rows`` rows in all.  So tables of different lengths
    compile once per (system shape, phases, bucket, batch), not once per table.  Each value
    equals ``estimate_ns(s, pad_flows(t, bucket_rows(t.n_flows)), n_phases=...)`` to float32
    rounding (zero rows change no result; XLA fuses the two programs differently, which moves
    some results by one unit in the last place; tests compare them).
    """
    check_engine(engine, chunk_flows)
    cpu = jax.default_backend() == "cpu"
    vectorize = not cpu if vectorize is None else bool(vectorize)
    traffics = list(traffics)
    out = np.empty(len(traffics))
    phases = [resolve_n_phases(t, n_phases) for t in traffics]
    for P in sorted(set(phases)):
        idx = [i for i, p in enumerate(phases) if p == P]
        rows = batch_rows(max(traffics[i].n_flows for i in idx), chunk_flows)
        n_calls = -(-len(idx) // max(1, int(max_batch_rows) // rows))
        per_call = -(-len(idx) // n_calls)
        for j in range(0, len(idx), per_call):
            part = idx[j:j + per_call]
            batch = _stack_host([traffics[i] for i in part], rows, batch_bucket(per_call))
            quick = cpu and batch_bucket(per_call) * rows <= QUICK_COMPILE_ROWS
            fn = estimate_batch_quick_jit if quick else estimate_batch_jit
            est = fn(s, batch, n_phases=P, engine=engine, chunk_flows=int(chunk_flows), vectorize=vectorize)
            out[part] = np.asarray(est)[:len(part)]
    return out


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
