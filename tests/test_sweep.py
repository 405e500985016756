"""nuna_jax.sweep: grid checks, device-count and chunking invariance, resume, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from nuna_jax.cli import main
from nuna_jax.cli.common import parse_size
from nuna_jax.presets import preset
from nuna_jax.sweep import grid_from_dict
from nuna_jax.sweep.run import execute
from nuna_jax.sweep.writer import provenance_line, read_provenance, read_rows, to_columns

ROOT = Path(__file__).resolve().parents[1]

# one path-model shape group (2 GPUs UA, 100 kB: 392 flows, 120 kB: 470 flows -> 512 rows) and a
# closed-form block
SMALL = {
    "sweep": {"chunk": 64, "closed_form_chunk": 1 << 20},   # one chunk per block ("unchunked")
    "axes": {"model": ["closed_form", "path"], "gpus": [2], "size": ["100kB", "120kB"],
             "policy": ["UA"], "switch_latency_ns": [300.0, 500.0, 700.0]},
}


def _grid(d=SMALL, **sweep):
    d = {"sweep": {**d.get("sweep", {}), **sweep}, "axes": d["axes"]}
    return grid_from_dict(d, parse_size=parse_size)


def _cols(path):
    return to_columns(*read_rows(path))


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "full.csv"
    s = execute(_grid(), out, progress=False)
    assert s["complete"] and s["written"] == 12
    return _cols(out)


def _write_toml(path, d):
    lines = []
    for table, kv in d.items():
        lines.append(f"[{table}]")
        for k, v in kv.items():
            lines.append(f"{k} = {json.dumps(v)}")
    path.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------
def test_rows_match_single_calls(full):
    """Rows equal independent unbatched calls (contention.evaluate / the closed form), and the
    switch latency adds to every flow's zero-load latency: +200 ns on it is +200 ns on the estimate."""
    from nuna_jax.models.collectives import collective_time_ns
    from nuna_jax.models.contention import evaluate
    from nuna_jax.scenario import make_scenario
    assert list(full["index"]) == list(range(12))
    for k in (0, 10):   # closed form 100 kB / 300 ns; path 120 kB / 500 ns
        sw, n = float(full["switch_latency_ns"][k]), int(full["size"][k])
        s = preset("table2", n_gpus=2, switch_latency_ns=sw)
        if full["model"][k] == "path":   # the sweep's default threadblocks: "best", as the CLI's
            sc = make_scenario(s, collective="allgather", size_bytes=n, policy="UA", tbs_per_gpu="best")
            want = evaluate(s, sc.traffic)["time_ns"]
            assert full["n_flows"][k] == sc.traffic.n_flows
            assert full["tbs_used"][k] == int(sc.plan.tbs_per_gpu.max())
        else:   # jitted: the eager op-by-op call takes ~15 s on a 2-core CPU
            want = float(jax.jit(lambda s_: collective_time_ns(s_, "allgather", n))(s))
        assert full["time_ns"][k] == pytest.approx(want, rel=1e-6)
    path = full["time_ns"][full["model"] == "path"].reshape(2, 3)
    np.testing.assert_allclose(np.diff(path, axis=1), 200.0, rtol=1e-4)


def test_best_threadblocks_is_the_fastest_fixed_count_per_hardware_variant(tmp_path):
    """``tbs_per_gpu = "best"`` (the default) is, for every hardware variant, the fastest of the
    fixed candidate counts 1, 4, 16 x (n - 1) evaluated as their own rows (ties: fewer)."""
    d = {"sweep": {"chunk": 64}, "axes": {"model": ["path"], "gpus": [2], "size": ["100kB", "1MB"],
                                           "policy": ["UA", "NAP+NAR"], "tbs": [1, 4, 16, "best"],
                                           "link_bw_bytes_per_ns": [100.0, 833.0, 5000.0]}}
    out = tmp_path / "best.csv"
    execute(grid_from_dict(d, parse_size=parse_size), out, progress=False)
    c = _cols(out)
    fixed, best = c["tbs_per_gpu"] != "best", c["tbs_per_gpu"] == "best"
    assert best.sum() == 12 and fixed.sum() == 36
    key = lambda k: (c["size"][k], c["policy"][k], float(c["link_bw_bytes_per_ns"][k]))  # noqa: E731
    by = {}
    for k in np.flatnonzero(fixed):
        by.setdefault(key(k), []).append((float(c["time_ns"][k]), int(c["tbs_per_gpu"][k])))
        assert int(c["tbs_used"][k]) == int(c["tbs_per_gpu"][k])
    for k in np.flatnonzero(best):
        t, tbs = min(by[key(k)])
        assert float(c["time_ns"][k]) == pytest.approx(t, rel=1e-6)
        assert int(c["tbs_used"][k]) == tbs
    cf = execute(grid_from_dict({"axes": {"model": ["closed_form"], "gpus": [2], "size": [1000]}}),
                   tmp_path / "cf.csv", progress=False)
    assert cf["complete"] and list(_cols(tmp_path / "cf.csv")["tbs_used"]) == [-1]


def test_closed_form_hand_invariants(full):
    """Direct All-Gather: one alpha, so +200 ns of switch latency is +200 ns; the byte term is
    f * n / (n_io_ports * port_bw) = (1/2) * 20 kB / 7200 B/ns more for 120 kB than 100 kB."""
    cf = full["model"] == "closed_form"
    t = full["time_ns"][cf].reshape(2, 3)           # size x switch latency
    np.testing.assert_allclose(np.diff(t, axis=1), 200.0, rtol=1e-5)
    np.testing.assert_allclose(t[1] - t[0], 0.5 * 20e3 / 7200.0, rtol=1e-3)


def test_chunked_equals_unchunked(tmp_path, full):
    """One point per chunk (path model and closed form) gives the rows of one chunk per block."""
    out1 = tmp_path / "one.csv"
    s = execute(_grid(chunk=1, closed_form_chunk=1), out1, progress=False, max_rows=1)
    assert s["chunks"] > 6
    np.testing.assert_array_equal(_cols(out1)["time_ns"], full["time_ns"])
    np.testing.assert_array_equal(_cols(out1)["lower_bound_ns"], full["lower_bound_ns"])


def test_resume_no_duplicate_no_loss(tmp_path, full):
    out = tmp_path / "r.csv"
    s1 = execute(_grid(), out, progress=False, max_chunks=1)       # interrupted after 1 chunk
    assert s1["interrupted"] and 0 < s1["written"] < 12
    with out.open("a") as fh:                                          # a row cut mid-write
        fh.write("11,path,120000,2,UA,70")
    s2 = execute(_grid(), out, progress=False)
    assert s2["already_done"] == s1["written"] and s2["written"] == 12 - s1["written"]
    header, rows = read_rows(out)
    idx = [int(r[0]) for r in rows]
    assert sorted(idx) == list(range(12))                              # no duplicate, no loss
    assert out.read_text().count("\n") == 12 + 3               # magic + provenance + header + 12 rows
    np.testing.assert_array_equal(_cols(out)["time_ns"], full["time_ns"])
    assert execute(_grid(), out, progress=False)["written"] == 0     # nothing left to do


def test_resume_refuses_other_grid(tmp_path):
    out = tmp_path / "x.csv"
    execute(_grid(), out, progress=False, max_chunks=1)
    other = _grid({"axes": {**SMALL["axes"], "switch_latency_ns": [300.0]}})
    with pytest.raises(ValueError, match="different grid"):
        execute(other, out, progress=False)


def test_npz_output(tmp_path, full):
    from nuna_jax.provenance import provenance
    out = tmp_path / "r.npz"
    execute(_grid(), out, progress=False)
    z = np.load(out)
    np.testing.assert_array_equal(z["time_ns"], full["time_ns"])
    assert list(z["policy"]) == ["UA"] * 12
    p = provenance()
    assert str(z["nuna_jax_version"]) == p["nuna_jax_version"] and str(z["git_commit"]) == (p["git_commit"] or "")


def test_csv_carries_provenance_and_a_resume_by_other_code_says_so(tmp_path, full):
    """Issue 20 item 6: line 2 names the version and commit; a resume by other code adds a line."""
    from nuna_jax.provenance import provenance
    out = tmp_path / "p.csv"
    execute(_grid(), out, progress=False, max_chunks=1)
    lines = out.read_text().split("\n")
    assert lines[0].startswith("# nuna-jax sweep grid=") and lines[1] == "# " + provenance_line()
    assert read_provenance(out) == [provenance()]
    # the same rows, as if an older checkout had written them: the resume appends its own line
    old = out.read_text().replace(lines[1], "# nuna_jax_version=0.0.9 git_commit=unknown")
    out.write_text(old)
    execute(_grid(), out, progress=False)
    assert read_provenance(out) == [{"nuna_jax_version": "0.0.9", "git_commit": None}, provenance()]
    assert "# resumed: " + provenance_line() in out.read_text().split("\n")
    np.testing.assert_array_equal(_cols(out)["time_ns"], full["time_ns"])     # reading still works
    execute(_grid(), out, progress=False)                                    # same code again: no new line
    assert len(read_provenance(out)) == 2


@pytest.mark.parametrize("axes, match", [
    ({"size": [1000], "hop_latency": [1.0]}, "unknown axis 'hop_latency'"),
    ({"size": [1000], "policy": []}, "axis 'policy' has no values"),
    ({"size": [1000], "n_io_ports": [72.5]}, "axis 'n_io_ports': must be an integer"),
    ({"size": [1000], "switch_latency_ns": ["fast"]}, "axis 'switch_latency_ns': must be a finite number"),
    ({"size": [1000], "n_io_ports": [10]}, "impossible system .*n_io_ports=10"),
    ({"size": [1000], "switch_latency_ns": [-5.0]}, "switch_latency_ns': -5.0 is out of range"),
    ({"size": ["1 parsec"]}, "bad size"),
    ({"size": [1000], "policy": ["NAP++"]}, "unknown policy"),
    ({"gpus": [2]}, "needs a 'size' axis"),
])
def test_bad_grid_exits_2_before_work(tmp_path, capsys, axes, match):
    g = tmp_path / "bad.toml"
    _write_toml(g, {"axes": axes})
    out = tmp_path / "o.csv"
    assert main(["sweep", str(g), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nuna-jax sweep: error:")
    import re
    assert re.search(match, err[0]), err[0]
    assert not out.exists()


def test_cli_sweep_and_examples_parse(tmp_path, capsys):
    from nuna_jax.sweep import load_grid
    for f in sorted((ROOT / "examples" / "grids").glob("*.toml")):
        g = load_grid(f, parse_size=parse_size)
        assert g.n_points > 0, f
    fig9 = load_grid(ROOT / "examples" / "grids" / "fig9.toml", parse_size=parse_size)
    assert fig9.values("n_gpus") == (2, 8, 64) and len(fig9.values("policy")) == 4
    g = tmp_path / "g.toml"
    _write_toml(g, {"axes": {"model": ["closed_form"], "gpus": [2, 8], "size": ["1MB"]}})
    out = tmp_path / "o.csv"
    assert main(["sweep", str(g), "--out", str(out), "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["written"] == 2 and summary["complete"]


def _run_sub(code, env_extra, timeout=300):
    env = {**os.environ, **env_extra, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_four_emulated_devices_give_identical_rows(tmp_path, full):
    out = tmp_path / "four.csv"
    code = ("import jax, json, sys; sys.path.insert(0, 'tests'); "
            "from test_sweep import _grid; from nuna_jax.sweep.run import execute; "
            f"s = execute(_grid(), {str(out)!r}, progress=False); "
            "print(json.dumps([len(jax.devices()), len(s['devices'])]))")
    n = json.loads(_run_sub(code, {"XLA_FLAGS": "--xla_force_host_platform_device_count=4",
                                   "JAX_PLATFORMS": "cpu"}).strip().splitlines()[-1])
    assert n == [4, 4]
    four = _cols(out)
    np.testing.assert_array_equal(four["index"], full["index"])
    np.testing.assert_array_equal(four["time_ns"], full["time_ns"])
    np.testing.assert_array_equal(four["lower_bound_ns"], full["lower_bound_ns"])


@pytest.mark.slow
def test_sim_rows_equal_the_simulator(tmp_path):
    """``model = "sim"`` rows are sim.simulate's completion time of the same traffic."""
    from nuna_jax.scenario import make_scenario
    from nuna_jax.sim import simulate
    g = _grid({"axes": {"model": ["sim"], "gpus": [2], "size": ["100kB"], "policy": ["UA", "NAP+NAR"]}})
    out = tmp_path / "sim.csv"
    execute(g, out, progress=False)
    c = _cols(out)
    for k, pol in enumerate(("UA", "NAP+NAR")):
        s = preset("table2", n_gpus=2)
        sc = make_scenario(s, collective="allgather", size_bytes=10**5, policy=pol, tbs_per_gpu="best")
        want = simulate(s, sc.traffic)      # the sweep's default threadblocks: "best", as make_scenario's
        assert c["time_ns"][k] == want.completion_ns
        assert c["tbs_used"][k] == int(sc.plan.tbs_per_gpu.max())


@pytest.mark.parametrize("vectorized", [False, True])
def test_hardware_sweep_rows_are_the_single_system_calls_bit_for_bit(vectorized, monkeypatch):
    """A hardware sweep (one traffic, continuous axes only) gives each variant's own
    ``estimate_ns`` / ``lower_bound_ns`` float32 exactly: on a CPU's ``lax.map`` and, forced, on the
    accelerators' ``vmap`` over the hoisted segment structure (``contention.sweep_plans``)."""
    from nuna_jax.models import contention as K
    from nuna_jax.scenario import make_scenario
    from nuna_jax.sweep import path_eval, run_sweep
    monkeypatch.setattr(path_eval, "vectorize", lambda mesh: vectorized)
    path_eval.path_batch_fn.cache_clear()
    d = {"sweep": {"chunk": 4}, "axes": {"model": ["path"], "gpus": [2], "size": ["100kB"], "policy": ["UA"],
                                          "tbs": [4], "hop_cycles": [0.6, 2.0, 7.5],
                                          "link_bw_bytes_per_ns": [150.0, 2200.0]}}
    try:
        df = run_sweep(grid_from_dict(d, parse_size=parse_size), progress=False)
    finally:
        path_eval.path_batch_fn.cache_clear()
    assert len(df) == 6 and (df["n_flows"] > 0).all()
    base = preset("table2", n_gpus=2)
    t = make_scenario(base, collective="allgather", size_bytes=100_000, policy="UA", tbs_per_gpu=4).traffic
    for _, r in df.iterrows():
        s = base.replace(hop_cycles=r["hop_cycles"], link_bw_bytes_per_ns=r["link_bw_bytes_per_ns"])
        assert np.float32(r["time_ns"]) == np.asarray(K.estimate_ns(s, t))
        assert np.float32(r["lower_bound_ns"]) == np.asarray(K.lower_bound_ns(s, t))
