"""XY (dimension-order) routed on-chip mesh: hops, latencies and link sets.

NUNA section 5.3: a global ``mesh_cols x mesh_rows`` mesh with X-then-Y
routing and a fixed per-hop latency (``hop_cycles`` at ``noc_clock_ghz``).  A
packet from router ``s = (sx, sy)`` to ``d = (dx, dy)`` first moves along X in
row ``sy`` to column ``dx``, then along Y in column ``dx`` to row ``dy``
(docs/model.md, "Routing").

Directed links are indexed by *slot* ``4 * router + direction`` with
``direction`` in ``(EAST=+x, WEST=-x, SOUTH=+y, NORTH=-y)``; slots that point
off the mesh exist in the index space but no route ever uses them.

All functions take router ids as integer arrays of any (broadcastable) shape
and are ``jit``/``vmap``-able; latencies are differentiable in the continuous
``System`` fields ``hop_cycles``, ``noc_clock_ghz`` and ``die_crossing_ns``.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..system import System

EAST, WEST, SOUTH, NORTH = 0, 1, 2, 3
DIRECTIONS = 4

__all__ = [
    "EAST", "WEST", "SOUTH", "NORTH", "n_link_slots", "max_hops", "xy",
    "hops", "die_crossings", "latency_ns", "route_incidence", "route_links",
    "link_endpoints", "link_crosses_die",
]


def n_link_slots(s: System) -> int:
    """Size of the directed-link index space, ``4 * n_routers``."""
    return DIRECTIONS * s.n_routers


def max_hops(s: System) -> int:
    """Longest XY route in hops (corner to opposite corner)."""
    return (s.mesh_cols - 1) + (s.mesh_rows - 1)


def xy(s: System, router):
    """(x, y) coordinates of router ids, as JAX int arrays."""
    r = jnp.asarray(router)
    return r % s.mesh_cols, r // s.mesh_cols


def hops(s: System, src, dst):
    """Number of mesh hops of the XY route ``src -> dst`` (Manhattan distance)."""
    sx, sy = xy(s, src)
    dx, dy = xy(s, dst)
    return jnp.abs(sx - dx) + jnp.abs(sy - dy)


def die_crossings(s: System, src, dst):
    """Die boundaries crossed by the XY route (only X moves cross dies)."""
    sx, _ = xy(s, src)
    dx, _ = xy(s, dst)
    return jnp.abs(sx // s.cols_per_die - dx // s.cols_per_die)


def latency_ns(s: System, src, dst):
    """Uncontended head latency of the XY route in ns.

    ``hops * hop_cycles / noc_clock_ghz + die_crossings * die_crossing_ns``.
    Zero for ``src == dst``.  Serialization of a flit on a link is *not*
    included (it is a bandwidth term; see models.contention).
    """
    return hops(s, src, dst) * s.hop_ns + die_crossings(s, src, dst) * s.die_crossing_ns


def route_incidence(s: System, src, dst):
    """Which directed links the XY route ``src -> dst`` uses.

    Returns a bool array of shape ``broadcast(src, dst).shape + (n_link_slots,)``.
    Closed form (no loop): link slot ``(r, dir)`` with ``r = (rx, ry)`` is on the
    route iff

    * EAST:  ``ry == sy`` and ``sx <= rx < dx``
    * WEST:  ``ry == sy`` and ``dx < rx <= sx``
    * SOUTH: ``rx == dx`` and ``sy <= ry < dy``
    * NORTH: ``rx == dx`` and ``dy < ry <= sy``
    """
    sx, sy = xy(s, src)
    dx, dy = xy(s, dst)
    sx, sy, dx, dy = (a[..., None] for a in (sx, sy, dx, dy))
    r = jnp.arange(s.n_routers)
    rx, ry = r % s.mesh_cols, r // s.mesh_cols
    east = (ry == sy) & (sx <= rx) & (rx < dx)
    west = (ry == sy) & (dx < rx) & (rx <= sx)
    south = (rx == dx) & (sy <= ry) & (ry < dy)
    north = (rx == dx) & (dy < ry) & (ry <= sy)
    inc = jnp.stack([east, west, south, north], axis=-1)  # [..., n_routers, 4]
    return inc.reshape(inc.shape[:-2] + (n_link_slots(s),))


def route_links(s: System, src, dst):
    """The XY route as an ordered list of link slots, padded with ``-1``.

    Returns int32 of shape ``broadcast(src, dst).shape + (max_hops(s),)``;
    entry ``k`` is the link taken on hop ``k``.
    """
    sx, sy = xy(s, src)
    dx, dy = xy(s, dst)
    sx, sy, dx, dy = (a[..., None] for a in (sx, sy, dx, dy))
    k = jnp.arange(max_hops(s))
    nx = jnp.abs(dx - sx)
    ny = jnp.abs(dy - sy)
    stepx = jnp.sign(dx - sx)
    stepy = jnp.sign(dy - sy)
    # X phase: hop k leaves router (sx + stepx*k, sy)
    x_router = sy * s.mesh_cols + (sx + stepx * k)
    x_link = DIRECTIONS * x_router + jnp.where(stepx > 0, EAST, WEST)
    # Y phase: hop k leaves router (dx, sy + stepy*(k - nx))
    j = k - nx
    y_router = (sy + stepy * j) * s.mesh_cols + dx
    y_link = DIRECTIONS * y_router + jnp.where(stepy > 0, SOUTH, NORTH)
    out = jnp.where(k < nx, x_link, jnp.where(k < nx + ny, y_link, -1))
    return out.astype(jnp.int32)


def link_endpoints(s: System, link):
    """(from_router, to_router) of link slots; ``to`` is -1 for off-mesh slots."""
    link = jnp.asarray(link)
    r, d = link // DIRECTIONS, link % DIRECTIONS
    x, y = r % s.mesh_cols, r // s.mesh_cols
    nx = x + jnp.where(d == EAST, 1, jnp.where(d == WEST, -1, 0))
    ny = y + jnp.where(d == SOUTH, 1, jnp.where(d == NORTH, -1, 0))
    ok = (nx >= 0) & (nx < s.mesh_cols) & (ny >= 0) & (ny < s.mesh_rows)
    return r, jnp.where(ok, ny * s.mesh_cols + nx, -1)


def link_crosses_die(s: System, link):
    """Whether a link slot crosses a compute-die boundary."""
    a, b = link_endpoints(s, link)
    ax = a % s.mesh_cols
    bx = jnp.where(b >= 0, b % s.mesh_cols, ax)
    return (ax // s.cols_per_die) != (bx // s.cols_per_die)
