"""The ``runs`` engine: the resource tables without the [flows, stages] table.

Per flow, the zero-load arrival time at each stage comes from the path's latency
tables (:func:`nuna_jax.path.path_tables`); each mesh leg becomes two straight
runs, and per-link quantities are interval updates (:mod:`.intervals`).  The response leg's runs are
left out when ``System.read_response_links`` is False (its time stays in the tables).
Arrival times along a run are affine in the link position (plus die crossings, a
fixed function of the position), so the least arrival / least remaining time
are range-min updates of one number per flow.  Results equal the ``stages``
engine (tests compare them).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import geometry as geo
from ...path import (dst_endpoint, hbm_service_ns, issue_cycle_ns, link_hop_ns, path_tables, port_service_ns,
                     read_endpoint, resource_layout)
from ...system import System
from ...traffic import Traffic
from .intervals import _ext_layout, ext_index, ext_plan, grid_shape, links_to_resources, place, range_ext, range_sum
from .segplan import seg_plan, segment_reduce
from .tables import BIG, Tables, active, assemble, load, phase_of, window_segment


def _endpoints(s: System, t: Traffic):
    """(x, y, die) of every flow's CU, read endpoint, port and destination endpoint routers, from
    small constant tables (XLA recomputes gathers from them cheaply wherever it fuses)."""
    def xy_die(routers):
        x, y = geo.router_xy(s, routers)
        return (jnp.asarray(x, jnp.int32), jnp.asarray(y, jnp.int32),
                jnp.asarray(geo.router_die(s, routers), jnp.int32))
    cux, cuy, cud = xy_die(geo.cu_router(s))
    stx, sty, std = xy_die(geo.hbm_endpoint_router(s))
    ptx, pty, ptd = xy_die(geo.port_router(s))
    cu, rs = jnp.asarray(t.cu, jnp.int32), read_endpoint(s, t)
    pt, ds = jnp.asarray(t.port, jnp.int32), dst_endpoint(s, t)
    return dict(cu=(cux[cu], cuy[cu], cud[cu]), rs=(stx[rs], sty[rs], std[rs]),
                pt=(ptx[pt], pty[pt], ptd[pt]), ds=(stx[ds], sty[ds], std[ds]))


def flow_times(s: System, t: Traffic) -> dict:
    """Zero-load arrival time of every flow at each stage group, ns, ``[F]`` arrays (docs/model.md):
    ``p_read`` (HBM read), ``p_a`` (response leg starts), ``p_b`` (store leg starts), ``p_e`` (egress
    port), ``p_i`` (ingress port), ``p_c`` (delivery leg starts), ``p_w`` (HBM write), ``L`` (done)."""
    tab = path_tables(s)
    cr = jnp.asarray(geo.cu_router(s))[jnp.asarray(t.cu, jnp.int32)]
    rs, pt, ds = read_endpoint(s, t), jnp.asarray(t.port, jnp.int32), dst_endpoint(s, t)
    hbm = hbm_service_ns(s) + s.hbm_latency_ns
    p_read = tab.request_ns[cr, rs]
    p_b = tab.read_ns[cr, rs]
    p_e = p_b + tab.to_port_ns[cr, pt]
    p_i = p_e + port_service_ns(s) + s.switch_latency_ns
    L = p_e + tab.switch_ns + tab.deliver_ns[pt, ds]
    return dict(E=_endpoints(s, t), p_read=p_read, p_a=p_read + hbm, p_b=p_b, p_e=p_e, p_i=p_i,
                p_c=p_i + port_service_ns(s), p_w=L - hbm, L=L)


class Runs(NamedTuple):
    """The straight runs of every flow (3 legs x {X, Y}; 2 legs, the store and the delivery, when
    ``System.read_response_links`` is False), flattened to [6F] (or [4F])."""

    dirn: Any    # 0 E, 1 W, 2 S, 3 N
    line: Any    # flat line id within its direction grid: (phase * G + gpu) * n_lines + row/col
    lo: Any      # first link position (inclusive)
    hi: Any      # last link position + 1 (exclusive); lo == hi: empty run
    K: Any       # arrival(j) = K + g_dir(j)
    L: Any       # the flow's zero-load latency
    load: Any    # the flow's expected flits, weight * flits
    act: Any     # the flow is active (flits > 0 and weight > 0)
    logw: Any    # the flow's log-weight in the smooth maximum (``tables.smooth_log_weight``)


def runs(s: System, t: Traffic, ft: dict, P: int, logw=None) -> Runs:
    C, Rw, G = s.mesh_cols, s.mesh_rows, s.n_gpus
    ph = link_hop_ns(s)
    d = s.die_crossing_ns
    phase = phase_of(t, P)
    g_src = jnp.asarray(t.src_gpu, jnp.int32)
    g_dst = jnp.asarray(t.dst_gpu, jnp.int32)
    parts = []
    E = ft["E"]
    legs = [("rs", "cu", ft["p_a"], g_src), ("cu", "pt", ft["p_b"], g_src), ("pt", "ds", ft["p_c"], g_dst)]
    if not s.read_response_links:   # the response holds no link (path.response_link_stages)
        legs = legs[1:]
    for a, b, t0, gpu in legs:
        (sx, sy, sdie), (dx, dy, ddie) = E[a], E[b]
        east = dx > sx
        # X run along row sy
        lo_x = jnp.where(east, sx, dx + 1)
        hi_x = jnp.where(dx == sx, lo_x, jnp.where(east, dx, sx + 1))
        k_x = jnp.where(east, t0 - sx * ph - d * sdie, t0 + sx * ph + d * sdie)
        parts.append((jnp.where(east, 0, 1), (phase * G + gpu) * Rw + sy, lo_x, hi_x, k_x))
        # Y run along column dx, starting after the X run
        t0y = t0 + jnp.abs(dx - sx) * ph + d * jnp.abs(ddie - sdie)
        south = dy > sy
        lo_y = jnp.where(south, sy, dy + 1)
        hi_y = jnp.where(dy == sy, lo_y, jnp.where(south, dy, sy + 1))
        k_y = jnp.where(south, t0y - sy * ph, t0y + sy * ph)
        parts.append((jnp.where(south, 2, 3), (phase * G + gpu) * C + dx, lo_y, hi_y, k_y))
    cat = lambda i: jnp.concatenate([q[i] for q in parts])  # noqa: E731
    n = len(parts)
    logw = jnp.zeros_like(ft["L"]) if logw is None else logw
    return Runs(cat(0).astype(jnp.int32), cat(1).astype(jnp.int32), cat(2).astype(jnp.int32),
                cat(3).astype(jnp.int32), cat(4), jnp.tile(ft["L"], n), jnp.tile(load(t), n),
                jnp.tile(active(t), n), jnp.tile(logw, n))


def _arrival_offset(s: System, dirn: int, pos):
    """``g_dir(j)``: arrival at link position ``j`` of a run relative to its ``K``, ns."""
    ph = link_hop_ns(s)
    d = s.die_crossing_ns
    if dirn == 0:
        return pos * ph + d * (pos // s.cols_per_die)
    if dirn == 1:
        return -pos * ph - d * (pos // s.cols_per_die)
    return pos * ph if dirn == 2 else -pos * ph


def _nonlink_entries(s: System, t: Traffic, ft: dict, P: int):
    """(seg [5F], arrival [5F], remaining [5F], svc [5F]) of the CU, HBM read, egress, ingress, HBM write stages."""
    lay = resource_layout(s)
    R = lay.n_resources
    phase = phase_of(t, P)
    g, dg = jnp.asarray(t.src_gpu, jnp.int32), jnp.asarray(t.dst_gpu, jnp.int32)
    cu, rs = jnp.asarray(t.cu, jnp.int32), jnp.asarray(t.read_stack, jnp.int32)
    p, ds = jnp.asarray(t.port, jnp.int32), jnp.asarray(t.dst_stack, jnp.int32)
    L = ft["L"]
    res = [g * lay.per_gpu + lay.offset_cu + cu, g * lay.per_gpu + lay.offset_hbm + rs,
           g * lay.per_gpu + lay.offset_egress + p, dg * lay.per_gpu + lay.offset_ingress + p,
           dg * lay.per_gpu + lay.offset_hbm + ds]
    arr = [jnp.zeros_like(L), ft["p_read"], ft["p_e"], ft["p_i"], ft["p_w"]]
    one = jnp.ones_like(L)
    cyc, hbm_svc, port_svc = issue_cycle_ns(s), hbm_service_ns(s), port_service_ns(s)
    svc = [cyc * one, hbm_svc * one, port_svc * one, port_svc * one, hbm_svc * one]
    seg = jnp.concatenate([phase * R + r for r in res])
    arrival = jnp.concatenate(arr)
    sv = jnp.concatenate(svc)
    rem = jnp.tile(L, 5) - arrival - sv
    return seg, arrival, rem, sv


def tables_runs(s: System, t: Traffic, P: int, plans: dict | None = None) -> Tables:
    """``plans`` (:func:`sweep_plans` of this traffic): the reductions as gathers over the hoisted
    structure (a hardware sweep), same numbers; ``None``: scatters."""
    pl = plans or {}
    R = resource_layout(s).n_resources
    ft = flow_times(s, t)
    L = ft["L"]
    n = P * R + 1
    seg, arrival, rem, sv = _nonlink_entries(s, t, ft, P)
    act5 = jnp.tile(active(t), 5)
    nl = pl.get("nl")
    busy_nl = segment_reduce("sum", jnp.tile(load(t), 5) * sv, seg, n, nl)
    a_nl = segment_reduce("min", jnp.where(act5, arrival, BIG), seg, n, nl)
    m_nl = segment_reduce("min", jnp.where(act5, rem, BIG), seg, n, nl)
    lr_nl = segment_reduce("max", jnp.where(act5, jnp.tile(L, 5), -BIG), seg, n, nl)
    ru = runs(s, t, ft, P)
    link_svc = s.flit_bytes / s.link_bw_bytes_per_ns
    busy_l = [g * link_svc for g in range_sum(s, P, ru, ru.load, ru.act)]
    ex = pl.get("ext")
    lr_l = range_ext(s, P, ru, ru.L, ru.act, "max", ex)
    kmin = range_ext(s, P, ru, ru.K, ru.act, "min", ex)
    lkmin = range_ext(s, P, ru, ru.L - ru.K, ru.act, "min", ex)
    a_l, m_l = [], []
    for dn in range(4):
        nl_, nn = grid_shape(s, P, dn)
        gj = _arrival_offset(s, dn, jnp.arange(nn, dtype=jnp.result_type(float)))[None, :]
        used = kmin[dn] < BIG / 2
        a_l.append(jnp.where(used, kmin[dn] + gj, BIG))
        m_l.append(jnp.where(used, lkmin[dn] - gj - link_svc, BIG))
    busy = place(s, P, busy_nl, links_to_resources(s, P, busy_l, 0.0), 0.0)
    a = place(s, P, a_nl, links_to_resources(s, P, a_l, BIG), BIG)
    m = place(s, P, m_nl, links_to_resources(s, P, m_l, BIG), BIG)
    lr = place(s, P, lr_nl, links_to_resources(s, P, lr_l, -BIG), -BIG)
    return assemble(s, t, P, L, busy, a, m, lr, plans)


def sweep_plans(s: System, t: Traffic, P: int) -> dict:
    """The structure of ``t``'s tables that no continuous System field changes, as
    :class:`.segplan.SegPlan` s (host; ``t`` concrete, ``s`` gives the statics): the
    (phase, resource) segment of every non-link entry (``"nl"``), the sparse-table cell of
    every run (``"ext"``), the CU window (``"w"``) and the phase (``"ph"``) of every flow.
    Computed once per traffic of a hardware sweep; :func:`tables_runs` with them does per
    variant only the arithmetic and gathers."""
    R = resource_layout(s).n_resources
    NC = s.n_gpus * s.n_cus
    ids = _structure_ids(s, t, P)
    seg, ext, wseg, ph = (np.asarray(v) for v in ids)
    n_tot = int(_ext_layout(s, P)[2][-1])
    return {"nl": seg_plan(seg, P * R + 1), "ext": ext_plan(ext, n_tot), "w": seg_plan(wseg, P * NC),
            "ph": seg_plan(ph, P)}


@functools.partial(jax.jit, static_argnames="P")
def _structure_ids(s: System, t: Traffic, P: int):
    ft = flow_times(s, t)
    seg = _nonlink_entries(s, t, ft, P)[0]
    ru = runs(s, t, ft, P)
    return seg, ext_index(s, P, ru, ru.act)[0], window_segment(s, t, P), phase_of(t, P)


def smooth_log_sums_runs(s: System, t: Traffic, tb: Tables, lr, tau, logw):
    """``log sum`` over active (flow, stage) on r of ``exp((L_f - lr_r) / tau + logw_f)``, ``[P, R]``;
    links use one stabilizer per mesh line and fall back to the hard max (0) where the sum is not
    resolvable in float."""
    P, R = tb.n_phases, tb.n_res
    ft = flow_times(s, t)
    seg, _, _, _ = _nonlink_entries(s, t, ft, P)
    lr_flat = jnp.concatenate([jnp.where(lr > -BIG / 2, lr, 0.0).ravel(), jnp.zeros(1, lr.dtype)])
    act5 = jnp.tile(active(t), 5)
    z = jnp.where(act5, (jnp.tile(tb.L, 5) - lr_flat[seg]) / tau + jnp.tile(logw, 5), -1e4)
    s_nl = jax.ops.segment_sum(jnp.where(act5, jnp.exp(z), 0.0), seg, num_segments=P * R + 1)
    ru = runs(s, t, ft, P, logw)
    lay = resource_layout(s)
    lr_links = lr.reshape(P, s.n_gpus, lay.per_gpu)[:, :, lay.offset_link:lay.offset_link + geo.n_link_slots(s)]
    lr_links = lr_links.reshape(P, s.n_gpus, s.mesh_rows, s.mesh_cols, 4)
    grids, c_lines = [], []
    zr = jnp.full(ru.L.shape, -1e4, ru.L.dtype)
    for dn in range(4):
        nl, n = grid_shape(s, P, dn)
        g = lr_links[..., dn]
        g = g.reshape(nl, n) if dn < 2 else g.transpose(0, 1, 3, 2).reshape(nl, n)
        c_line = jnp.max(jnp.where(g > -BIG / 2, g, -BIG), axis=1)           # [nl]
        c_line = jnp.where(c_line > -BIG / 2, c_line, 0.0)
        on = ru.act & (ru.dirn == dn) & (ru.hi > ru.lo)      # empty runs cover no link
        zr = jnp.where(on, (ru.L - c_line[jnp.clip(ru.line, 0, nl - 1)]) / tau, zr)
        grids.append(g)
        c_lines.append(c_line)
    ron = ru.act & (ru.hi > ru.lo)
    val = jnp.where(ron, jnp.exp(jnp.where(ron, zr + ru.logw, -1e4)), 0.0)
    sums = range_sum(s, P, ru, val, ru.act)
    logs = []
    for dn in range(4):
        g, c_line, sdir = grids[dn], c_lines[dn], sums[dn]
        # resolvable where the sum is not lost to float cancellation / underflow; else the hard max
        ok = (g > -BIG / 2) & (sdir > 1e-6 * jnp.max(sdir, axis=1, keepdims=True)) & (sdir > 1e-30)
        rel = jnp.where(ok, c_line[:, None] + tau * jnp.log(jnp.where(ok, sdir, 1.0)) - g, 0.0)
        logs.append(rel / tau)
    link_logs = links_to_resources(s, P, logs, 0.0)
    nl_log = jnp.log(jnp.where(s_nl > 0, s_nl, 1.0))
    return place(s, P, nl_log, link_logs, 0.0)
