"""benchmarks/bench_scaling.py: the launcher's arithmetic and checks (cheap), and a smoke run on two
emulated CPU devices and two jax.distributed CPU processes whose rows must equal one device's (slow)."""

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

import bench_scaling as S  # noqa: E402


def _run(args, timeout=1200):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)
    return subprocess.run([sys.executable, "benchmarks/bench_scaling.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_speedups_by_hand():
    def run(cf, cfm, path, pe2e, cfe2e):
        return {"closed_form": {"evals_per_s": cf, "evals_per_s_median": cfm},
                "path": {"evals_per_s": path, "evals_per_s_end_to_end": pe2e},
                "closed_form_sweep": {"evals_per_s_end_to_end": cfe2e}}
    base = run(1e9, 8e8, 100.0, 50.0, 1e4)
    sp = S.speedups({"1": base, "2": run(1.9e9, 1.6e9, 150.0, 60.0, 1e4)}, base)
    assert sp["1"] == {k: 1.0 for k in sp["1"]}
    assert sp["2"]["closed_form"] == pytest.approx(1.9) and sp["2"]["closed_form_median"] == pytest.approx(2.0)
    assert sp["2"]["path"] == pytest.approx(1.5) and sp["2"]["path_end_to_end"] == pytest.approx(1.2)


def test_compare_rows(tmp_path):
    head = "index,time_ns,lower_bound_ns\n"
    (tmp_path / "a.csv").write_text(head + "0,1.5,nan\n1,2.5,nan\n")
    (tmp_path / "b.csv").write_text(head + "0,1.5,nan\n1,2.5,nan\n")
    (tmp_path / "c.csv").write_text(head + "0,1.5,nan\n1,2.50001,nan\n")
    assert S.compare_rows(tmp_path / "a.csv", tmp_path / "b.csv")       # NaN lower bounds compare equal
    assert not S.compare_rows(tmp_path / "a.csv", tmp_path / "c.csv")


@pytest.mark.parametrize("bad", [["--devices", "0"], ["--devices", "2", "--processes", "1"],
                                 ["--devices", "2", "--counts", "2"], ["--devices", "2", "--counts", "1,4"],
                                 ["--devices", "2", "--counts", "x"]])
def test_bad_input_exits_2(bad):
    r = _run(bad, timeout=300)
    assert r.returncode == 2 and "bench_scaling:" in r.stderr, r.stderr[-500:]


def test_more_devices_than_seen_exits_2(tmp_path):
    r = _run(["--devices", "3", "--quick", "--out", str(tmp_path)], timeout=300)   # one CPU device, no --emulate
    assert r.returncode == 2 and "JAX sees 1 device" in r.stderr, r.stderr[-800:]


@pytest.mark.slow
def test_emulated_devices_and_processes_give_the_same_rows(tmp_path):
    from nuna_jax.sweep.writer import read_rows, to_columns
    rows = tmp_path / "rows"
    r = _run(["--devices", "2", "--processes", "2", "--quick", "--emulate", "--rows", str(rows),
              "--out", str(tmp_path), "--tag", "t"])
    assert r.returncode == 0, r.stderr[-3000:]
    (f,) = tmp_path.glob("scaling_t_*.json")
    d = json.loads(f.read_text())
    assert d["emulated"] and set(d["devices"]) == {"1", "2"} and set(d["processes"]) == {"2"}
    assert d["processes_info"]["process_count"] == 2 and d["devices"]["2"]["path"]["processes"] == 1
    assert d["processes"]["2"]["path"]["processes"] == 2 and len(d["processes"]["2"]["path"]["devices"]) == 2
    for k in ("date", "device_kind", "jax", "jaxlib", "driver", "host"):
        assert k in d["info"]
    sp = d["speedup"]["2"]["closed_form"]
    assert sp == pytest.approx(d["devices"]["2"]["closed_form"]["evals_per_s"] / d["devices"]["1"]["closed_form"]["evals_per_s"])
    # the rows themselves, read here (not the script's own verdict): same points, bit-identical times
    for w, n in (("closed", 4 * 16 * 16), ("path", 8)):
        one = to_columns(*read_rows(rows / f"{w}_k1.csv"))
        assert list(one["index"]) == list(range(n))
        assert np.isfinite(one["time_ns"]).all() and (one["time_ns"] > 0).all()
        for other in (f"{w}_k2.csv", f"{w}_p2.csv"):
            c = to_columns(*read_rows(rows / other))
            assert set(c) == set(one)
            for k in one:
                np.testing.assert_array_equal(c[k], one[k], err_msg=f"{other}: {k}")
    assert all(all(v.values()) for v in d["rows_equal"].values())
