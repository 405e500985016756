"""Sweep results as labelled data (docs/sweep.md "Output"): ``run_sweep`` returns a DataFrame in grid
order without touching the disk, ``--out`` writes .csv / .npz / .parquet with the same rows, floats at
the precision they carry, no leftover files, and a resume key that covers the package version, every
system field and the model's code.  Simulator points over worker processes give the same rows."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from nuna_jax.cli import main  # noqa: E402
from nuna_jax.cli.common import parse_size  # noqa: E402
from nuna_jax.sweep import grid_from_dict, run_sweep  # noqa: E402
from nuna_jax.sweep import simpool, writer  # noqa: E402
from nuna_jax.sweep.frame import read_sweep  # noqa: E402
from nuna_jax.sweep.run import execute  # noqa: E402

# every column kind: text (model; tbs mixes an integer and "best"), int (n_gpus, size), bool
# (read_response_links), float axis (switch_latency_ns); closed-form and path-model results (float32)
AXES = {"model": ["closed_form", "path"], "gpus": [2], "size": ["100kB"], "policy": ["UA"],
        "tbs": [4, "best"], "read_response_links": [True, False], "switch_latency_ns": [300.0, 700.0]}
CANON = {"model": ["closed_form", "path"], "n_gpus": [2], "size": [100000], "policy": ["UA"],
         "tbs_per_gpu": ["4", "best"], "read_response_links": [True, False], "switch_latency_ns": [300.0, 700.0]}


def _toml(path: Path, axes: dict) -> Path:
    path.write_text("[axes]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in axes.items()))
    return path


def _plain(df):
    df = df.copy()
    df.attrs = {}
    return df


@pytest.fixture(scope="module")
def memory(tmp_path_factory):
    d = tmp_path_factory.mktemp("mem")
    cwd = os.getcwd()
    os.chdir(d)
    try:
        df = run_sweep(grid_from_dict({"axes": AXES}, parse_size=parse_size), progress=False)
    finally:
        os.chdir(cwd)
    assert list(d.iterdir()) == []                       # nothing touched the disk
    return df


def test_in_memory_rows_are_in_grid_order_with_typed_columns(memory):
    df = memory
    assert df.attrs["summary"]["out"] is None and df.attrs["summary"]["complete"]
    assert list(df.columns) == ["index", *CANON, "time_ns", "lower_bound_ns", "n_flows", "tbs_used"]
    assert df["index"].tolist() == list(range(16))
    for k, point in enumerate(itertools.product(*CANON.values())):     # C order, last axis fastest
        assert tuple(df.loc[k, list(CANON)]) == point, k
    assert str(df["size"].dtype) == "int64" and str(df["switch_latency_ns"].dtype) == "float64"
    assert df["read_response_links"].dtype == bool
    cf = df["model"] == "closed_form"
    assert (df.loc[cf, "n_flows"] == -1).all() and df.loc[cf, "lower_bound_ns"].isna().all()
    assert (df.loc[~cf, "n_flows"] > 0).all() and (df.loc[~cf, "lower_bound_ns"] <= df.loc[~cf, "time_ns"]).all()


def test_float32_results_are_kept_at_their_precision(memory):
    """A closed-form time is the float32 the model computes, written as the shortest decimal that
    identifies that float32 (not its 17-digit float64 widening)."""
    import jax

    from nuna_jax.models.collectives import collective_time_ns
    from nuna_jax.presets import preset
    s = preset("table2", n_gpus=2, switch_latency_ns=300.0)
    want = np.float32(jax.jit(lambda s_: collective_time_ns(s_, "allgather", 100000))(s))
    got = float(memory.loc[0, "time_ns"])
    assert np.float32(got) == want                           # the same float32 ...
    assert repr(got) == str(want)                            # ... at its own precision


def test_csv_parquet_npz_give_the_in_memory_rows(tmp_path, memory, capsys):
    pytest.importorskip("pyarrow")
    grid = _toml(tmp_path / "g.toml", AXES)
    for suffix in (".csv", ".parquet", ".npz"):
        out = tmp_path / f"x{suffix}"
        assert main(["sweep", str(grid), "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
        pd.testing.assert_frame_equal(_plain(read_sweep(out)), _plain(memory))
        assert run_sweep(grid_from_dict({"axes": AXES}, parse_size=parse_size), out,
                         progress=False).attrs["summary"]["written"] == 0          # finished: nothing to do
    # the CSV's rows are in grid order in the file itself, with short floats
    lines = [ln for ln in (tmp_path / "x.csv").read_text().splitlines() if not ln.startswith("#")]
    assert [int(ln.split(",")[0]) for ln in lines[1:]] == list(range(16))
    k = lines[0].split(",").index("time_ns")
    for ln in lines[1:]:
        txt = ln.split(",")[k]
        assert txt == str(np.float32(float(txt))), txt       # no digits beyond the float32
    # no leftover files: no stream, no lock, no temporary file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.toml", "x.csv", "x.npz", "x.parquet"]


# closed form only: cheap, and several chunks
SMALL = {"sweep": {"closed_form_chunk": 2},
         "axes": {"model": ["closed_form"], "gpus": [2, 8], "size": ["100kB", "1MB"],
                  "switch_latency_ns": [300.0, 500.0]}}


@pytest.mark.parametrize("suffix", [".csv", ".npz", ".parquet"])
def test_interrupted_output_resumes_to_the_full_rows(tmp_path, suffix):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    g = grid_from_dict(SMALL, parse_size=parse_size)
    full = run_sweep(g, progress=False)
    out = tmp_path / f"r{suffix}"
    s1 = execute(g, out, progress=False, max_chunks=1)
    assert s1["interrupted"] and 0 < s1["written"] < 8
    part = run_sweep(g, out, progress=False, max_chunks=0)          # what is there so far
    assert len(part) == s1["written"]
    df = run_sweep(g, out, progress=False)
    assert df.attrs["summary"]["already_done"] == s1["written"]
    pd.testing.assert_frame_equal(_plain(df), _plain(full))
    pd.testing.assert_frame_equal(_plain(read_sweep(out)), _plain(full))
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


def test_resume_key_covers_version_system_fields_and_model_code(tmp_path, monkeypatch):
    import nuna_jax
    g = grid_from_dict(SMALL, parse_size=parse_size)
    fp = writer.grid_fingerprint(g)
    # a base-system field that System.summary() leaves out (the old key missed it)
    other = dataclasses.replace(g, base=g.base.replace(port_bw_bytes_per_ns=float(g.base.port_bw_bytes_per_ns) * 2))
    assert writer.grid_fingerprint(other) != fp
    files = writer.model_code_files()
    for f in ("nuna_jax/scenario.py", "nuna_jax/models/collectives.py", "nuna_jax/sim/kernel.py",
              "nuna_jax/placement.py", "nuna_jax/sweep/path_eval.py", "nuna_jax/sweep/frame.py"):
        assert f in files, f
    assert any(f.startswith("nuna_jax/models/contention/") for f in files)
    assert not any(f.startswith(("nuna_jax/cli/", "nuna_jax/plots/")) for f in files)
    # comments and docstrings do not count, code does
    src = "def f(x):\n    return x + 1\n"
    a, b, c = (tmp_path / n for n in ("a.py", "b.py", "c.py"))
    a.write_text(src)
    b.write_text('"""Doc."""\n# a comment\ndef f(x):\n    """More doc."""\n    return x + 1  # same\n')
    c.write_text(src.replace("+ 1", "+ 2"))
    assert writer._code(a) == writer._code(b) != writer._code(c)
    monkeypatch.setattr(writer, "model_code_hash", lambda: "another model")
    assert writer.grid_fingerprint(g) != fp
    monkeypatch.undo()
    out = tmp_path / "v.csv"
    monkeypatch.setattr(nuna_jax, "__version__", "0.0.0-other")
    execute(g, out, progress=False, max_chunks=1)                      # rows of "another version"
    monkeypatch.undo()
    assert writer.grid_fingerprint(g) == fp
    with pytest.raises(ValueError, match="different grid, system, model or nuna_jax version"):
        execute(g, out, progress=False)


def test_bad_out_and_jobs_exit_2(tmp_path, capsys):
    grid = _toml(tmp_path / "g.toml", SMALL["axes"])
    assert main(["sweep", str(grid), "--out", str(tmp_path / "x.json")]) == 2
    assert ".csv, .npz or .parquet" in capsys.readouterr().err
    assert main(["sweep", str(grid), "--out", str(tmp_path / "x.csv"), "--jobs", "0"]) == 2
    assert "--jobs must lie in [1, 1024]" in capsys.readouterr().err
    with pytest.raises(ValueError, match="jobs must be an integer >= 1"):
        run_sweep(grid_from_dict(SMALL, parse_size=parse_size), jobs=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.toml"]


# ---------------------------------------------------------------------------------------------
# simulator points spread over processes
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, procs", [(0, 1), (1, 2), (7, 2), (8, 3), (64, 4)])
def test_process_shares_cover_every_task_once(n, procs):
    got = np.concatenate([simpool.share(n, procs, p) for p in range(procs)])
    assert sorted(got.tolist()) == list(range(n))
    sizes = [len(simpool.share(n, procs, p)) for p in range(procs)]
    assert max(sizes) - min(sizes) <= 1


def test_gathered_results_keep_every_bit():
    """Results cross processes as int32 pairs (the all-gather of a run without x64 would round
    float64 to float32): times come back bit for bit, integers exactly, errors and padding flagged."""
    t = [1600.2970000000001, 1e-300, 123456789.123456789, float(np.nextafter(1.0, 2.0))]
    res = [(k, "ok", (v, 392 + k, 4)) for k, v in enumerate(t)] + [(9, "error", "no")]
    back = simpool._unpack(simpool._pack(res, 6))
    assert back[:4, 0].tolist() == t and back[:4, 1].tolist() == [392, 393, 394, 395]
    assert back[:, 3].tolist() == [0, 0, 0, 0, 1, -1]


SIM = {"axes": {"model": ["sim"], "gpus": [2], "size": ["100kB"], "policy": ["UA"], "tbs": [4],
                "switch_latency_ns": [300.0, 500.0, 700.0, 900.0]}}


@pytest.mark.slow
@pytest.mark.parametrize("main_takes_tasks", [False, True])
def test_sim_points_on_two_jobs_give_the_serial_rows(tmp_path, monkeypatch, main_takes_tasks):
    """``jobs = 2`` (this process and a spawned worker; or the worker alone) gives the rows of
    ``jobs = 1``, which are the simulator's completion times (+200 ns of switch latency: +200 ns on
    every point here, a 2-GPU direct All-Gather whose last flit crosses the switch once)."""
    g = grid_from_dict(SIM, parse_size=parse_size)
    one = run_sweep(g, progress=False, jobs=1)
    np.testing.assert_allclose(np.diff(one["time_ns"]), 200.0, rtol=1e-9)
    monkeypatch.setattr(simpool, "MAIN_TAKES_TASKS", main_takes_tasks)
    two = run_sweep(g, tmp_path / "two.csv", progress=False, jobs=2)
    s = two.attrs["summary"]
    assert s["jobs"] == 2 and s["sim_points"] == 4
    if not main_takes_tasks:
        assert s["sim_on_workers"] == 4
    pd.testing.assert_frame_equal(_plain(two), _plain(one))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["two.csv"]


@pytest.mark.slow
def test_ctrl_c_on_two_jobs_stops_every_process_and_resumes_exactly(tmp_path):
    """^C (SIGINT to the whole process group, as a terminal sends it) during a ``--jobs 2`` simulator
    sweep: exit 130, no process of the group left, the rows written are whole; the rerun adds the
    rest, and the file equals an uninterrupted ``--jobs 1`` run's."""
    import signal
    import subprocess
    import sys
    import time
    root = Path(__file__).resolve().parents[1]
    axes = {"model": ["sim"], "gpus": [8], "size": ["256kB"], "policy": ["UA"], "tbs": [28],
            "switch_latency_ns": [100.0 * k for k in range(1, 13)]}
    grid = _toml(tmp_path / "g.toml", axes)
    env = {**os.environ, "PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu"}
    out = tmp_path / "x.csv"
    cmd = [sys.executable, "-m", "nuna_jax", "sweep", str(grid), "--out", str(out), "--no-progress", "--jobs", "2"]
    p = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    t0 = time.time()
    while time.time() - t0 < 300 and p.poll() is None:
        if out.exists() and out.read_text().count("\n") >= 4:          # magic, provenance, header, a row
            break
        time.sleep(0.05)
    assert p.poll() is None, "the sweep ended before it could be interrupted"
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    # no worker left behind (multiprocessing's resource tracker, which the ^C also reached, may stay a
    # zombie for a moment until init reaps it)
    for _ in range(200):
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    with pytest.raises(ProcessLookupError):
        os.killpg(p.pid, 0)
    from nuna_jax.sweep.writer import read_rows
    n_first = len(read_rows(out)[1])
    assert 1 <= n_first < 12
    r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    ref = tmp_path / "ref.csv"
    r = subprocess.run([*cmd[:5], "--out", str(ref), "--no-progress", "--jobs", "1"], cwd=root, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.read_text() == ref.read_text()
    assert sorted(q.name for q in tmp_path.iterdir()) == ["g.toml", "ref.csv", "x.csv"]


def test_a_foreign_or_other_grid_parquet_is_never_written_over(tmp_path):
    pytest.importorskip("pyarrow")
    g = grid_from_dict(SMALL, parse_size=parse_size)
    mine = tmp_path / "mine.parquet"
    pd.DataFrame({"a": [1, 2, 3]}).to_parquet(mine)
    before = mine.read_bytes()
    with pytest.raises(ValueError, match="not a nuna-jax sweep output"):
        execute(g, mine, progress=False)
    assert mine.read_bytes() == before
    done = tmp_path / "done.parquet"
    execute(g, done, progress=False)
    other = grid_from_dict({**SMALL, "axes": {**SMALL["axes"], "gpus": [2]}}, parse_size=parse_size)
    with pytest.raises(ValueError, match="different grid"):
        execute(other, done, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done.parquet", "mine.parquet"]


def test_early_workers_start_only_for_sim_grids_and_load_no_jax(tmp_path):
    """``nuna-jax sweep --jobs N`` starts its workers before importing jax only for a grid whose model
    axis names the simulator (read with the standard library); ``nuna_jax.workers`` imports no jax;
    a pool no sweep takes is killed by ``close_early`` (its worker process is gone)."""
    import subprocess
    import sys
    from nuna_jax import workers
    from nuna_jax.cli.sweep import _has_sim_points
    cases = {'[axes]\nmodel = ["sim"]\n': True, '[axes]\nmodel = "sim"\n': True,
             '[axes]\nmodel = ["path", "sim"]\n': True, '[axes]\nmodel = ["path"]\n': False,
             '[axes]\ngpus = [8]\n': False, 'not = toml = at all': False}
    for k, (text, want) in enumerate(cases.items()):
        f = tmp_path / f"g{k}.toml"
        f.write_text(text)
        assert _has_sim_points(f) is want, text
    assert _has_sim_points(tmp_path / "missing.toml") is False
    r = subprocess.run([sys.executable, "-c", "import sys, nuna_jax.workers, nuna_jax.cli.sweep; "
                        "print(sorted(m for m in ('jax', 'numba') if m in sys.modules))"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
    workers.start_early(1)                    # one job: no pool
    assert workers.take_early(1) is None
    workers.start_early(2)
    ex = workers._EARLY[2][0]
    procs = list(ex._processes.values())
    assert len(procs) == 1
    workers.close_early()
    procs[0].join(30)                         # killed: reaped within seconds even on a loaded CPU
    assert workers.take_early(2) is None and not procs[0].is_alive()
