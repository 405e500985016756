"""The path model over Traffic: hand cases, bound <= estimate, a tiny reference
simulation, monotonicity, smooth -> hard, gradients, jit/vmap."""

import heapq

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nuna_jax import preset
from nuna_jax.models import contention as K
from nuna_jax.path import flow_stages
from nuna_jax.traffic import Traffic, make_traffic

S = preset()
HOP = 10 / 1.2
LINK = 256 / (10e3 / 12)
PORT = 256 / 50.0
HBM = 256 / 2500.0
CYC = 1 / 1.2
# the flow of tests/test_path.py: CU 0 (0,0), read stack 0 (1,0), port 0 (0,0), dst stack 15 (22,5)
L0 = (CYC + 120 + HOP + HBM + 150 + (LINK + HOP) + 120 + PORT + 500 + PORT
      + 27 * (LINK + HOP) + HBM + 150)


def one(flits=1, **kw):
    # channel 1 of each stack: the centre router of its stretch, where L0's hand calculation puts it
    cols = dict(src_gpu=[0], cu=[0], read_stack=[0], read_channel=[1], port=[0], dst_gpu=[3], dst_stack=[15],
                dst_channel=[1], flits=[flits])
    cols.update({k: [v] for k, v in kw.items()})
    return K.pad_flows(make_traffic(S, **cols), 512)   # zero-flit padding: one shape for all tests


def rand_traffic(seed, n=300, gpus=8, max_flits=20, phases=1, ports=144, rows=512):
    """Random traffic, padded with zero-flit rows to ``rows`` (one shape -> one compile)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, gpus, n)
    dst = (src + rng.integers(1, gpus, n)) % gpus
    t = make_traffic(S, src_gpu=src, cu=rng.integers(0, S.n_cus, n), read_stack=rng.integers(0, 16, n),
                     port=rng.integers(0, ports, n), dst_gpu=dst, dst_stack=rng.integers(0, 16, n),
                     flits=rng.integers(1, max_flits + 1, n).astype(float),
                     tb=rng.integers(0, 50, n), phase=rng.integers(0, phases, n))
    return K.pad_flows(t, max(rows, n))


def reference_fifo_sim(s, t):
    """Slow, obvious event simulation of docs/model.md's stage semantics (FCFS per
    resource by arrival time; no window: tests keep < 700 flits per CU).  Returns
    the completion time of the last flit, phases run one after the other."""
    st = flow_stages(s, t)
    res, svc, lat = (np.asarray(a, dtype=np.float64) for a in st)
    res = res.astype(int)
    flits = np.asarray(t.flits).astype(int)
    phase = np.asarray(t.phase)
    t0 = 0.0
    for k in range(int(phase.max()) + 1):
        free = {}
        heap = []
        for f in np.nonzero((phase == k) & (flits > 0))[0]:
            for j in range(flits[f]):
                heapq.heappush(heap, (t0, int(f), j, 0))
        end = t0
        while heap:
            tm, f, j, stg = heapq.heappop(heap)
            r = res[f, stg]
            start = tm if r < 0 else max(tm, free.get(r, -np.inf))
            if r >= 0:
                free[r] = start + svc[f, stg]
            nxt = start + svc[f, stg] + lat[f, stg]
            if stg + 1 < res.shape[1]:
                heapq.heappush(heap, (nxt, f, j, stg + 1))
            else:
                end = max(end, nxt)
        t0 = end
    return t0


def test_single_flit_everything_equals_hand_latency():
    t = one()
    c = K.analyze(S, t)
    assert float(c.flow_latency_ns[0]) == pytest.approx(L0, rel=1e-5)
    assert float(c.lower_bound_ns) == pytest.approx(L0, rel=1e-5)
    assert float(c.estimate_ns) == pytest.approx(L0, rel=1e-5)
    assert float(K.lower_bound_ns(S, t)) == pytest.approx(L0, rel=1e-5)
    assert float(K.estimate_ns(S, t)) == pytest.approx(L0, rel=1e-5)


def test_one_flow_pipeline_is_exact_latency_plus_bottleneck():
    # 100 flits, one path: the 50 B/ns port is the bottleneck -> L + 99 * 5.12 ns
    t = one(100)
    hand = L0 + 99 * PORT
    assert float(K.lower_bound_ns(S, t)) == pytest.approx(hand, rel=1e-5)
    assert float(K.estimate_ns(S, t)) == pytest.approx(hand, rel=1e-5)
    assert reference_fifo_sim(S, t) == pytest.approx(hand, rel=1e-6)
    b = K.breakdown(K.analyze(S, t))
    assert b["bottleneck"] == "port" and b["port_ns"] == pytest.approx(99 * PORT, rel=1e-5)


def test_busy_times_by_hand():
    t = make_traffic(S, src_gpu=[0, 1], cu=[0, 4], read_stack=[0, 0], port=[0, 0], dst_gpu=[3, 3],
                     dst_stack=[15, 15], flits=[10, 30])
    busy = np.asarray(K.resource_busy_ns(S, t))[0]
    from nuna_jax.path import resource_layout
    lay = resource_layout(S)
    ing = 3 * lay.per_gpu + lay.offset_ingress + 0
    hbm_w = 3 * lay.per_gpu + lay.offset_hbm + 15
    eg1 = 1 * lay.per_gpu + lay.offset_egress + 0
    assert busy[ing] == pytest.approx(40 * PORT, rel=1e-5)      # both flows enter GPU 3 on port 0
    assert busy[hbm_w] == pytest.approx(40 * HBM, rel=1e-5)
    assert busy[eg1] == pytest.approx(30 * PORT, rel=1e-5)
    assert busy.sum() > 0 and busy.min() >= 0


def test_window_bound_binds_for_one_busy_cu():
    # one CU sends 50 flits on each of 144 ports (7,200 flits): the window
    # (700 in flight for ~1.5 us each) is the bottleneck, not any port (256 ns)
    n = 144
    t = K.pad_flows(make_traffic(S, src_gpu=np.zeros(n, int), cu=np.full(n, 300), read_stack=np.arange(n) % 16,
                                 port=np.arange(n), dst_gpu=1 + np.arange(n) % 7, dst_stack=np.arange(n) % 16,
                                 flits=np.full(n, 50.0)), 512)
    L = np.asarray(K.flow_latency_ns(S, t), dtype=np.float64)[:n]
    win = np.sum(50 * (L - CYC)) / 700
    assert float(np.asarray(K.window_busy_ns(S, t))[0, 300]) == pytest.approx(win, rel=1e-5)
    assert win > 7200 * CYC + 2500  # the window term dominates the CU issue term (hand check)
    assert float(K.lower_bound_ns(S, t)) == pytest.approx(win, rel=1e-5)
    b = K.breakdown(K.analyze(S, t))
    assert b["bottleneck"] == "window" and b["window_ns"] > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bound_below_reference_sim_and_estimate(seed):
    t = rand_traffic(seed, n=40, gpus=4, max_flits=12, phases=2, ports=8)
    lb = float(K.lower_bound_ns(S, t))
    est = float(K.estimate_ns(S, t))
    sim = reference_fifo_sim(S, t)
    assert lb <= sim * (1 + 1e-5)
    assert lb <= est * (1 + 1e-6)
    # the estimate is a model, not a bound; it should be in the right ballpark
    assert 0.7 < est / sim < 1.5


@pytest.mark.parametrize("seed", range(6))
def test_lower_bound_never_above_estimate(seed):
    t = rand_traffic(100 + seed, n=500, phases=1 + seed % 3, ports=[144, 12, 2][seed % 3])
    c = K.analyze(S, t)
    assert float(c.lower_bound_ns) <= float(c.estimate_ns) * (1 + 1e-6)
    assert np.all(np.asarray(c.phase_lower_bound_ns) <= np.asarray(c.phase_estimate_ns) * (1 + 1e-6))


def test_phases_are_barriers_and_add():
    t = rand_traffic(7, n=256, rows=0)
    d = {k: np.concatenate([np.asarray(getattr(t, k))] * 2) for k in
         ("src_gpu", "cu", "read_stack", "port", "dst_gpu", "dst_stack", "flits", "bytes", "tb", "step")}
    d["phase"] = np.repeat([0, 1], t.n_flows)
    t2 = make_traffic(S, **d)
    assert float(K.lower_bound_ns(S, t2)) == pytest.approx(2 * float(K.lower_bound_ns(S, t)), rel=1e-5)
    assert float(K.estimate_ns(S, t2)) == pytest.approx(2 * float(K.estimate_ns(S, t)), rel=1e-5)


def test_monotone_in_bytes_and_hops():
    t = rand_traffic(3, n=200)
    base_lb, base_est = float(K.lower_bound_ns(S, t)), float(K.estimate_ns(S, t))
    for scale in (1.5, 3.0):
        more = t.replace(flits=np.asarray(t.flits) * scale, bytes=np.asarray(t.bytes) * scale)
        assert float(K.lower_bound_ns(S, more)) >= base_lb - 1e-3
        assert float(K.estimate_ns(S, more)) >= base_est - 1e-3
    # one flow: moving the egress port farther from the CU never helps
    near = one(20, port=0)            # port 0 sits on the CU's router (0,0)
    far = one(20, port=143)           # port 143 on (23,5)
    for f in (K.lower_bound_ns, K.estimate_ns):
        assert float(f(S, far)) > float(f(S, near))


def test_smooth_tends_to_hard_estimate():
    t = rand_traffic(11, n=300, phases=2)
    hard = float(K.estimate_ns(S, t))
    prev = None
    for tau in (100.0, 10.0, 1.0, 0.1, 0.01):
        v = float(K.smooth_estimate_ns(S, t, tau))
        assert np.isfinite(v)
        if prev is not None:
            assert v <= prev + 1e-3
        prev = v
    assert prev == pytest.approx(hard, rel=1e-5)


def test_soft_traffic_same_functions_finite_and_grads_match_fd():
    t = rand_traffic(5, n=120, max_flits=6)
    rng = np.random.default_rng(0)
    soft = t.replace(flits=jnp.asarray(np.asarray(t.flits) * rng.uniform(0.05, 1.0, t.n_flows)),
                     bytes=jnp.asarray(np.asarray(t.bytes) * 0.0))

    def f(flits, sw):
        s = S.replace(switch_latency_ns=sw)
        return K.smooth_estimate_ns(s, soft.replace(flits=flits), 5.0, n_phases=1)

    fl = jnp.asarray(soft.flits)
    val, (gf, gs) = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))(fl, 500.0)
    assert np.isfinite(float(val)) and np.all(np.isfinite(np.asarray(gf))) and np.isfinite(float(gs))
    # finite differences in float64-safe steps on the switch latency and 3 flit counts
    h = 0.5
    fd = (float(f(fl, 500.0 + h)) - float(f(fl, 500.0 - h))) / (2 * h)
    assert float(gs) == pytest.approx(fd, rel=2e-2, abs=2e-2)
    for i in np.argsort(-np.abs(np.asarray(gf)))[:2]:
        e = jnp.zeros_like(fl).at[i].set(1e-2)
        fd = (float(f(fl + e, 500.0)) - float(f(fl - e, 500.0))) / 2e-2
        assert float(gf[i]) == pytest.approx(fd, rel=5e-2, abs=5e-2)
    # hard functions also accept soft traffic
    assert float(K.lower_bound_ns(S, soft)) <= float(K.estimate_ns(S, soft)) * (1 + 1e-6)


def test_jit_and_vmap_match_python_loop():
    t = rand_traffic(9, n=150)
    scales = np.array([0.5, 3.0])
    fl = np.asarray(t.flits)

    def est(f):
        tt = t.replace(flits=f)
        return jnp.stack([K.estimate_ns(S, tt, n_phases=1), K.lower_bound_ns(S, tt, n_phases=1),
                          K.smooth_estimate_ns(S, tt, 2.0, n_phases=1)])

    batch = jax.vmap(est)(jnp.asarray(scales[:, None] * fl[None, :]))
    jitted = jax.jit(est)
    for i, sc in enumerate(scales):
        loop = np.asarray(est(jnp.asarray(sc * fl)))
        np.testing.assert_allclose(np.asarray(batch[i]), loop, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(jitted(jnp.asarray(sc * fl))), loop, rtol=1e-5)


def test_traced_phase_needs_n_phases():
    t = one()
    with pytest.raises(ValueError, match="n_phases"):
        jax.jit(lambda tt: K.estimate_ns(S, tt))(t)
    assert np.isfinite(float(jax.jit(lambda tt: K.estimate_ns(S, tt, n_phases=1))(t)))


def test_zero_flit_flows_are_ignored():
    t = K.pad_flows(make_traffic(S, src_gpu=[0, 0], cu=[0, 575], read_stack=[0, 15], port=[0, 143],
                                 dst_gpu=[3, 3], dst_stack=[15, 8], flits=[1, 0],
                                 read_channel=[1, 1], dst_channel=[1, 1]), 512)
    assert float(K.lower_bound_ns(S, t)) == pytest.approx(L0, rel=1e-5)
    assert float(K.estimate_ns(S, t)) == pytest.approx(L0, rel=1e-5)
    assert isinstance(t, Traffic)
    g = jax.grad(lambda fl: K.smooth_estimate_ns(S, t.replace(flits=fl), 1.0, n_phases=1))(
        jnp.asarray(t.flits))
    assert np.all(np.isfinite(np.asarray(g)))


def test_chunked_scan_equals_single_pass():
    t = rand_traffic(21, n=700, phases=2)
    ref = K.analyze(S, t, temperature_ns=3.0, engine="stages")
    got = K.analyze(S, t, temperature_ns=3.0, engine="stages", chunk_flows=128)  # 6 chunks, last padded
    for name in ("lower_bound_ns", "estimate_ns", "smooth_estimate_ns"):
        assert float(getattr(got, name)) == pytest.approx(float(getattr(ref, name)), rel=1e-5)
    np.testing.assert_allclose(np.asarray(got.busy_ns), np.asarray(ref.busy_ns), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.asarray(got.flow_latency_ns), np.asarray(ref.flow_latency_ns), rtol=1e-6)


@pytest.mark.parametrize("name", ["table2", pytest.param("quad", marks=pytest.mark.slow)])  # quad: die crossings
def test_fast_runs_engine_equals_stage_table_engine(name):
    from nuna_jax import preset as _preset
    s = _preset(name)
    rng = np.random.default_rng(4)
    n = 400
    src = rng.integers(0, 8, n)
    t = make_traffic(s, src_gpu=src, cu=rng.integers(0, s.n_cus, n), read_stack=rng.integers(0, s.n_hbm_stacks, n),
                     port=rng.integers(0, s.n_io_ports, n), dst_gpu=(src + rng.integers(1, 8, n)) % 8,
                     dst_stack=rng.integers(0, s.n_hbm_stacks, n), flits=rng.integers(0, 9, n).astype(float),
                     phase=rng.integers(0, 3, n))
    out = {}
    for eng in ("stages", "runs"):
        tables = jax.jit(lambda s_, t_: K.resource_tables(s_, t_, 3, engine=eng))
        out[eng] = (K.analyze(s, t, temperature_ns=5.0, engine=eng), tables(s, t))
    (ca, ta), (cb, tb) = out["stages"], out["runs"]
    for name_ in ("lower_bound_ns", "estimate_ns", "smooth_estimate_ns"):
        assert float(getattr(cb, name_)) == pytest.approx(float(getattr(ca, name_)), rel=1e-5)
    np.testing.assert_allclose(np.asarray(cb.flow_latency_ns), np.asarray(ca.flow_latency_ns), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tb.busy), np.asarray(ta.busy), rtol=1e-5, atol=1e-3)
    for f in ("a", "m", "lr"):
        x, y = np.asarray(getattr(ta, f)), np.asarray(getattr(tb, f))
        assert np.array_equal(np.abs(x) > 1e29, np.abs(y) > 1e29), f
        ok = np.abs(x) < 1e29
        np.testing.assert_allclose(y[ok], x[ok], rtol=1e-5, atol=1e-2)


def test_window_estimate_counts_the_first_windows_issue_time():
    """One CU, W = 12, 24 single-flit flows on the 12 ports of one edge router (equal latency L,
    two flits per port): the second window's flit k issues when flit k returns, at k t + L, so the
    last is delivered at 2 L + (W - 1) t (hand calculation; t = one NoC cycle, every other stage
    serves a flit in less than t).  The estimate's window term, Lmax + (B_c - Lbar) + W t =
    2 L + (W - 2) t, lies within one cycle of it; without the W t term it would miss by (W - 1) t."""
    from nuna_jax import sim
    s = preset("table2", n_gpus=2, max_outstanding_per_cu=12)
    n = 24
    ports = np.arange(n) % 12                                    # ports 0..11: the same west-edge router
    t = make_traffic(s, src_gpu=np.zeros(n, int), cu=np.full(n, 0), read_stack=np.zeros(n, int), port=ports,
                     dst_gpu=np.ones(n, int), dst_stack=np.zeros(n, int), flits=np.ones(n))
    L = np.asarray(K.flow_latency_ns(s, t), dtype=np.float64)
    assert np.ptp(L) < 1e-3                                      # one latency for every flow
    cyc = 1.0 / 1.2
    want = 2 * L[0] + 11 * cyc
    assert sim.simulate(s, t).completion_ns == pytest.approx(want, abs=2e-3 * 24)   # ps rounding
    est = float(K.estimate_ns(s, t))
    assert abs(est - want) <= cyc * 1.001
    assert est == pytest.approx(2 * L[0] + 10 * cyc, rel=1e-5)


# ---------------------------------------------------------------------------------------------
# hardware sweeps: the traffic's segment structure hoisted out of the batch (contention.segplan)
def test_plan_reduce_equals_the_scatter_bit_for_bit():
    """``plan_reduce`` gives ``jax.ops.segment_{sum,min,max}``'s exact floats: empty segments their
    identity, ids out of range dropped, sums folded in entry order (values of mixed magnitudes, so
    another order rounds differently; segments of up to ~40 entries take the scan)."""
    from nuna_jax.models.contention.segplan import plan_reduce, seg_plan
    rng = np.random.default_rng(3)
    m, n = 3000, 90
    seg = rng.integers(-3, n + 3, m)
    seg[:400] = 7                                      # one long segment (the scan path)
    v = jnp.asarray((rng.normal(size=m) * 10.0 ** rng.integers(-3, 4, m)).astype(np.float32))
    p = seg_plan(seg, n)
    ops = {"sum": jax.ops.segment_sum, "min": jax.ops.segment_min, "max": jax.ops.segment_max}
    for op, f in ops.items():
        got = np.asarray(jax.jit(lambda x: plan_reduce(p, x, op))(v))
        want = np.asarray(jax.jit(lambda x: f(x, jnp.asarray(seg), num_segments=n))(v))
        assert np.array_equal(got, want), op
    # a sum in another order is not bit-equal here (the test can tell the orders apart)
    rev = seg_plan(seg[::-1], n)
    assert not np.array_equal(np.asarray(plan_reduce(rev, v[::-1], "sum")),
                              np.asarray(jax.ops.segment_sum(v, jnp.asarray(seg), num_segments=n)))


@pytest.mark.parametrize("case", ["random", "no_response_links"])
def test_hoisted_structure_gives_the_scatter_tables_per_hardware_variant(case):
    """``resource_tables(..., plans=sweep_plans(...))`` under ``vmap`` over hardware variants equals the
    default single-System call of each variant bit for bit: every table, the estimate and the bound."""
    from nuna_jax.models.contention.objective import estimate_phases, lower_bound_phases
    from nuna_jax.system import stack_systems
    s0 = S if case == "random" else S.replace(read_response_links=False)
    t = rand_traffic(11, n=400, phases=2)
    P = 2
    plans = K.sweep_plans(s0, jax.tree_util.tree_map(np.asarray, t), P)
    variants = [s0.replace(hop_cycles=h, link_bw_bytes_per_ns=bw, switch_latency_ns=sw)
                for h, bw, sw in [(0.7, 300.0, 250.0), (2.5, 1700.0, 800.0), (10.0, 90.0, 0.0)]]

    def fields(tb):
        return (tb.busy, tb.a, tb.m, tb.lr, tb.wbusy, tb.wflits, tb.wlat, tb.L,
                jnp.sum(estimate_phases(tb)[0]), jnp.sum(lower_bound_phases(tb)))

    hoisted = jax.jit(jax.vmap(lambda s: fields(K.resource_tables(s, t, P, plans=plans))))(stack_systems(variants))
    single = jax.jit(lambda s: fields(K.resource_tables(s, t, P)))
    for i, s in enumerate(variants):
        for got, want in zip(hoisted, single(s)):
            assert np.array_equal(np.asarray(got[i]), np.asarray(want))
