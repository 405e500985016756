"""Two jax.distributed CPU processes on localhost give the same rows as one process: the path model
and closed form sharded over both, and simulator points dealt out (each process simulates its
share, process 0 gathers and writes)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nuna_jax.sweep.writer import read_rows, to_columns

ROOT = Path(__file__).resolve().parents[1]

GRID = """
[sweep]
chunk = 2
closed_form_chunk = 8
[axes]
model = ["closed_form", "path"]
gpus = [2]
size = ["100kB", "120kB"]
policy = ["UA"]
switch_latency_ns = [300.0, 500.0, 700.0]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


# simulator points only: 2-GPU direct All-Gathers, cheap to simulate; 6 points over 2 processes in
# rounds of 2 processes x 1 job x 2 = 4 points (a round of 4, then one of 2)
SIM_GRID = """
[axes]
model = ["sim"]
gpus = [2]
size = ["100kB", "120kB"]
policy = ["UA"]
tbs = [4]
switch_latency_ns = [300.0, 500.0, 700.0]
"""


def _one_and_two(tmp_path, grid_text, n_points, extra=()):
    g = tmp_path / "g.toml"
    g.write_text(grid_text)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    one = tmp_path / "one.csv"
    r = subprocess.run([sys.executable, "-m", "nuna_jax", "sweep", str(g), "--out", str(one), "--no-progress"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    two = tmp_path / "two.csv"
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "nuna_jax", "sweep", str(g), "--out", str(two),
                               "--no-progress", "--json", "--coordinator", f"localhost:{port}",
                               "--num-processes", "2", "--process-id", str(k), *extra],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e[-2000:]
    assert '"processes": 2' in outs[0][0]
    a, b = to_columns(*read_rows(one)), to_columns(*read_rows(two))
    assert list(b["index"]) == list(range(n_points))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert one.read_text() == two.read_text()              # byte for byte, rows in grid order
    # (Gloo writes a "[Gloo] Rank 0 is connected ..." line to stdout before the JSON)
    return a, [json.loads(o[o.index("{"):]) for o, _ in outs]


# a hardware sweep: one traffic, the CPU's per-device lax.map under shard_map (sweep.path_eval)
HW_GRID = """
[sweep]
chunk = 4
[axes]
model = ["path"]
gpus = [2]
size = ["100kB"]
policy = ["UA"]
tbs = [4]
hop_cycles = [0.6, 1.0, 2.0, 7.5]
link_bw_bytes_per_ns = [150.0, 2200.0]
"""


@pytest.mark.slow
@pytest.mark.parametrize("grid,n", [(GRID, 12), (HW_GRID, 8)], ids=["scenarios", "hardware"])
def test_two_processes_same_rows_as_one(tmp_path, grid, n):
    _one_and_two(tmp_path, grid, n)


@pytest.mark.slow
def test_two_processes_share_the_simulator_points(tmp_path):
    """Each process simulates its share (``sim_s`` on both), process 0 writes every row; the rows are
    the one-process rows, bit for bit, and +200 ns of switch latency is +200 ns on each point."""
    cols, summaries = _one_and_two(tmp_path, SIM_GRID, 6)
    assert [s["sim_points"] for s in summaries] == [6, 6]
    assert [s["sim_here"] for s in summaries] == [3, 3]
    t = cols["time_ns"].reshape(2, 3)
    np.testing.assert_allclose(np.diff(t, axis=1), 200.0, rtol=1e-9)
