"""Closed-form alpha-beta-gamma costs: hand calculations, invariants, jit/vmap/grad."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nuna_jax import preset
from nuna_jax.models import collectives as C
from nuna_jax.path import zero_load_latency_ns
from nuna_jax.traffic import make_traffic

S = preset()

# alpha = 1 ns, beta = 0.001 ns/B, gamma = 0.0001 ns/B, n = 1000 B, p = 4 (lg p = 2, f = 3/4)
HAND_P4 = {
    ("all_gather", "direct"): 1 + 750 * 0.001,
    ("all_gather", "ring"): 3 + 750 * 0.001,
    ("all_gather", "recursive"): 2 + 750 * 0.001,
    ("reduce_scatter", "direct"): 1 + 750 * 0.0011,
    ("reduce_scatter", "ring"): 3 + 750 * 0.0011,
    ("reduce_scatter", "recursive"): 2 + 750 * 0.0011,
    ("all_reduce", "direct"): 2 + 1500 * 0.001 + 750 * 0.0001,
    ("all_reduce", "ring"): 6 + 1500 * 0.001 + 750 * 0.0001,
    ("all_reduce", "recursive"): 4 + 1500 * 0.001 + 750 * 0.0001,
    ("all_reduce", "tree"): 4 + 2 * 1000 * 2 * 0.001 + 1000 * 2 * 0.0001,
    ("all_to_all", "direct"): 1 + 750 * 0.001,
    ("all_to_all", "ring"): 3 + 750 * 0.001,
    ("all_to_all", "recursive"): 2 + 500 * 2 * 0.001,
}


@pytest.mark.parametrize("key", sorted(HAND_P4))
def test_formulas_by_hand_p4(key):
    coll, alg = key
    got = float(C.cost_ns(coll, alg, 4, 1000.0, 1.0, 0.001, 0.0001))
    assert got == pytest.approx(HAND_P4[key], rel=1e-6)


def test_ring_all_reduce_issue_example():
    # 2(p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma, p = 8, n = 1 MB
    got = float(C.cost_ns("all-reduce", "ring", 8, 1e6, 1000.0, 1e-4, 2e-8))
    assert got == pytest.approx(14000 + 175 + 0.0175, rel=1e-6)


def test_non_power_of_two_uses_ceil_log2_and_p1_is_free():
    # p = 6 -> 3 rounds of recursive doubling
    assert float(C.cost_ns("all_gather", "recursive", 6, 600.0, 10.0, 0.0, 0.0)) == pytest.approx(30.0)
    for coll, alg in HAND_P4:
        assert float(C.cost_ns(coll, alg, 1, 1e6, 1000.0, 1e-3, 1e-4)) == 0.0


def test_tree_only_for_all_reduce():
    for coll in ("all_gather", "reduce_scatter", "all_to_all"):
        assert np.isinf(float(C.cost_ns(coll, "tree", 8, 1e6, 1.0, 1.0, 1.0)))


def test_bad_names_raise():
    with pytest.raises(ValueError, match="collective"):
        C.collective_code("broadcastish")
    with pytest.raises(ValueError, match="algorithm"):
        C.algorithm_code("butterfly9")
    with pytest.raises(ValueError, match="stat"):
        C.alpha_ns(S, "median")


def test_monotone_in_bytes_and_gpus():
    p = jnp.array([2, 3, 4, 8, 16, 64])[:, None]
    n = jnp.array([1e3, 1e5, 1e6, 1e8, 1e9])[None, :]
    for c, k in itertools.product(range(4), range(3)):
        t = np.asarray(C.cost_ns(c, k, p, n, 1500.0, 1 / 7200, 2e-8))
        assert np.all(np.diff(t, axis=1) > 0), (c, k)
        assert np.all(np.diff(t, axis=0) >= -1e-6 * t[1:]), (c, k)


def test_grid_broadcast_jit_vmap_equal_python_loop():
    cs, ks = np.arange(4), np.arange(4)
    ps = np.array([2, 5, 8, 64])
    ns = np.array([1e5, 1e7, 1e9])
    alphas = np.array([1000.0, 1500.0])
    grid = jax.jit(C.cost_ns)(cs[:, None, None, None, None], ks[None, :, None, None, None],
                              ps[None, None, :, None, None], ns[None, None, None, :, None],
                              alphas[None, None, None, None, :], 1e-4, 2e-8)
    vm = jax.vmap(lambda a: C.cost_ns(cs[:, None, None, None], ks[None, :, None, None],
                                      ps[None, None, :, None], ns[None, None, None, :], a, 1e-4, 2e-8),
                  out_axes=-1)(jnp.asarray(alphas))
    for idx in itertools.product(*(range(len(x)) for x in (cs, ks, ps, ns, alphas))):
        c, k, p, n, a = cs[idx[0]], ks[idx[1]], ps[idx[2]], ns[idx[3]], alphas[idx[4]]
        ref = float(C.cost_ns(int(c), int(k), int(p), float(n), float(a), 1e-4, 2e-8))
        for g in (grid, vm):
            v = float(g[idx])
            assert (np.isinf(ref) and np.isinf(v)) or v == pytest.approx(ref, rel=1e-5)


def test_alpha_terms_are_separable_parts_of_the_path():
    read, to_port, deliver = C.transfer_latency_terms(S)
    rng = np.random.default_rng(1)
    n = 50
    k = S.hbm_routers_per_stack
    cu, rs = rng.integers(0, S.n_cus, n), rng.integers(0, 16 * k, n)   # rs, ds: stack * k + channel
    pt, ds = rng.integers(0, 144, n), rng.integers(0, 16 * k, n)
    t = make_traffic(S, src_gpu=np.zeros(n, int), cu=cu, read_stack=rs // k, read_channel=rs % k, port=pt,
                     dst_gpu=np.ones(n, int), dst_stack=ds // k, dst_channel=ds % k, flits=np.ones(n))
    full = np.asarray(zero_load_latency_ns(S, t))
    router = cu // S.cus_per_router
    parts = np.asarray(read)[router, rs] + np.asarray(to_port)[router, pt] + np.asarray(deliver)[pt, ds]
    np.testing.assert_allclose(parts, full, rtol=1e-5)


def test_alpha_stats_ordered_and_match_spread_module():
    from nuna_jax.models.spread import nuna_spread
    sp = nuna_spread(S)["transfer"]
    best, mean, worst = (float(C.alpha_ns(S, k)) for k in ("best", "mean", "worst"))
    assert best < mean < worst
    assert best == pytest.approx(sp["min"], rel=1e-4)
    assert mean == pytest.approx(sp["mean"], rel=1e-4)
    assert worst == pytest.approx(sp["max"], rel=1e-4)


def test_beta_gamma_from_system():
    _, beta, gamma = C.alpha_beta_gamma(S)
    assert float(beta) == pytest.approx(1 / 7200.0)         # 144 ports x 50 B/ns
    assert float(gamma) == pytest.approx(1 / (2 * 25e6))     # bf16, 25 PFLOPS


def test_grad_wrt_system_finite_and_matches_finite_difference():
    def f(sw):
        s = S.replace(switch_latency_ns=sw, port_bw_bytes_per_ns=50.0)
        return C.collective_time_ns(s, "all_gather", 1e6, "ring")
    g = float(jax.grad(f)(500.0))
    # ring AG: (p-1) alpha, d alpha / d switch_latency = 1
    assert g == pytest.approx(7.0, rel=1e-5)
    gb = jax.grad(lambda bw: C.collective_time_ns(S.replace(port_bw_bytes_per_ns=bw), "all_reduce", 1e8))(50.0)
    h = 1e-2
    fd = (float(C.collective_time_ns(S.replace(port_bw_bytes_per_ns=50.0 + h), "all_reduce", 1e8))
          - float(C.collective_time_ns(S.replace(port_bw_bytes_per_ns=50.0 - h), "all_reduce", 1e8))) / (2 * h)
    assert np.isfinite(float(gb)) and float(gb) == pytest.approx(fd, rel=2e-2)


def test_vmap_over_hardware_variants():
    sws = jnp.array([100.0, 500.0, 1000.0])
    f = lambda sw: C.alpha_beta_gamma(S.replace(switch_latency_ns=sw))[0]  # noqa: E731
    batched = jax.vmap(f)(sws)
    for i, sw in enumerate([100.0, 500.0, 1000.0]):
        assert float(batched[i]) == pytest.approx(float(f(sw)), rel=1e-5)  # float32 sum order
    # switch latency enters alpha once
    assert float(batched[2] - batched[0]) == pytest.approx(900.0, rel=1e-5)
