"""Exact flit simulator: hand-computed timings, conservation, determinism, errors.

Hand system (`_tiny`): a 2 x 1 mesh, 1 GHz NoC, 10-cycle hops (10 ns), 256 B
flits on 256 B/ns links (1 ns), 128 B/ns HBM (2 ns), 64 B/ns ports (4 ns),
cu_to_noc 100 ns, HBM latency 50 ns, switch 500 ns.  Both HBM stacks sit on
router 1, port 0 on router 0, port 1 on router 1, CUs 0,1 on router 0.
One flit GPU0 CU0 -> read stack 0 -> port 0 -> GPU1 stack 1, by hand
(docs/model.md, "The path of a flit"):
  issue 1 + (100 + 10 request hop) = 111; HBM read 2 + 50 = 52;
  response 1 link: 1 + 10 = 11; store issue 100; CU router == port router: 0;
  egress 4 + 500 = 504; ingress 4; delivery 1 link: 11; HBM write 2 + 50 = 52
  total 845 ns; store latency (from store issue) 100+504+4+11+52 = 671 ns.
"""

import numpy as np
import pytest

from nuna_jax import path, sim
from nuna_jax.sim import kernel as K
from nuna_jax.presets import from_params, preset
from nuna_jax.traffic import make_traffic

ONE_FLIT_NS = 845.0
STORE_NS = 671.0
PORT_NS = 4.0


def _tiny(**kw):
    p = dict(mesh_cols=2, mesh_rows=1, n_dies=1, cus_per_router=2, n_hbm_stacks=2, n_io_ports=2,
             n_gpus=2, noc_clock_ghz=1.0, hop_cycles=10.0, die_crossing_ns=0.0, cu_to_noc_ns=100.0,
             link_bw_bytes_per_ns=256.0, hbm_bw_bytes_per_ns=128.0, hbm_latency_ns=50.0,
             port_bw_bytes_per_ns=64.0, switch_latency_ns=500.0, max_outstanding_per_cu=700,
             hbm_routers_per_stack=1)   # the hand calculations put each stack on one router, column 1
    p.update(kw)
    return from_params(**p)


def _flow(s, flits, cu=0, **kw):
    n = len(flits)
    cols = dict(src_gpu=np.zeros(n, int), cu=np.full(n, cu) if np.ndim(cu) == 0 else cu,
                read_stack=np.zeros(n, int), port=np.zeros(n, int), dst_gpu=np.ones(n, int),
                dst_stack=np.ones(n, int), flits=flits)
    cols.update(kw)
    return make_traffic(s, **cols)


@pytest.mark.parametrize("engine", sim.ENGINES)
def test_single_flit_matches_hand_calculation(engine):
    s = _tiny()
    r = sim.simulate(s, _flow(s, [1]), engine=engine)
    assert r.completion_ps == ONE_FLIT_NS * 1000
    assert r.store_latency_ps.tolist() == [STORE_NS * 1000]
    assert (r.flits_injected, r.flits_delivered) == (1, 1)
    # resource services: CU, HBM read, 1 link, egress, ingress, 1 link, HBM write
    assert r.flit_hops == 7


@pytest.mark.parametrize("engine", sim.ENGINES)
def test_port_serialization_pipeline(engine):
    # n flits of one flow: issued 1 ns apart, the 4 ns egress port is the bottleneck,
    # so flit k is delivered 4k ns after the first (hand: 845 + 4 (n - 1)).
    s = _tiny()
    n = 9
    r = sim.simulate(s, _flow(s, [n]), engine=engine)
    assert np.sort(r.deliver_ps).tolist() == [(ONE_FLIT_NS + PORT_NS * k) * 1000 for k in range(n)]
    lay = path.resource_layout(s)
    assert r.busy_ps[lay.offset_egress + 0] == n * PORT_NS * 1000          # egress port 0 of GPU 0
    assert r.busy_ps[lay.per_gpu + lay.offset_ingress + 0] == n * PORT_NS * 1000
    assert r.busy_ps[lay.offset_hbm + 0] == n * 2000                        # read stack: 2 ns per flit
    assert r.busy_ps.sum() == n * (1 + 2 + 1 + 4 + 4 + 1 + 2) * 1000


@pytest.mark.parametrize("engine", sim.ENGINES)
def test_window_of_one_serializes(engine):
    s = _tiny(max_outstanding_per_cu=1)
    r = sim.simulate(s, _flow(s, [4]), engine=engine)
    # each flit is issued when the previous one is delivered
    assert r.issue_ps.tolist() == [k * ONE_FLIT_NS * 1000 for k in range(4)]
    assert r.completion_ps == 4 * ONE_FLIT_NS * 1000


@pytest.mark.parametrize("engine", sim.ENGINES)
def test_phase_is_a_barrier(engine):
    s = _tiny()
    # two CUs, phase 0 on CU 0 and phase 1 on CU 1: the second waits for the first's delivery
    t = _flow(s, [1, 1], cu=np.array([0, 1]), phase=[0, 3])
    r = sim.simulate(s, t, engine=engine)
    assert sorted(r.issue_ps.tolist()) == [0, ONE_FLIT_NS * 1000]
    assert r.completion_ps == 2 * ONE_FLIT_NS * 1000


@pytest.mark.parametrize("engine", sim.ENGINES)
def test_fcfs_tie_break_by_flit_id(engine):
    # CUs 0 and 1 share router 0: their flits (ids 0 and 1) issue at t = 0 and reach the
    # read stack at the same ps.  Tie-break: lower global flit id first.  Flit 1 then
    # trails by 2 ns (HBM) and at the 4 ns egress port by 4 ns: delivered at 845 + 4.
    s = _tiny()
    r = sim.simulate(s, _flow(s, [1, 1], cu=np.array([1, 0])), engine=engine)
    assert r.flit_flow.tolist() == [1, 0]                 # ids follow CU order, not row order
    assert r.deliver_ps.tolist() == [ONE_FLIT_NS * 1000, (ONE_FLIT_NS + PORT_NS) * 1000]


def test_issue_order_round_robin_by_hand():
    # one CU, tb 0: step 0 has flows 0 (2 flits) and 1 (1 flit), step 1 flow 2 (1 flit);
    # tb 1: flow 3 (2 flits).  tb0 sequence 0 1 0 2, tb1 sequence 3 3 -> interleaved 0 3 1 3 0 2
    s = _tiny()
    t = _flow(s, [2, 1, 1, 2], tb=[0, 0, 0, 1], step=[0, 0, 1, 0])
    r = sim.simulate(s, t)
    assert r.flit_flow.tolist() == [0, 3, 1, 3, 0, 2]
    assert r.issue_ps.tolist() == [k * 1000 for k in range(6)]   # 1 flit per NoC cycle


def test_conservation_and_determinism_table2():
    s = preset("table2", n_gpus=3)
    rng = np.random.default_rng(1)
    f = 30
    t = make_traffic(s, src_gpu=rng.integers(0, 2, f), cu=rng.integers(0, 576, f),
                     read_stack=rng.integers(0, 16, f), port=rng.integers(0, 144, f),
                     dst_gpu=np.full(f, 2), dst_stack=rng.integers(0, 16, f),
                     flits=rng.integers(0, 40, f), tb=rng.integers(0, 4, f), step=rng.integers(0, 3, f))
    a = sim.simulate(s, t)
    b = sim.simulate(s, t)
    total = int(np.asarray(t.flits).sum())
    assert a.flits_injected == a.flits_delivered == total == a.deliver_ps.shape[0]
    assert np.bincount(a.flit_flow, minlength=f).tolist() == np.asarray(t.flits).astype(int).tolist()
    for k in ("issue_ps", "deliver_ps", "store_ps", "busy_ps", "flit_flow"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    # every flit is at least its own zero-load latency in flight
    zl = np.asarray(path.zero_load_latency_ns(s, t), np.float64)[a.flit_flow] * 1000
    assert np.all(a.deliver_ps - a.issue_ps >= zl - 1)  # stages round up: never early


def test_zero_load_equals_path_definition_table2():
    # the shared definition: path.zero_load_latency_ns (docs/model.md).  Each of the
    # 2 * n_stages per-stage quantities is rounded up to whole ps (docs/simulator.md):
    # never early (up to float32 slack of the float sum), late by < 1 ps per quantity.
    s = preset("table2", n_gpus=2)
    rng = np.random.default_rng(7)
    late_ps = 2 * path.n_stages(s) * 1.0
    for _ in range(12):
        t = make_traffic(s, src_gpu=[0], cu=[rng.integers(576)], read_stack=[rng.integers(16)],
                         port=[rng.integers(144)], dst_gpu=[1], dst_stack=[rng.integers(16)], flits=[1])
        r = sim.simulate(s, t)
        zl_ps = float(np.asarray(path.zero_load_latency_ns(s, t))[0]) * 1000
        assert -1.0 <= r.completion_ps - zl_ps <= late_ps
        st = path.flow_stages(s, t)
        store_col = path.stage_names(s).index("store_issue")
        store_ps = float(np.sum(np.asarray(st.service_ns + st.latency_ns)[0, store_col:])) * 1000
        assert -1.0 <= int(r.store_latency_ps[0]) - store_ps <= late_ps


def test_chunked_and_pure_python_kernel_agree(monkeypatch):
    s = _tiny(max_outstanding_per_cu=3)
    t = _flow(s, [5, 4, 3], cu=np.array([0, 1, 1]), tb=[0, 1, 2], port=[0, 1, 0], phase=[0, 0, 1])
    prog = sim.compile_program(s, t)
    whole = sim.fast.run_fast(prog)
    chunked = sim.fast.run_fast(prog, chunk_events=3)
    ref = sim.run_reference(s, t)
    for k in ("issue_ps", "deliver_ps", "store_ps", "busy_ps"):
        assert np.array_equal(getattr(whole, k), getattr(chunked, k))
        assert np.array_equal(getattr(whole, k), getattr(ref, k))
    if K.HAVE_NUMBA:  # the fallback: the very same loop, uncompiled
        monkeypatch.setattr(K, "run_chunk", K.run_chunk.py_func)
        py = sim.fast.run_fast(prog)
        assert np.array_equal(py.deliver_ps, whole.deliver_ps)


def test_time_bound_raises_instead_of_partial_answer():
    s = _tiny()
    with pytest.raises(sim.SimulationError, match="time bound"):
        sim.simulate(s, _flow(s, [3]), max_time_ns=500.0)
    with pytest.raises(sim.SimulationError):
        sim.simulate(s, _flow(s, [3]), engine="reference", max_time_ns=500.0)
    with pytest.raises(sim.SimulationError, match="conservation"):
        sim.fast.check_complete(3, 2, 3, np.array([1, 2, 3]))


def test_bad_input():
    s = _tiny()
    with pytest.raises(ValueError, match="whole"):
        sim.simulate(s, _flow(s, [1.5]))
    with pytest.raises(ValueError, match="engine"):
        sim.simulate(s, _flow(s, [1]), engine="magic")
    with pytest.raises(ValueError, match="max_time_ns"):
        sim.simulate(s, _flow(s, [1]), max_time_ns=0)


def test_background_read_and_write_by_hand():
    s = _tiny()
    # read: issue 1 + (100 + 10) ; HBM 2 + 50 ; link 1 + 10 ; back to CU 100 -> 274 ns
    # write: issue 1 + 100 ; link 1 + 10 ; HBM 2 + 50 -> 164 ns
    bg = sim.make_background(s, gpu=[0, 0], cu=[0, 1], stack=[0, 1], kind=[0, 1], flits=[1, 1], tb=[0, 1])
    t = _flow(s, [1], cu=1, src_gpu=[1], dst_gpu=[0])
    for engine in sim.ENGINES:
        r = sim.simulate(s, t, background=bg, engine=engine)
        d = {int(f): int(x) for f, x in zip(r.flit_flow, r.deliver_ps)}
        assert d[1] == 274_000 and d[2] == 164_000
        assert r.traffic_completion_ps == ONE_FLIT_NS * 1000
    clash = sim.make_background(s, gpu=[0], cu=[0], stack=[0], kind=[0], flits=[1])
    with pytest.raises(ValueError, match="share CU"):
        sim.simulate(s, _flow(s, [1]), background=clash)


def test_stop_after_traffic_keeps_traffic_timing_exact():
    s = preset("table2", n_gpus=2)
    t = make_traffic(s, src_gpu=[0, 1], cu=[0, 7], read_stack=[0, 5], port=[3, 140], dst_gpu=[1, 0],
                     dst_stack=[2, 9], flits=[40, 30])
    bg = sim.gemm_background(s, gemm_bytes=10_000_000, n_tiles=4, avoid_cus=[0, 7])
    full = sim.simulate(s, t, background=bg)
    early = sim.simulate(s, t, background=bg, stop_after_traffic=True)
    m = full.traffic_mask
    assert full.background_complete and not early.background_complete
    assert np.array_equal(full.deliver_ps[m], early.deliver_ps[m])
    assert early.traffic_completion_ps == full.traffic_completion_ps
    assert early.flits_delivered < full.flits_delivered == full.flits_injected
    # the GEMM really interferes: without it the traffic finishes no later
    alone = sim.simulate(s, t)
    assert alone.traffic_completion_ps <= full.traffic_completion_ps


@pytest.mark.parametrize("responses_hold_links", [True, False])
def test_segment_factoring_equals_the_path_table(responses_hold_links):
    # the fast engine's factored program, expanded, is exactly path.flow_stages compressed; with
    # read responses off the links (tests/test_readings.py) their hops, service included, are
    # folded into the latency of the HBM read before them
    from nuna_jax.sim.program import _compress
    s = preset("table2", n_gpus=3, read_response_links=responses_hold_links)
    rng = np.random.default_rng(5)
    f = 60
    t = make_traffic(s, src_gpu=rng.integers(1, 3, f), cu=rng.integers(0, 576, f),
                     read_stack=rng.integers(0, 16, f), port=rng.integers(0, 144, f),
                     dst_gpu=np.zeros(f, int), dst_stack=rng.integers(0, 16, f), flits=np.ones(f))
    st = path.flow_stages(s, t)
    want = _compress(np.asarray(st.resource), np.asarray(st.service_ns), np.asarray(st.latency_ns))
    prog = sim.compile_program(s, t)
    res, svc, lat, nst = prog.expand()
    assert np.array_equal(nst, want[3])
    k = want[0].shape[1]
    assert np.array_equal(res[:, :k], want[0]) and np.array_equal(svc[:, :k], want[1])
    assert np.array_equal(lat[:, :k], want[2])


def test_batch_equals_one_by_one():
    s = _tiny()
    ts = [_flow(s, [n], port=[n % 2]) for n in (1, 3, 5)]
    batch = sim.simulate_batch(s, ts, threads=2)
    for t, r in zip(ts, batch):
        one = sim.simulate(s, t)
        assert np.array_equal(one.deliver_ps, r.deliver_ps) and one.completion_ps == r.completion_ps


def test_progress_bar_silent_when_stderr_is_not_a_terminal(capsys):
    s = _tiny()
    sim.simulate(s, _flow(s, [3]), progress=True)
    assert capsys.readouterr().err == ""


def test_crowded_calendar_buckets_equal_reference():
    """Many flits in one calendar bucket (records over several blocks of ``kernel.BLOCK``, exact ties
    sorted by flit id inside a bucket, buckets wider and narrower than the default): the fast engine
    equals the reference flit by flit (docs/simulator.md, "Speed")."""
    s = _tiny(cus_per_router=8, max_outstanding_per_cu=64, hop_cycles=1.0, cu_to_noc_ns=2.0,
              switch_latency_ns=3.0, hbm_latency_ns=1.0)
    n = 16
    rng = np.random.default_rng(3)
    t = _flow(s, rng.integers(20, 40, n), cu=np.arange(n) % s.n_cus, read_stack=rng.integers(0, 2, n),
              port=rng.integers(0, 2, n), dst_stack=rng.integers(0, 2, n), tb=np.arange(n) % 3,
              src_gpu=np.arange(n) % 2, dst_gpu=1 - np.arange(n) % 2)
    ref = sim.run_reference(s, t)
    from nuna_jax.sim import fast as F
    saved = (F.CAL_BUCKET_PS, F.CAL_BUCKETS)
    try:
        for dw, nb in ((saved[0], saved[1]), (1 << 16, 4), (1 << 14, 64), (1 << 20, 1), (4, 2)):
            F.CAL_BUCKET_PS, F.CAL_BUCKETS = dw, nb
            r = sim.simulate(s, t)
            for k in ("issue_ps", "deliver_ps", "store_ps", "busy_ps"):
                assert np.array_equal(getattr(r, k), getattr(ref, k)), (dw, nb, k)
            assert r.flit_hops == ref.flit_hops
    finally:
        F.CAL_BUCKET_PS, F.CAL_BUCKETS = saved
    assert ref.flits_delivered > 4 * K.BLOCK          # enough flits in flight for buckets of several blocks
    with pytest.raises(ValueError, match="powers of two"):
        F.CAL_BUCKET_PS = 250
        try:
            sim.simulate(s, t)
        finally:
            F.CAL_BUCKET_PS = saved[0]


@pytest.mark.skipif(not K.HAVE_NUMBA, reason="the prefetch hint is a numba intrinsic")
def test_prefetch_is_a_hint_only():
    """sim.prefetch emits a real prefetch instruction and changes nothing, even far past an array's end
    (a prefetch never faults): the sums equal numpy's."""
    import platform

    import numba

    from nuna_jax.sim.prefetch import prefetch

    @numba.njit(cache=False)
    def total(a, b):
        s = 0
        for i in range(a.shape[0]):
            prefetch(a, i + 8)
            prefetch(a, i + (1 << 40))            # far outside any mapping
            prefetch(b, i + 3)
            s += a[i] + b[i, 1]
        return s

    a = np.arange(1000, dtype=np.int64)
    b = np.arange(3000, dtype=np.int64).reshape(1000, 3)
    assert total(a, b) == int(a.sum() + b[:, 1].sum())
    if platform.machine() in ("x86_64", "AMD64"):
        asm = "".join(total.inspect_asm().values())
        assert "prefetcht0" in asm
