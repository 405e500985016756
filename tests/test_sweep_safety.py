"""Crash-safe, exclusive sweep output (docs/sweep.md): a kill at any byte resumes exactly, one writer at
a time, no foreign file written over, recovered rows checked with file and line."""

from __future__ import annotations

import numpy as np
import pytest

from nuna_jax.cli import main
from nuna_jax.cli.common import parse_size
from nuna_jax.sweep import grid_from_dict
from nuna_jax.sweep.run import execute
from nuna_jax.sweep.writer import RowWriter, grid_fingerprint, read_rows, to_columns

# closed form only: fast, and many rows written in several chunks
GRID = {"sweep": {"closed_form_chunk": 4},
        "axes": {"model": ["closed_form"], "gpus": [2, 8], "size": ["100kB", "1MB", "10MB"],
                 "switch_latency_ns": [300.0, 500.0, 700.0]}}


def _grid():
    return grid_from_dict(GRID, parse_size=parse_size)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "ref.csv"
    s = execute(_grid(), out, progress=False)
    assert s["complete"] and s["written"] == 18 and s["chunks"] > 2
    return out.read_bytes(), to_columns(*read_rows(out))


def test_a_kill_at_any_byte_resumes_to_the_uninterrupted_rows(tmp_path, reference):
    """Append-only writes: a SIGKILL at byte k leaves exactly the first k bytes.  Every such prefix
    (random offsets, and each line boundary +- 1) resumes to the same rows, none twice."""
    data, cols = reference
    rng = np.random.default_rng(0)
    nl = [i for i, b in enumerate(data) if b == 10]
    offsets = sorted(set(rng.integers(1, len(data), 12).tolist() + [k + d for k in nl[:4] for d in (0, 1, 2)]))
    for k in offsets:
        out = tmp_path / f"cut{k}.csv"
        out.write_bytes(data[:k])
        execute(_grid(), out, progress=False)
        header, rows = read_rows(out)
        idx = [int(r[0]) for r in rows]
        assert sorted(idx) == list(range(18)), k            # no loss, no duplicate
        got = to_columns(header, rows)
        np.testing.assert_array_equal(got["time_ns"], cols["time_ns"])
        assert not (tmp_path / f"cut{k}.csv.lock").exists()


def test_second_writer_is_refused_at_once(tmp_path):
    out = tmp_path / "busy.csv"
    g = _grid()
    holder = RowWriter(out, ["index", *g.names, "time_ns", "lower_bound_ns", "n_flows"], grid_fingerprint(g),
                       g.n_points)
    try:
        with pytest.raises(ValueError, match="another nuna-jax sweep is writing"):
            execute(g, out, progress=False)
    finally:
        holder.close()
    assert execute(g, out, progress=False)["written"] == 18     # free again


@pytest.mark.parametrize("line, match", [
    ("99,closed_form,2,100000,300.0,1.0,,-1,-1", "outside this grid"),
    ("0,closed_form,2,100000,300.0,1.0,,-1,-1", "appears twice"),
    ("x,closed_form,2,100000,300.0,1.0,,-1,-1", "not an integer"),
    ("1,closed_form,2,100000", "fields where the header has"),
    ("1,closed_form,2,100000,300.0,fast,,-1,-1", "not a number"),
])
def test_recovered_rows_are_checked_with_file_and_line(tmp_path, reference, line, match):
    data, _ = reference
    lines = data.decode().split("\n")
    out = tmp_path / "bad.csv"
    out.write_text("\n".join(lines[:4] + [line]) + "\n")          # magic, provenance, header, row 0, bad
    with pytest.raises(ValueError, match=match) as e:
        execute(_grid(), out, progress=False)
    assert f"{out}:5" in str(e.value)
    assert not (tmp_path / "bad.csv.lock").exists()


def test_foreign_files_are_never_written_over(tmp_path, capsys):
    csv = tmp_path / "notes.csv"
    csv.write_text("my,own,data\n1,2,3\n")
    with pytest.raises(ValueError, match="not a nuna-jax sweep output"):
        execute(_grid(), csv, progress=False)
    assert csv.read_text() == "my,own,data\n1,2,3\n"
    npz = tmp_path / "mine.npz"
    np.savez(npz, a=np.arange(3))
    with pytest.raises(ValueError, match="not a nuna-jax sweep output"):
        execute(_grid(), npz, progress=False)
    assert list(np.load(npz)["a"]) == [0, 1, 2]
    # the CLI: exit 2 with one line; --force starts afresh; --out onto the grid file is refused
    grid = tmp_path / "g.toml"
    grid.write_text('[sweep]\nclosed_form_chunk = 4\n[axes]\nmodel = ["closed_form"]\ngpus = [2]\n'
                    'size = ["100kB"]\n')
    assert main(["sweep", str(grid), "--out", str(csv), "--no-progress"]) == 2
    assert "not a nuna-jax sweep output" in capsys.readouterr().err
    assert main(["sweep", str(grid), "--out", str(csv), "--no-progress", "--force"]) == 0
    assert len(read_rows(csv)[1]) == 1
    g_npz = tmp_path / "g.npz"                      # a grid named like an output
    g_npz.write_text(grid.read_text())
    assert main(["sweep", str(g_npz), "--out", str(g_npz), "--no-progress"]) == 2
    assert "is the grid file itself" in capsys.readouterr().err
    assert g_npz.read_text().startswith("[sweep]")


def test_finished_npz_leaves_no_stream_and_reruns_to_nothing(tmp_path, reference):
    _, cols = reference
    out = tmp_path / "r.npz"
    execute(_grid(), out, progress=False)
    assert not (tmp_path / "r.npz.rows.csv").exists() and not (tmp_path / "r.npz.rows.csv.lock").exists()
    before = out.read_bytes()
    s = execute(_grid(), out, progress=False)
    assert s["written"] == 0 and s["complete"]
    assert out.read_bytes() == before
    np.testing.assert_array_equal(np.load(out)["time_ns"], cols["time_ns"])
    other = grid_from_dict({**GRID, "axes": {**GRID["axes"], "gpus": [2]}}, parse_size=parse_size)
    with pytest.raises(ValueError, match="different grid"):
        execute(other, out, progress=False)


# ---------------------------------------------------------------------------------------------
# work limits and hostile grids: exit 2, one line, before any work
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, match", [
    ('[axes]\nsize = {start = 1, stop = 2, num = 100000000}\n', "axis values"),
    ('[axes]\nmodel = ["closed_form"]\nsize = {start = 1, stop = 1e9, num = 1000000, integer = true}\n'
     'switch_latency_ns = {start = 1, stop = 2, num = 1000}\n', "grid points"),
    ('[axes]\nsize = [1e300]\n', "out of range"),
    ('[axes]\nsize = ["1MB"]\ngpus = [1000000000]\n', "out of range"),
    ('[axes]\nsize = ["1MB"]\nnoc_clock_ghz = [1e-9]\n', "out of range"),
    ('[axes]\nsize = ["1MB"]\ngpus = [100000]\n', "gpus"),
    ('[axes]\nsize = ["1MB"]\ntbs = [1000000]\n', "threadblocks"),
    ('[axes]\nmodel = ["sim"]\nsize = ["1GB"]\ngpus = [64]\n', "flits"),
    ('sweep = 5\n[axes]\nsize = [1]\n', "must be a table"),
    ('[axes]\nsize = ' + '[' * 5000 + ']' * 5000 + '\n', "nested too deeply"),
])
def test_hostile_grids_exit_2_with_one_line(tmp_path, capsys, text, match):
    g = tmp_path / "g.toml"
    g.write_text(text)
    out = tmp_path / "o.csv"
    assert main(["sweep", str(g), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists() or read_rows(out)[1] == []


def test_max_work_raises_the_sweep_limits(tmp_path, capsys):
    g = tmp_path / "g.toml"
    g.write_text('[axes]\nmodel = ["closed_form"]\nsize = {start = 1000, stop = 1e6, num = 2000, integer = true}\n')
    assert main(["sweep", str(g), "--out", str(tmp_path / "a.csv"), "--no-progress", "--max-work", "0.001"]) == 2
    assert "axis values" in capsys.readouterr().err
    assert main(["sweep", str(g), "--out", str(tmp_path / "b.csv"), "--no-progress"]) == 0


def test_read_response_links_is_a_sweep_axis_and_part_of_the_traffic_key(tmp_path):
    """A boolean static switch sweeps like any static field; its two values never share cached traffic,
    and each row equals a direct estimate of that system."""
    from nuna_jax.models.contention import evaluate
    from nuna_jax.presets import preset
    from nuna_jax.scenario import make_scenario
    g = grid_from_dict({"axes": {"model": ["path"], "gpus": [2], "size": ["1MB"], "policy": ["NAP+NAR"],
                                 "tbs": [4], "read_response_links": [True, False]}}, parse_size=parse_size)
    out = tmp_path / "r.csv"
    s = execute(g, out, progress=False)
    assert s["distinct_traffic"] == 2
    cols = to_columns(*read_rows(out))
    for k, flag in enumerate((True, False)):
        sy = preset("table2", n_gpus=2).replace(read_response_links=flag)
        sc = make_scenario(sy, collective="allgather", size_bytes=10**6, policy="NAP+NAR", tbs_per_gpu=4)
        assert cols["time_ns"][k] == pytest.approx(evaluate(sy, sc.traffic)["time_ns"], rel=1e-6)
