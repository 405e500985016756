"""Resource tables of the path model: per flow its zero-load latency, per (phase, resource) its busy
time, earliest arrival, least remaining time and longest latency, per (phase, CU) the window terms
(docs/analytical.md, section 2).  Two engines build them (``runs``: fast, XY runs as intervals;
``stages``: the [flows, stages] table, the reference); both give the same numbers."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...path import issue_cycle_ns, resource_layout
from ...system import System
from ...traffic import FIELDS, Traffic
from .segplan import segment_reduce

KINDS = ("cu", "hbm", "link", "egress", "ingress")
ENGINES = ("runs", "stages")
CHUNK_FLOWS = 32768  # stage engine: flows per chunk of the [F, S] table (bounds memory for huge tables)
BIG = 1e30           # "no flow" marker for min / max tables


class Tables(NamedTuple):
    """Everything the objective reads (ns; ``P`` phases, ``R`` resources, ``NC`` = GPUs x CUs)."""

    L: Any            # [F] zero-load latency of every flow
    load: Any         # [F] expected flits, weight * flits
    phase: Any        # [F]
    wseg: Any         # [F] window segment: phase * NC + gpu * n_cus + cu
    busy: Any         # [P, R] sum load * svc
    a: Any            # [P, R] least zero-load arrival at r of an active flow (+BIG if none)
    m: Any            # [P, R] least zero-load time from leaving r to delivery (+BIG if none)
    lr: Any           # [P, R] longest zero-load latency of an active flow through r (-BIG if none)
    svc_r: Any        # [R] service time per flit of every resource
    wbusy: Any        # [P, NC] window busy = sum load * (L - svc_issue) / W
    wflits: Any       # [P, NC] sum load
    wlat: Any         # [P, NC] sum load * L
    wfill: Any        # [P, NC] W * svc_issue where the CU's flits exceed its window W, else 0
    n_phases: int
    n_res: int
    n_cu: int
    plans: Any = None  # the hoisted structure of a hardware sweep (``runs_engine.sweep_plans``), or None


def resolve_n_phases(t: Traffic, n_phases: int | None = None) -> int:
    """Number of phases: ``n_phases`` if given, else ``max(phase) + 1`` of concrete traffic."""
    if n_phases is not None:
        n = int(n_phases)
        if n < 1:
            raise ValueError(f"n_phases must be >= 1, got {n_phases}")
        return n
    try:
        ph = np.asarray(t.phase)
    except Exception:  # traced
        raise ValueError("n_phases must be given when traffic.phase is traced (under jit/vmap)") from None
    return int(ph.max()) + 1 if ph.size else 1


def check_engine(engine: str, chunk_flows: int) -> None:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if int(chunk_flows) < 1:
        raise ValueError(f"chunk_flows must be >= 1, got {chunk_flows}")


def resource_kind_index(s: System) -> np.ndarray:
    """Kind (index into ``KINDS``) of every global resource id, numpy ``[n_resources]``."""
    lay = resource_layout(s)
    bounds = np.array([lay.offset_hbm, lay.offset_link, lay.offset_egress, lay.offset_ingress])
    k = np.searchsorted(bounds, np.arange(lay.per_gpu), side="right").astype(np.int32)
    return np.tile(k, s.n_gpus)


def resource_service_ns(s: System):
    """Service time per flit of every resource, ns, ``[n_resources]`` (traceable in ``s``)."""
    per_kind = jnp.stack([
        jnp.asarray(issue_cycle_ns(s), float),
        jnp.asarray(s.flit_bytes / s.hbm_bw_bytes_per_ns, float),
        jnp.asarray(s.flit_bytes / s.link_bw_bytes_per_ns, float),
        jnp.asarray(s.flit_bytes / s.port_bw_bytes_per_ns, float),
        jnp.asarray(s.flit_bytes / s.port_bw_bytes_per_ns, float),
    ])
    return per_kind[jnp.asarray(resource_kind_index(s))]


# ---------------------------------------------------------------------------
# the flow weight (docs/model.md, "Flow weight")
# ---------------------------------------------------------------------------
def load(t: Traffic):
    """Expected flits of every flow, ``weight * flits`` (what busy times count)."""
    return jnp.asarray(t.flits, dtype=jnp.result_type(float)) * jnp.asarray(t.weight, dtype=jnp.result_type(float))


def active(t: Traffic):
    """Flows that exist with some probability and carry flits."""
    return (jnp.asarray(t.flits) > 0) & (jnp.asarray(t.weight) > 0)


def smooth_log_weight(t: Traffic, tau, tau_w):
    """Log-weight of every flow inside the smooth maximum:
    ``log min(1, flits) + (tau_w / tau) log weight``, so a flow of weight ``w`` enters the
    log-sum-exp as if its latency were ``tau_w * ln(1/w)`` ns shorter.  0 for inactive flows
    (they are masked), with safe gradients at ``weight = 0``."""
    f = jnp.asarray(t.flits, dtype=jnp.result_type(float))
    w = jnp.asarray(t.weight, dtype=jnp.result_type(float))
    on = (f > 0) & (w > 0)
    lf = jnp.log(jnp.where(on, jnp.minimum(f, 1.0), 1.0))
    lw = jnp.log(jnp.where(on, w, 1.0))
    return jnp.where(on, lf + (tau_w / tau) * lw, 0.0)


def phase_of(t: Traffic, P: int):
    return jnp.clip(jnp.asarray(t.phase, jnp.int32), 0, P - 1)


# ---------------------------------------------------------------------------
# padding (numpy for concrete tables, jnp for traced ones)
# ---------------------------------------------------------------------------
def _on_host(t: Traffic) -> bool:
    return all(isinstance(getattr(t, k), np.ndarray) for k in FIELDS)


def pad_traffic(t: Traffic, n_rows: int) -> Traffic:
    """``t`` with zero rows appended up to ``n_rows`` (zero flits, weight 0: they change no
    result); ``n_rows`` is static.  Numpy tables are padded in numpy (no device work, no XLA
    compilation per row count; dtypes as ``jnp.asarray`` would give them), anything else (jax
    arrays, tracers under ``jit``/``vmap``) in jnp."""
    F = int(np.shape(t.flits)[0])
    if n_rows < F:
        raise ValueError(f"pad_traffic: n_rows={n_rows} < n_flows={F}")
    if n_rows == F:
        return t
    if _on_host(t):
        def pad(v):
            dt = jax.dtypes.canonicalize_dtype(v.dtype)
            out = np.zeros(n_rows, dt)
            out[:F] = v
            return out
        return Traffic(**{k: pad(getattr(t, k)) for k in FIELDS})
    return Traffic(**{k: jnp.concatenate([jnp.asarray(getattr(t, k)),
                                          jnp.zeros((n_rows - F,), jnp.asarray(getattr(t, k)).dtype)])
                      for k in FIELDS})


def chunked(t: Traffic, chunk: int):
    """Padded traffic reshaped to ``[n_chunks, chunk]`` per field."""
    F = int(np.shape(t.flits)[0])
    tp = pad_traffic(t, -(-F // chunk) * chunk)
    return jax.tree_util.tree_map(lambda v: jnp.reshape(v, (-1, chunk)), tp)


# ---------------------------------------------------------------------------
# assembling the tables
# ---------------------------------------------------------------------------
def window_segment(s: System, t: Traffic, P: int):
    """Window segment of every flow, ``phase * NC + gpu * n_cus + cu`` (``NC`` = GPUs x CUs)."""
    return phase_of(t, P) * (s.n_gpus * s.n_cus) + jnp.asarray(t.src_gpu, jnp.int32) * s.n_cus \
        + jnp.asarray(t.cu, jnp.int32)


def window_terms(s: System, t: Traffic, L, P: int, plans: dict | None = None):
    """(wseg, wbusy, wflits, wlat, wfill) of the CU outstanding-request window (Little's law;
    ``wfill``: the first window's issue time, docs/analytical.md 2.3)."""
    return window_terms_of(s, window_segment(s, t, P), load(t), L, P, plans)


def window_terms_of(s: System, wseg, ld, L, P: int, plans: dict | None = None):
    """:func:`window_terms` from columns: window segment ``wseg``, expected flits ``ld`` and
    zero-load latency ``L`` of every flow (also the background's flows, ``.background``)."""
    NC = s.n_gpus * s.n_cus
    w = (plans or {}).get("w")
    hold = jnp.maximum(L - issue_cycle_ns(s), 0.0)
    wbusy = segment_reduce("sum", ld * hold, wseg, P * NC, w).reshape(P, NC) / s.max_outstanding_per_cu
    wflits = segment_reduce("sum", ld, wseg, P * NC, w).reshape(P, NC)
    wlat = segment_reduce("sum", ld * L, wseg, P * NC, w).reshape(P, NC)
    W = s.max_outstanding_per_cu
    wfill = jnp.where(wflits > W, W * issue_cycle_ns(s), 0.0)
    return wseg, wbusy, wflits, wlat, wfill


def assemble(s: System, t: Traffic, P: int, L, busy, a, m, lr, plans: dict | None = None) -> Tables:
    """Tables from an engine's per-resource arrays (each ``[P, R]``) and flow latencies."""
    wseg, wbusy, wflits, wlat, wfill = window_terms(s, t, L, P, plans)
    R = resource_layout(s).n_resources
    return Tables(L, load(t), phase_of(t, P), wseg, busy, a, m, lr, resource_service_ns(s),
                  wbusy, wflits, wlat, wfill, P, R, s.n_gpus * s.n_cus, plans)
