"""Geometry and XY routes (nuna_jax.geometry) and the mesh head latency (nuna_jax.path): hop counts,
latencies and link sets against hand calculations and a plain walk; numpy in -> numpy out."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna_jax import from_params, preset
from nuna_jax import geometry as mesh
from nuna_jax.path import head_latency_ns

S = preset()
C = S.mesh_cols


def rid(x, y, s=S):
    return y * s.mesh_cols + x


def walk_xy(s, src, dst):
    """Independent reference: step along X then Y, recording (router, direction)."""
    x, y = src % s.mesh_cols, src // s.mesh_cols
    dx, dy = dst % s.mesh_cols, dst // s.mesh_cols
    links = []
    while x != dx:
        d = mesh.EAST if dx > x else mesh.WEST
        links.append(4 * (y * s.mesh_cols + x) + d)
        x += 1 if dx > x else -1
    while y != dy:
        d = mesh.SOUTH if dy > y else mesh.NORTH
        links.append(4 * (y * s.mesh_cols + x) + d)
        y += 1 if dy > y else -1
    return links


def test_hand_calculated_hops_and_latency():
    hop = 10 / 1.2  # ns
    corner = (rid(0, 0), rid(23, 5))
    assert int(mesh.hops(S, *corner)) == 28
    assert float(head_latency_ns(S, *corner)) == pytest.approx(28 * hop, rel=1e-6)
    assert int(mesh.hops(S, rid(7, 3), rid(7, 3))) == 0
    assert float(head_latency_ns(S, rid(7, 3), rid(7, 3))) == 0.0
    # crossing from die 0 (x=5) to die 1 (x=6): one die crossing, one hop
    assert int(mesh.die_crossings(S, rid(5, 0), rid(6, 0))) == 1
    assert int(mesh.die_crossings(S, rid(0, 0), rid(23, 0))) == 3
    s2 = S.replace(die_crossing_ns=20.0)
    assert float(head_latency_ns(s2, rid(0, 2), rid(23, 4))) == pytest.approx(25 * hop + 3 * 20.0, rel=1e-6)


def test_route_links_match_an_independent_walk_on_every_pair_of_a_small_mesh():
    s = from_params(mesh_cols=6, mesh_rows=3, n_dies=2, n_hbm_stacks=4, n_io_ports=6, n_gpus=2)
    n = s.n_routers
    src, dst = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    links = np.asarray(mesh.route_links(s, src, dst))
    inc = np.asarray(mesh.route_incidence(s, src, dst))
    for a in range(n):
        for b in range(n):
            ref = walk_xy(s, a, b)
            got = [int(v) for v in links[a, b] if v >= 0]
            assert got == ref
            assert sorted(np.flatnonzero(inc[a, b]).tolist()) == sorted(ref)


@settings(max_examples=20, deadline=None)   # the exhaustive small-mesh test above covers every pair
@given(st.integers(0, S.n_routers - 1), st.integers(0, S.n_routers - 1))
def test_route_links_walk_consecutively_on_table2(a, b):
    links = [int(v) for v in np.asarray(mesh.route_links(S, a, b)) if v >= 0]
    assert links == walk_xy(S, a, b)
    assert len(links) == int(mesh.hops(S, a, b))
    # consecutive links chain: each link starts where the previous ended
    frm, to = mesh.link_endpoints(S, jnp.asarray(links, dtype=jnp.int32)) if links else ([], [])
    for k in range(1, len(links)):
        assert int(frm[k]) == int(to[k - 1])
    if links:
        assert int(frm[0]) == a and int(to[-1]) == b


def test_symmetry_of_distances():
    r = np.arange(S.n_routers)
    h = np.asarray(mesh.hops(S, r[:, None], r[None, :]))
    assert np.array_equal(h, h.T)
    # mirror x -> 23 - x keeps distances
    x, y = r % C, r // C
    m = y * C + (C - 1 - x)
    assert np.array_equal(h, h[np.ix_(m, m)])


def test_jit_vmap_grad():
    src = jnp.array([0, 5, 100])
    dst = jnp.array([143, 6, 100])
    eager = head_latency_ns(S, src, dst)
    jitted = jax.jit(head_latency_ns)(S, src, dst)
    vm = jax.vmap(lambda a, b: head_latency_ns(S, a, b))(src, dst)
    np.testing.assert_allclose(eager, jitted, rtol=1e-6)
    np.testing.assert_allclose(eager, vm, rtol=1e-6)
    g = jax.grad(lambda s: head_latency_ns(s, src, dst).sum())(S)
    total_hops = float(mesh.hops(S, src, dst).sum())
    assert float(g.hop_cycles) == pytest.approx(total_hops / 1.2, rel=1e-5)
    assert float(g.noc_clock_ghz) == pytest.approx(-total_hops * 10 / 1.2**2, rel=1e-5)
    assert float(g.die_crossing_ns) == float(mesh.die_crossings(S, src, dst).sum())
    # batch over hardware variants: hop_cycles as a vector
    lat = jax.vmap(lambda hc: head_latency_ns(S.replace(hop_cycles=hc), src, dst))(jnp.array([10.0, 20.0]))
    np.testing.assert_allclose(lat[1], 2 * lat[0], rtol=1e-6)


def test_numpy_in_numpy_out_and_jax_in_jax_out():
    src, dst = np.arange(10), np.arange(10)[::-1] * 13
    h_np = mesh.hops(S, src, dst)
    h_jx = mesh.hops(S, jnp.asarray(src), jnp.asarray(dst))
    assert isinstance(h_np, np.ndarray) and isinstance(h_jx, jax.Array)
    np.testing.assert_array_equal(h_np, np.asarray(h_jx))
    np.testing.assert_array_equal(mesh.route_links(S, src, dst), np.asarray(mesh.route_links(S, jnp.asarray(src),
                                                                                           jnp.asarray(dst))))
    # jitted (traced) inputs take the JAX branch
    assert int(jax.jit(lambda a, b: mesh.hops(S, a, b).sum())(jnp.asarray(src), jnp.asarray(dst))) == int(h_np.sum())


def test_hbm_endpoints_lie_along_each_stacks_stretch():
    """Table 2: 8 stacks per edge over 24 columns, so stack i's stretch is columns 3i .. 3i+2 and
    its 3 channels sit on exactly those routers of its edge row (hand count); k = 1 is the centre."""
    s = preset("table2")
    ep = mesh.hbm_endpoint_router(s).reshape(s.n_hbm_stacks, s.hbm_routers_per_stack)
    x, y = mesh.router_xy(s, ep)
    for stack in range(16):
        i, row = stack % 8, (0 if stack < 8 else 5)
        assert x[stack].tolist() == [3 * i, 3 * i + 1, 3 * i + 2]
        assert set(y[stack].tolist()) == {row}
    one = preset("table2", hbm_routers_per_stack=1)
    assert np.array_equal(mesh.hbm_endpoint_router(one), mesh.stack_router(one))
    # the channel of a flit address: (a // flit) mod k
    assert mesh.hbm_channel(s, [0, 255, 256, 512, 768]).tolist() == [0, 0, 1, 2, 0]


def test_hbm_routers_per_stack_is_checked_against_the_stretch():
    with pytest.raises(ValueError, match="hbm_routers_per_stack=4 exceeds the 3 router"):
        preset("table2", hbm_routers_per_stack=4)
    with pytest.raises(ValueError, match="hbm_routers_per_stack"):
        preset("table2", hbm_routers_per_stack=0)
    # not given: the full stretch of the mesh at hand (16 columns, 4 stacks per edge: 4 routers)
    assert from_params(mesh_cols=16, n_dies=4, n_hbm_stacks=8).hbm_routers_per_stack == 4
    assert from_params(mesh_cols=8, n_dies=4, n_hbm_stacks=16).hbm_routers_per_stack == 1
