"""One definition of the flit's path: every consumer's zero-load latency equals the path tables
and the stage table of ``path.flow_stages`` on random flows (docs/model.md, "The path of a flit")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nuna_jax import path
from nuna_jax.models import collectives, spread
from nuna_jax.models.contention.runs_engine import flow_times
from nuna_jax.presets import preset
from nuna_jax.traffic import make_traffic

SYSTEMS = [preset("table2", n_gpus=4), preset("quad", n_gpus=4)]   # quad: die crossings cost 20 ns


def _random_traffic(s, n=300, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, s.n_gpus, n)
    k = s.hbm_routers_per_stack
    return make_traffic(s, src_gpu=src, cu=rng.integers(0, s.n_cus, n), read_stack=rng.integers(0, s.n_hbm_stacks, n),
                        read_channel=rng.integers(0, k, n), port=rng.integers(0, s.n_io_ports, n),
                        dst_gpu=(src + rng.integers(1, s.n_gpus, n)) % s.n_gpus,
                        dst_stack=rng.integers(0, s.n_hbm_stacks, n), dst_channel=rng.integers(0, k, n),
                        flits=np.ones(n))


def _endpoints(s, t):
    """(read, destination) endpoint ids by hand: stack * hbm_routers_per_stack + channel."""
    k = s.hbm_routers_per_stack
    return (np.asarray(t.read_stack) * k + np.asarray(t.read_channel),
            np.asarray(t.dst_stack) * k + np.asarray(t.dst_channel))


@pytest.mark.parametrize("s", SYSTEMS, ids=lambda s: s.name)
def test_tables_equal_the_stage_table(s):
    t = _random_traffic(s)
    stage_sum = np.asarray(path.zero_load_latency_ns(s, t), np.float64)
    np.testing.assert_allclose(np.asarray(path.flow_latency_ns(s, t)), stage_sum, rtol=1e-6)


@pytest.mark.parametrize("s", SYSTEMS, ids=lambda s: s.name)
def test_runs_engine_arrival_times_are_stage_prefix_sums(s):
    t = _random_traffic(s, seed=1)
    st = path.flow_stages(s, t)
    step = np.asarray(st.service_ns + st.latency_ns, np.float64)
    prefix = np.cumsum(step, axis=1) - step                      # arrival at each stage
    sl = path.stage_slices(s)
    ft = flow_times(s, t)
    for key, col in (("p_read", sl.read.start), ("p_a", sl.response.start), ("p_b", sl.store.start),
                     ("p_e", sl.egress.start), ("p_i", sl.ingress.start), ("p_c", sl.deliver.start),
                     ("p_w", sl.write.start)):
        np.testing.assert_allclose(np.asarray(ft[key]), prefix[:, col], rtol=1e-6, atol=1e-3, err_msg=key)
    np.testing.assert_allclose(np.asarray(ft["L"]), step.sum(axis=1), rtol=1e-6)


@pytest.mark.parametrize("s", SYSTEMS, ids=lambda s: s.name)
def test_closed_form_alpha_terms_sum_to_the_stage_table(s):
    read, to_port, deliver = (np.asarray(a, np.float64) for a in collectives.transfer_latency_terms(s))
    t = _random_traffic(s, seed=2)
    cr = np.arange(s.n_cus) // s.cus_per_router
    cu, p = np.asarray(t.cu), np.asarray(t.port)
    rs, ds = _endpoints(s, t)
    got = read[cr[cu], rs] + to_port[cr[cu], p] + deliver[p, ds]
    np.testing.assert_allclose(got, np.asarray(path.zero_load_latency_ns(s, t)), rtol=1e-6)


@pytest.mark.parametrize("s", [preset("quad", n_gpus=2), preset("mono", n_gpus=2)], ids=lambda s: s.name)
def test_spread_extremes_equal_brute_force_over_the_stage_table(s):
    """The transfer spread of ``nuna-jax info`` is min / max of the stage-table latency over every
    (CU, read stack, port, destination stack), each stack's latency the mean over its channels:
    brute force on the stage table, one CU per router (small sockets: every combination is one flow)."""
    cu = np.arange(s.n_routers) * s.cus_per_router
    k = s.hbm_routers_per_stack
    ep = np.arange(s.n_hbm_stacks * k)
    g = np.meshgrid(cu, ep, np.arange(s.n_io_ports), ep, indexing="ij")
    n = g[0].size
    t = make_traffic(s, src_gpu=np.zeros(n), cu=g[0].ravel(), read_stack=g[1].ravel() // k,
                     read_channel=g[1].ravel() % k, port=g[2].ravel(), dst_gpu=np.ones(n),
                     dst_stack=g[3].ravel() // k, dst_channel=g[3].ravel() % k, flits=np.ones(n))
    lat = np.asarray(jax.jit(path.zero_load_latency_ns)(s, t), np.float64)
    # a transfer's data is interleaved over the channels of both stacks: mean over the channel axes
    lat = lat.reshape(len(cu), s.n_hbm_stacks, k, s.n_io_ports, s.n_hbm_stacks, k).mean(axis=(2, 5))
    sp = spread.nuna_spread(s)
    assert sp["transfer"]["min"] == pytest.approx(lat.min(), rel=1e-6)
    assert sp["transfer"]["max"] == pytest.approx(lat.max(), rel=1e-6)
    assert sp["transfer"]["mean"] == pytest.approx(lat.mean(), rel=1e-5)


def test_background_stages_use_the_same_link_and_hbm_terms():
    from nuna_jax.sim.background import READ, background_stages, make_background
    s = SYSTEMS[1]
    bg = make_background(s, gpu=[0, 0], cu=[0, s.n_cus - 1], stack=[s.n_hbm_stacks - 1, 0], kind=[READ, READ],
                         flits=[1, 1], channel=[s.hbm_routers_per_stack - 1, 0])
    res, svc, lat = (np.asarray(a, np.float64) for a in background_stages(s, bg))
    # a background read is the traffic's read side: issue, HBM read, response (no store issue latency)
    t = make_traffic(s, src_gpu=[0, 0], cu=[0, s.n_cus - 1], read_stack=[s.n_hbm_stacks - 1, 0], port=[0, 0],
                     read_channel=[s.hbm_routers_per_stack - 1, 0], dst_gpu=[1, 1], dst_stack=[0, 0], flits=[1, 1])
    tab = path.path_tables(s)
    cr = np.asarray(t.cu) // s.cus_per_router
    want = np.asarray(tab.read_ns)[cr, _endpoints(s, t)[0]]
    np.testing.assert_allclose((svc + lat).sum(axis=1), want, rtol=1e-6)


def test_vmap_over_stacked_systems_equals_single_calls():
    from nuna_jax.models import contention as C
    from nuna_jax.system import stack_systems
    base = preset("table2", n_gpus=2)
    systems = [base.replace(hop_cycles=h, port_bw_bytes_per_ns=b) for h, b in
               ((8.0, 40.0), (10.0, 50.0), (12.0, 60.0), (16.0, 25.0))]
    t = C.pad_traffic(_random_traffic(base, n=200, seed=3), 256)
    batched = jax.jit(jax.vmap(lambda s: C.path_costs(s, t, n_phases=1)))(stack_systems(systems))
    for k, s in enumerate(systems):
        one = C.analyze(s, t, n_phases=1)
        for name in ("estimate_ns", "lower_bound_ns", "smooth_estimate_ns"):
            assert float(getattr(batched, name)[k]) == pytest.approx(float(getattr(one, name)), rel=1e-5)
    # and over a batch of same-shape Traffic tables
    ts = [_random_traffic(base, n=100 + 50 * k, seed=10 + k) for k in range(3)]
    stacked = C.stack_traffic(ts)
    many = jax.jit(jax.vmap(lambda tt: C.path_costs(base, tt, n_phases=1)))(stacked)   # jit: one compile, not op by op
    for k, tt in enumerate(ts):
        assert float(many.estimate_ns[k]) == pytest.approx(C.evaluate(base, tt)["time_ns"], rel=1e-5)
