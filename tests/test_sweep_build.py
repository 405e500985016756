"""nuna_jax.sweep: how path points are built and grouped -- the shape buckets merged into few
compiled programs (``run._merge_shapes``) and the traffics built on worker processes
(``sweep.trafficpool``) -- change no row."""

from __future__ import annotations

import numpy as np
import pytest

from nuna_jax.cli.common import parse_size
from nuna_jax.sweep import grid_from_dict
from nuna_jax.sweep import run as R
from nuna_jax.sweep.run import run_sweep




def _lst(rows_points):
    """``(rows, items)`` buckets as ``_merge_shapes`` sees them: ``points`` one-point items, each its
    own traffic."""
    out = []
    for rows, n in rows_points:
        out.append((rows, [(np.arange(1), None, None, object(), None) for _ in range(n)]))
    return out


def test_cheapest_partition_by_hand():
    """Hand-computed costs: a group costs C + rows x (points x e + traffics x t); here every point
    is its own traffic, so C + rows x points x (e + t)."""
    cap = R.MAX_STACK_ROWS["cpu"]
    part = lambda lst, c, e=1.0, t=0.0: [[r for r, _ in g] for g in R._cheapest_partition(lst, c, e, t, cap)]  # noqa: E731
    # C = 10,000: 256 and 512 together cost 10,000 + 512 x 20 = 20,240 < apart 20,000 + 2,560 + 5,120;
    # 2^20 with them would cost 2^20 x 21 > 10,000 + ...: alone
    assert part(_lst([(256, 10), (512, 10), (1 << 20, 1)]), 10_000) == [[256, 512], [1 << 20]]
    # C = 1,000: apart 2,000 + 2,560 + 5,120 = 9,680 < together 11,240
    assert part(_lst([(256, 10), (512, 10)]), 1_000) == [[256], [512]]
    # the same with e = 0.5, t = 0.5 (per row: 10 x 0.5 + 10 x 0.5 = 10 a bucket, as above)
    assert part(_lst([(256, 10), (512, 10)]), 1_000, 0.5, 0.5) == [[256], [512]]
    assert part(_lst([(256, 10), (512, 10)]), 10_000, 0.5, 0.5) == [[256, 512]]
    # C huge: one program for the block
    assert part(_lst([(256, 3), (4096, 2), (65536, 1)]), 1e12) == [[256, 4096, 65536]]
    # the memory cap: stacked traffics x rows over MAX_STACK_ROWS never merge (2 x 2 x cap / 2 > cap)
    big = cap // 2
    assert part(_lst([(big, 2), (2 * big, 2)]), 1e18) == [[big], [2 * big]]
    assert part(_lst([(7, 1)]), 1.0) == [[7]]


def test_merge_factor_greedy_kept():
    """A number keeps the old rule: buckets within ``factor`` of the group's smallest share it."""
    groups = {(0, r, 1): [(np.arange(1), None, None, object(), None)] for r in (256, 512, 1024, 4096)}
    got = sorted(k[1] for k in R._merge_shapes(groups, 2.0))
    assert got == [512, 1024, 4096]    # {256, 512}; 1024 > 2 x 256 starts {1024}; 4096 > 2 x 1024: {4096}
    got1 = sorted(k[1] for k in R._merge_shapes(groups, 1.0))
    assert got1 == [256, 512, 1024, 4096]


GRID = {"sweep": {"chunk": 64},
        "axes": {"model": ["path"], "gpus": [2], "size": ["100kB", "1MB"], "policy": ["UA"], "tbs": [1, 4]}}


@pytest.mark.slow
def test_one_program_per_block_rows_equal_unmerged(count_compiles):
    """On a CPU the 2-GPU grid's row buckets (256 .. 4,096) share one compiled program (a compile
    costs as much as evaluating ~6e6 rows there), that program is the run's only XLA compilation after the first
    run's, and its rows equal those of one program per bucket bit for bit (zero rows change nothing)."""
    g = grid_from_dict(GRID, parse_size=parse_size)
    one = run_sweep(g, progress=False, merge_factor=1.0)
    assert one.attrs["summary"]["path_groups"] > 1
    with count_compiles() as cnt:
        merged = run_sweep(g, progress=False)
    assert merged.attrs["summary"]["path_groups"] == 1
    assert cnt.n <= 1                                  # the merged program (nothing else is new)
    for c in ("time_ns", "lower_bound_ns", "n_flows", "tbs_used"):
        np.testing.assert_array_equal(merged[c].to_numpy(), one[c].to_numpy())
    with count_compiles() as cnt:
        again = run_sweep(g, progress=False)
    assert cnt.n == 0                                  # a second sweep of the same shapes compiles nothing
    np.testing.assert_array_equal(again["time_ns"].to_numpy(), merged["time_ns"].to_numpy())


@pytest.mark.slow
def test_build_jobs_rows_equal_serial():
    """Traffics built on two worker processes (NAP's search included) give the serial run's rows."""
    d = {"sweep": {"chunk": 64}, "axes": {"model": ["path"], "gpus": [2], "size": ["100kB", "1MB"],
                                           "policy": ["UA", "NAP+NAR"]}}
    g = grid_from_dict(d, parse_size=parse_size)
    serial = run_sweep(g, progress=False)
    pooled = run_sweep(g, progress=False, build_jobs=2)
    assert pooled.attrs["summary"]["build_jobs"] == 2
    for c in ("time_ns", "lower_bound_ns", "n_flows", "tbs_used"):
        np.testing.assert_array_equal(pooled[c].to_numpy(), serial[c].to_numpy())


def test_build_jobs_checked():
    g = grid_from_dict(GRID, parse_size=parse_size)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="build_jobs"):
            run_sweep(g, progress=False, build_jobs=bad)


def test_a_traffic_that_cannot_be_built_names_its_point(monkeypatch):
    """Built after every point is collected: a fixed threadblock count that cannot be placed raises
    with the first such point (grid order) named; a "best" point whose every candidate fails too
    (the last candidate's message, as before); nothing is evaluated."""
    from nuna_jax.sweep import path_eval
    built = []

    def fake(s, pt, cache):
        built.append(pt["tbs_per_gpu"])
        raise ValueError(f"cannot place {pt['tbs_per_gpu']} threadblocks")
    monkeypatch.setattr(path_eval, "traffic_for", fake)
    g = grid_from_dict({"axes": {"model": ["path"], "gpus": [2], "size": ["100kB"], "policy": ["UA"],
                                 "tbs": [4, 16]}}, parse_size=parse_size)
    with pytest.raises(ValueError, match=r"grid point 0 \(.*tbs_per_gpu=4.*\): cannot place 4 threadblocks"):
        run_sweep(g, progress=False)
    assert sorted(built) == [4, 16]            # every distinct traffic was tried before the error
    g = grid_from_dict({"axes": {"model": ["path"], "gpus": [2], "size": ["100kB"], "policy": ["UA+NAR"]}},
                       parse_size=parse_size)
    with pytest.raises(ValueError, match=r"grid point 0 \(.*policy=UA\+NAR.*\): cannot place 16 threadblocks"):
        run_sweep(g, progress=False)


@pytest.mark.slow
@pytest.mark.parametrize("gpus,size,tbs", [(2, 100_000, 1), (8, 1_000_000, 28)])
def test_split_nap_search_is_the_search(gpus, size, tbs):
    """NAP's search split by granularity (``trafficpool.nap_candidate``, each estimated alone) gives
    the search's estimates bit for bit and so its choice (ties: the smaller granularity)."""
    from nuna_jax.presets import preset
    from nuna_jax.scenario import make_scenario
    from nuna_jax.sweep import trafficpool as P
    s = preset("table2", n_gpus=gpus)
    pt = {"collective": "allgather", "size": size, "policy": "NAP+NAR", "tbs_per_gpu": tbs, "algorithm": "direct",
          "nar_granularity": None}
    assert P.searches_granularity(pt) and not P.searches_granularity(dict(pt, policy="UA+NAR"))
    sc = make_scenario(s, collective="allgather", size_bytes=size, policy="NAP+NAR", tbs_per_gpu=tbs)
    search = sc.placement.granularity_search
    split = {g: v for _, g, st, v in (P.nap_candidate((0, s, pt, g)) for g in P.nap_granularities(s))}
    assert list(split) == list(search)
    assert all(np.float64(split[g]) == np.float64(search[g]) for g in search), (split, search)
    g_best = min(split, key=lambda g: (split[g], g))
    assert g_best == sc.placement.domains.granularity
    _, st, tr = P.build_task((0, s, dict(pt, nar_granularity=g_best)))
    assert st == "ok"
    for k in ("flits", "port", "cu", "read_stack", "dst_stack"):
        np.testing.assert_array_equal(np.asarray(getattr(tr.traffic, k))[:tr.n_flows], np.asarray(getattr(sc.traffic, k)))


def test_cli_build_jobs_refused(tmp_path, capsys):
    from nuna_jax.cli import main
    grid = tmp_path / "g.toml"
    grid.write_text('[axes]\nmodel = ["path"]\ngpus = [2]\nsize = ["100kB"]\npolicy = ["UA"]\n')
    for bad in ("0", "1025"):
        assert main(["sweep", str(grid), "--out", str(tmp_path / "x.csv"), "--build-jobs", bad]) == 2
        assert "--build-jobs must lie in [1, 1024]" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.slow
def test_cli_build_jobs_two_workers(tmp_path, capsys):
    """``nuna-jax sweep --build-jobs 2`` builds on two workers (the summary says so), same rows as 1."""
    import json

    from nuna_jax.cli import main
    from nuna_jax.sweep.writer import read_rows
    grid = tmp_path / "g.toml"
    grid.write_text('[axes]\nmodel = ["path"]\ngpus = [2]\nsize = ["100kB", "1MB"]\npolicy = ["UA", "NAP+NAR"]\n')
    rows = {}
    for n in (1, 2):
        out = tmp_path / f"r{n}.csv"
        assert main(["sweep", str(grid), "--out", str(out), "--json", "--build-jobs", str(n)]) == 0
        assert json.loads(capsys.readouterr().out)["build_jobs"] == n
        header, body = read_rows(out)
        rows[n] = {c: [r[header.index(c)] for r in body] for c in ("time_ns", "lower_bound_ns", "n_flows")}
    assert len(rows[1]["time_ns"]) == 4 and rows[2] == rows[1]       # the same text, digit for digit


def test_build_workers_malloc_environment(monkeypatch):
    """The build workers' allocator settings (``trafficpool.MALLOC_ENV``) are set only while the pool
    starts and only where the caller set none of them; restored after."""
    import os
    from nuna_jax.sweep import trafficpool
    for k in trafficpool.MALLOC_ENV:
        monkeypatch.delenv(k, raising=False)
    with trafficpool._malloc():
        assert {k: os.environ.get(k) for k in trafficpool.MALLOC_ENV} == trafficpool.MALLOC_ENV
    assert not any(k in os.environ for k in trafficpool.MALLOC_ENV)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")      # the caller's choice wins: none of ours is set
    with trafficpool._malloc():
        assert os.environ["MALLOC_ARENA_MAX"] == "4" and "MALLOC_MMAP_MAX_" not in os.environ
    assert os.environ["MALLOC_ARENA_MAX"] == "4"
