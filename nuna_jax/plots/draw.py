"""Drawing primitives of one socket on a matplotlib ``Axes`` (no numbers computed here).

Data coordinates are router coordinates (docs/model.md, "Geometry"): router
``(x, y)`` is the unit square centred on ``(x, y)``; the y axis is inverted so
that row 0 (the north long edge) is on top.  HBM stacks are drawn outside the
long edges, I/O ports outside the short edges, each next to the router that
:mod:`nuna_jax.geometry` attaches it to.  Every shaded set is one
``PatchCollection``/``LineCollection`` whose ``gid`` names it and whose
``get_array()`` holds the numbers it shows (in the order of resource ids), so
tests can read back what was drawn.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.collections import LineCollection, PatchCollection
from matplotlib.patches import Rectangle

from .. import geometry as geo

__all__ = ["STACK_STRIP", "PORT_STRIP", "mesh_extent", "draw_mesh", "draw_cus", "draw_stacks", "draw_ports",
           "draw_links", "finish_axes", "domain_colors"]

STACK_STRIP = 0.42   # height of one strip of an HBM stack (router units)
PORT_STRIP = 0.45    # width of one strip of I/O ports (router units)
_GAP = 0.12


def domain_colors(n: int) -> np.ndarray:
    """``[n, 4]`` RGBA colours for NAR domains 0 .. n-1 (categorical)."""
    from matplotlib import colormaps
    if n == 1:  # one domain of all ports: the baseline hash, no NAR
        return np.array([[0.3, 0.3, 0.3, 1.0]])
    tab10 = colormaps["tab10"](np.array([0, 1, 3, 5, 6, 7, 8, 9]))  # no green / purple: the byte scales
    if n <= len(tab10):
        return tab10[:n]
    if n <= 20:
        return colormaps["tab20"](np.arange(n))
    return colormaps["hsv"](np.arange(n) / n)


def mesh_extent(s, n_stack_strips: int = 2, n_port_strips: int = 3):
    """(xlim, ylim) that hold the mesh, its stacks and its ports (ylim inverted)."""
    px = 0.5 + _GAP + n_port_strips * PORT_STRIP + 0.35
    py = 0.5 + _GAP + n_stack_strips * STACK_STRIP + 0.1
    return (-px, s.mesh_cols - 1 + px), (s.mesh_rows - 1 + py + 0.3, -py)


def draw_mesh(ax, s, *, face="white", label_dies=True, label_y=None):
    """Router cells and the compute-die boundaries (thick dashed lines)."""
    x, y = geo.router_xy(s, np.arange(s.n_routers))
    cells = [Rectangle((xi - 0.5, yi - 0.5), 1, 1) for xi, yi in zip(x, y)]
    ax.add_collection(PatchCollection(cells, facecolor=face, edgecolor="0.75", linewidth=0.5, gid="routers",
                                      zorder=0))
    for d in range(1, s.n_dies):
        xb = d * s.cols_per_die - 0.5
        ax.plot([xb, xb], [-0.5, s.mesh_rows - 0.5], color="k", lw=1.6, ls="--", zorder=4)
    ax.add_patch(Rectangle((-0.5, -0.5), s.mesh_cols, s.mesh_rows, fill=False, ec="k", lw=1.6, zorder=4))
    if label_dies and s.n_dies > 1:
        for d in range(s.n_dies):
            ax.text((d + 0.5) * s.cols_per_die - 0.5, s.mesh_rows - 0.5 if label_y is None else label_y,
                    f"compute die {d}", ha="center", va="top", fontsize=6, color="0.3", zorder=5)


def draw_cus(ax, s, domain, count, colors):
    """CUs as sub-squares of their router: used CUs in the colour of their NAR domain
    (``gid='cu_used'``, array = domain), idle CUs light grey (``gid='cu_unused'``);
    ``xn`` marks a CU holding n > 1 threadblocks."""
    from matplotlib.colors import BoundaryNorm, ListedColormap
    k = math.ceil(math.sqrt(s.cus_per_router))
    side = 0.84 / k
    rx, ry = geo.router_xy(s, geo.cu_router(s))
    j = np.arange(s.n_cus) % s.cus_per_router
    x0 = rx - 0.42 + (j % k) * side
    y0 = ry - 0.42 + (j // k) * side
    used = domain >= 0
    box = lambda m: [Rectangle((a + 0.03, b + 0.03), side - 0.06, side - 0.06)  # noqa: E731
                     for a, b in zip(x0[m], y0[m])]
    ax.add_collection(PatchCollection(box(~used), facecolor="0.9", edgecolor="none", gid="cu_unused", zorder=1))
    n = len(colors)
    pc = PatchCollection(box(used), cmap=ListedColormap(colors), norm=BoundaryNorm(np.arange(n + 1) - 0.5, n),
                         edgecolor="k", linewidth=0.4, gid="cu_used", zorder=2)
    pc.set_array(domain[used].astype(float))
    ax.add_collection(pc)
    for c in np.flatnonzero(count > 1):
        ax.text(x0[c] + side / 2, y0[c] + side / 2, f"x{count[c]}", ha="center", va="center", fontsize=4,
                color="w", zorder=3)
    return pc


def draw_stacks(ax, s, strips, norm, cmap, *, gid="hbm", annotate=None):
    """HBM stacks outside the long edges, one strip per ``(label, values[n_hbm_stacks])``, the
    first strip next to the mesh; ``gid=f'{gid}_{label}'``.  ``annotate(v) -> str`` writes values."""
    sx, sy = geo.router_xy(s, geo.stack_router(s))
    width = s.mesh_cols / (s.n_hbm_stacks // 2) - 0.2
    north = sy == 0
    out = []
    for i, (label, vals) in enumerate(strips):
        d = 0.5 + _GAP + i * STACK_STRIP
        y0 = np.where(north, -d - STACK_STRIP, s.mesh_rows - 1 + d)
        rects = [Rectangle((a - width / 2, b), width, STACK_STRIP - 0.04) for a, b in zip(sx, y0)]
        pc = PatchCollection(rects, cmap=cmap, norm=norm, edgecolor="k", linewidth=0.5, gid=f"{gid}_{label}",
                             zorder=2)
        pc.set_array(np.asarray(vals, float))
        ax.add_collection(pc)
        out.append(pc)
        for a, b, v in zip(sx, y0, vals):
            text = f"{label} {annotate(v)}" if annotate else label
            if text:
                lum = np.dot(cmap(norm(v))[:3], [0.299, 0.587, 0.114])
                ax.text(a, b + STACK_STRIP / 2 - 0.02, text, ha="center", va="center", fontsize=5,
                        color="w" if lum < 0.5 else "k", zorder=3)
    for a, b in zip(sx, sy):  # the attach point
        ax.plot([a], [b + (-0.5 if b == 0 else 0.5)], marker="o", ms=2, color="k", zorder=5)
    return out


def _port_rows(s):
    """(edge side -1/+1, y centre, height) of every port's slot on its edge router."""
    pr = geo.port_router(s)
    px, py = geo.router_xy(s, pr)
    k = np.zeros(s.n_io_ports, int)
    for r in np.unique(pr):
        m = np.flatnonzero(pr == r)
        k[m] = np.arange(m.size)
    per = np.bincount(pr, minlength=s.n_routers)[pr]
    h = 0.9 / per
    return np.where(px == 0, -1, 1), py - 0.45 + (k + 0.5) * h, h, px


def draw_ports(ax, s, strips, norm, cmap, *, gid="port", domain=None, domain_colors_=None):
    """I/O ports outside the short edges, one strip per ``(label, values[n_io_ports])`` (first
    next to the mesh, ``gid=f'{gid}_{label}'``), then a thin strip in the colour of each port's
    NAR domain when ``domain`` is given."""
    side, yc, h, px = _port_rows(s)
    out = []
    n = len(strips)
    for i, (label, vals) in enumerate(strips):
        d = 0.5 + _GAP + i * PORT_STRIP
        x0 = np.where(side < 0, -d - PORT_STRIP, s.mesh_cols - 1 + d)
        rects = [Rectangle((a, b - hh / 2), PORT_STRIP - 0.05, hh) for a, b, hh in zip(x0, yc, h)]
        pc = PatchCollection(rects, cmap=cmap, norm=norm, edgecolor="none", gid=f"{gid}_{label}", zorder=2)
        pc.set_array(np.asarray(vals, float))
        ax.add_collection(pc)
        out.append(pc)
        for sd in (-1, 1):
            xt = (-d - PORT_STRIP / 2) if sd < 0 else (s.mesh_cols - 1 + d + PORT_STRIP / 2)
            ax.text(xt, s.mesh_rows - 0.45, label, rotation=90, ha="center", va="top", fontsize=5, zorder=5)
    if domain is not None:
        d = 0.5 + _GAP + n * PORT_STRIP
        x0 = np.where(side < 0, -d - 0.15, s.mesh_cols - 1 + d)
        rects = [Rectangle((a, b - hh / 2), 0.15, hh) for a, b, hh in zip(x0, yc, h)]
        ax.add_collection(PatchCollection(rects, facecolor=domain_colors_[np.asarray(domain)], edgecolor="none",
                                          gid=f"{gid}_domain", zorder=2))
    for sd in (-1, 1):  # edge outline of the port columns (the I/O dies)
        x = -0.5 - _GAP - n * PORT_STRIP if sd < 0 else s.mesh_cols - 0.5 + _GAP
        ax.add_patch(Rectangle((x - 0.02, -0.5), n * PORT_STRIP, s.mesh_rows, fill=False, ec="0.4", lw=0.6,
                               zorder=4))
    return out


def draw_links(ax, s, util, norm, cmap, *, lw=2.6):
    """Every on-mesh directed link as a segment coloured by ``util[slot]`` (``gid='links'``, array in
    ascending slot order).  A link is drawn on the left of its direction of travel (east-bound
    links above west-bound ones, south-bound right of north-bound)."""
    slots = np.arange(geo.n_link_slots(s))
    a, b = geo.link_endpoints(s, slots)
    ok = np.asarray(b) >= 0
    slots, a, b = slots[ok], np.asarray(a)[ok], np.asarray(b)[ok]
    ax_, ay = geo.router_xy(s, a)
    bx, by = geo.router_xy(s, b)
    dx, dy = bx - ax_, by - ay
    ox, oy = dy * 0.17, -dx * 0.17          # left of travel on the y-inverted screen
    segs = np.stack([np.stack([ax_ + 0.22 * dx + ox, ay + 0.22 * dy + oy], -1),
                     np.stack([bx - 0.22 * dx + ox, by - 0.22 * dy + oy], -1)], 1)
    lc = LineCollection(segs, cmap=cmap, norm=norm, linewidths=lw, gid="links", zorder=3, capstyle="butt")
    lc.set_array(np.asarray(util, float)[slots])
    ax.add_collection(lc)
    # small arrow heads on the links that carried traffic: direction of travel
    busy = np.nan_to_num(np.asarray(util, float)[slots]) > 0
    mid = segs.mean(axis=1)[busy]
    dx, dy = dx[busy], dy[busy]
    ax.quiver(mid[:, 0], mid[:, 1], dx, dy, angles="xy", scale_units="xy", scale=5, color="0.25",
              width=0.0015, headwidth=4, headlength=4, headaxislength=3.5, zorder=4, pivot="mid")
    return lc


def finish_axes(ax, s, *, n_stack_strips=2, n_port_strips=3, title=None):
    """Limits, equal aspect, router-index ticks and axis labels."""
    xl, yl = mesh_extent(s, n_stack_strips, n_port_strips)
    ax.set_xlim(*xl)
    ax.set_ylim(*yl)
    ax.set_aspect("equal")
    ax.set_xticks(np.arange(s.mesh_cols))
    ax.set_yticks(np.arange(s.mesh_rows))
    ax.tick_params(labelsize=5, length=2)
    ax.set_xlabel("mesh column x (router index; long edge)", fontsize=7)
    ax.set_ylabel("mesh row y (router index)", fontsize=7)
    if title:
        ax.set_title(title, fontsize=8)
