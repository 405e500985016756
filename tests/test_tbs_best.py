"""``tbs_per_gpu="best"`` (NUNA 5.1: "the best-performing number of threadblocks"; docs/policies.md D7)."""

import json

import pytest

from nuna_jax.cli import main
from nuna_jax.models.contention import evaluate
from nuna_jax.presets import preset
from nuna_jax.scenario import tbs_candidates, make_scenario


def test_candidates_by_hand():
    assert tbs_candidates(8) == (7, 28, 112)
    assert tbs_candidates(64) == (63, 252, 1008)
    assert tbs_candidates(128) == (127, 508)        # 16 x 127 = 2,032 > 1,008
    assert tbs_candidates(2) == (1, 4, 16)
    assert tbs_candidates(2000) == (1999,)          # at least one per peer


def test_best_is_the_fastest_candidate_by_an_independent_estimate():
    s = preset("table2", n_gpus=4)
    sc = make_scenario(s, collective="allgather", size_bytes=10**6, policy="ua", tbs_per_gpu="best")
    each = {k: evaluate(s, make_scenario(s, collective="allgather", size_bytes=10**6, policy="ua",
                                         tbs_per_gpu=k).traffic)["time_ns"] for k in tbs_candidates(4)}
    assert set(sc.tbs_search) == set(each)
    assert sc.tbs_search == pytest.approx(each, rel=1e-6)
    chosen = int(sc.plan.tbs_per_gpu.max())
    assert each[chosen] == min(each.values())
    d = sc.describe()
    assert d["tbs_per_gpu"] == chosen and d["tbs_chosen_by"] == "search"
    fixed = make_scenario(s, collective="allgather", size_bytes=10**6, policy="ua", tbs_per_gpu=3)
    assert fixed.describe()["tbs_chosen_by"] == "fixed"
    assert make_scenario(s, collective="allgather", size_bytes=10**6, policy="ua").tbs_chosen_by == "default"


def test_ring_allreduce_grows_with_the_pod_under_best():
    """Bandwidth-bound ring All-Reduce at a fixed per-GPU size: alpha-beta's 2 (n-1)/n S/B grows with n,
    and so must the best-threadblock estimate (one threadblock per peer made 8 GPUs slower than 16)."""
    t = {}
    for n in (4, 8):
        s = preset("table2", n_gpus=n)
        sc = make_scenario(s, collective="allreduce", algorithm="ring", size_bytes=8 * 10**6, policy="ua",
                           tbs_per_gpu="best")
        t[n] = min(sc.tbs_search.values())
    assert t[8] > t[4]


def test_bad_tbs_value():
    s = preset("table2", n_gpus=2)
    with pytest.raises(ValueError, match="'best'"):
        make_scenario(s, collective="allgather", size_bytes=10**5, policy="ua", tbs_per_gpu="fastest")
    assert main(["estimate", "--collective", "allgather", "--size", "100kB", "--gpus", "2", "--tbs", "many"]) == 2


def test_cli_reports_the_chosen_count(capsys):
    assert main(["estimate", "--collective", "allgather", "--size", "100kB", "--gpus", "2", "--policy", "ua",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tbs_chosen_by"] == "search" and out["tbs_requested"] == "best"
    assert out["tbs_per_gpu"] in (1, 4, 16)
    assert main(["estimate", "--collective", "allgather", "--size", "100kB", "--gpus", "2", "--policy", "ua",
                 "--tbs", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tbs_per_gpu"] == 4 and out["tbs_chosen_by"] == "fixed"


@pytest.mark.parametrize("cmd", ["place", "simulate"])
def test_place_and_simulate_report_the_count(cmd, capsys):
    assert main([cmd, "--collective", "allgather", "--size", "100kB", "--gpus", "2", "--policy", "ua",
                 "--tbs", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tbs_per_gpu"] == 4 and out["tbs_chosen_by"] == "fixed"
