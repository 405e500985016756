"""The path of a flit: the ordered resources it occupies, and for how long.

This module is the single definition of docs/model.md, "The path of a flit".
Both the analytical model (``models.contention``) and the simulator (``sim``)
build on :func:`flow_stages`, so they can never disagree about *where* a flit
goes or what each stage costs at zero load.

A flow's path is a fixed-length list of ``n_stages(system)`` stages.  Each
stage has a resource id (or ``-1`` for a pure-latency stage or padding), a
*service* time (how long the resource is busy per flit) and a *latency* (how
long after its service the flit reaches the next stage).  A flit that reaches
a stage at time ``t`` starts service at ``max(t, resource free time)``, holds
the resource for ``service`` and moves on ``service + latency`` after it
started.  Zero-load latency of a flow is therefore
``sum(service + latency)`` over its stages.

Stages, in order (``H = max_hops(system)`` padded slots per mesh leg):

 0      CU issue            res CU(src_gpu, cu)        svc 1 NoC cycle    lat cu_to_noc + mesh(cu -> read_stack)   [read request]
 1      HBM read            res HBM(src_gpu, rstack)   svc flit/hbm_bw    lat hbm_latency
 2..    response, H links   res LINK(src_gpu, l)       svc flit/link_bw   lat hop (+ die_crossing)   stack -> CU
 H+2    store issue         none                       svc 0              lat cu_to_noc
 ..     store, H links      res LINK(src_gpu, l)       svc flit/link_bw   lat hop (+ die_crossing)   CU -> egress port router
 2H+3   egress port         res EGRESS(src_gpu, p)     svc flit/port_bw   lat switch_latency
 2H+4   switch plane p out  res INGRESS(dst_gpu, p)    svc flit/port_bw   lat 0   (= ingress port p of dst_gpu)
 ..     delivery, H links   res LINK(dst_gpu, l)       svc flit/link_bw   lat hop (+ die_crossing)   port router -> dst stack
 3H+5   HBM write           res HBM(dst_gpu, dstack)   svc flit/hbm_bw    lat hbm_latency
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from .models import mesh
from .system import System, cu_router, port_router, stack_router
from .traffic import Traffic

__all__ = ["ResourceLayout", "resource_layout", "n_stages", "Stages", "flow_stages", "stage_names",
           "leg_latency_ns", "zero_load_latency_ns"]


class ResourceLayout(NamedTuple):
    """Global resource id = ``gpu * per_gpu + offset_<kind> + local index``."""

    per_gpu: int
    offset_cu: int
    offset_hbm: int
    offset_link: int
    offset_egress: int
    offset_ingress: int
    n_resources: int

    def kind_of(self, rid):
        """Name of the resource kind of global ids (numpy helper for reports)."""
        local = np.asarray(rid) % self.per_gpu
        names = np.array(["cu", "hbm", "link", "egress", "ingress"])
        bounds = np.array([self.offset_hbm, self.offset_link, self.offset_egress, self.offset_ingress])
        return names[np.searchsorted(bounds, local, side="right")]


def resource_layout(s: System) -> ResourceLayout:
    o_cu = 0
    o_hbm = o_cu + s.n_cus
    o_link = o_hbm + s.n_hbm_stacks
    o_eg = o_link + mesh.n_link_slots(s)
    o_in = o_eg + s.n_io_ports
    per = o_in + s.n_io_ports
    return ResourceLayout(per, o_cu, o_hbm, o_link, o_eg, o_in, per * s.n_gpus)


def n_stages(s: System) -> int:
    return 3 * mesh.max_hops(s) + 6


def stage_names(s: System) -> list[str]:
    h = mesh.max_hops(s)
    return (["cu_issue", "hbm_read"] + [f"resp_link{k}" for k in range(h)] + ["store_issue"]
            + [f"store_link{k}" for k in range(h)] + ["egress_port", "ingress_port"]
            + [f"deliver_link{k}" for k in range(h)] + ["hbm_write"])


class Stages(NamedTuple):
    """Per-flow stage arrays, each ``[n_flows, n_stages]``."""

    resource: Any    # int32 global resource id, -1 = none
    service_ns: Any  # float, resource busy time per flit
    latency_ns: Any  # float, pure latency after service


def _leg(s: System, gpu, src_router, dst_router, layout: ResourceLayout):
    links = mesh.route_links(s, src_router, dst_router)  # [F, H]
    valid = links >= 0
    res = jnp.where(valid, gpu[:, None] * layout.per_gpu + layout.offset_link + links, -1)
    svc = jnp.where(valid, s.flit_bytes / s.link_bw_bytes_per_ns, 0.0)
    cross = mesh.link_crosses_die(s, jnp.maximum(links, 0))
    lat = jnp.where(valid, s.hop_ns + jnp.where(cross, s.die_crossing_ns, 0.0), 0.0)
    return res, svc, lat


def flow_stages(s: System, t: Traffic) -> Stages:
    """Stage table of every flow of ``t`` (jit-able; differentiable in ``s``'s leaves)."""
    lay = resource_layout(s)
    cu_r = jnp.asarray(cu_router(s))
    st_r = jnp.asarray(stack_router(s))
    pt_r = jnp.asarray(port_router(s))
    g, dg = jnp.asarray(t.src_gpu), jnp.asarray(t.dst_gpu)
    cu = jnp.asarray(t.cu)
    rs, ds, p = jnp.asarray(t.read_stack), jnp.asarray(t.dst_stack), jnp.asarray(t.port)
    f = g.shape[0]
    ones = jnp.ones((f, 1))
    col = lambda v: jnp.broadcast_to(jnp.asarray(v, dtype=jnp.result_type(float)), (f,))[:, None]  # noqa: E731
    icol = lambda v: jnp.asarray(v, dtype=jnp.int32)[:, None]  # noqa: E731

    cyc = 1.0 / s.noc_clock_ghz
    hbm_svc = s.flit_bytes / s.hbm_bw_bytes_per_ns
    port_svc = s.flit_bytes / s.port_bw_bytes_per_ns

    req_lat = s.cu_to_noc_ns + mesh.latency_ns(s, cu_r[cu], st_r[rs])
    issue = (icol(g * lay.per_gpu + lay.offset_cu + cu), cyc * ones, col(req_lat))
    read = (icol(g * lay.per_gpu + lay.offset_hbm + rs), hbm_svc * ones, s.hbm_latency_ns * ones)
    resp = _leg(s, g, st_r[rs], cu_r[cu], lay)
    store = (jnp.full((f, 1), -1, jnp.int32), 0.0 * ones, s.cu_to_noc_ns * ones)
    to_port = _leg(s, g, cu_r[cu], pt_r[p], lay)
    egress = (icol(g * lay.per_gpu + lay.offset_egress + p), port_svc * ones, s.switch_latency_ns * ones)
    ingress = (icol(dg * lay.per_gpu + lay.offset_ingress + p), port_svc * ones, 0.0 * ones)
    deliver = _leg(s, dg, pt_r[p], st_r[ds], lay)
    write = (icol(dg * lay.per_gpu + lay.offset_hbm + ds), hbm_svc * ones, s.hbm_latency_ns * ones)

    parts = [issue, read, resp, store, to_port, egress, ingress, deliver, write]
    res = jnp.concatenate([jnp.asarray(q[0], jnp.int32) for q in parts], axis=1)
    svc = jnp.concatenate([jnp.broadcast_to(q[1], q[0].shape) for q in parts], axis=1)
    lat = jnp.concatenate([jnp.broadcast_to(q[2], q[0].shape) for q in parts], axis=1)
    return Stages(res, svc, lat)


def leg_latency_ns(s: System, src_router, dst_router):
    """Zero-load time of one flit over an XY mesh leg, ns: per hop ``flit/link_bw + hop``,
    plus ``die_crossing_ns`` per die boundary (the same terms as the link stages)."""
    return (mesh.hops(s, src_router, dst_router) * (s.flit_bytes / s.link_bw_bytes_per_ns + s.hop_ns)
            + mesh.die_crossings(s, src_router, dst_router) * s.die_crossing_ns)


def zero_load_latency_ns(s: System, t: Traffic):
    """Latency of one flit of each flow when it meets no other flit, ns, ``[n_flows]``."""
    st = flow_stages(s, t)
    return jnp.sum(st.service_ns + st.latency_ns, axis=1)
