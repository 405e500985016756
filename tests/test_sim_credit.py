"""Credit flow control in the flit simulator (docs/simulator.md, "Credit flow control").

* ``flow_control="none"`` is the old model: numbers recorded from the engine before credit mode
  existed (commit 049a431) on four scenarios are reproduced bit for bit.
* Hand calculations: a lone flit's latency through the router pipeline; two flits behind a
  one-flit switch FIFO; a CU stalled by a full injection buffer.
* The compiled engine equals the reference flit by flit on random small cases (hypothesis).
"""

import hashlib
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna_jax import path, preset, sim
from nuna_jax.presets import from_params
from nuna_jax.scenario import make_scenario
from nuna_jax.sim.flow_control import FlowControl, flow_control
from nuna_jax.traffic import make_traffic

from test_sim_property import cases

# recorded with commit 049a431 (before credit mode), fast engine, make_scenario's default
# threadblocks: sha256 of issue/deliver/store/busy arrays (first 16 hex digits)
RECORDED = {
    ("allgather", 4, 100_000, "ua"): (1842549, 48079, "9a2b4ecc919128db"),
    ("allgather", 4, 100_000, "nap+nar"): (1240737, 10983, "fd0464e847785f08"),
    ("alltoall", 4, 100_000, "ua+nar"): (1892076, 45068, "595e7a97f0538cac"),
    ("allgather", 8, 1_000_000, "ua"): (2305760, 1191864, "405d8830d2d3a80b"),
}


def _digest(r):
    return hashlib.sha256(b"".join(np.asarray(a, np.int64).tobytes() for a in
                                   (r.deliver_ps, r.store_ps, r.issue_ps, r.busy_ps))).hexdigest()[:16]


@pytest.mark.parametrize("key", list(RECORDED), ids=lambda k: "_".join(map(str, k)))
def test_none_mode_is_bit_identical_to_the_recorded_engine(key):
    coll, g, size, pol = key
    sc = make_scenario(preset("table2", n_gpus=g), collective=coll, size_bytes=size, policy=pol)
    for fc in (None, "none", FlowControl(mode="none", num_vcs=1, vc_buf_flits=1)):   # buffer settings ignored
        r = sim.simulate(sc.system, sc.traffic, flow_control=fc)
        assert (r.completion_ps, r.flit_hops, _digest(r)) == RECORDED[key]


def _tiny(**kw):
    p = dict(mesh_cols=4, mesh_rows=1, n_dies=1, cus_per_router=1, n_hbm_stacks=2, n_io_ports=2, n_gpus=2,
             noc_clock_ghz=1.0, hop_cycles=2.0, die_crossing_ns=0.0, cu_to_noc_ns=5.0, link_bw_bytes_per_ns=256.0,
             hbm_bw_bytes_per_ns=256.0, hbm_latency_ns=20.0, port_bw_bytes_per_ns=64.0, switch_latency_ns=50.0,
             max_outstanding_per_cu=16)
    p.update(kw)
    return from_params(**p)


def _one_flow(s, flits, cu=0, stack=0, port=0, dst_stack=0, dst_channel=0):
    one = lambda v: np.array([v])  # noqa: E731
    return make_traffic(s, src_gpu=one(0), cu=one(cu), read_stack=one(stack), port=one(port), dst_gpu=one(1),
                        dst_stack=one(dst_stack), dst_channel=one(dst_channel), flits=one(flits))


def _both(s, t, fc, bg=None):
    ref = sim.simulate(s, t, background=bg, engine="reference", flow_control=fc)
    fast = sim.simulate(s, t, background=bg, flow_control=fc)
    for k in ("issue_ps", "deliver_ps", "store_ps", "busy_ps"):
        assert np.array_equal(getattr(fast, k), getattr(ref, k)), k
    assert fast.flit_hops == ref.flit_hops
    return fast


def test_lone_flit_latency_through_the_router_pipeline():
    """Zero load: a lone flit never waits for a credit; its latency is the path's stage times with
    every held mesh link's hop (2 cycles) replaced by the pipeline's 1+1+1+1+1 cycles."""
    s = _tiny()
    t = _one_flow(s, 1, cu=3)                    # 3 response, 3 store links (routers 0 -> 3 -> 0)
    st_ = path.flow_stages(s, t)
    res = np.asarray(st_.resource)[0]
    stage_ps = sim.to_ps(np.asarray(st_.service_ns)[0]) + sim.to_ps(np.asarray(st_.latency_ns)[0])
    links = int(np.sum(path.resource_layout(s).kind_of(res[res >= 0]) == "link"))
    assert links == 6
    none = sim.simulate(s, t)
    assert none.completion_ps == int(stage_ps.sum())
    plain = _both(s, t, flow_control("credit", num_vcs=1, vc_buf_flits=1, port_buf_flits=1, inj_buf_flits=1))
    assert plain.completion_ps == none.completion_ps
    piped = _both(s, t, flow_control("credit", router_cycles=(1, 1, 1, 1, 1)))
    assert piped.completion_ps == none.completion_ps + links * (5000 - 2000)


@pytest.mark.parametrize("rd,va,sa", [(1, 1, 1), (0, 2, 3)])
def test_mesh_hop_equals_the_noc_simulators_in_cycles(rd, va, sa):
    """Cross-check with nuna_jax.noc (validated against BookSim2): with the same routing, VC- and
    switch-allocation delays, one more mesh link adds the same cycles to a lone flit in both.  The
    NoC simulator's zero-load latency of a 1-flit packet over h links is 2 + (h + 1) P cycles,
    P = routing + vc_alloc + sw_alloc + 2 (docs/noc.md); ours, per link, is the flit's serialization
    (1 cycle here) + routing + vc_alloc + sw_alloc + traversal (1) + link (0)."""
    from nuna_jax.noc.config import load_config
    from nuna_jax.noc.sim import zero_load_latency
    cfg = load_config(overrides=[("topology", "mesh"), ("k", 2), ("n", 1), ("routing_function", "dor"),
                                 ("num_vcs", 1), ("traffic", "neighbor"), ("routing_delay", rd),
                                 ("vc_alloc_delay", va), ("sw_alloc_delay", sa)])
    per_router = (zero_load_latency(cfg) - 2 - (cfg["packet_size"] - 1)) / 2     # every packet: 1 link, 2 routers
    s = _tiny()                                  # 1 GHz; 256 B at 256 B/ns: one cycle a link
    fc = flow_control("credit", router_cycles=(rd, va, sa, 1, 0))
    lat = [_both(s, _one_flow(s, 1, dst_channel=h), fc).completion_ps for h in range(4)]   # h links (port at router 0)
    assert np.diff(lat).tolist() == [per_router * 1000] * 3


def test_two_flits_behind_a_one_flit_switch_fifo():
    """Port FIFO of 1 flit, credit delay 3 cycles: the second flit leaves the egress port only when the
    first has crossed the switch (4 ns port + 50 ns switch) and its credit is back (3 ns): the
    deliveries are 57 ns apart instead of the port's 4 ns."""
    s = _tiny()
    t = _one_flow(s, 2)
    none = sim.simulate(s, t)
    assert int(np.diff(none.deliver_ps)[0]) == 4000
    r = _both(s, t, flow_control("credit", num_vcs=4, vc_buf_flits=16, port_buf_flits=1, credit_delay_cycles=3))
    assert int(np.diff(r.deliver_ps)[0]) == 4000 + 50_000 + 3000
    assert r.deliver_ps[0] == none.deliver_ps[0]
    deep = _both(s, t, flow_control("credit", port_buf_flits=2, credit_delay_cycles=3))
    assert np.array_equal(deep.deliver_ps, none.deliver_ps)


def test_cu_stalls_on_a_full_injection_buffer():
    """A write (background) flow from a CU one router away from its stack, injection buffer of 1 flit:
    the CU issues the next flit when the previous one has left the buffer onto the first link
    (1 ns issue + 5 ns CU -> NoC) and the credit is back (3 ns): every 9 ns instead of every 1 ns."""
    s = _tiny()
    t = _one_flow(s, 1, cu=0)
    bg = sim.make_background(s, gpu=np.array([1]), cu=np.array([1]), stack=np.array([0]), kind=np.array([1]),
                             flits=np.array([4]), tb=np.array([0]), step=np.array([0]))
    assert path.resource_layout(s).kind_of(np.asarray(sim.background_stages(s, bg)[0])[0, 1]) == "link"
    mine = lambda r: np.sort(r.issue_ps[r.flit_flow >= r.n_traffic_flows])  # noqa: E731
    none = sim.simulate(s, t, background=bg)
    assert np.diff(mine(none)).tolist() == [1000] * 3
    r = _both(s, t, flow_control("credit", inj_buf_flits=1, credit_delay_cycles=3), bg)
    assert np.diff(mine(r)).tolist() == [9000] * 3
    r2 = _both(s, t, flow_control("credit", inj_buf_flits=2, credit_delay_cycles=3), bg)
    assert np.diff(mine(r2)).tolist() == [1000, 8000, 1000]


def test_bad_settings_are_refused(monkeypatch):
    for kw in ({"num_vcs": 0}, {"vc_buf_flits": -1}, {"credit_delay_cycles": 1.5}, {"router_cycles": (1, 2)},
               {"port_buf_flits": True}):
        with pytest.raises(ValueError):
            flow_control("credit", **kw)
    with pytest.raises(ValueError, match="flow_control"):
        flow_control("wormhole")
    s = _tiny()
    with pytest.raises(ValueError, match="credit"):
        sim.simulate(s, _one_flow(s, 1), flow_control="credit", trace_services=10)
    from nuna_jax.sim import credit_kernel
    monkeypatch.setattr(credit_kernel, "MAX_ROW_BYTES", 100)      # the per-flow rows' memory bound
    with pytest.raises(ValueError, match="per-flow stage rows"):
        sim.simulate(s, _one_flow(s, 1), flow_control="credit")


@st.composite
def credit_cases(draw):
    s, t, bg = draw(cases())
    fc = flow_control("credit", num_vcs=draw(st.integers(1, 3)), vc_buf_flits=draw(st.integers(1, 3)),
                      port_buf_flits=draw(st.integers(1, 3)), inj_buf_flits=draw(st.integers(1, 3)),
                      credit_delay_cycles=draw(st.sampled_from([0, 1, 3, 20])),
                      router_cycles=draw(st.sampled_from([None, (1, 1, 1, 1, 1), (0, 0, 2, 0, 1)])))
    return s, t, bg, fc


# 5 generated cases by default (about 3.5 CPU s a case), 100 in the slow run
# (test_credit_fast_equals_reference_on_many_cases); NUNA_SIM_EXAMPLES for more
@settings(max_examples=int(os.environ.get("NUNA_SIM_EXAMPLES", "5")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(credit_cases())
def test_credit_fast_equals_reference_flit_by_flit(case):
    _credit_fast_equals_reference(case)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(credit_cases())
def test_credit_fast_equals_reference_on_many_cases(case):
    _credit_fast_equals_reference(case)


def _credit_fast_equals_reference(case):
    s, t, bg, fc = case
    r = _both(s, t, fc, bg)                      # also: no deadlock (a SimulationError otherwise)
    total = int(np.asarray(t.flits).sum()) + (0 if bg is None else bg.total_flits)
    assert r.flits_injected == r.flits_delivered == total
    none = sim.simulate(s, t, background=bg)
    assert r.flit_hops == none.flit_hops and np.array_equal(r.busy_ps, none.busy_ps)  # same work, other timing
    if fc.router_cycles is None:                 # waiting for credits only adds time to a flit's zero-load path
        st_ = path.flow_stages(s, t)
        res = np.asarray(st_.resource)
        svc = np.where(res >= 0, np.maximum(sim.to_ps(np.asarray(st_.service_ns)), 1), sim.to_ps(np.asarray(st_.service_ns)))
        lone = (svc + sim.to_ps(np.asarray(st_.latency_ns))).sum(axis=1)
        m = r.traffic_mask
        assert np.all((r.deliver_ps - r.issue_ps)[m] >= lone[r.flit_flow[m]])
