"""Background load in the path model (models/contention/background.py, docs/analytical.md 2.7):
hand-calculated changes of the estimate, ``background=None`` unchanged, the bound below the
simulator beside random backgrounds, smooth -> hard."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nuna_jax import sim
from nuna_jax.models import contention as K
from nuna_jax.models.contention.background import prorate
from nuna_jax.traffic import make_traffic

# Table 2's hand-derived stage times and the hand latency L0 of tests/test_contention.py's flow
# (CU 0 at router (0,0), read stack 0 channel 1 at router (1,0), one hop; port 0 at (0,0);
# destination stack 15 on GPU 3): one copy, there
from test_contention import CYC, HBM, HOP, L0, LINK, PORT, S  # noqa: E402

# a background read by CU 1 (router (0,0), like CU 0) of stack 0 channel 1: issue (cycle + cu_to_noc
# + one request hop), HBM read, one response link (1,0) -> (0,0) (the collective's response link
# too), cu_to_noc back into the CU
L_BG = CYC + 120 + HOP + HBM + 150 + (LINK + HOP) + 120


def one(flits=10, phase=None):
    cols = dict(src_gpu=[0], cu=[0], read_stack=[0], read_channel=[1], port=[0], dst_gpu=[3], dst_stack=[15],
                dst_channel=[1], flits=[flits])
    if phase is not None:   # the same flow once per phase
        cols = {k: v * len(phase) for k, v in cols.items()}
        cols["phase"] = phase
    return K.pad_flows(make_traffic(S, **cols), 512)


def read_bg(k, cu=1):
    return sim.make_background(S, gpu=[0], cu=[cu], stack=[0], channel=[1], kind=[0], flits=[k])


def test_short_background_adds_its_whole_busy_time_to_the_shared_link():
    # 10 flits alone: port-bound, L0 + 9 PORT.  A 300-flit read on CU 1 shares the collective's
    # response link (1,0) -> (0,0) and stack 0.  Alone it takes T_bg = L_BG + 299 CYC (issue-bound;
    # 300 < 700 so no window term; its link and stack terms are L_BG + 299 LINK / HBM) = 657 ns,
    # shorter than the collective's link term L0 + 9 LINK (1304 ns): all of its 300 LINK of link
    # work falls inside the phase, so the link's term becomes L0 + 9 LINK + 300 LINK
    t = one()
    assert float(K.estimate_ns(S, t)) == pytest.approx(L0 + 9 * PORT, rel=1e-6)
    bg = read_bg(300)
    bl = K.background_load(S, bg)
    assert float(jnp.max(bl.duration_ns)) == pytest.approx(L_BG + 299 * CYC, rel=1e-6)
    est = float(K.estimate_ns(S, t, background=bg))
    assert est == pytest.approx(L0 + 309 * LINK, rel=1e-6)
    assert est - (L0 + 9 * PORT) == pytest.approx(309 * LINK - 9 * PORT, abs=2e-3)     # +48.84 ns


def test_long_background_is_prorated_by_its_own_duration():
    # 5000 flits on CU 1: T_bg = L_BG + 4999 CYC (issue-bound: its window term is
    # L_BG + 5000 (L_BG - CYC) / 700 - L_BG + 700 CYC = 3491 ns < 4574 ns), so the shared link
    # carries background at rho = 5000 LINK / T_bg = 0.336 of its time.  The collective's link
    # term c = L0 + 9 LINK solves T = c + rho T (the phase ends long before the background):
    # c / (1 - rho) = 1964 ns; its stack: (L0 + 9 HBM) / (1 - 5000 HBM / T_bg) = 1466 ns
    t_bg = L_BG + 4999 * CYC
    rho = 5000 * LINK / t_bg
    want = (L0 + 9 * LINK) / (1 - rho)
    assert want < L0 + 9 * LINK + rho * t_bg          # the prorated branch, not "all of it"
    est = float(K.estimate_ns(S, one(), background=read_bg(5000)))
    assert est == pytest.approx(want, rel=1e-5)


def test_a_background_that_ends_in_phase_0_leaves_phase_1_alone():
    # the 300-flit read (657 ns) ends inside phase 0 (1347 ns alone): phase 1 starts after it,
    # D = (T_bg - t_1)^+ = 0, so its terms are the collective's own
    t = one(phase=[0, 1])
    pc0 = K.analyze(S, t)
    pc = K.analyze(S, t, background=read_bg(300))
    p0, p1 = (float(v) for v in pc.phase_estimate_ns)
    assert p0 == pytest.approx(L0 + 309 * LINK, rel=1e-6)
    assert p1 == float(pc0.phase_estimate_ns[1])
    assert float(pc.estimate_ns) == pytest.approx(p0 + p1, rel=1e-6)
    # the bound, busy and window tables are the traffic's own
    assert float(pc.lower_bound_ns) == float(pc0.lower_bound_ns)
    assert np.array_equal(np.asarray(pc.busy_ns), np.asarray(pc0.busy_ns))


def test_prorate_by_hand():
    # T = c + rho min(T, D): rho 0 -> c; rho 0.5, c 100: T = 200 if D >= 200 else 100 + D / 2; rho 1 -> c + D
    c = jnp.array([100.0, 100.0, 100.0, 100.0, 0.0])
    rho = jnp.array([0.0, 0.5, 0.5, 1.0, 1.0])
    D = jnp.array([1e4, 1e4, 50.0, 70.0, 70.0])
    np.testing.assert_allclose(np.asarray(prorate(c, rho, D)), [100.0, 200.0, 125.0, 170.0, 70.0])


def _rand(seed, n=40, gpus=8, phases=2):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, gpus, n)
    dst = (src + rng.integers(1, gpus, n)) % gpus
    return make_traffic(S, src_gpu=src, cu=rng.integers(0, 64, n), read_stack=rng.integers(0, 16, n),
                        port=rng.integers(0, 144, n), dst_gpu=dst, dst_stack=rng.integers(0, 16, n),
                        flits=rng.integers(1, 60, n), tb=rng.integers(0, 20, n), phase=rng.integers(0, phases, n))


def _rand_bg(seed, b=24, gpus=8, max_flits=400):
    rng = np.random.default_rng(1000 + seed)
    return sim.make_background(S, gpu=rng.integers(0, gpus, b), cu=rng.integers(64, S.n_cus, b),
                               stack=rng.integers(0, 16, b), channel=rng.integers(0, 3, b),
                               kind=rng.integers(0, 2, b), flits=rng.integers(0, max_flits, b),
                               tb=rng.integers(0, 4, b), step=rng.integers(0, 2, b))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_background_none_is_bit_identical(seed):
    t = K.pad_flows(_rand(seed, phases=3), 64)
    empty = sim.gemm_background(S, gemm_bytes=0, n_tiles=1)
    assert empty.n_flows == 0
    for f in (K.estimate_ns, K.lower_bound_ns, K.smooth_estimate_ns):
        ref = np.asarray(f(S, t))
        assert np.array_equal(ref, np.asarray(f(S, t, background=None)))
    ref = K.analyze(S, t)
    none = K.analyze(S, t, background=None)
    for a, b in zip(ref, none):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    # an empty background (rho = 0 everywhere) gives the same hard estimate, bit for bit
    assert np.array_equal(np.asarray(K.estimate_ns(S, t)), np.asarray(K.estimate_ns(S, t, background=empty)))
    assert float(K.smooth_estimate_ns(S, t, background=empty)) == pytest.approx(float(K.smooth_estimate_ns(S, t)),
                                                                              rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_bound_below_the_simulator_beside_random_backgrounds(seed):
    t = _rand(seed)
    bg = _rand_bg(seed)
    r = sim.simulate(S, t, background=bg, stop_after_traffic=True)
    simulated = r.traffic_completion_ps / 1000
    tp = K.pad_flows(t, 64)
    lb = float(K.lower_bound_ns(S, tp, background=bg))
    est0 = float(K.estimate_ns(S, tp))
    est = float(K.estimate_ns(S, tp, background=bg))
    assert lb <= simulated * (1 + 1e-6)
    assert lb <= est0 * (1 + 1e-6) <= est * (1 + 1e-6)   # the background never lowers the estimate
    # the simulator's own view: a background never sped this traffic up
    assert sim.simulate(S, t).traffic_completion_ps <= r.traffic_completion_ps


def test_smooth_tends_to_hard_and_has_finite_gradients_with_a_background():
    t = K.pad_flows(_rand(5, phases=2), 64)
    bl = K.background_load(S, _rand_bg(5, max_flits=3000))
    hard = float(K.estimate_ns(S, t, background=bl))
    assert hard > float(K.estimate_ns(S, t))          # this background does reach the traffic
    assert float(K.smooth_estimate_ns(S, t, 0.01, background=bl)) == pytest.approx(hard, rel=1e-3)

    def f(flits):
        return K.smooth_estimate_ns(S, t.replace(flits=flits), 10.0, n_phases=2, background=bl)

    g = jax.grad(f)(jnp.asarray(t.flits, float))
    assert np.all(np.isfinite(np.asarray(g))) and float(jnp.max(jnp.abs(g))) > 0


def test_a_background_must_bring_its_paths():
    with pytest.raises(TypeError, match="sim.Background"):
        K.estimate_ns(S, one(), background=np.zeros(3))
