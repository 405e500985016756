"""The NUNA path model over ``Traffic``: latency, busy times, bound, estimate.

Built on :func:`nuna_jax.path.flow_stages` (docs/model.md, "The path of a
flit"); the model itself is defined in docs/analytical.md.  In short, per
phase ``k`` (phases are barriers, so phase times add):

* ``L_f``: zero-load latency of flow ``f`` (sum of ``svc + lat`` over its stages).
* ``B_r``: busy time of resource ``r`` = sum over stages on ``r`` of
  ``flits * svc`` (a resource serves one flit at a time).
* CU window: a CU holds at most ``W`` flits in flight and each flit holds
  its slot for at least ``L_f - svc_issue`` (Little's law), so
  ``B_cu = sum_f flits_f (L_f - svc_issue) / W`` is a busy time too.

Lower bound (no schedule can beat it)::

    T_k >= max( max_f L_f,
                max_r  a_r + B_r + m_r,        a_r: least zero-load arrival at r,
                                               m_r: least time from leaving r to delivery
                max_cu B_cu )

Estimate (latency + bottleneck backlog; Hockney's alpha-beta / LogGP's
``L + (k-1) G``, exact for one pipelined flow)::

    T_k ~= max( max_r  Lmax_r + (B_r - svc_r)^+,
                max_cu Lmax_cu + (B_cu - Lbar_cu)^+ )

with ``Lmax_r`` the longest zero-load latency among flows through ``r`` and
``Lbar_cu`` the flit-weighted mean latency of the CU's flows.  It is never
below the bound (docs/analytical.md proves it).  The smooth estimate
replaces every max by a log-sum-exp at temperature ``tau`` (ns), each flow
weighted by ``min(1, flits) * weight ** (tau_w / tau)``; it tends to the
estimate as ``tau -> 0``.

Soft traffic goes through the same functions: busy times count
``weight * flits`` (docs/model.md, "Flow weight").
Everything is ``jit``/``vmap``/``grad``-able; the number of phases is static
(read from concrete ``traffic.phase`` or passed as ``n_phases``).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..path import flow_stages, resource_layout
from ..system import System, cu_router, port_router, stack_router
from . import mesh
from ..traffic import FIELDS, Traffic

__all__ = [
    "KINDS", "resolve_n_phases", "flow_latency_ns", "resource_busy_ns", "window_busy_ns",
    "lower_bound_ns", "estimate_ns", "smooth_estimate_ns", "PathCosts", "analyze", "breakdown",
    "resource_service_ns", "resource_kind_index", "bucket_rows", "pad_flows", "evaluate", "CHUNK_FLOWS",
]

KINDS = ("cu", "hbm", "link", "egress", "ingress")
_BIG = 1e30


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


def resource_kind_index(s: System) -> np.ndarray:
    """Kind (index into ``KINDS``) of every global resource id, numpy ``[n_resources]``."""
    lay = resource_layout(s)
    local = np.arange(lay.per_gpu)
    bounds = np.array([lay.offset_hbm, lay.offset_link, lay.offset_egress, lay.offset_ingress])
    k = np.searchsorted(bounds, local, side="right").astype(np.int32)
    return np.tile(k, s.n_gpus)


def resource_service_ns(s: System):
    """Service time per flit of every resource, ns, ``[n_resources]`` (traceable in ``s``)."""
    per_kind = jnp.stack([
        jnp.asarray(1.0 / s.noc_clock_ghz, float),
        jnp.asarray(s.flit_bytes / s.hbm_bw_bytes_per_ns, float),
        jnp.asarray(s.flit_bytes / s.link_bw_bytes_per_ns, float),
        jnp.asarray(s.flit_bytes / s.port_bw_bytes_per_ns, float),
        jnp.asarray(s.flit_bytes / s.port_bw_bytes_per_ns, float),
    ])
    return per_kind[jnp.asarray(resource_kind_index(s))]


def _load(t: Traffic):
    """Expected flits of every flow, ``weight * flits`` (what busy times count)."""
    return jnp.asarray(t.flits, dtype=jnp.result_type(float)) * jnp.asarray(t.weight, dtype=jnp.result_type(float))


def _active(t: Traffic):
    """Flows that exist with some probability and carry flits."""
    return (jnp.asarray(t.flits) > 0) & (jnp.asarray(t.weight) > 0)


def _smooth_log_weight(t: Traffic, tau, tau_w):
    """Log-weight of every flow inside the smooth maximum (docs/model.md, "Flow weight"):
    ``log min(1, flits) + (tau_w / tau) log weight``, so a flow of weight ``w`` enters the
    log-sum-exp as if its latency were ``tau_w * ln(1/w)`` ns shorter.  0 for inactive flows
    (they are masked), with safe gradients at ``weight = 0``."""
    f = jnp.asarray(t.flits, dtype=jnp.result_type(float))
    w = jnp.asarray(t.weight, dtype=jnp.result_type(float))
    on = (f > 0) & (w > 0)
    lf = jnp.log(jnp.where(on, jnp.minimum(f, 1.0), 1.0))
    lw = jnp.log(jnp.where(on, w, 1.0))
    return jnp.where(on, lf + (tau_w / tau) * lw, 0.0)


ENGINE = "runs"  # "runs" (fast, interval updates) or "stages" (the [F, S] stage table, reference)
CHUNK_FLOWS = 32768  # flows per chunk of the [F, S] stage table (bounds memory for huge tables)


class _Tables(NamedTuple):
    L: Any            # [F] zero-load latency
    flits: Any        # [F]
    phase: Any        # [F]
    wseg: Any         # [F] phase * NC + gpu * n_cus + cu
    busy: Any         # [P, R] sum flits * svc
    a: Any            # [P, R] least zero-load arrival at r of an active flow (+BIG if none)
    m: Any            # [P, R] least zero-load time from leaving r to delivery (+BIG if none)
    lr: Any           # [P, R] longest zero-load latency of an active flow through r (-BIG if none)
    svc_r: Any        # [R]
    wbusy: Any        # [P, NC]  window busy = sum flits * (L - svc_issue) / W
    wflits: Any       # [P, NC]
    wlat: Any         # [P, NC]  sum flits * L
    n_phases: int
    n_res: int
    n_cu: int
    chunk: int        # stage engine: flows per chunk; 0 = runs engine


def _stage_view(s: System, t: Traffic, P: int):
    """Per-(flow, stage) arrays of a (chunk of a) flow table."""
    st = flow_stages(s, t)
    R = resource_layout(s).n_resources
    flits = jnp.asarray(t.flits, dtype=jnp.result_type(float))
    phase = jnp.clip(jnp.asarray(t.phase, jnp.int32), 0, P - 1)
    step_t = st.service_ns + st.latency_ns
    L = jnp.sum(step_t, axis=1)
    prefix = jnp.cumsum(step_t, axis=1) - step_t
    rem = L[:, None] - prefix - st.service_ns
    seg = jnp.where(st.resource >= 0, phase[:, None] * R + st.resource, P * R)
    return L, flits, prefix, rem, seg, st.service_ns


def _reduce_chunk(s: System, t: Traffic, P: int):
    R = resource_layout(s).n_resources
    L, flits, prefix, rem, seg, svc = _stage_view(s, t, P)
    n = P * R + 1
    sg = seg.ravel()
    act = _active(t)[:, None] & (seg < P * R)
    busy = jax.ops.segment_sum((_load(t)[:, None] * svc).ravel(), sg, num_segments=n)
    a = jax.ops.segment_min(jnp.where(act, prefix, _BIG).ravel(), sg, num_segments=n)
    m = jax.ops.segment_min(jnp.where(act, rem, _BIG).ravel(), sg, num_segments=n)
    lr = jax.ops.segment_max(jnp.where(act, L[:, None], -_BIG).ravel(), sg, num_segments=n)
    return L, busy, a, m, lr


def _pad_rows(t: Traffic, n_pad: int) -> Traffic:
    """Append ``n_pad`` zero-flit rows (ignored by every function here)."""
    if n_pad == 0:
        return t
    def pad(v):
        v = jnp.asarray(v)
        return jnp.concatenate([v, jnp.zeros((n_pad,), v.dtype)])
    return Traffic(**{k: pad(getattr(t, k)) for k in FIELDS})


def _chunked(t: Traffic, chunk: int):
    """(padded traffic reshaped to [n_chunks, chunk] per field, F)."""
    F = int(np.shape(t.flits)[0])
    nc = -(-F // chunk)
    tp = _pad_rows(t, nc * chunk - F)
    return jax.tree_util.tree_map(lambda v: jnp.reshape(v, (nc, chunk)), tp), F


def _tables(s: System, t: Traffic, n_phases: int, chunk: int | None = None, engine: str | None = None) -> _Tables:
    engine = ENGINE if engine is None else engine
    if engine == "runs":
        return _tables_runs(s, t, n_phases)
    if engine != "stages":
        raise ValueError(f"engine must be 'runs' or 'stages', got {engine!r}")
    chunk = int(CHUNK_FLOWS if chunk is None else chunk)
    lay = resource_layout(s)
    R, P = lay.n_resources, n_phases
    NC = s.n_gpus * s.n_cus
    F = int(np.shape(t.flits)[0])
    if F <= chunk:
        L, busy, a, m, lr = _reduce_chunk(s, t, P)
    else:  # scan over chunks: memory O(chunk * n_stages), not O(F * n_stages)
        tc, _ = _chunked(t, chunk)
        n = P * R + 1
        init = (jnp.zeros(n), jnp.full(n, _BIG), jnp.full(n, _BIG), jnp.full(n, -_BIG))

        def body(carry, tch):
            L_, b_, a_, m_, l_ = _reduce_chunk(s, tch, P)
            cb, ca, cm, cl = carry
            return (cb + b_, jnp.minimum(ca, a_), jnp.minimum(cm, m_), jnp.maximum(cl, l_)), L_

        (busy, a, m, lr), Ls = jax.lax.scan(body, init, tc)
        L = Ls.reshape(-1)[:F]
    flits = _load(t)
    phase = jnp.clip(jnp.asarray(t.phase, jnp.int32), 0, P - 1)
    svc_issue = 1.0 / s.noc_clock_ghz
    wseg = phase * NC + jnp.asarray(t.src_gpu, jnp.int32) * s.n_cus + jnp.asarray(t.cu, jnp.int32)
    hold = jnp.maximum(L - svc_issue, 0.0)
    wbusy = jax.ops.segment_sum(flits * hold, wseg, num_segments=P * NC).reshape(P, NC) \
        / s.max_outstanding_per_cu
    wflits = jax.ops.segment_sum(flits, wseg, num_segments=P * NC).reshape(P, NC)
    wlat = jax.ops.segment_sum(flits * L, wseg, num_segments=P * NC).reshape(P, NC)
    shp = lambda v: v[:-1].reshape(P, R)  # noqa: E731
    return _Tables(L, flits, phase, wseg, shp(busy), shp(a), shp(m), shp(lr), resource_service_ns(s),
                   wbusy, wflits, wlat, P, R, NC, chunk)


# ---------------------------------------------------------------------------
# the fast engine: per-flow closed-form stage times + XY runs as intervals
# ---------------------------------------------------------------------------
# The stage table has 3 * max_hops + 6 columns, most of them mesh links.  A mesh
# leg under XY routing is two straight runs (X along the source row, then Y along
# the destination column), so "every link of the run" is an interval of link
# positions on one line of the mesh.  Per-link sums become difference arrays
# (+v at the start, -v past the end, then a cumulative sum), per-link max / min
# become two updates of a sparse table (blocks of length 2^k covering the run)
# pushed down level by level.  Arrival times along a run are affine in the
# position (plus die crossings, a fixed function of the position), so the least
# arrival / least remaining time are also range-min updates of one number per
# flow.  Results equal the stage-table engine exactly (tests compare them).

def _level_count(n: int) -> int:
    return max(1, int(np.floor(np.log2(max(n, 1)))) + 1)


def _flow_times(s: System, t: Traffic):
    """Per-flow zero-load stage times (docs/model.md table), ns, and endpoint coordinates: [F] arrays.

    Coordinates come from small constant tables (router positions of every CU,
    stack and port), not from integer division, so that XLA can recompute them
    cheaply wherever it fuses them (on CPU it re-fuses per-flow values into every
    consumer)."""
    C = s.mesh_cols
    def xy_die(routers):
        r = np.asarray(routers)
        x, y = r % C, r // C
        return (jnp.asarray(x, jnp.int32), jnp.asarray(y, jnp.int32),
                jnp.asarray(x // s.cols_per_die, jnp.int32))
    cux, cuy, cud = xy_die(cu_router(s))
    stx, sty, std = xy_die(stack_router(s))
    ptx, pty, ptd = xy_die(port_router(s))
    cu, rs = jnp.asarray(t.cu, jnp.int32), jnp.asarray(t.read_stack, jnp.int32)
    pt, ds = jnp.asarray(t.port, jnp.int32), jnp.asarray(t.dst_stack, jnp.int32)
    E = dict(cu=(cux[cu], cuy[cu], cud[cu]), rs=(stx[rs], sty[rs], std[rs]),
             pt=(ptx[pt], pty[pt], ptd[pt]), ds=(stx[ds], sty[ds], std[ds]))
    ph = s.flit_bytes / s.link_bw_bytes_per_ns + s.hop_ns
    d = s.die_crossing_ns

    def hops(a, b):
        return jnp.abs(E[a][0] - E[b][0]) + jnp.abs(E[a][1] - E[b][1])

    def cross(a, b):
        return jnp.abs(E[a][2] - E[b][2])

    def leg(a, b):  # = path.leg_latency_ns
        return hops(a, b) * ph + cross(a, b) * d

    cyc = 1.0 / s.noc_clock_ghz
    hbm_svc = s.flit_bytes / s.hbm_bw_bytes_per_ns
    port_svc = s.flit_bytes / s.port_bw_bytes_per_ns
    p_read = cyc + s.cu_to_noc_ns + hops("cu", "rs") * s.hop_ns + cross("cu", "rs") * d  # = mesh.latency_ns
    p_a = p_read + hbm_svc + s.hbm_latency_ns
    p_b = p_a + leg("rs", "cu") + s.cu_to_noc_ns
    p_e = p_b + leg("cu", "pt")
    p_i = p_e + port_svc + s.switch_latency_ns
    p_c = p_i + port_svc
    p_w = p_c + leg("pt", "ds")
    L = p_w + hbm_svc + s.hbm_latency_ns
    return dict(E=E, p_read=p_read, p_a=p_a, p_b=p_b, p_e=p_e, p_i=p_i, p_c=p_c, p_w=p_w, L=L,
                cyc=cyc, hbm_svc=hbm_svc, port_svc=port_svc)


class _Runs(NamedTuple):
    """The 6 straight runs of every flow (3 legs x {X, Y}), flattened to [6F]."""

    dirn: Any    # 0 E, 1 W, 2 S, 3 N
    line: Any    # flat line id within its direction grid: (phase * G + gpu) * n_lines + row/col
    lo: Any      # first link position (inclusive)
    hi: Any      # last link position + 1 (exclusive); lo == hi: empty run
    K: Any       # arrival(j) = K + g_dir(j)
    L: Any       # the flow's zero-load latency
    load: Any    # the flow's expected flits, weight * flits
    act: Any     # the flow is active (flits > 0 and weight > 0)
    logw: Any    # the flow's log-weight in the smooth maximum (:func:`_smooth_log_weight`)


def _runs(s: System, t: Traffic, ft: dict, P: int, logw=None) -> _Runs:
    C, Rw = s.mesh_cols, s.mesh_rows
    G = s.n_gpus
    ph = s.flit_bytes / s.link_bw_bytes_per_ns + s.hop_ns
    d = s.die_crossing_ns
    phase = jnp.clip(jnp.asarray(t.phase, jnp.int32), 0, P - 1)
    g_src = jnp.asarray(t.src_gpu, jnp.int32)
    g_dst = jnp.asarray(t.dst_gpu, jnp.int32)
    parts = []
    E = ft["E"]
    for a, b, t0, gpu in (("rs", "cu", ft["p_a"], g_src), ("cu", "pt", ft["p_b"], g_src),
                          ("pt", "ds", ft["p_c"], g_dst)):
        (sx, sy, sdie), (dx, dy, ddie) = E[a], E[b]
        east = dx > sx
        # X run along row sy
        lo_x = jnp.where(east, sx, dx + 1)
        hi_x = jnp.where(east, dx, sx + 1)
        hi_x = jnp.where(dx == sx, lo_x, hi_x)
        k_x = jnp.where(east, t0 - sx * ph - d * sdie, t0 + sx * ph + d * sdie)
        dir_x = jnp.where(east, 0, 1)
        line_x = (phase * G + gpu) * Rw + sy
        # Y run along column dx, starting after the X run
        t0y = t0 + jnp.abs(dx - sx) * ph + d * jnp.abs(ddie - sdie)
        south = dy > sy
        lo_y = jnp.where(south, sy, dy + 1)
        hi_y = jnp.where(south, dy, sy + 1)
        hi_y = jnp.where(dy == sy, lo_y, hi_y)
        k_y = jnp.where(south, t0y - sy * ph, t0y + sy * ph)
        dir_y = jnp.where(south, 2, 3)
        line_y = (phase * G + gpu) * C + dx
        parts.append((dir_x, line_x, lo_x, hi_x, k_x))
        parts.append((dir_y, line_y, lo_y, hi_y, k_y))
    cat = lambda i: jnp.concatenate([q[i] for q in parts])  # noqa: E731
    n = len(parts)
    logw = jnp.zeros_like(ft["L"]) if logw is None else logw
    return _Runs(cat(0).astype(jnp.int32), cat(1).astype(jnp.int32), cat(2).astype(jnp.int32),
                 cat(3).astype(jnp.int32), cat(4), jnp.tile(ft["L"], n), jnp.tile(_load(t), n),
                 jnp.tile(_active(t), n), jnp.tile(logw, n))


def _g(s: System, dirn: int, pos):
    ph = s.flit_bytes / s.link_bw_bytes_per_ns + s.hop_ns
    d = s.die_crossing_ns
    if dirn == 0:
        return pos * ph + d * (pos // s.cols_per_die)
    if dirn == 1:
        return -pos * ph - d * (pos // s.cols_per_die)
    return pos * ph if dirn == 2 else -pos * ph


def _grid_shape(s: System, P: int, dirn: int):
    """(n_lines_total, line_length) of a direction grid."""
    if dirn < 2:
        return P * s.n_gpus * s.mesh_rows, s.mesh_cols
    return P * s.n_gpus * s.mesh_cols, s.mesh_rows


_DEAD = 1024  # padding segments for masked entries (spread, so they do not pile onto one address)


def _by_dir(dirn, values):
    """values[dirn] for 4 static ints, as selects (a gather here defeats XLA CPU fusion)."""
    v = [int(x) for x in values]
    return jnp.where(dirn == 0, v[0], jnp.where(dirn == 1, v[1], jnp.where(dirn == 2, v[2], v[3]))).astype(jnp.int32)


def _dead_idx(base: int, n: int):
    return base + (jnp.arange(n, dtype=jnp.int32) % _DEAD)


def _range_sum(s: System, P: int, ru: _Runs, val, act):
    """Per direction, [lines, length]: sum of ``val`` over runs covering each link
    (difference arrays: +v at the first link, -v past the last, cumulative sum)."""
    shapes = [_grid_shape(s, P, dn) for dn in range(4)]
    sizes = [nl * (n + 1) for nl, n in shapes]
    offs = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n_tot = int(offs[-1])
    on = act & (ru.hi > ru.lo)
    width = _by_dir(ru.dirn, [n + 1 for _, n in shapes])
    base = _by_dir(ru.dirn, offs[:4]) + ru.line * width
    m = ru.lo.shape[0]
    idx = jnp.concatenate([jnp.where(on, base + ru.lo, _dead_idx(n_tot, m)),
                           jnp.where(on, base + ru.hi, _dead_idx(n_tot, m))])
    v = jnp.concatenate([jnp.where(on, val, 0.0), jnp.where(on, -val, 0.0)])
    idx, v = jax.lax.optimization_barrier((idx, v))
    flat = jax.ops.segment_sum(v, idx, num_segments=n_tot + _DEAD)
    out = []
    for dn, (nl, n) in enumerate(shapes):
        diff = flat[offs[dn]:offs[dn + 1]].reshape(nl, n + 1)
        out.append(jnp.cumsum(diff, axis=1)[:, :n])
    return out


def _range_ext(s: System, P: int, ru: _Runs, val, act, op: str):
    """Per direction, [lines, length]: max (op='max') or min of ``val`` over runs covering each link
    (identity -/+BIG where none), by a sparse table: each run updates two blocks of length 2^k
    (k = floor log2 of its length) that together cover it; levels are pushed down to length 1."""
    ident = -_BIG if op == "max" else _BIG
    seg_op = jax.ops.segment_max if op == "max" else jax.ops.segment_min
    comb = jnp.maximum if op == "max" else jnp.minimum
    shapes = [_grid_shape(s, P, dn) for dn in range(4)]
    nks = [_level_count(n) for _, n in shapes]
    sizes = [nl * nk * n for (nl, n), nk in zip(shapes, nks)]
    offs = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n_tot = int(offs[-1])
    on = act & (ru.hi > ru.lo)
    ln = jnp.maximum(ru.hi - ru.lo, 1)
    k = jnp.zeros_like(ln)
    for kk in range(1, max(nks)):          # k = floor(log2(len)), exactly, in integers
        k = jnp.where(ln >= (1 << kk), kk, k)
    nlen = _by_dir(ru.dirn, [n for _, n in shapes])
    nkd = _by_dir(ru.dirn, nks)
    base = _by_dir(ru.dirn, offs[:4]) + (ru.line * nkd + k) * nlen
    m = ru.lo.shape[0]
    idx = jnp.concatenate([jnp.where(on, base + ru.lo, _dead_idx(n_tot, m)),
                           jnp.where(on, base + ru.hi - jnp.left_shift(1, k), _dead_idx(n_tot, m))])
    v = jnp.concatenate([jnp.where(on, val, ident), jnp.where(on, val, ident)])
    idx, v = jax.lax.optimization_barrier((idx, v))
    flat = seg_op(v, idx, num_segments=n_tot + _DEAD)
    out = []
    for dn, ((nl, n), nk) in enumerate(zip(shapes, nks)):
        tab = flat[offs[dn]:offs[dn + 1]].reshape(nl, nk, n)
        tab = jnp.where(jnp.abs(tab) < _BIG / 2, tab, ident)   # empty segments of segment_max/min
        lvl = tab[:, nk - 1, :]
        for kk in range(nk - 1, 0, -1):
            half = 1 << (kk - 1)
            shifted = jnp.concatenate([jnp.full((nl, half), ident, lvl.dtype), lvl[:, :n - half]], axis=1)
            lvl = comb(comb(tab[:, kk - 1, :], lvl), shifted)
        out.append(lvl)
    return out


def _links_to_resources(s: System, P: int, grids, fill):
    """Four direction grids -> [P, G, n_link_slots] in mesh.route_links' slot order (4 * router + dir)."""
    G, C, Rw = s.n_gpus, s.mesh_cols, s.mesh_rows
    e, w = (g.reshape(P, G, Rw, C) for g in grids[:2])
    so, no = (g.reshape(P, G, C, Rw).transpose(0, 1, 3, 2) for g in grids[2:])
    slots = jnp.stack([e, w, so, no], axis=-1)  # [P, G, rows, cols, 4]
    return slots.reshape(P, G, Rw * C * 4)


def _place(s: System, P: int, nonlink_flat, link_pgl, fill):
    """Combine scattered non-link values ([P * R + 1] by global id) and link grids into [P, R]."""
    lay = resource_layout(s)
    G = s.n_gpus
    a = nonlink_flat[:-1].reshape(P, G, lay.per_gpu)
    a = a.at[:, :, lay.offset_link:lay.offset_link + mesh.n_link_slots(s)].set(link_pgl)
    return a.reshape(P, G * lay.per_gpu)


def _nonlink_entries(s: System, t: Traffic, ft: dict, P: int):
    """(seg [5F], arrival [5F], remaining [5F], svc [5F]) of the CU, HBM read, egress, ingress, HBM write stages."""
    lay = resource_layout(s)
    R = lay.n_resources
    phase = jnp.clip(jnp.asarray(t.phase, jnp.int32), 0, P - 1)
    g, dg = jnp.asarray(t.src_gpu, jnp.int32), jnp.asarray(t.dst_gpu, jnp.int32)
    cu, rs = jnp.asarray(t.cu, jnp.int32), jnp.asarray(t.read_stack, jnp.int32)
    p, ds = jnp.asarray(t.port, jnp.int32), jnp.asarray(t.dst_stack, jnp.int32)
    L = ft["L"]
    res = [g * lay.per_gpu + lay.offset_cu + cu, g * lay.per_gpu + lay.offset_hbm + rs,
           g * lay.per_gpu + lay.offset_egress + p, dg * lay.per_gpu + lay.offset_ingress + p,
           dg * lay.per_gpu + lay.offset_hbm + ds]
    arr = [jnp.zeros_like(L), ft["p_read"], ft["p_e"], ft["p_i"], ft["p_w"]]
    one = jnp.ones_like(L)
    svc = [ft["cyc"] * one, ft["hbm_svc"] * one, ft["port_svc"] * one, ft["port_svc"] * one, ft["hbm_svc"] * one]
    seg = jnp.concatenate([phase * R + r for r in res])
    arrival = jnp.concatenate(arr)
    sv = jnp.concatenate(svc)
    rem = jnp.tile(L, 5) - arrival - sv
    return seg, arrival, rem, sv


def _tables_runs(s: System, t: Traffic, P: int) -> _Tables:
    lay = resource_layout(s)
    R = lay.n_resources
    NC = s.n_gpus * s.n_cus
    ft = _flow_times(s, t)
    L = ft["L"]
    flits = _load(t)
    act = _active(t)
    n = P * R + 1
    seg, arrival, rem, sv = _nonlink_entries(s, t, ft, P)
    act5 = jnp.tile(act, 5)
    f5 = jnp.tile(flits, 5)
    L5 = jnp.tile(L, 5)
    busy_nl = jax.ops.segment_sum(f5 * sv, seg, num_segments=n)
    a_nl = jax.ops.segment_min(jnp.where(act5, arrival, _BIG), seg, num_segments=n)
    m_nl = jax.ops.segment_min(jnp.where(act5, rem, _BIG), seg, num_segments=n)
    lr_nl = jax.ops.segment_max(jnp.where(act5, L5, -_BIG), seg, num_segments=n)
    ru = _runs(s, t, ft, P)
    ract = ru.act
    link_svc = s.flit_bytes / s.link_bw_bytes_per_ns
    busy_l = [g * link_svc for g in _range_sum(s, P, ru, ru.load, ract)]
    lr_l = _range_ext(s, P, ru, ru.L, ract, "max")
    kmin = _range_ext(s, P, ru, ru.K, ract, "min")
    lkmin = _range_ext(s, P, ru, ru.L - ru.K, ract, "min")
    a_l, m_l = [], []
    for dn in range(4):
        nl, nn = _grid_shape(s, P, dn)
        gj = _g(s, dn, jnp.arange(nn, dtype=jnp.result_type(float)))[None, :]
        used = kmin[dn] < _BIG / 2
        a_l.append(jnp.where(used, kmin[dn] + gj, _BIG))
        m_l.append(jnp.where(used, lkmin[dn] - gj - link_svc, _BIG))
    busy = _place(s, P, busy_nl, _links_to_resources(s, P, busy_l, 0.0), 0.0)
    a = _place(s, P, a_nl, _links_to_resources(s, P, a_l, _BIG), _BIG)
    m = _place(s, P, m_nl, _links_to_resources(s, P, m_l, _BIG), _BIG)
    lr = _place(s, P, lr_nl, _links_to_resources(s, P, lr_l, -_BIG), -_BIG)
    phase = jnp.clip(jnp.asarray(t.phase, jnp.int32), 0, P - 1)
    wseg = phase * NC + jnp.asarray(t.src_gpu, jnp.int32) * s.n_cus + jnp.asarray(t.cu, jnp.int32)
    hold = jnp.maximum(L - ft["cyc"], 0.0)
    wbusy = jax.ops.segment_sum(flits * hold, wseg, num_segments=P * NC).reshape(P, NC) \
        / s.max_outstanding_per_cu
    wflits = jax.ops.segment_sum(flits, wseg, num_segments=P * NC).reshape(P, NC)
    wlat = jax.ops.segment_sum(flits * L, wseg, num_segments=P * NC).reshape(P, NC)
    return _Tables(L, flits, phase, wseg, busy, a, m, lr, resource_service_ns(s), wbusy, wflits, wlat,
                   P, R, NC, 0)


def _smooth_sums_runs(s: System, t: Traffic, tb: _Tables, lr, tau, logw):
    """Engine 'runs' version of :func:`_smooth_resource_sums`, returned in log form:
    ``log S_r`` relative to ``lr`` (i.e. ``lse_r = lr + tau * out``), ``[P, R]``; links use one
    stabilizer per mesh line and fall back to the hard max where the sum is not resolvable."""
    P, R = tb.n_phases, tb.n_res
    ft = _flow_times(s, t)
    act = _active(t)
    seg, _, _, _ = _nonlink_entries(s, t, ft, P)
    lr_flat = jnp.concatenate([jnp.where(lr > -_BIG / 2, lr, 0.0).ravel(), jnp.zeros(1, lr.dtype)])
    act5 = jnp.tile(act, 5)
    z = jnp.where(act5, (jnp.tile(tb.L, 5) - lr_flat[seg]) / tau + jnp.tile(logw, 5), -1e4)
    e = jnp.where(act5, jnp.exp(z), 0.0)
    s_nl = jax.ops.segment_sum(e, seg, num_segments=P * R + 1)
    ru = _runs(s, t, ft, P, logw)
    ract = ru.act
    lay = resource_layout(s)
    G = s.n_gpus
    lr_links = lr.reshape(P, G, lay.per_gpu)[:, :, lay.offset_link:lay.offset_link + mesh.n_link_slots(s)]
    lr_links = lr_links.reshape(P, G, s.mesh_rows, s.mesh_cols, 4)
    grids, c_lines = [], []
    zr = jnp.full(ru.L.shape, -1e4, ru.L.dtype)
    for dn in range(4):
        nl, n = _grid_shape(s, P, dn)
        g = lr_links[..., dn]
        g = g.reshape(nl, n) if dn < 2 else g.transpose(0, 1, 3, 2).reshape(nl, n)
        c_line = jnp.max(jnp.where(g > -_BIG / 2, g, -_BIG), axis=1)           # [nl]
        c_line = jnp.where(c_line > -_BIG / 2, c_line, 0.0)
        on = ract & (ru.dirn == dn) & (ru.hi > ru.lo)      # empty runs cover no link
        zr = jnp.where(on, (ru.L - c_line[jnp.clip(ru.line, 0, nl - 1)]) / tau, zr)
        grids.append(g)
        c_lines.append(c_line)
    ron = ract & (ru.hi > ru.lo)
    val = jnp.where(ron, jnp.exp(jnp.where(ron, zr + ru.logw, -1e4)), 0.0)
    sums = _range_sum(s, P, ru, val, ract)
    logs = []
    for dn in range(4):
        g, c_line, sdir = grids[dn], c_lines[dn], sums[dn]
        # resolvable where the sum is not lost to float cancellation / underflow; else the hard max
        ok = (g > -_BIG / 2) & (sdir > 1e-6 * jnp.max(sdir, axis=1, keepdims=True)) & (sdir > 1e-30)
        rel = jnp.where(ok, c_line[:, None] + tau * jnp.log(jnp.where(ok, sdir, 1.0)) - g, 0.0)
        logs.append(rel / tau)
    link_logs = _links_to_resources(s, P, logs, 0.0)
    nl_log = jnp.log(jnp.where(s_nl > 0, s_nl, 1.0))
    return _place(s, P, nl_log, link_logs, 0.0)


@jax.jit
def flow_latency_ns(s: System, t: Traffic):
    """Zero-load latency of one flit of each flow, ns, ``[n_flows]`` (= ``path.zero_load_latency_ns``)."""
    st = flow_stages(s, t)
    return jnp.sum(st.service_ns + st.latency_ns, axis=1)


_STATIC = ("n_phases", "engine", "chunk")


def _static(t: Traffic, n_phases) -> dict:
    """Static arguments of the jitted kernels: phases, engine and chunk size (read at call time)."""
    return {"n_phases": resolve_n_phases(t, n_phases), "engine": ENGINE, "chunk": int(CHUNK_FLOWS)}


def resource_busy_ns(s: System, t: Traffic, n_phases: int | None = None):
    """Busy time of every resource per phase, ns, ``[n_phases, n_resources]``:
    ``sum flits * svc`` over the stages that use it."""
    return _busy_jit(s, t, **_static(t, n_phases))


@functools.partial(jax.jit, static_argnames=_STATIC)
def _busy_jit(s, t, n_phases, engine, chunk):
    return _tables(s, t, n_phases, chunk, engine).busy


def window_busy_ns(s: System, t: Traffic, n_phases: int | None = None):
    """Outstanding-request window 'busy time' per CU and phase, ns,
    ``[n_phases, n_gpus * n_cus]`` (index ``gpu * n_cus + cu``): by Little's law
    ``sum flits * (L_f - svc_issue) / max_outstanding_per_cu``."""
    return _wbusy_jit(s, t, **_static(t, n_phases))


@functools.partial(jax.jit, static_argnames=_STATIC)
def _wbusy_jit(s, t, n_phases, engine, chunk):
    return _tables(s, t, n_phases, chunk, engine).wbusy


# ---------------------------------------------------------------------------
# lower bound
# ---------------------------------------------------------------------------
def _phase_max_latency(tb: _Tables):
    act = tb.flits > 0
    v = jnp.where(act, tb.L, -_BIG)
    m = jax.ops.segment_max(v, tb.phase, num_segments=tb.n_phases)
    return jnp.maximum(m, 0.0)


def _lower_bound_phases(tb: _Tables):
    used = tb.a < _BIG / 2
    res = jnp.where(used, tb.a + tb.busy + tb.m, 0.0)
    lb_res = jnp.max(res, axis=1)
    lb_win = jnp.max(tb.wbusy, axis=1)
    return jnp.maximum(jnp.maximum(_phase_max_latency(tb), lb_res), lb_win)


def lower_bound_ns(s: System, t: Traffic, n_phases: int | None = None):
    """A lower bound on the completion time, ns (docs/analytical.md, "Lower bound").

    Per phase the max of: the longest zero-load flow latency; for every
    resource, its earliest zero-load arrival + busy time + least remaining
    latency; for every CU, the window busy time.  Phases add.  Valid for hard
    traffic under the semantics of docs/model.md.
    """
    return _lb_jit(s, t, **_static(t, n_phases))


@functools.partial(jax.jit, static_argnames=_STATIC)
def _lb_jit(s, t, n_phases, engine, chunk):
    return jnp.sum(_lower_bound_phases(_tables(s, t, n_phases, chunk, engine)))


# ---------------------------------------------------------------------------
# estimate (hard and smooth)
# ---------------------------------------------------------------------------
def _seg_lmax(tb: _Tables):
    """Longest zero-load latency among active flows, per (phase, resource) and per (phase, CU)."""
    act = tb.flits > 0
    lc = jax.ops.segment_max(jnp.where(act, tb.L, -_BIG), tb.wseg, num_segments=tb.n_phases * tb.n_cu)
    return tb.lr, lc.reshape(tb.n_phases, tb.n_cu)


def _excess(tb: _Tables):
    ex_r = jnp.maximum(tb.busy - tb.svc_r[None, :], 0.0)
    lbar = tb.wlat / jnp.where(tb.wflits > 0, tb.wflits, 1.0)
    ex_w = jnp.maximum(tb.wbusy - lbar, 0.0)
    return ex_r, ex_w


def _estimate_phases(tb: _Tables):
    lr, lc = _seg_lmax(tb)
    ex_r, ex_w = _excess(tb)
    used_r = lr > -_BIG / 2
    used_c = lc > -_BIG / 2
    term_r = jnp.where(used_r, lr + ex_r, 0.0)
    term_c = jnp.where(used_c, lc + ex_w, 0.0)
    return jnp.maximum(jnp.max(term_r, axis=1), jnp.max(term_c, axis=1)), term_r, term_c


def estimate_ns(s: System, t: Traffic, n_phases: int | None = None):
    """Best estimate of the completion time, ns (docs/analytical.md, "Estimate").

    Per phase ``max( max_r Lmax_r + (B_r - svc_r)^+, max_cu Lmax_cu + (B_cu - Lbar_cu)^+ )``;
    phases add.  Never below :func:`lower_bound_ns`.
    """
    return _est_jit(s, t, **_static(t, n_phases))


@functools.partial(jax.jit, static_argnames=_STATIC)
def _est_jit(s, t, n_phases, engine, chunk):
    return jnp.sum(_estimate_phases(_tables(s, t, n_phases, chunk, engine))[0])


def _smooth_resource_sums(s: System, t: Traffic, tb: _Tables, lr, tau, tau_w):
    """sum over active (flow, stage) on r of exp((L_f - Lmax_r) / tau + logw_f), [P, R]."""
    P, R = tb.n_phases, tb.n_res
    lr_pad = jnp.concatenate([jnp.where(lr > -_BIG / 2, lr, 0.0).ravel(), jnp.zeros(1, lr.dtype)])

    def part(tch):
        L, flits, _, _, seg, _ = _stage_view(s, tch, P)
        # z <= 0 by construction; no clamp (a min() tie at 0 would halve the gradient)
        on = (seg < P * R) & _active(tch)[:, None]
        z = jnp.where(on, (L[:, None] - lr_pad[seg]) / tau + _smooth_log_weight(tch, tau, tau_w)[:, None], -1e4)
        e = jnp.where(on, jnp.exp(z), 0.0)
        return jax.ops.segment_sum(e.ravel(), seg.ravel(), num_segments=P * R + 1)

    F = int(np.shape(t.flits)[0])
    if F <= tb.chunk:
        sr = part(t)
    else:
        tc, _ = _chunked(t, tb.chunk)
        sr, _ = jax.lax.scan(lambda c, tch: (c + part(tch), None), jnp.zeros(P * R + 1), tc)
    return sr[:-1].reshape(P, R)


def _smooth_phases(s: System, t: Traffic, tb: _Tables, tau, tau_w):
    P = tb.n_phases
    tau = jnp.asarray(tau, dtype=tb.L.dtype)
    lr, lc = _seg_lmax(tb)
    lr, lc = jax.lax.stop_gradient(lr), jax.lax.stop_gradient(lc)
    logw = _smooth_log_weight(t, tau, tau_w)
    used_r = lr > -_BIG / 2
    used_c = lc > -_BIG / 2
    # per-segment log-sum-exp of L_f with weights w_f, stabilized by the hard segment max
    if tb.chunk == 0:  # runs engine
        lse_r = jnp.where(used_r, lr + tau * _smooth_sums_runs(s, t, tb, lr, tau, logw), 0.0)
    else:
        sr = _smooth_resource_sums(s, t, tb, lr, tau, tau_w)
        sr_safe = jnp.where(used_r & (sr > 0), sr, 1.0)
        lse_r = jnp.where(used_r, lr + tau * jnp.log(sr_safe), 0.0)
    lc_safe = jnp.where(used_c, lc, 0.0)
    zc = (tb.L - lc_safe.ravel()[tb.wseg]) / tau + logw
    zc = jnp.where(_active(t), zc, -1e4)
    sc = jax.ops.segment_sum(jnp.exp(zc), tb.wseg,
                             num_segments=P * tb.n_cu).reshape(P, tb.n_cu)
    sc_safe = jnp.where(used_c & (sc > 0), sc, 1.0)
    lse_c = jnp.where(used_c, lc_safe + tau * jnp.log(sc_safe), 0.0)
    ex_r, ex_w = _excess(tb)
    term_r = lse_r + ex_r
    term_c = lse_c + ex_w
    allt = jnp.concatenate([term_r, term_c], axis=1)
    mask = jnp.concatenate([used_r, used_c], axis=1)
    mx = jax.lax.stop_gradient(jnp.max(jnp.where(mask, allt, -_BIG), axis=1, keepdims=True))
    mx = jnp.where(mx > -_BIG / 2, mx, 0.0)
    za = jnp.where(mask, (allt - mx) / tau, -1e4)
    ssum = jnp.sum(jnp.where(mask, jnp.exp(za), 0.0), axis=1)
    any_used = jnp.any(mask, axis=1)
    out = mx[:, 0] + tau * jnp.log(jnp.where(any_used, ssum, 1.0))
    return jnp.where(any_used, out, 0.0)


WEIGHT_TEMPERATURE_NS = 100.0


def smooth_estimate_ns(s: System, t: Traffic, temperature_ns=10.0, n_phases: int | None = None,
                       weight_temperature_ns=WEIGHT_TEMPERATURE_NS):
    """Smooth (differentiable) estimate, ns: :func:`estimate_ns` with every max a
    log-sum-exp at temperature ``temperature_ns``, each flow weighted by
    ``min(1, flits) * weight ** (weight_temperature_ns / temperature_ns)``
    (docs/model.md, "Flow weight").  ``>=`` the estimate up to the weights'
    ``tau log w``; tends to the estimate as the temperature falls to 0."""
    return _smooth_jit(s, t, temperature_ns, weight_temperature_ns, **_static(t, n_phases))


@functools.partial(jax.jit, static_argnames=_STATIC)
def _smooth_jit(s, t, temperature_ns, weight_temperature_ns, n_phases, engine, chunk):
    tb = _tables(s, t, n_phases, chunk, engine)
    return jnp.sum(_smooth_phases(s, t, tb, temperature_ns, weight_temperature_ns))


# ---------------------------------------------------------------------------
# everything at once, and a breakdown for reports
# ---------------------------------------------------------------------------
class PathCosts(NamedTuple):
    """Result of :func:`analyze` (all ns).  Per-phase arrays have length ``n_phases``."""

    flow_latency_ns: Any         # [F]
    busy_ns: Any                 # [P, R]
    window_busy_ns: Any          # [P, n_gpus * n_cus]
    phase_lower_bound_ns: Any    # [P]
    phase_estimate_ns: Any       # [P]
    phase_latency_ns: Any        # [P] longest zero-load flow latency
    kind_excess_ns: Any          # [P, 6] max backlog (B - svc)^+ per kind: cu, hbm, link, egress, ingress, window
    kind_term_ns: Any            # [P, 6] max (Lmax + backlog) per kind
    kind_busy_ns: Any            # [P, 6] max busy per kind
    lower_bound_ns: Any          # scalar
    estimate_ns: Any             # scalar
    smooth_estimate_ns: Any      # scalar (nan-free; at temperature_ns)


def analyze(s: System, t: Traffic, n_phases: int | None = None, temperature_ns=10.0,
            weight_temperature_ns=WEIGHT_TEMPERATURE_NS) -> PathCosts:
    """All the path model's quantities in one pass (jit-able with static ``n_phases``)."""
    return _analyze_impl(s, t, temperature_ns, weight_temperature_ns, **_static(t, n_phases))


@functools.partial(jax.jit, static_argnames=_STATIC)
def _analyze_impl(s, t, temperature_ns, weight_temperature_ns, n_phases, engine, chunk) -> PathCosts:
    tb = _tables(s, t, n_phases, chunk, engine)
    lb = _lower_bound_phases(tb)
    est, term_r, term_c = _estimate_phases(tb)
    ex_r, ex_w = _excess(tb)
    kind = jnp.asarray(resource_kind_index(s))
    nk = len(KINDS)

    def per_kind(v):  # [P, R] -> [P, nk] max over each kind
        return jax.vmap(lambda row: jax.ops.segment_max(row, kind, num_segments=nk))(v)

    kx = jnp.concatenate([jnp.maximum(per_kind(ex_r), 0.0), jnp.max(ex_w, axis=1, keepdims=True)], axis=1)
    kt = jnp.concatenate([jnp.maximum(per_kind(term_r), 0.0), jnp.max(term_c, axis=1, keepdims=True)], axis=1)
    kb = jnp.concatenate([jnp.maximum(per_kind(tb.busy), 0.0), jnp.max(tb.wbusy, axis=1, keepdims=True)], axis=1)
    sm = _smooth_phases(s, t, tb, temperature_ns, weight_temperature_ns)
    return PathCosts(tb.L, tb.busy, tb.wbusy, lb, est, _phase_max_latency(tb), kx, kt, kb,
                     jnp.sum(lb), jnp.sum(est), jnp.sum(sm))


def breakdown(c: PathCosts) -> dict:
    """Plain-float report of :func:`analyze`'s result (sums over phases).

    ``latency_ns``: longest zero-load flow latency; ``<kind>_ns``: the largest
    backlog ``(B - svc)^+`` on a resource of that kind (``port_ns`` = max of
    egress and ingress; ``window_ns`` the CU window's ``(B_cu - Lbar)^+``);
    ``busy_max_ns``: the largest busy time per kind; ``bottleneck``: the kind
    whose term ``Lmax + backlog`` sets the estimate (of the longest phase).
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


# ---------------------------------------------------------------------------
# convenience for CLIs and sweeps: pad to a few shapes, jit once per shape
# ---------------------------------------------------------------------------
def bucket_rows(n_flows: int) -> int:
    """Row count a flow table is padded to: the next power of two (>= 256) up to
    ``CHUNK_FLOWS``, then the next multiple of ``CHUNK_FLOWS`` (few shapes, few compiles)."""
    n = max(int(n_flows), 1)
    if n <= CHUNK_FLOWS:
        return max(256, 1 << (n - 1).bit_length())
    return -(-n // CHUNK_FLOWS) * CHUNK_FLOWS


def pad_flows(t: Traffic, n_rows: int) -> Traffic:
    """``t`` (concrete) with zero-flit rows appended up to ``n_rows`` (they change no result)."""
    F = t.n_flows
    if n_rows < F:
        raise ValueError(f"pad_flows: n_rows={n_rows} < n_flows={F}")
    out = {}
    for k in FIELDS:
        v = np.asarray(getattr(t, k))
        out[k] = np.concatenate([v, np.zeros(n_rows - F, v.dtype)])
    return Traffic(**out)




def evaluate(s: System, t: Traffic, temperature_ns: float = 10.0) -> dict:
    """Run the jitted :func:`analyze` on (padded) concrete traffic; plain-float report.

    Keys: ``time_ns`` (the estimate), ``lower_bound_ns``, ``smooth_estimate_ns``
    (at ``temperature_ns``), ``breakdown`` (:func:`breakdown`), ``n_flows``.
    """
    n_phases = resolve_n_phases(t)
    tp = pad_flows(t, bucket_rows(t.n_flows))
    c = analyze(s, tp, n_phases=n_phases, temperature_ns=float(temperature_ns))
    return {"time_ns": float(c.estimate_ns), "lower_bound_ns": float(c.lower_bound_ns),
            "smooth_estimate_ns": float(c.smooth_estimate_ns), "temperature_ns": float(temperature_ns),
            "breakdown": breakdown(c), "n_flows": t.n_flows}
