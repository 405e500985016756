"""The path of a flit: the ordered resources it occupies, and for how long (docs/model.md, "The path of a flit").

The one definition of a flit's zero-load path.  The analytical model
(``models.contention``), the closed-form alpha (``models.collectives``), the
latency spread (``models.spread``), the kernel model's on-chip alpha and the
simulator's program (``sim``) all read it, so they can disagree only about
queueing, never about where a flit goes or what a stage costs.

Follow one flit of a remote store, from a threadblock on CU ``c`` of GPU
``g`` to HBM stack ``ds`` of GPU ``dg`` (``H = max_hops``, ``r_*`` routers):

 stage            slice (STAGES)  resource                 service          latency after service
 CU issue         issue           CU(g, c)                 1 NoC cycle      cu_to_noc + head(r_c -> r_rs)   [read request]
 HBM read         read            HBM(g, rs)               flit / hbm_bw    hbm_latency
 response, H      response        LINK(g, l) [*]           flit / link_bw   hop (+ die_crossing)           r_rs -> r_c
 store issue      store_issue     none                     0                cu_to_noc
 store, H         store           LINK(g, l)               flit / link_bw   hop (+ die_crossing)           r_c -> r_p
 egress port      egress          EGRESS(g, p)             flit / port_bw   switch_latency
 ingress port     ingress         INGRESS(dg, p)           flit / port_bw   0   (switch plane p)
 delivery, H      deliver         LINK(dg, l)              flit / link_bw   hop (+ die_crossing)           r_p -> r_ds
 HBM write        write           HBM(dg, ds)              flit / hbm_bw    hbm_latency

[*] none when ``System.read_response_links`` is False (the same time, as pure latency).

A flit that reaches a stage at time ``t`` starts service at
``max(t, resource free time)``, holds the resource for ``service`` and moves
on ``service + latency`` after it started; its zero-load latency is the sum
of ``service + latency`` over its stages.  That sum separates into three
tables and one constant (:func:`path_tables`):

    L = read_ns[r_c, e_rs] + to_port_ns[r_c, p] + switch_ns + deliver_ns[p, e_ds]

Routers ``r_rs`` and ``r_ds`` are those of the stacks' *endpoints*
``e = stack * hbm_routers_per_stack + channel`` (:mod:`nuna_jax.geometry`,
"HBM channels"): the tables are indexed by endpoint, the HBM service by stack.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from . import geometry as geo
from .system import System
from .traffic import Traffic

__all__ = ["ResourceLayout", "resource_layout", "n_stages", "StageSlices", "stage_slices", "stage_names",
           "Stages", "flow_stages", "link_stages", "response_link_stages", "link_hop_ns", "issue_cycle_ns", "hbm_service_ns",
           "port_service_ns", "request_ns", "head_latency_ns", "leg_latency_ns", "PathTables",
           "path_tables", "flow_latency_ns", "zero_load_latency_ns", "read_endpoint", "dst_endpoint", "stack_mean"]


# ---------------------------------------------------------------------------
# resources
# ---------------------------------------------------------------------------
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
    o_hbm = s.n_cus
    o_link = o_hbm + s.n_hbm_stacks
    o_eg = o_link + geo.n_link_slots(s)
    o_in = o_eg + s.n_io_ports
    per = o_in + s.n_io_ports
    return ResourceLayout(per, 0, o_hbm, o_link, o_eg, o_in, per * s.n_gpus)


# ---------------------------------------------------------------------------
# stages: names and slices
# ---------------------------------------------------------------------------
class StageSlices(NamedTuple):
    """Column ranges of the stage table (``[lo, hi)``), in path order."""

    issue: slice
    read: slice
    response: slice
    store_issue: slice
    store: slice
    egress: slice
    ingress: slice
    deliver: slice
    write: slice

    @property
    def read_side(self) -> slice:
        """Issue, HBM read, response and store issue: depends on (CU, read stack) only."""
        return slice(self.issue.start, self.store_issue.stop)

    @property
    def store_side(self) -> slice:
        """The store leg CU -> port router: depends on (CU, port) only."""
        return self.store

    @property
    def deliver_side(self) -> slice:
        """Delivery leg and HBM write: depends on (port, destination stack) only."""
        return slice(self.deliver.start, self.write.stop)


def stage_slices(s: System) -> StageSlices:
    h = geo.max_hops(s)
    widths = (1, 1, h, 1, h, 1, 1, h, 1)
    ends = np.cumsum(widths)
    return StageSlices(*(slice(int(e - w), int(e)) for e, w in zip(ends, widths)))


def n_stages(s: System) -> int:
    return stage_slices(s).write.stop


def stage_names(s: System) -> list[str]:
    names = []
    for name, sl in stage_slices(s)._asdict().items():
        w = sl.stop - sl.start
        names += [name] if w == 1 else [f"{name}_link{k}" for k in range(w)]
    return names


# ---------------------------------------------------------------------------
# the terms of the path
# ---------------------------------------------------------------------------
def link_hop_ns(s: System):
    """Zero-load time of one flit per mesh hop, ns: serialization ``flit / link_bw`` + ``hop_ns``."""
    return s.flit_bytes / s.link_bw_bytes_per_ns + s.hop_ns


def head_latency_ns(s: System, src_router, dst_router):
    """Head latency of an XY route, ns: ``hops * hop_ns + die_crossings * die_crossing_ns``
    (no serialization: a request travels as a header)."""
    return (geo.hops(s, src_router, dst_router) * s.hop_ns
            + geo.die_crossings(s, src_router, dst_router) * s.die_crossing_ns)


def leg_latency_ns(s: System, src_router, dst_router):
    """Zero-load time of a data flit over an XY mesh leg, ns: ``link_hop_ns`` per hop plus
    ``die_crossing_ns`` per die boundary (the link stages' ``service + latency``)."""
    return (geo.hops(s, src_router, dst_router) * link_hop_ns(s)
            + geo.die_crossings(s, src_router, dst_router) * s.die_crossing_ns)


def issue_cycle_ns(s: System):
    """A CU issues one flit per NoC cycle, ns."""
    return 1.0 / s.noc_clock_ghz


def hbm_service_ns(s: System):
    """An HBM stack's service time per flit, ns."""
    return s.flit_bytes / s.hbm_bw_bytes_per_ns


def port_service_ns(s: System):
    """An I/O port's service time per flit (one direction), ns."""
    return s.flit_bytes / s.port_bw_bytes_per_ns


def request_ns(s: System, cu_router_id, stack_router_id):
    """CU issue cycle + request head latency: a read request reaches its stack, ns."""
    return issue_cycle_ns(s) + s.cu_to_noc_ns + head_latency_ns(s, cu_router_id, stack_router_id)


def stack_mean(s: System, a):
    """Mean of ``a[..., endpoint]`` over each stack's channels: ``[..., n_hbm_stacks]``.  A
    transfer's data is interleaved over the channels (docs/model.md, "HBM channels"), so this is
    the latency of a stack as a whole."""
    k = s.hbm_routers_per_stack
    return a.reshape(a.shape[:-1] + (s.n_hbm_stacks, k)).mean(axis=-1)


def read_endpoint(s: System, t: Traffic):
    """HBM endpoint (stack channel) each flow reads from, ``[n_flows]``."""
    return geo.hbm_endpoint(s, jnp.asarray(t.read_stack, jnp.int32), jnp.asarray(t.read_channel, jnp.int32))


def dst_endpoint(s: System, t: Traffic):
    """HBM endpoint (stack channel) each flow writes to, ``[n_flows]``."""
    return geo.hbm_endpoint(s, jnp.asarray(t.dst_stack, jnp.int32), jnp.asarray(t.dst_channel, jnp.int32))


class PathTables(NamedTuple):
    """Zero-load latency of every separable part of the path, ns (docs/model.md).

    request_ns[router, endpoint]: CU issue + request, until the read reaches the stack's channel.
    read_ns[router, endpoint]: issue .. store issue done (request, HBM read, response, cu_to_noc).
    to_port_ns[router, port]: the store leg from the CU's router to the port's router.
    switch_ns: egress port + switch + ingress port (a scalar).
    deliver_ns[port, endpoint]: delivery leg from the port's router + HBM write.

    An endpoint is ``stack * hbm_routers_per_stack + channel`` (:func:`read_endpoint`).
    """

    request_ns: Any
    read_ns: Any
    to_port_ns: Any
    switch_ns: Any
    deliver_ns: Any


def path_tables(s: System) -> PathTables:
    """The latency tables of system ``s`` (jit/vmap/grad in ``s``'s continuous fields)."""
    routers = jnp.arange(s.n_routers)
    st = jnp.asarray(geo.hbm_endpoint_router(s))
    pt = jnp.asarray(geo.port_router(s))
    hbm = hbm_service_ns(s) + s.hbm_latency_ns
    req = request_ns(s, routers[:, None], st[None, :])
    read = req + hbm + leg_latency_ns(s, st[None, :], routers[:, None]) + s.cu_to_noc_ns
    to_port = leg_latency_ns(s, routers[:, None], pt[None, :])
    switch = 2.0 * port_service_ns(s) + s.switch_latency_ns
    deliver = leg_latency_ns(s, pt[:, None], st[None, :]) + hbm
    return PathTables(req, read, to_port, switch, deliver)


def flow_latency_ns(s: System, t: Traffic, tables: PathTables | None = None):
    """Zero-load latency of one flit of each flow from the tables, ns, ``[n_flows]``."""
    tab = path_tables(s) if tables is None else tables
    cr = jnp.asarray(geo.cu_router(s))[jnp.asarray(t.cu)]
    p = jnp.asarray(t.port)
    return (tab.read_ns[cr, read_endpoint(s, t)] + tab.to_port_ns[cr, p] + tab.switch_ns
            + tab.deliver_ns[p, dst_endpoint(s, t)])


# ---------------------------------------------------------------------------
# the stage table
# ---------------------------------------------------------------------------
class Stages(NamedTuple):
    """Per-flow stage arrays, each ``[n_flows, n_stages]``.  A stage with resource -1 holds
    nothing: its ``service_ns + latency_ns`` is pure latency (a store issue, padding, or a read
    response's hop when ``System.read_response_links`` is False)."""

    resource: Any    # int32 global resource id, -1 = none
    service_ns: Any  # float, resource busy time per flit
    latency_ns: Any  # float, pure latency after service


def link_stages(s: System, gpu, src_router, dst_router, layout: ResourceLayout):
    """Link stages of an XY leg: ``[F, H]`` resources, service and latency (-1, 0, 0 padding)."""
    links = geo.route_links(s, src_router, dst_router)
    valid = links >= 0
    res = jnp.where(valid, gpu[:, None] * layout.per_gpu + layout.offset_link + links, -1)
    svc = jnp.where(valid, s.flit_bytes / s.link_bw_bytes_per_ns, 0.0)
    cross = geo.link_crosses_die(s, jnp.maximum(links, 0))
    lat = jnp.where(valid, s.hop_ns + jnp.where(cross, s.die_crossing_ns, 0.0), 0.0)
    return res, svc, lat


def response_link_stages(s: System, gpu, src_router, dst_router, layout: ResourceLayout):
    """Link stages of a read response's leg (HBM stack -> reading CU), as :func:`link_stages`.

    ``s.read_response_links`` (docs/model.md, "Read responses on the mesh"): True, each hop
    holds its directed link for ``flit / link_bw``; False, the same stages with resource -1,
    so the response takes the same zero-load time (service + latency as pure latency) and
    holds no link.  Every consumer of a read response (the traffic's stage table, the
    simulator's background reads) takes its legs from here."""
    res, svc, lat = link_stages(s, gpu, src_router, dst_router, layout)
    if not s.read_response_links:
        res = jnp.full_like(res, -1)
    return res, svc, lat


def flow_stages(s: System, t: Traffic) -> Stages:
    """Stage table of every flow of ``t`` (jit-able; differentiable in ``s``'s leaves)."""
    lay = resource_layout(s)
    cu_r = jnp.asarray(geo.cu_router(s))
    ep_r = jnp.asarray(geo.hbm_endpoint_router(s))
    pt_r = jnp.asarray(geo.port_router(s))
    r_rs, r_ds = ep_r[read_endpoint(s, t)], ep_r[dst_endpoint(s, t)]
    g, dg = jnp.asarray(t.src_gpu), jnp.asarray(t.dst_gpu)
    cu = jnp.asarray(t.cu)
    rs, ds, p = jnp.asarray(t.read_stack), jnp.asarray(t.dst_stack), jnp.asarray(t.port)
    f = g.shape[0]
    ones = jnp.ones((f, 1))
    col = lambda v: jnp.broadcast_to(jnp.asarray(v, dtype=jnp.result_type(float)), (f,))[:, None]  # noqa: E731
    icol = lambda v: jnp.asarray(v, dtype=jnp.int32)[:, None]  # noqa: E731

    hbm_svc, port_svc = hbm_service_ns(s), port_service_ns(s)
    req_lat = s.cu_to_noc_ns + head_latency_ns(s, cu_r[cu], r_rs)
    parts = [
        (icol(g * lay.per_gpu + lay.offset_cu + cu), issue_cycle_ns(s) * ones, col(req_lat)),       # issue
        (icol(g * lay.per_gpu + lay.offset_hbm + rs), hbm_svc * ones, s.hbm_latency_ns * ones),      # read
        response_link_stages(s, g, r_rs, cu_r[cu], lay),                                                   # response
        (jnp.full((f, 1), -1, jnp.int32), 0.0 * ones, s.cu_to_noc_ns * ones),                        # store_issue
        link_stages(s, g, cu_r[cu], pt_r[p], lay),                                                         # store
        (icol(g * lay.per_gpu + lay.offset_egress + p), port_svc * ones, s.switch_latency_ns * ones),  # egress
        (icol(dg * lay.per_gpu + lay.offset_ingress + p), port_svc * ones, 0.0 * ones),              # ingress
        link_stages(s, dg, pt_r[p], r_ds, lay),                                                            # deliver
        (icol(dg * lay.per_gpu + lay.offset_hbm + ds), hbm_svc * ones, s.hbm_latency_ns * ones),     # write
    ]
    res = jnp.concatenate([jnp.asarray(q[0], jnp.int32) for q in parts], axis=1)
    svc = jnp.concatenate([jnp.broadcast_to(q[1], q[0].shape) for q in parts], axis=1)
    lat = jnp.concatenate([jnp.broadcast_to(q[2], q[0].shape) for q in parts], axis=1)
    return Stages(res, svc, lat)


def zero_load_latency_ns(s: System, t: Traffic):
    """Latency of one flit of each flow when it meets no other flit, ns, ``[n_flows]``:
    the sum of its stage table (equals :func:`flow_latency_ns` to float rounding)."""
    st = flow_stages(s, t)
    return jnp.sum(st.service_ns + st.latency_ns, axis=1)
