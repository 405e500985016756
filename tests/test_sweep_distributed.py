"""Two jax.distributed CPU processes on localhost give the same rows as one process."""

from __future__ import annotations

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


@pytest.mark.slow
def test_two_processes_same_rows_as_one(tmp_path):
    g = tmp_path / "g.toml"
    g.write_text(GRID)
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
                               "--num-processes", "2", "--process-id", str(k)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e[-2000:]
    assert '"processes": 2' in outs[0][0]
    a, b = to_columns(*read_rows(one)), to_columns(*read_rows(two))
    assert list(b["index"]) == list(range(12))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
