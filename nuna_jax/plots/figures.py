"""The four pictures of the socket (one per CLI use: place, estimate, simulate, info); each returns a ``matplotlib.figure.Figure``.

Built on ``Figure`` directly (Agg canvas, no pyplot), so nothing is left in
pyplot's global state; the caller saves it with :func:`nuna_jax.plots.save`.
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from .. import geometry as geo
from .data import check_gpu, cu_domains, port_bytes, port_latency_ns, resource_utilization, stack_bytes
from .draw import domain_colors, draw_cus, draw_links, draw_mesh, draw_ports, draw_stacks, finish_axes, mesh_extent

__all__ = ["socket_figure", "compare_figure", "simulation_figure", "latency_map_figure"]

PORT_CMAP = "Purples"
HBM_CMAP = "Greens"
UTIL_CMAP = "inferno_r"
LATENCY_CMAP = "viridis"


def _byte_unit(vmax: float):
    """(divisor, unit) in decimal units (docs/model.md: 1 kB = 10^3 B)."""
    for div, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if vmax >= div:
            return div, unit
    return 1.0, "B"


def _fmt_bytes(v: float) -> str:
    div, unit = _byte_unit(v)
    return "0" if v == 0 else f"{v / div:.3g}{unit[:-1] if unit != 'B' else ''}"


def _ranges(ids) -> str:
    """'0-35, 108-143' for a sorted id list."""
    ids = list(map(int, ids))
    out, start = [], ids[0]
    for a, b in zip(ids, ids[1:] + [None]):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(out)


def _socket_data(system, placement, traffic, gpu):
    g = check_gpu(system, gpu)
    eg, ig = port_bytes(system, traffic, g)
    rd, wr = stack_bytes(system, traffic, g)
    dom, count = cu_domains(system, placement, g)
    return {"gpu": g, "egress": eg, "ingress": ig, "read": rd, "written": wr, "domain": dom, "count": count,
            "domains": placement.domains}


def _draw_socket(ax, system, d, port_norm, hbm_norm, colors, title):
    draw_mesh(ax, system, label_y=system.mesh_rows - 0.5 + 0.12 + 2 * 0.42 + 0.02)
    draw_cus(ax, system, d["domain"], d["count"], colors)
    draw_stacks(ax, system, [("R", d["read"]), ("W", d["written"])], hbm_norm, colormaps[HBM_CMAP],
                annotate=_fmt_bytes)
    draw_ports(ax, system, [("out", d["egress"]), ("in", d["ingress"])], port_norm, colormaps[PORT_CMAP],
               domain=d["domains"].port_domain, domain_colors_=colors)
    finish_axes(ax, system, title=title)


def _domain_legend(ax, domains, colors):
    g = domains.granularity
    handles = [Patch(fc=colors[k], ec="k", lw=0.4,
                     label=("NAR domain %d: ports %s" % (k, _ranges(domains.ports[k]))) if g > 1
                     else f"all ports 0-{len(domains.flat) - 1} (baseline hash, no NAR)")
               for k in range(g)][:12]
    handles.append(Patch(fc="0.9", ec="none", label="idle CU"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=min(len(handles), 3),
              fontsize=6, title="CUs used (threadblocks) and port strip, coloured by routing domain\n"
              "(xn: n threadblocks on one CU)", title_fontsize=6, frameon=False)


def _byte_colorbars(fig, axes, port_norm, hbm_norm):
    for norm, cmap, what in ((port_norm, PORT_CMAP, "I/O port load, out = egress / in = ingress"),
                             (hbm_norm, HBM_CMAP, "HBM stack, R = bytes read / W = bytes written")):
        div, unit = _byte_unit(norm.vmax)
        cb = fig.colorbar(ScalarMappable(norm, colormaps[cmap]), ax=axes, shrink=0.9, aspect=20, pad=0.01,
                          format=FuncFormatter(lambda v, _, div=div: f"{v / div:g}"))
        cb.set_label(f"{what} ({unit})", fontsize=6)
        cb.ax.tick_params(labelsize=5)


def _norm(*arrays) -> Normalize:
    vmax = max(float(np.max(a)) if np.size(a) else 0.0 for a in arrays)
    return Normalize(0.0, vmax if vmax > 0 else 1.0)


def _default_title(system, placement, traffic, g):
    return (f"{system.name}, GPU {g} of {system.n_gpus}: {placement.policy}, "
            f"{_fmt_bytes(traffic.total_bytes)}B sent in the pod")


def socket_figure(system, placement, traffic, *, gpu=0, title=None) -> Figure:
    """One GPU's socket (NUNA Figures 1 and 6): the mesh and its compute dies, the CUs used
    coloured by NAR domain, HBM stacks shaded by bytes read (R) and written (W), I/O ports shaded
    by bytes out (egress) and in (ingress) with a strip in their domain's colour.  Axes: the socket
    and two colour bars (ports, HBM)."""
    return compare_figure([(title, system, placement, traffic)], gpu=gpu, _single=True)


def compare_figure(scenarios, *, gpu=0, _single=False) -> Figure:
    """Several ``(label, system, placement, traffic)`` side by side (two per row; an odd count in one
    column), the port and HBM
    colour scales shared, e.g. UA beside NAP+NAR: where the threadblocks, pages and ports sit
    (NUNA Figures 1 and 6).  Axes: one socket per scenario and two colour bars."""
    scenarios = list(scenarios)
    if not scenarios:
        raise ValueError("compare_figure: give at least one (label, system, placement, traffic)")
    data = [_socket_data(s, p, t, gpu) for _, s, p, t in scenarios]
    port_norm = _norm(*(d[k] for d in data for k in ("egress", "ingress")))
    hbm_norm = _norm(*(d[k] for d in data for k in ("read", "written")))
    n = len(scenarios)
    ncols = 2 if n % 2 == 0 else 1   # an odd count stacks in one column: no empty panel
    nrows = -(-n // ncols)
    xl, yl = mesh_extent(scenarios[0][1])
    w_ax = min(9.5, max(5.0, 0.33 * (xl[1] - xl[0])))  # inches per panel, the socket's aspect kept
    h_ax = w_ax * (yl[0] - yl[1]) / (xl[1] - xl[0])
    fig = Figure(figsize=(w_ax * ncols + 1.4, (h_ax + 1.3) * nrows + 0.5), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[n:]:
        fig.delaxes(ax)
    axes = axes[:n]
    for ax, (label, s, p, t), d in zip(axes, scenarios, data):
        title = _default_title(s, p, t, d["gpu"])
        if label and not _single:
            same = str(label).replace(" ", "").upper() == str(p.policy).replace(" ", "").upper()
            title = f"{label}: " + (title.replace(f": {p.policy},", ",") if same else title)
        elif label:
            title = label
        colors = domain_colors(d["domains"].granularity)
        _draw_socket(ax, s, d, port_norm, hbm_norm, colors, title)
        _domain_legend(ax, d["domains"], colors)
    _byte_colorbars(fig, list(axes), port_norm, hbm_norm)
    if not _single:
        fig.suptitle(f"GPU {data[0]['gpu']}: {', '.join(str(sc[0]) for sc in scenarios)} side by side "
                     "(shared colour scales)", fontsize=9)
    return fig


def _nice_bin_ns(lat_ns) -> float:
    """About 40 bins over the range, rounded to 1, 2 or 5 x 10^k ns (at least 1 ns)."""
    span = float(np.ptp(lat_ns)) if np.size(lat_ns) else 0.0
    raw = max(span / 40.0, 1.0)
    k = 10.0 ** np.floor(np.log10(raw))
    return float(min((m * k for m in (1, 2, 5, 10) if m * k >= raw)))


def simulation_figure(system, traffic, sim_result, *, gpu=0, bin_ns=None) -> Figure:
    """A simulation seen on the socket: utilization (busy time / completion time) of every
    directed mesh link, I/O port and HBM stack of ``gpu`` as one heat map, and the histogram of
    the one-way store latency of every traffic flit (store issue -> HBM write, NUNA Figure 10).
    Axes: the socket, its colour bar, the histogram."""
    g = check_gpu(system, gpu)
    if int(sim_result.n_traffic_flows) != traffic.n_flows:
        raise ValueError(f"sim_result has {sim_result.n_traffic_flows} traffic flows but traffic has "
                         f"{traffic.n_flows}: pass the Traffic that was simulated")
    lat_ns = np.asarray(sim_result.store_latency_ps, np.float64) / 1000.0
    if bin_ns is None:
        bin_ns = _nice_bin_ns(lat_ns)
    if not bin_ns > 0:
        raise ValueError(f"bin_ns={bin_ns!r} must be > 0")
    u = resource_utilization(system, sim_result, g)
    norm = Normalize(1e-12, max(float(np.nanmax(np.concatenate([u["link"], u["hbm"], u["egress"], u["ingress"]]))),
                              1e-9))
    cmap = colormaps[UTIL_CMAP].with_extremes(under="0.88")  # idle resources: grey
    fig = Figure(figsize=(10, 6.6), layout="constrained")
    ax, hx = fig.subplots(2, 1, height_ratios=[1.6, 1.0])
    draw_mesh(ax, system, face="0.97", label_y=system.mesh_rows - 0.5 + 0.12 + 0.42 + 0.02)
    draw_links(ax, system, u["link"], norm, cmap)
    draw_stacks(ax, system, [("", u["hbm"])], norm, cmap, annotate=lambda v: f"{100 * v:.0f}%")
    draw_ports(ax, system, [("out", u["egress"]), ("in", u["ingress"])], norm, cmap)
    done_ns = sim_result.completion_ps / 1000.0
    finish_axes(ax, system, n_stack_strips=1, n_port_strips=2,
                title=(f"{system.name}, GPU {g} of {system.n_gpus}: resource utilization over the run "
                       f"({done_ns:,.1f} ns; the pod sent {_fmt_bytes(traffic.total_bytes)}B, "
                       f"{sim_result.flits_delivered:,} flits)"))
    cb = fig.colorbar(ScalarMappable(norm, cmap), ax=ax, shrink=0.8, aspect=25, pad=0.01,
                      format=FuncFormatter(lambda v, _: f"{100 * v:g}"))
    cb.set_label("utilization = busy / completion time (%)\nof links (drawn left of their direction),\n"
                 "I/O ports (out / in), HBM stacks; grey: idle",
                 fontsize=6)
    cb.ax.tick_params(labelsize=5)

    if lat_ns.size:
        lo, hi = np.floor(lat_ns.min() / bin_ns) * bin_ns, np.ceil(lat_ns.max() / bin_ns + 1e-9) * bin_ns
        edges = np.arange(lo, hi + bin_ns / 2, bin_ns)
        if edges.size < 2:
            edges = np.array([lo, lo + bin_ns])
        hx.hist(lat_ns, bins=edges, color="tab:blue", alpha=0.8, gid="store_hist",
                label=f"{lat_ns.size:,} traffic flits")
        hx.axvline(lat_ns.mean(), color="k", lw=1.2, label=f"mean {lat_ns.mean():,.0f} ns")
        hx.axvline(lat_ns.max(), color="k", lw=1.2, ls="--", label=f"max {lat_ns.max():,.0f} ns")
    hx.set_xlabel("one-way store latency: store issue -> HBM write at the destination (ns)", fontsize=7)
    hx.set_ylabel(f"flits per {bin_ns:g} ns bin", fontsize=7)
    hx.set_title("store-latency histogram (all GPUs' traffic flits; NUNA Figure 10)", fontsize=8)
    hx.tick_params(labelsize=6)
    hx.legend(fontsize=6)
    return fig


def latency_map_figure(system) -> Figure:
    """Zero-load latency from every CU router to its nearest (top) and farthest (bottom) I/O port,
    ``cu_to_noc_ns`` + head latency of the XY route (docs/model.md, "NoC latency figures"): the
    NUMA picture of NUNA Figure 4.  Axes: the two maps and their shared colour bar."""
    near, far = port_latency_ns(system)
    norm = Normalize(float(min(near.min(), far.min())), float(max(near.max(), far.max())))
    cmap = colormaps[LATENCY_CMAP]
    fig = Figure(figsize=(9, 6.4), layout="constrained")
    axes = fig.subplots(2, 1)
    x, y = geo.router_xy(system, np.arange(system.n_routers))
    px, py = geo.router_xy(system, geo.port_router(system))
    pset = sorted(set(zip(px.tolist(), py.tolist())))
    for ax, vals, what in ((axes[0], near, "nearest"), (axes[1], far, "farthest")):
        img = np.full((system.mesh_rows, system.mesh_cols), np.nan)
        img[y, x] = vals
        ax.imshow(img, cmap=cmap, norm=norm, origin="upper", gid=f"latency_{what}",
                  extent=(-0.5, system.mesh_cols - 0.5, system.mesh_rows - 0.5, -0.5))
        for xi, yi, v in zip(x, y, vals):
            lum = np.dot(cmap(norm(v))[:3], [0.299, 0.587, 0.114])
            ax.text(xi, yi, f"{v:.0f}", ha="center", va="center", fontsize=5, color="w" if lum < 0.5 else "k")
        for d in range(1, system.n_dies):
            xb = d * system.cols_per_die - 0.5
            ax.plot([xb, xb], [-0.5, system.mesh_rows - 0.5], color="w", lw=1.5, ls="--")
        for xi, yi in pset:  # routers carrying I/O ports: a bar on their outer edge
            xe = -0.5 if xi == 0 else system.mesh_cols - 0.5
            ax.plot([xe, xe], [yi - 0.45, yi + 0.45], color="tab:red", lw=3, solid_capstyle="butt", clip_on=False)
        ax.set_xlim(-0.7, system.mesh_cols - 0.3)
        ax.set_ylim(system.mesh_rows - 0.5, -0.5)
        ax.set_xticks(np.arange(system.mesh_cols))
        ax.set_yticks(np.arange(system.mesh_rows))
        ax.tick_params(labelsize=5, length=2)
        ax.set_xlabel("mesh column x (router index; long edge)", fontsize=7)
        ax.set_ylabel("mesh row y", fontsize=7)
        ax.set_title(f"CU -> {what} I/O port (red bars: routers with ports; dashed: die boundaries)", fontsize=8)
    cb = fig.colorbar(ScalarMappable(norm, cmap), ax=list(axes), shrink=0.9, aspect=30, pad=0.01)
    cb.set_label("zero-load latency, CU -> port (ns)", fontsize=7)
    cb.ax.tick_params(labelsize=6)
    fig.suptitle(f"{system.name}: zero-load CU -> I/O port latency per router "
                 f"({system.mesh_cols} x {system.mesh_rows} mesh, {system.n_dies} dies)", fontsize=9)
    return fig
