"""The paper's open reading ``System.read_response_links`` (issue 20 item 2; docs/model.md,
"Read responses on the mesh"): both settings by hand on a two-flow case, in the simulator and
the path model; the two path-model engines and the two simulator engines agree in both.

Hand system (`_tiny`, as tests/test_sim.py but links of 32 B/ns and 4 ports): a 2 x 1 mesh,
1 GHz NoC, 10 ns hops; 256 B flits: 8 ns per mesh link, 2 ns per HBM stack, 4 ns per port;
cu_to_noc 100 ns, HBM latency 50 ns, switch 500 ns.  Both HBM stacks sit on router 1; CUs 0, 1
and ports 0, 1 on router 0.  Two single-flit flows of GPU 0:

  flow 0: CU 0 reads stack 0, port 0 -> GPU 1 stack 1
  flow 1: CU 1 reads stack 1, port 1 -> GPU 2 stack 1

share exactly one resource: the directed link router 1 -> router 0 of GPU 0, which both read
responses cross.  Each flit alone (docs/model.md, "The path of a flit"):
  issue 1 + (100 + 10 request hop) = 111; HBM read 2 + 50 = 52; response 1 link 8 + 10 = 18;
  store issue 100; CU router == port router: 0; egress 4 + 500 = 504; ingress 4;
  delivery 1 link 8 + 10 = 18; HBM write 2 + 50 = 52                          -> 859 ns.
Both issue at t = 0 (two CUs) and reach the shared link at 111 + 52 = 163 ns.
* responses occupy links: flit 0 (lower global id) holds the link 163 .. 171; flit 1 waits
  8 ns, delivered at 867.  Path model: estimate = Lmax + (B - svc) = 859 + (16 - 8) = 867;
  lower bound = a + B + m = 163 + 16 + (859 - 163 - 8) = 867.
* responses hold no link: nothing is shared; both delivered at 859; estimate = bound = 859.
"""

import jax
import numpy as np
import pytest

from nuna_jax import path, sim
from nuna_jax.models import contention as K
from nuna_jax.presets import from_params, from_toml, preset
from nuna_jax.traffic import make_traffic

ALONE_NS, WAIT_NS = 859.0, 8.0
SETTINGS = (True, False)


def _tiny(on: bool):
    return from_params(mesh_cols=2, mesh_rows=1, n_dies=1, cus_per_router=2, n_hbm_stacks=2, n_io_ports=4,
                       n_gpus=3, noc_clock_ghz=1.0, hop_cycles=10.0, die_crossing_ns=0.0, cu_to_noc_ns=100.0,
                       link_bw_bytes_per_ns=32.0, hbm_bw_bytes_per_ns=128.0, hbm_latency_ns=50.0,
                       port_bw_bytes_per_ns=64.0, switch_latency_ns=500.0, max_outstanding_per_cu=700,
                       hbm_routers_per_stack=1, read_response_links=on)


def _two_flows(s):
    return make_traffic(s, src_gpu=[0, 0], cu=[0, 1], read_stack=[0, 1], port=[0, 1], dst_gpu=[1, 2],
                        dst_stack=[1, 1], flits=[1, 1])


def _response_link(s):
    """Global id of GPU 0's directed link router 1 -> router 0 (the two responses' one hop)."""
    res = np.asarray(path.flow_stages(_tiny(True), _two_flows(s)).resource)
    sl = path.stage_slices(s).response
    ids = {int(r) for r in res[:, sl].ravel() if r >= 0}
    assert len(ids) == 1
    return ids.pop()


def test_two_flows_geometry_is_as_the_hand_calculation_says():
    s = _tiny(True)
    lay = path.resource_layout(s)
    res = np.asarray(path.flow_stages(s, _two_flows(s)).resource)
    shared = set(res[0][res[0] >= 0].tolist()) & set(res[1][res[1] >= 0].tolist())
    assert shared == {_response_link(s)}
    assert lay.kind_of(_response_link(s)) == "link"
    np.testing.assert_allclose(np.asarray(path.zero_load_latency_ns(s, _two_flows(s))), [ALONE_NS] * 2)


@pytest.mark.parametrize("on", SETTINGS)
@pytest.mark.parametrize("engine", sim.ENGINES)
def test_simulator_two_flows_by_hand(on, engine):
    s = _tiny(on)
    r = sim.simulate(s, _two_flows(s), engine=engine)
    want = [ALONE_NS, ALONE_NS + WAIT_NS] if on else [ALONE_NS, ALONE_NS]
    assert r.flit_flow.tolist() == [0, 1]                       # CU 0's flit has the lower id
    assert r.deliver_ps.tolist() == [int(x * 1000) for x in want]
    link = _response_link(s)
    assert int(r.busy_ps[link]) == (2 * 8000 if on else 0)
    # the responses' time is the same either way: only the wait differs
    assert r.flit_hops == (7 if on else 6) * 2


@pytest.mark.parametrize("on", SETTINGS)
@pytest.mark.parametrize("engine", ("stages", "runs"))
def test_path_model_two_flows_by_hand(on, engine):
    s = _tiny(on)
    t = _two_flows(s)
    c = K.analyze(s, t, engine=engine)
    want = ALONE_NS + WAIT_NS if on else ALONE_NS
    assert float(c.estimate_ns) == pytest.approx(want, abs=1e-3)
    assert float(c.lower_bound_ns) == pytest.approx(want, abs=1e-3)
    busy = np.asarray(K.resource_tables(s, t, 1, engine=engine).busy)[0]
    assert float(busy[_response_link(s)]) == pytest.approx(16.0 if on else 0.0)
    np.testing.assert_allclose(np.asarray(c.flow_latency_ns), [ALONE_NS] * 2, atol=1e-3)


def _rand(s, seed, n=300):
    rng = np.random.default_rng(seed)
    g = s.n_gpus
    src = rng.integers(0, g, n)
    return make_traffic(s, src_gpu=src, cu=rng.integers(0, s.n_cus, n), read_stack=rng.integers(0, s.n_hbm_stacks, n),
                        port=rng.integers(0, s.n_io_ports, n), dst_gpu=(src + rng.integers(1, g, n)) % g,
                        dst_stack=rng.integers(0, s.n_hbm_stacks, n), flits=rng.integers(0, 9, n).astype(float),
                        phase=rng.integers(0, 2, n))


@pytest.mark.slow     # 8 path-model compiles (~45 CPU s); the default run compares the engines in
                      # the default setting (test_contention.test_fast_runs_engine_equals_stage_table_engine)
def test_stages_and_runs_engines_agree_in_both_settings():
    base = preset("table2")
    t = _rand(base, 4)
    busy_link = {}
    for on in SETTINGS:
        s = base.replace(read_response_links=on)
        out = {}
        for eng in ("stages", "runs"):
            out[eng] = (K.analyze(s, t, temperature_ns=5.0, engine=eng),
                        jax.jit(lambda s_, t_: K.resource_tables(s_, t_, 2, engine=eng))(s, t))
        (ca, ta), (cb, tb) = out["stages"], out["runs"]
        for name in ("lower_bound_ns", "estimate_ns", "smooth_estimate_ns"):
            assert float(getattr(cb, name)) == pytest.approx(float(getattr(ca, name)), rel=1e-5), (on, name)
        np.testing.assert_allclose(np.asarray(tb.busy), np.asarray(ta.busy), rtol=1e-5, atol=1e-3)
        for f in ("a", "m", "lr"):
            x, y = np.asarray(getattr(ta, f)), np.asarray(getattr(tb, f))
            assert np.array_equal(np.abs(x) > 1e29, np.abs(y) > 1e29), (on, f)
            ok = np.abs(x) < 1e29
            np.testing.assert_allclose(y[ok], x[ok], rtol=1e-5, atol=1e-2)
        lay = path.resource_layout(s)
        kinds = lay.kind_of(np.arange(lay.n_resources))
        busy_link[on] = float(np.asarray(ta.busy)[:, kinds == "link"].sum())
        busy_other = np.asarray(ta.busy)[:, kinds != "link"]
        if on:
            ref_other = busy_other
        else:   # only link loads move; every other resource and every latency is the same
            np.testing.assert_array_equal(busy_other, ref_other)
    # the responses' link load is gone: every flit's response hops, 0.3072 ns each at 833 B/ns
    s = base
    st = path.flow_stages(s, t)
    hops = (np.asarray(st.resource)[:, path.stage_slices(s).response] >= 0).sum(axis=1)
    want = float((np.asarray(t.flits) * hops).sum()) * s.flit_bytes / s.link_bw_bytes_per_ns
    assert busy_link[True] - busy_link[False] == pytest.approx(want, rel=1e-4)


def test_zero_load_latency_is_the_same_in_both_settings():
    base = preset("table2")
    t = _rand(base, 9, n=64)
    off = base.replace(read_response_links=False)
    np.testing.assert_array_equal(np.asarray(path.zero_load_latency_ns(base, t)),
                                  np.asarray(path.zero_load_latency_ns(off, t)))
    for a, b in zip(path.path_tables(base), path.path_tables(off)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    st_on, st_off = path.flow_stages(base, t), path.flow_stages(off, t)
    sl = path.stage_slices(base).response
    r_on, r_off = np.asarray(st_on.resource), np.asarray(st_off.resource)
    assert (r_off[:, sl] == -1).all() and (r_on[:, sl] >= 0).any()
    keep = np.ones(r_on.shape[1], bool)
    keep[sl] = False
    np.testing.assert_array_equal(r_on[:, keep], r_off[:, keep])
    np.testing.assert_array_equal(np.asarray(st_on.service_ns), np.asarray(st_off.service_ns))
    np.testing.assert_array_equal(np.asarray(st_on.latency_ns), np.asarray(st_off.latency_ns))


def test_program_drops_the_response_links_and_keeps_every_flits_time():
    # sim/program.py folds a stage without resource, service included, into the latency of the
    # resource stage before it (the HBM read); tests/test_sim.py checks the folding in both
    # settings, here: the links are gone and every flit alone finishes at the same ps
    s = preset("table2", n_gpus=3, read_response_links=False)
    t = _rand(s, 5, n=40)
    on = s.replace(read_response_links=True)
    n_off, n_on = sim.compile_program(s, t).expand()[3], sim.compile_program(on, t).expand()[3]
    hops = (np.asarray(path.flow_stages(on, t).resource)[:, path.stage_slices(s).response] >= 0).sum(axis=1)
    np.testing.assert_array_equal(n_on - n_off, hops)
    for i in range(3):
        one = make_traffic(s, flits=[1], **{c: np.asarray(getattr(t, c))[i:i + 1] for c in
                                            ("src_gpu", "cu", "read_stack", "port", "dst_gpu", "dst_stack")})
        a, b = sim.simulate(s, one), sim.simulate(on, one)
        assert a.completion_ps == b.completion_ps and a.store_latency_ps.tolist() == b.store_latency_ps.tolist()


@pytest.mark.parametrize("on", SETTINGS)
def test_fast_and_reference_simulators_agree(on):
    s = preset("table2", n_gpus=3, read_response_links=on)
    t = _rand(s, 11, n=40)
    bg = sim.gemm_background(s, gemm_bytes=100_000, n_tiles=3, avoid_cus=np.unique(np.asarray(t.cu)))
    for b in (None, bg):
        fast = sim.simulate(s, t, background=b)
        ref = sim.simulate(s, t, background=b, engine="reference")
        for k in ("issue_ps", "deliver_ps", "store_ps", "busy_ps", "flit_flow"):
            assert np.array_equal(getattr(fast, k), getattr(ref, k)), (on, b is not None, k)


def test_background_reads_honour_the_field_and_writes_do_not():
    s = preset("table2", n_gpus=1)
    bg = sim.make_background(s, gpu=[0, 0], cu=[0, 1], stack=[15, 15], kind=[0, 1], flits=[1, 1], tb=[0, 1])
    lay = path.resource_layout(s)
    from nuna_jax.sim.background import background_stages
    res_on = np.asarray(background_stages(s, bg)[0])
    res_off = np.asarray(background_stages(s.replace(read_response_links=False), bg)[0])
    link = lambda r: ((r >= lay.offset_link) & (r < lay.offset_egress)).sum()   # noqa: E731
    assert link(res_on[0]) > 0 and link(res_off[0]) == 0                         # the read's response
    assert link(res_on[1]) == link(res_off[1]) > 0                                # the write's store leg
    for b in (s, s.replace(read_response_links=False)):
        svc_lat = [np.asarray(a) for a in background_stages(b, bg)[1:]]
        np.testing.assert_allclose((svc_lat[0] + svc_lat[1]).sum(axis=1),
                                   (np.asarray(background_stages(s, bg)[1]) + np.asarray(background_stages(s, bg)[2])).sum(axis=1))


def test_presets_and_toml_accept_the_field(tmp_path):
    assert preset("table2").read_response_links is True
    assert preset("table2", read_response_links=False).read_response_links is False
    assert preset("table2").summary()["read_response_links"] is True
    p = tmp_path / "off.toml"
    p.write_text('base = "table2"\nread_response_links = false\n')
    assert from_toml(p).read_response_links is False
    bad = tmp_path / "bad.toml"
    bad.write_text('base = "table2"\nread_response_links = 1\n')
    with pytest.raises(ValueError, match="read_response_links must be true or false"):
        from_toml(bad)
    with pytest.raises(ValueError, match="read_response_links"):
        preset("table2", read_response_links="no")
    from nuna_jax.system import validate
    with pytest.raises(ValueError, match="read_response_links"):
        validate(preset("table2").replace(read_response_links=0))
