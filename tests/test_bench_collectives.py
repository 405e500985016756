"""benchmarks/bench_collectives.py: each collective's result on emulated CPU devices (against numpy),
the nccl-tests bandwidth arithmetic against hand calculations, and a tiny end-to-end run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_collectives as B  # noqa: E402


def test_bus_factors_are_nccl_tests():
    # NVIDIA/nccl-tests doc/PERFORMANCE.md, "Summary": AR 2(n-1)/n; RS, AG, A2A (n-1)/n
    assert B.bus_factor("all_reduce", 8) == 2 * 7 / 8
    assert B.bus_factor("all_gather", 8) == 7 / 8
    assert B.bus_factor("reduce_scatter", 4) == 3 / 4
    assert B.bus_factor("all_to_all", 2) == 1 / 2
    assert B.bus_factor("all_reduce", 1) == 0.0
    with pytest.raises(ValueError):
        B.bus_factor("broadcast", 2)


def test_bandwidths_by_hand():
    # 1 GiB All-Reduce on 8 ranks in 10 ms: algbw = 2^30 / 0.01 / 1e9 = 107.3741824 GB/s,
    # busbw = 107.3741824 * 1.75 = 187.9048192 GB/s
    assert B.algbw_GBps(2**30, 0.01) == pytest.approx(107.3741824, rel=1e-12)
    assert B.busbw_GBps("all_reduce", 8, 2**30, 0.01) == pytest.approx(187.9048192, rel=1e-12)
    # 1 MB All-Gather on 2 ranks in 20 us: algbw 50 GB/s, busbw 25 GB/s
    assert B.busbw_GBps("all_gather", 2, 10**6, 20e-6) == pytest.approx(25.0, rel=1e-12)


def test_buffer_sizes_follow_nccl_tests():
    # All-Gather: S is the gathered output; each device sends S/p
    assert B.buffer_elems("all_gather", 4, 4096, 4) == {"count": 1024, "in": 256, "out": 1024, "size_bytes": 4096}
    assert B.buffer_elems("reduce_scatter", 4, 4096, 4)["in"] == 1024
    assert B.buffer_elems("reduce_scatter", 4, 4096, 4)["out"] == 256
    # counts rounded down to a multiple of p: 1000 B of float32 on 3 devices -> 250 -> 249 elements
    b = B.buffer_elems("all_to_all", 3, 1000, 4)
    assert b["count"] == 249 and b["size_bytes"] == 996
    with pytest.raises(ValueError):
        B.buffer_elems("all_reduce", 8, 16, 4)       # 4 elements for 8 devices
    assert B.sizes_from(1024, 8192, 2) == [1024, 2048, 4096, 8192]
    assert B.sizes_from(2**10, 2**30, 2)[-1] == 2**30 and len(B.sizes_from(2**10, 2**30, 2)) == 21


def test_loop_check_flags_a_hoisted_collective():
    assert B._loop_ok({"while_loops": 1, "all-gather": 2}, 20, False)
    assert not B._loop_ok({"while_loops": 0, "all-gather": 1}, 20, False)    # hoisted / folded away
    assert not B._loop_ok({"while_loops": 1}, 20, False)                      # no collective left
    assert B._loop_ok({"while_loops": 0, "all-reduce": 20}, 20, True)
    assert not B._loop_ok({"while_loops": 0, "all-reduce": 1}, 20, True)      # CSE merged the unrolled copies
    assert B._loop_structure("%x = f32[8] all-gather-start(%y)\n%w = (f32[8]) while(%t)") == \
        {"while_loops": 1, "all-gather": 1}
    with pytest.raises(ValueError, match="chain='update'"):
        B.loop_fn("all_gather", None, 4, chain="barrier", unroll=True)


_CHECK = r"""
import json, sys
import numpy as np, jax
from jax.sharding import Mesh
sys.path.insert(0, 'benchmarks')
import bench_collectives as B
out = {}
for k in (2, 4):
    mesh = Mesh(np.asarray(jax.devices()[:k]), ('d',))
    for c in B.COLLECTIVES:
        b = B.buffer_elems(c, k, 4 * 8 * k, 4)        # 8k float32 elements of S
        x = np.random.default_rng(k).integers(-50, 50, k * b['in']).astype(np.float32)
        xs = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec('d')))
        one = np.asarray(B.collective_fn(c, mesh)(xs))
        loop = np.asarray(B.loop_fn(c, mesh, 3)(xs))
        upd = np.asarray(B.loop_fn(c, mesh, 3, chain='update')(xs))
        unr = np.asarray(B.loop_fn(c, mesh, 3, chain='update', unroll=True)(xs))
        rows = [B.time_collective(c, mesh, 4 * 8 * k, iters=4, reps=1, chain=ch, unroll=u)
                for ch, u in (('barrier', False), ('update', False), ('update', True))] if k == 2 else []
        gen = np.asarray(B.make_input(c, mesh, b['in']))
        out[f'{c}/{k}'] = {'x': x.tolist(), 'one': one.tolist(), 'loop': loop.tolist(), 'update': upd.tolist(),
                           'unrolled': unr.tolist(), 'in': b['in'], 'out': b['out'], 'gen': gen.tolist(),
                           'hlo': [r['hlo'] for r in rows], 'loop_ok': [r['loop_ok'] for r in rows]}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def results():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    r = subprocess.run([sys.executable, "-c", _CHECK], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _expected(c: str, x: np.ndarray, k: int) -> np.ndarray:
    """What device i must hold, stacked over i (numpy, from the collective's definition)."""
    blocks = x.reshape(k, -1)                           # device i's input block
    if c == "all_gather":
        return np.stack([x for _ in range(k)])          # every device: every block, in rank order
    if c == "reduce_scatter":
        total = blocks.sum(0)                           # the elementwise sum of the k vectors
        return total.reshape(k, -1)                     # device i: its 1/k slice
    if c == "all_reduce":
        return np.stack([blocks.sum(0) for _ in range(k)])
    if c == "all_to_all":
        m = blocks.shape[1] // k
        # device j receives chunk j of every device i, placed at position i
        return np.stack([np.concatenate([blocks[i, j * m:(j + 1) * m] for i in range(k)]) for j in range(k)])
    raise AssertionError(c)


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("c", B.COLLECTIVES)
def test_collective_result_on_emulated_devices(results, c, k):
    r = results[f"{c}/{k}"]
    x = np.asarray(r["x"], np.float32)
    want = _expected(c, x, k)
    assert want.shape == (k, r["out"])
    np.testing.assert_array_equal(np.asarray(r["one"]).reshape(k, -1), want)
    # the timed program (3 collectives in a loop) ends with the same result
    np.testing.assert_array_equal(np.asarray(r["loop"]).reshape(k, -1), want)
    # chain "update": before each next collective, element 0 of each device's input := element 0 of its output
    xb = x.reshape(k, -1).copy()
    y = _expected(c, xb.ravel(), k)
    for _ in range(2):
        xb[:, 0] = y[:, 0]
        y = _expected(c, xb.ravel(), k)
    np.testing.assert_array_equal(np.asarray(r["update"]).reshape(k, -1), y)
    np.testing.assert_array_equal(np.asarray(r["unrolled"]).reshape(k, -1), y)
    # the compiled programs hold the collectives: looped (1 before + 1 in the body), unrolled (4 in a row)
    if k == 2:
        ops = [sum(v for key, v in h.items() if key != "while_loops") for h in r["hlo"]]
        assert [h["while_loops"] for h in r["hlo"]] == [1, 1, 0] and ops == [2, 2, 4]
        assert r["loop_ok"] == [True, True, True]
    # the on-device input: device i's element j is (j + 7 i) mod 251
    want_gen = (np.arange(r["in"])[None, :] + 7 * np.arange(k)[:, None]) % 251
    np.testing.assert_array_equal(np.asarray(r["gen"]).reshape(k, -1), want_gen)


@pytest.mark.slow
def test_end_to_end_tiny_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)
    r = subprocess.run([sys.executable, "benchmarks/bench_collectives.py", "--emulate", "2", "--min-bytes", "1KiB",
                        "--max-bytes", "2KiB", "--iters", "3", "--reps", "2", "--out", str(tmp_path), "--tag", "t"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (f,) = tmp_path.glob("collectives_t_*.json")
    d = json.loads(f.read_text())
    assert d["info"]["emulated"] and d["info"]["n_devices_seen"] == 2 and d["info"]["jax"]
    assert {(x["collective"], x["size_bytes"]) for x in d["results"]} == {(c, s) for c in B.COLLECTIVES
                                                                          for s in (1024, 2048)}
    for x in d["results"]:
        assert len(x["time_us_all"]) == 2 and x["time_us"] == pytest.approx(np.median(x["time_us_all"]))
        assert x["algbw_GBps"] == pytest.approx(x["size_bytes"] / (x["time_us"] * 1e-6) / 1e9)
        assert x["busbw_GBps"] == pytest.approx(x["algbw_GBps"] * (2 * 0.5 if x["collective"] == "all_reduce" else 0.5))
        assert x["hlo"]["while_loops"] == 1     # the timed collectives run in one loop (iters >= 3)


def test_bad_input_exits_2(tmp_path):
    for bad in (["--min-bytes", "2KiB", "--max-bytes", "1KiB"], ["--factor", "1"], ["--collectives", "bcast"],
                ["--min-bytes", "lots"], ["--unroll"]):
        r = subprocess.run([sys.executable, "benchmarks/bench_collectives.py", *bad, "--out", str(tmp_path)],
                           cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 2 and "bench_collectives:" in r.stderr, (bad, r.stderr[-500:])
