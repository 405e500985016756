"""Where things sit on one socket, and the XY routes between them (docs/model.md, "Geometry", "Routing").

The one definition of the socket's geometry.  Every function takes router ids
as integer arrays of any (broadcastable) shape and works on numpy and JAX
alike: numpy in, numpy out (placement policies, reports); a JAX array or a
tracer in, JAX out (the models, under ``jit``/``vmap``).

* Router id ``r = y * mesh_cols + x``; ``n_dies`` compute dies split the
  columns into equal slabs.
* CU ``c`` sits on router ``c // cus_per_router``.
* HBM stacks sit on the two long edges (rows 0 and ``mesh_rows - 1``), half
  on each, stack ``i`` of an edge at the centre column of its stretch.  Its
  channels attach to ``k = hbm_routers_per_stack`` routers spread evenly
  along the stretch: *endpoint* ``e = stack * k + channel`` (docs/model.md,
  "HBM channels"); flit address ``a`` of a stack uses channel
  ``(a // flit_bytes) mod k``.
* I/O ports sit on the two short edges (columns 0 and ``mesh_cols - 1``),
  half on each, consecutive ports on consecutive rows.
* NUNA section 5.3: XY (dimension-order) routing; a route from ``(sx, sy)`` to
  ``(dx, dy)`` moves along X in row ``sy``, then along Y in column ``dx``.
  Directed links are indexed by *slot* ``4 * router + direction`` with
  direction ``EAST=+x, WEST=-x, SOUTH=+y, NORTH=-y``; slots pointing off the
  mesh exist in the index space but no route uses them.

Latencies are not geometry: they live in :mod:`nuna_jax.path`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .system import System

EAST, WEST, SOUTH, NORTH = 0, 1, 2, 3
DIRECTIONS = 4

__all__ = [
    "EAST", "WEST", "SOUTH", "NORTH", "DIRECTIONS",
    "router_xy", "router_die", "cu_router", "stack_router", "hbm_endpoint_router", "n_hbm_endpoints",
    "hbm_endpoint", "hbm_channel", "port_router",
    "n_link_slots", "max_hops", "hops", "die_crossings",
    "route_links", "route_incidence", "link_endpoints", "link_crosses_die",
]


def _xp(*arrays):
    """jax.numpy if any argument is a JAX array (or tracer), else numpy."""
    return jnp if any(isinstance(a, jax.Array) for a in arrays) else np


# ---------------------------------------------------------------------------
# positions
# ---------------------------------------------------------------------------
def router_xy(s: System, router):
    """(x, y) mesh coordinates of router ids."""
    r = _xp(router).asarray(router)
    return r % s.mesh_cols, r // s.mesh_cols


def router_die(s: System, router):
    """Compute die (0 .. n_dies-1) owning each router (by column slab)."""
    x, _ = router_xy(s, router)
    return x // s.cols_per_die


def cu_router(s: System) -> np.ndarray:
    """Router of every CU, ``[n_cus]``: CU ``c`` sits on router ``c // cus_per_router``."""
    return np.arange(s.n_cus, dtype=np.int32) // s.cus_per_router


def stack_router(s: System) -> np.ndarray:
    """Router of every HBM stack, ``[n_hbm_stacks]``.

    Stacks ``0 .. n/2-1`` sit on row 0, the rest on row ``mesh_rows-1``; on
    each edge stack ``i`` owns the column span ``[i*w, (i+1)*w)`` with
    ``w = mesh_cols / (n/2)`` and attaches to the router at its centre
    column ``floor((i + 1/2) * w)``.
    """
    per_edge = s.n_hbm_stacks // 2
    x = np.floor((np.arange(per_edge) + 0.5) * s.mesh_cols / per_edge).astype(np.int32)
    return np.concatenate([x, (s.mesh_rows - 1) * s.mesh_cols + x]).astype(np.int32)


def n_hbm_endpoints(s: System) -> int:
    """Stack channels with their own router: ``n_hbm_stacks * hbm_routers_per_stack``."""
    return s.n_hbm_stacks * s.hbm_routers_per_stack


def hbm_endpoint_router(s: System) -> np.ndarray:
    """Router of every HBM endpoint ``e = stack * k + channel``, ``[n_hbm_endpoints]``.

    Channel ``j`` of stack ``i`` (on its edge) attaches to column
    ``floor(i*w + (j + 1/2) * w / k)`` of the stack's row, ``w = mesh_cols / (n/2)``:
    ``k`` routers evenly along the stretch; ``k = 1`` is :func:`stack_router`.
    """
    per_edge, k = s.n_hbm_stacks // 2, s.hbm_routers_per_stack
    w = s.mesh_cols / per_edge
    x = np.floor(np.arange(per_edge)[:, None] * w + (np.arange(k)[None, :] + 0.5) * w / k).astype(np.int32)
    x = x.reshape(-1)
    return np.concatenate([x, (s.mesh_rows - 1) * s.mesh_cols + x]).astype(np.int32)


def hbm_channel(s: System, addr, flit_bytes: int | None = None):
    """Channel (0 .. k-1) of the flit at byte address ``addr`` of its stack: ``(addr // flit) mod k``."""
    fb = int(s.flit_bytes if flit_bytes is None else flit_bytes)
    return (np.asarray(addr, dtype=np.int64) // fb) % s.hbm_routers_per_stack


def hbm_endpoint(s: System, stack, channel):
    """Endpoint id ``stack * hbm_routers_per_stack + channel`` (numpy or JAX)."""
    return stack * s.hbm_routers_per_stack + channel


def port_router(s: System) -> np.ndarray:
    """Router of every I/O port, ``[n_io_ports]``.

    Ports ``0 .. n/2-1`` sit on column 0 (west short edge), the rest on column
    ``mesh_cols-1`` (east).  On each edge, port ``k`` attaches to row
    ``k // (n/2 / mesh_rows)``: a contiguous range of port ids is a
    contiguous stretch of edge.
    """
    per_edge = s.n_io_ports // 2
    y = np.arange(per_edge) // (per_edge // s.mesh_rows)
    west = y * s.mesh_cols
    return np.concatenate([west, west + (s.mesh_cols - 1)]).astype(np.int32)


# ---------------------------------------------------------------------------
# XY routes
# ---------------------------------------------------------------------------
def n_link_slots(s: System) -> int:
    """Size of the directed-link index space, ``4 * n_routers``."""
    return DIRECTIONS * s.n_routers


def max_hops(s: System) -> int:
    """Longest XY route in hops (corner to opposite corner)."""
    return (s.mesh_cols - 1) + (s.mesh_rows - 1)


def hops(s: System, src, dst):
    """Number of mesh hops of the XY route ``src -> dst`` (Manhattan distance)."""
    xp = _xp(src, dst)
    sx, sy = router_xy(s, src)
    dx, dy = router_xy(s, dst)
    return xp.abs(sx - dx) + xp.abs(sy - dy)


def die_crossings(s: System, src, dst):
    """Die boundaries crossed by the XY route (only X moves cross dies)."""
    return _xp(src, dst).abs(router_die(s, src) - router_die(s, dst))


def route_incidence(s: System, src, dst):
    """Which directed links the XY route ``src -> dst`` uses.

    Bool of shape ``broadcast(src, dst).shape + (n_link_slots,)``.  Closed
    form: slot ``(r, dir)`` with ``r = (rx, ry)`` is on the route iff

    * EAST:  ``ry == sy`` and ``sx <= rx < dx``
    * WEST:  ``ry == sy`` and ``dx < rx <= sx``
    * SOUTH: ``rx == dx`` and ``sy <= ry < dy``
    * NORTH: ``rx == dx`` and ``dy < ry <= sy``
    """
    xp = _xp(src, dst)
    sx, sy = router_xy(s, src)
    dx, dy = router_xy(s, dst)
    sx, sy, dx, dy = (a[..., None] for a in (sx, sy, dx, dy))
    rx, ry = router_xy(s, xp.arange(s.n_routers))
    east = (ry == sy) & (sx <= rx) & (rx < dx)
    west = (ry == sy) & (dx < rx) & (rx <= sx)
    south = (rx == dx) & (sy <= ry) & (ry < dy)
    north = (rx == dx) & (dy < ry) & (ry <= sy)
    inc = xp.stack([east, west, south, north], axis=-1)  # [..., n_routers, 4]
    return inc.reshape(inc.shape[:-2] + (n_link_slots(s),))


def route_links(s: System, src, dst):
    """The XY route as an ordered list of link slots, padded with ``-1``:
    int32 of shape ``broadcast(src, dst).shape + (max_hops(s),)``, entry ``k``
    the link taken on hop ``k``."""
    xp = _xp(src, dst)
    sx, sy = router_xy(s, src)
    dx, dy = router_xy(s, dst)
    sx, sy, dx, dy = (a[..., None] for a in (sx, sy, dx, dy))
    k = xp.arange(max_hops(s))
    nx, ny = xp.abs(dx - sx), xp.abs(dy - sy)
    stepx, stepy = xp.sign(dx - sx), xp.sign(dy - sy)
    # X phase: hop k leaves router (sx + stepx*k, sy); Y phase: hop k leaves (dx, sy + stepy*(k - nx))
    x_link = DIRECTIONS * (sy * s.mesh_cols + sx + stepx * k) + xp.where(stepx > 0, EAST, WEST)
    y_link = DIRECTIONS * ((sy + stepy * (k - nx)) * s.mesh_cols + dx) + xp.where(stepy > 0, SOUTH, NORTH)
    return xp.where(k < nx, x_link, xp.where(k < nx + ny, y_link, -1)).astype(xp.int32)


def link_endpoints(s: System, link):
    """(from_router, to_router) of link slots; ``to`` is -1 for off-mesh slots."""
    xp = _xp(link)
    link = xp.asarray(link)
    r, d = link // DIRECTIONS, link % DIRECTIONS
    x, y = router_xy(s, r)
    nx = x + xp.where(d == EAST, 1, xp.where(d == WEST, -1, 0))
    ny = y + xp.where(d == SOUTH, 1, xp.where(d == NORTH, -1, 0))
    ok = (nx >= 0) & (nx < s.mesh_cols) & (ny >= 0) & (ny < s.mesh_rows)
    return r, xp.where(ok, ny * s.mesh_cols + nx, -1)


def link_crosses_die(s: System, link):
    """Whether a link slot crosses a compute-die boundary."""
    xp = _xp(link)
    a, b = link_endpoints(s, link)
    return router_die(s, a) != router_die(s, xp.where(b >= 0, b, a))
