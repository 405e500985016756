"""On a host with two or more GPUs (skipped elsewhere, CI included): the collectives benchmark's
results on real devices (NCCL) against numpy, and the scaling benchmark's rows on 2 GPUs and on
2 jax.distributed processes equal to one GPU's.  docs/multi_gpu.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _gpus() -> int:
    """GPUs listed by nvidia-smi (no JAX import: a CPU-only run does not start a backend here)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for ln in r.stdout.splitlines() if ln.startswith("GPU ")) if r.returncode == 0 else 0


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_gpus() < 2, reason="needs 2 or more GPUs")]

_CHECK = r"""
import json, sys
import numpy as np, jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
sys.path.insert(0, 'benchmarks')
import bench_collectives as B
k = 2
mesh = Mesh(np.asarray(jax.devices()[:k]), ('d',))
out = {'backend': jax.default_backend()}
for c in B.COLLECTIVES:
    b = B.buffer_elems(c, k, 4 * 1024 * k, 4)
    x = np.random.default_rng(0).integers(-50, 50, k * b['in']).astype(np.float32)
    xs = jax.device_put(x, NamedSharding(mesh, P('d')))
    out[c] = {'x': x.tolist(), 'y': np.asarray(B.loop_fn(c, mesh, 3)(xs)).tolist()}
print(json.dumps(out))
"""


def test_collectives_on_two_gpus_against_numpy():
    sys.path.insert(0, str(ROOT / "tests"))
    from test_bench_collectives import _expected
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)
    r = subprocess.run([sys.executable, "-c", _CHECK], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["backend"] == "gpu"
    for c in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all"):
        x = np.asarray(d[c]["x"], np.float32)
        np.testing.assert_array_equal(np.asarray(d[c]["y"]).reshape(2, -1), _expected(c, x, 2), err_msg=c)


def test_scaling_rows_equal_on_two_gpus_and_two_processes(tmp_path):
    from nuna_jax.sweep.writer import read_rows, to_columns
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)
    rows = tmp_path / "rows"
    r = subprocess.run([sys.executable, "benchmarks/bench_scaling.py", "--devices", "2", "--processes", "2", "--quick",
                        "--rows", str(rows), "--out", str(tmp_path), "--tag", "t"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    (f,) = tmp_path.glob("scaling_t_*.json")
    d = json.loads(f.read_text())
    assert d["info"]["backend"] == "gpu" and d["processes_info"]["process_count"] == 2
    for w in ("closed", "path"):
        one = to_columns(*read_rows(rows / f"{w}_k1.csv"))
        for other in (f"{w}_k2.csv", f"{w}_p2.csv"):
            c = to_columns(*read_rows(rows / other))
            for k in one:
                np.testing.assert_array_equal(c[k], one[k], err_msg=f"{other}: {k}")
