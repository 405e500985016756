"""System: Table 2 numbers, geometry, construction and validation."""

import dataclasses

import numpy as np
import pytest

from nuna_jax import from_params, from_toml, preset
from nuna_jax.geometry import cu_router, port_router, router_die, router_xy, stack_router


def test_table2_numbers_from_the_paper():
    s = preset("table2")
    assert (s.mesh_cols, s.mesh_rows, s.n_dies) == (24, 6, 4)
    assert s.n_cus == 576 and s.cus_per_router == 4
    assert s.max_outstanding_per_cu == 700
    assert s.n_hbm_stacks == 16 and s.n_io_ports == 144
    assert (s.flit_bytes, s.page_bytes) == (256, 4096)
    # derived totals must give back Table 2's stated aggregates
    assert s.hop_ns == pytest.approx(10 / 1.2)
    assert s.bisection_bw_bytes_per_ns == pytest.approx(10_000.0)  # 10 TB/s
    assert s.hbm_total_bw_bytes_per_ns == pytest.approx(40_000.0)  # 40 TB/s
    assert s.scaleup_bw_bytes_per_ns == pytest.approx(7_200.0)  # 7.2 TB/s
    assert s.switch_latency_ns == 500.0 and s.hbm_latency_ns == 150.0 and s.cu_to_noc_ns == 120.0
    assert s.flops_bf16_per_ns == pytest.approx(25e6) and s.flops_fp4_per_ns == pytest.approx(100e6)


def test_geometry_table2():
    s = preset()
    # stacks: 8 on each long edge, one per 3-column span, at the span's centre
    sx, sy = router_xy(s, stack_router(s))
    assert list(sx[:8]) == [1, 4, 7, 10, 13, 16, 19, 22] and list(sx[8:]) == list(sx[:8])
    assert set(sy[:8]) == {0} and set(sy[8:]) == {5}
    # ports: 72 per short edge, 12 per edge router, consecutive ids adjacent
    px, py = router_xy(s, port_router(s))
    assert set(px[:72]) == {0} and set(px[72:]) == {23}
    assert np.bincount(py[:72]).tolist() == [12] * 6
    assert np.all(np.diff(py[:72]) >= 0)
    # CUs: 4 per router; dies are 6-column slabs
    assert np.bincount(cu_router(s)).tolist() == [4] * 144
    assert router_die(s, np.array([0, 5, 6, 23, 24 * 5 + 17])).tolist() == [0, 0, 1, 3, 2]


def test_geometry_is_mirror_symmetric():
    s = preset()
    sx, sy = router_xy(s, stack_router(s))
    # the stack set is symmetric under x -> 23 - x and under y -> 5 - y
    pts = set(zip(sx.tolist(), sy.tolist()))
    assert pts == {(23 - x, y) for x, y in pts} == {(x, 5 - y) for x, y in pts}
    px, py = router_xy(s, port_router(s))
    ports = sorted(zip(px.tolist(), py.tolist()))
    assert ports == sorted((23 - x, y) for x, y in ports)


def test_pod_size_override_and_presets():
    assert preset("table2", n_gpus=64).n_gpus == 64
    assert preset("TABLE2").name == "table2"
    for name in ("mono", "quad"):
        s = preset(name)
        assert s.n_cus > 0 and s.n_io_ports % 2 == 0
    assert preset("mono").n_dies == 1 and preset("quad").n_dies == 4
    assert preset().replace(n_gpus=2).n_gpus == 2


@pytest.mark.parametrize("field,value,match", [
    ("mesh_cols", 0, "mesh_cols"),
    ("mesh_rows", -1, "mesh_rows"),
    ("n_dies", 5, "n_dies"),
    ("n_io_ports", 140, "n_io_ports"),   # 70 per edge do not spread over 6 rows
    ("n_io_ports", 143, "n_io_ports"),   # odd
    ("n_hbm_stacks", 50, "n_hbm_stacks"),  # 25 per edge > 24 columns
    ("hop_cycles", 0.0, "hop_cycles"),
    ("switch_latency_ns", -1.0, "switch_latency_ns"),
    ("port_bw_bytes_per_ns", float("nan"), "port_bw_bytes_per_ns"),
    ("n_gpus", 0, "n_gpus"),
    ("page_bytes", 1000, "page_bytes"),
])
def test_bad_parameters_are_rejected_with_the_field_named(field, value, match):
    with pytest.raises(ValueError, match=match):
        preset("table2", **{field: value})


def test_unknown_preset_and_field():
    with pytest.raises(ValueError, match="unknown system preset 'h9000'.*table2"):
        preset("h9000")
    with pytest.raises(ValueError, match="unknown System field"):
        from_params(mesh_colz=4)


def test_from_params_and_toml(tmp_path):
    s = from_params(mesh_cols=8, mesh_rows=2, n_dies=2, n_hbm_stacks=4, n_io_ports=8, n_gpus=2)
    assert s.n_cus == 8 * 2 * 4 and s.name == "custom"
    f = tmp_path / "sys.toml"
    f.write_text('[system]\nbase = "table2"\nn_gpus = 16\nswitch_latency_ns = 300\n')
    t = from_toml(f)
    assert t.n_gpus == 16 and t.switch_latency_ns == 300.0 and t.mesh_cols == 24
    bad = tmp_path / "bad.toml"
    bad.write_text("mesh_cols = [")
    with pytest.raises(ValueError, match="invalid TOML"):
        from_toml(bad)
    with pytest.raises(ValueError, match="does not exist"):
        from_toml(tmp_path / "missing.toml")


def test_system_is_a_pytree_with_static_shape_fields():
    import jax
    s = preset()
    leaves = jax.tree_util.tree_leaves(s)
    static = [f.name for f in dataclasses.fields(s) if not f.metadata.get("pytree_node", True)]
    assert "mesh_cols" in static and "n_gpus" in static
    assert len(leaves) == len(dataclasses.fields(s)) - len(static)


def test_stack_systems_vmap_equals_single_calls():
    import jax
    import jax.numpy as jnp
    from nuna_jax.path import head_latency_ns
    from nuna_jax.system import stack_systems
    hops = [6.0, 8.0, 10.0, 14.0]
    ss = [preset("table2").replace(hop_cycles=h, die_crossing_ns=2.0 * h) for h in hops]
    f = lambda s: head_latency_ns(s, jnp.array(0), jnp.array(143))  # noqa: E731
    batched = jax.vmap(f)(stack_systems(ss))
    for k, s in enumerate(ss):
        assert float(batched[k]) == pytest.approx(float(f(s)), rel=1e-6)
    # hand value: corner to corner = 23 + 5 hops at h/1.2 ns, 3 die crossings at 2h ns
    assert float(batched[0]) == pytest.approx(28 * 6.0 / 1.2 + 3 * 12.0, rel=1e-6)
    with pytest.raises(ValueError, match="mesh_cols"):
        stack_systems([preset("table2"), preset("mono")])


# ---- TOML systems: every error names the file and the field (issue 11)
def test_toml_name_with_base_names_a_custom_system(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('base = "quad"\nname = "my-quad"\nn_gpus = 4\n')
    s = from_toml(f)
    assert (s.name, s.n_gpus, s.mesh_cols) == ("my-quad", 4, 16)  # quad preset: 16x4 mesh
    f.write_text('[system]\nbase = "table2"\nname = "t"\nhop_cycles = 20\n')
    s = from_toml(f)
    assert s.name == "t" and s.hop_cycles == 20.0


@pytest.mark.parametrize("body,field", [
    ('n_gpus = "eight"\n', "n_gpus"),
    ("mesh_cols = 2.5\n", "mesh_cols"),
    ("mesh_rows = true\n", "mesh_rows"),
    ("hop_cycles = nan\n", "hop_cycles"),
    ("link_bw_bytes_per_ns = inf\n", "link_bw_bytes_per_ns"),
    ("hbm_latency_ns = 1e300\n", "hbm_latency_ns"),
    ("cu_to_noc_ns = -1.0\n", "cu_to_noc_ns"),
    ("noc_clock_ghz = [1, 2]\n", "noc_clock_ghz"),
    ("mesh_cols = 100000000000000000000\n", "mesh_cols"),
    ("name = 3\n", "name"),
    ("base = 3\n", "base"),
    ("flops_bf16_per_ns = 1979-05-27\n", "flops_bf16_per_ns"),
])
def test_toml_type_and_range_errors_name_file_and_field(tmp_path, body, field):
    f = tmp_path / "bad.toml"
    f.write_text(body)
    with pytest.raises(ValueError) as e:
        from_toml(f)
    assert str(f) in str(e.value) and field in str(e.value)


def test_toml_file_errors_say_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        from_toml(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="not a regular file"):
        from_toml(tmp_path)
    f = tmp_path / "broken.toml"
    f.write_text("n_gpus = = 3\n")
    with pytest.raises(ValueError, match=r"broken.toml: invalid TOML.*line 1"):
        from_toml(f)
    f.write_bytes(b"name = \"\xff\"\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        from_toml(f)


@pytest.mark.parametrize("make", [lambda: float("nan"), lambda: np.float32("inf"),
                                  lambda: __import__("jax.numpy").numpy.asarray(float("nan")),
                                  lambda: __import__("jax.numpy").numpy.array([1.0, float("inf")])])
def test_replace_refuses_non_finite_concrete_values_jax_arrays_included(make):
    # a concrete jax NaN once passed and evaluated to time_ns = 0.0
    from nuna_jax.presets import preset
    with pytest.raises(ValueError, match="System.hop_cycles must be finite"):
        preset("table2").replace(hop_cycles=make())


def test_traced_fields_still_pass_through_jit_and_vmap():
    import jax
    from nuna_jax.presets import preset
    from nuna_jax.system import stack_systems
    s = preset("table2")
    assert float(jax.jit(lambda s: s.replace(hop_cycles=s.hop_cycles * 2).hop_ns)(s)) == pytest.approx(
        2 * float(s.hop_ns))
    b = stack_systems([s, s.replace(hop_cycles=3.0)])
    np.testing.assert_allclose(jax.vmap(lambda x: x.hop_ns)(b), [float(s.hop_ns), 3.0 / float(s.noc_clock_ghz)],
                               rtol=1e-6)
