"""nuna_jax.plots (issue 15 item 1): each figure's axes, files, and the numbers it draws,
checked against sums written here from the Traffic / SimResult / docs/model.md, not from plots.data."""

from collections import defaultdict

import numpy as np
import pytest
from matplotlib.figure import Figure

from nuna_jax import plots, sim
from nuna_jax.presets import preset
from nuna_jax.scenario import make_scenario
from nuna_jax.traffic import FIELDS


@pytest.fixture(scope="module")
def scen():
    s = preset("table2", n_gpus=2)
    return {p: make_scenario(s, collective="allgather", size_bytes=100_000, policy=p) for p in ("ua", "nap+nar")}


@pytest.fixture(scope="module")
def simulated(scen):
    sc = scen["nap+nar"]
    return sc, sim.simulate(sc.system, sc.traffic)


def _by_gid(fig, gid):
    found = [a for ax in fig.axes for a in ax.get_children() if a.get_gid() == gid]
    assert len(found) >= 1, gid
    return found


def _files_ok(fig, tmp_path):
    for suf in (".png", ".pdf"):
        p = plots.save(fig, tmp_path / f"fig{suf}")
        assert p.stat().st_size > 1000
    with open(tmp_path / "fig.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(tmp_path / "fig.pdf", "rb") as f:
        assert f.read(5) == b"%PDF-"


def _hand_sums(t, gpu):
    """Bytes per (port, direction) and (stack, read/write) of one GPU, by a plain loop over flows."""
    acc = defaultdict(float)
    for k in range(t.n_flows):
        b = float(t.bytes[k]) * float(t.weight[k])
        if int(t.src_gpu[k]) == gpu:
            acc["out", int(t.port[k])] += b
            acc["R", int(t.read_stack[k])] += b
        if int(t.dst_gpu[k]) == gpu:
            acc["in", int(t.port[k])] += b
            acc["W", int(t.dst_stack[k])] += b
    return acc


@pytest.mark.parametrize("gpu", [0, 1])
def test_socket_figure_draws_the_traffic(scen, tmp_path, gpu):
    sc = scen["nap+nar"]
    s, t = sc.system, sc.traffic
    fig = plots.socket_figure(s, sc.placement, t, gpu=gpu)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 3  # socket + port and HBM colour bars
    ax = fig.axes[0]
    assert ax.get_title() and "router" in ax.get_xlabel() and "router" in ax.get_ylabel()
    assert all("(" in cb.get_ylabel() for cb in fig.axes[1:])  # units on the colour bars
    assert ax.get_legend() is not None
    acc = _hand_sums(t, gpu)
    for label, n in (("out", s.n_io_ports), ("in", s.n_io_ports), ("R", s.n_hbm_stacks), ("W", s.n_hbm_stacks)):
        gid = f"port_{label}" if label in ("out", "in") else f"hbm_{label}"
        (pc,) = _by_gid(fig, gid)
        drawn = np.asarray(pc.get_array())
        assert drawn.shape == (n,)
        np.testing.assert_allclose(drawn, [acc[label, i] for i in range(n)])
    # every byte leaves one GPU and enters another: both GPUs' egress add up to the traffic
    # CUs: one coloured square per CU holding a threadblock of this GPU, in its threadblock's domain
    pl = sc.placement
    mine = {int(pl.tb_cu[k]): int(pl.tb_domain[k]) for k in range(len(pl.tb_cu))[::-1]
            if int(pl.tb_gpu[k]) == gpu and pl.tb_cu[k] >= 0}
    (used,) = _by_gid(fig, "cu_used")
    assert list(np.asarray(used.get_array()).astype(int)) == [mine[c] for c in sorted(mine)]
    (unused,) = _by_gid(fig, "cu_unused")
    assert len(unused.get_paths()) == s.n_cus - len(mine)
    _files_ok(fig, tmp_path)


def test_port_bytes_conserve_the_traffic(scen):
    t = scen["ua"].traffic
    s = scen["ua"].system
    out = sum(plots.port_bytes(s, t, g)[0].sum() for g in range(s.n_gpus))
    inn = sum(plots.port_bytes(s, t, g)[1].sum() for g in range(s.n_gpus))
    assert out == pytest.approx(t.total_bytes) and inn == pytest.approx(t.total_bytes)
    assert t.total_bytes == pytest.approx(100_000)  # allgather of 100 kB on 2 GPUs: each sends its 50 kB once


def test_compare_figure_shares_scales(scen, tmp_path):
    items = [(k.upper(), v.system, v.placement, v.traffic) for k, v in scen.items()]
    fig = plots.compare_figure(items)
    assert len(fig.axes) == 4  # two sockets + two shared colour bars
    titles = [ax.get_title() for ax in fig.axes[:2]]
    assert titles[0].startswith("UA") and titles[1].startswith("NAP+NAR")
    outs = _by_gid(fig, "port_out") + _by_gid(fig, "port_in")
    vmax = max(float(np.max(pc.get_array())) for pc in outs)
    assert all(pc.norm.vmax == pytest.approx(vmax) for pc in outs)  # one scale for all panels
    hbm = _by_gid(fig, "hbm_R") + _by_gid(fig, "hbm_W")
    vmax = max(float(np.max(pc.get_array())) for pc in hbm)
    assert all(pc.norm.vmax == pytest.approx(vmax) for pc in hbm)
    # UA routes over one domain (all ports): its entry + idle; NAP+NAR: one entry per NAR domain + idle
    g = scen["nap+nar"].placement.routing_granularity
    assert g >= 2
    assert len(fig.axes[0].get_legend().get_texts()) == 2 and len(fig.axes[1].get_legend().get_texts()) == g + 1
    _files_ok(fig, tmp_path)
    with pytest.raises(ValueError):
        plots.compare_figure([])


def _hand_link_slots(s):
    """(slot, valid) of every directed link slot 4 * router + (E, W, S, N), docs/model.md."""
    valid = []
    for r in range(s.mesh_cols * s.mesh_rows):
        x, y = r % s.mesh_cols, r // s.mesh_cols
        valid += [x + 1 < s.mesh_cols, x > 0, y + 1 < s.mesh_rows, y > 0]
    return np.flatnonzero(valid)


@pytest.mark.parametrize("gpu", [0, 1])
def test_simulation_figure_draws_busy_over_completion(simulated, tmp_path, gpu):
    sc, r = simulated
    s = sc.system
    fig = plots.simulation_figure(s, sc.traffic, r, gpu=gpu)
    assert len(fig.axes) == 3  # socket heat map, its colour bar, the histogram
    # resource ids, docs/model.md: per GPU [CUs | stacks | 4 * routers link slots | egress | ingress]
    per_gpu = s.n_cus + s.n_hbm_stacks + 4 * s.n_routers + 2 * s.n_io_ports
    link0 = gpu * per_gpu + s.n_cus + s.n_hbm_stacks
    slots = _hand_link_slots(s)
    assert slots.size == s.n_directed_links
    want = np.asarray(r.busy_ps, float)[link0 + slots] / r.completion_ps
    (lc,) = _by_gid(fig, "links")
    np.testing.assert_allclose(np.asarray(lc.get_array()), want)
    assert want.max() > 0
    eg0 = link0 + 4 * s.n_routers
    (pc,) = _by_gid(fig, "port_out")
    np.testing.assert_allclose(pc.get_array(), np.asarray(r.busy_ps, float)[eg0:eg0 + s.n_io_ports] / r.completion_ps)
    # egress busy = flits out of the port x flit / port_bw (ps, rounded per flit)
    flits_out = np.zeros(s.n_io_ports)
    for k in range(sc.traffic.n_flows):
        if int(sc.traffic.src_gpu[k]) == gpu:
            flits_out[int(sc.traffic.port[k])] += float(sc.traffic.flits[k])
    svc_ps = s.flit_bytes / float(s.port_bw_bytes_per_ns) * 1000
    np.testing.assert_allclose(np.asarray(pc.get_array()) * r.completion_ps, flits_out * svc_ps, rtol=1e-3, atol=1)
    # the histogram holds every traffic flit's store latency (delivery - store issue)
    hx = fig.axes[1] if fig.axes[1].get_xlabel().startswith("one-way") else fig.axes[2]
    assert "ns" in hx.get_xlabel() and hx.get_ylabel() and hx.get_title() and hx.get_legend()
    bars = [p for p in hx.patches]
    heights = np.array([p.get_height() for p in bars])
    edges = np.array([p.get_x() for p in bars] + [bars[-1].get_x() + bars[-1].get_width()])
    m = np.asarray(r.flit_flow) < sc.traffic.n_flows
    lat_ns = (np.asarray(r.deliver_ps)[m] - np.asarray(r.store_ps)[m]) / 1000.0
    assert heights.sum() == lat_ns.size == int(sc.traffic.total_flits)
    np.testing.assert_array_equal(heights, np.histogram(lat_ns, bins=edges)[0])
    _files_ok(fig, tmp_path)
    with pytest.raises(ValueError, match="traffic flows"):
        one_flow = sc.traffic.replace(**{k: getattr(sc.traffic, k)[:1] for k in FIELDS})
        plots.simulation_figure(s, one_flow, r)


def test_latency_map_matches_hand_latencies(tmp_path):
    for name in ("table2", "quad"):
        s = preset(name)
        fig = plots.latency_map_figure(s)
        assert len(fig.axes) == 3 and fig.axes[2].get_ylabel().endswith("(ns)")
        hop = float(s.hop_cycles) / float(s.noc_clock_ghz)
        per_row = s.n_io_ports // 2 // s.mesh_rows
        assert per_row >= 1  # every edge router carries ports: both short edges, every row
        ports = [(px, py) for px in (0, s.mesh_cols - 1) for py in range(s.mesh_rows)]
        die = lambda x: x // (s.mesh_cols // s.n_dies)  # noqa: E731
        near = np.zeros((s.mesh_rows, s.mesh_cols))
        far = np.zeros((s.mesh_rows, s.mesh_cols))
        for y in range(s.mesh_rows):
            for x in range(s.mesh_cols):
                lat = [float(s.cu_to_noc_ns) + (abs(x - px) + abs(y - py)) * hop
                       + abs(die(x) - die(px)) * float(s.die_crossing_ns) for px, py in ports]
                near[y, x], far[y, x] = min(lat), max(lat)
        (im_n,) = _by_gid(fig, "latency_nearest")
        (im_f,) = _by_gid(fig, "latency_farthest")
        np.testing.assert_allclose(np.asarray(im_n.get_array()), near, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(im_f.get_array()), far, rtol=1e-6)
    # an edge router's nearest port is cu_to_noc away (ports on every edge row)
    assert near.min() == pytest.approx(float(s.cu_to_noc_ns))
    _files_ok(fig, tmp_path)


def test_latency_map_table2_numbers():
    s = preset("table2")
    fig = plots.latency_map_figure(s)
    (im_f,) = _by_gid(fig, "latency_farthest")
    # 120 ns CU -> NoC + (23 + 5) hops x 10 cycles / 1.2 GHz
    assert float(np.max(im_f.get_array())) == pytest.approx(120 + 28 * 10 / 1.2)


def test_save_rejects_bad_suffix_and_path(tmp_path, scen):
    fig = plots.latency_map_figure(preset())
    with pytest.raises(ValueError, match="suffix"):
        plots.save(fig, tmp_path / "x.gif")
    with pytest.raises(ValueError, match="suffix"):
        plots.save(fig, tmp_path / "x")
    with pytest.raises(ValueError, match="cannot be written"):
        plots.save(fig, tmp_path / "no" / "such" / "dir" / "x.png")
    assert plots.save(fig, tmp_path / "X.PDF").stat().st_size > 0
    sc = scen["ua"]
    with pytest.raises(ValueError, match="gpu=2"):
        plots.socket_figure(sc.system, sc.placement, sc.traffic, gpu=2)


def test_no_pyplot_state(scen):
    import matplotlib.pyplot as plt
    before = plt.get_fignums()
    sc = scen["ua"]
    plots.socket_figure(sc.system, sc.placement, sc.traffic)
    plots.latency_map_figure(sc.system)
    assert plt.get_fignums() == before


def test_expected_bytes_follow_the_weight(scen):
    sc = scen["nap+nar"]
    t = sc.traffic.replace(weight=np.full(sc.traffic.n_flows, 0.25))
    fig = plots.socket_figure(sc.system, sc.placement, t)
    (pc,) = _by_gid(fig, "port_out")
    assert float(np.sum(pc.get_array())) == pytest.approx(0.25 * sc.traffic.total_bytes / 2)  # GPU 0: half


def test_placement_without_tb_gpu_is_a_clear_error(scen):
    import dataclasses
    sc = scen["ua"]
    pl = dataclasses.replace(sc.placement, tb_gpu=None)
    with pytest.raises(ValueError, match="tb_gpu"):
        plots.socket_figure(sc.system, pl, sc.traffic)


def test_save_stays_the_function_after_the_save_submodule_is_imported():
    """``import nuna_jax.plots.save`` (every experiment does) must not shadow ``plots.save``: it did,
    and every later ``--plot`` exited 1 (found when the suite ran in another order)."""
    import importlib
    importlib.import_module("nuna_jax.plots.save")
    from nuna_jax import plots as p
    assert callable(p.save) and p.save is importlib.import_module("nuna_jax.plots.io").save
