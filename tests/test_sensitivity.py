"""Gradient sensitivities (nuna_jax.sweep.sensitivity) against finite differences and hand values."""

from __future__ import annotations

import json

import pytest

from nuna_jax.cli import main
from nuna_jax.presets import preset
from nuna_jax.scenario import make_scenario
from nuna_jax.sweep import path_eval
from nuna_jax.sweep.sensitivity import sensitivity


@pytest.fixture(scope="module")
def case():
    s = preset("table2", n_gpus=2)
    sc = make_scenario(s, collective="allgather", size_bytes=10**5, policy="UA")
    return s, sc.traffic, sensitivity(s, sc.traffic)


def test_gradient_matches_central_differences(case):
    s, t, r = case
    pt = path_eval.pad(t)

    def time_ns(s2):   # the estimate alone, through the same compiled program (no second compile)
        return float(path_eval.path_value_and_grad(s2, pt)[0])

    checked = 0
    for row in r["rows"]:
        x = row["value"]
        if x == 0.0:
            continue
        h = 1e-3 * x
        up = time_ns(s.replace(**{row["field"]: x + h}))
        dn = time_ns(s.replace(**{row["field"]: x - h}))
        fd = (up - dn) / (2 * h)
        # float32 times of ~2e3 ns: an absolute error ~1e-3 ns in each difference
        assert row["d_time_ns_per_unit"] == pytest.approx(fd, rel=2e-2, abs=2e-3 / h), row["field"]
        checked += 1
    assert checked >= 8


def test_hand_values_and_ranking(case):
    """Direct All-Gather, one phase: every flow crosses the switch once (dT/d switch = 1) and pays
    the CU -> NoC latency twice (load, then store: dT/d cu_to_noc = 2); the FLOP ratings do not enter."""
    _, _, r = case
    d = {row["field"]: row for row in r["rows"]}
    assert d["switch_latency_ns"]["d_time_ns_per_unit"] == pytest.approx(1.0, rel=1e-5)
    assert d["cu_to_noc_ns"]["d_time_ns_per_unit"] == pytest.approx(2.0, rel=1e-5)
    assert d["flops_bf16_per_ns"]["d_time_ns_per_unit"] == 0.0
    e = [abs(row["elasticity"]) for row in r["rows"]]
    assert e == sorted(e, reverse=True)
    row = d["switch_latency_ns"]
    assert row["elasticity"] == pytest.approx(1.0 * 500.0 / r["time_ns"], rel=1e-5)


def test_cli_json_and_plot(tmp_path, capsys):
    png = tmp_path / "s.png"
    assert main(["sensitivity", "--collective", "allgather", "--size", "100kB", "--gpus", "2", "--policy", "ua",
                 "--json", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_gpus"] == 2 and len(out["rows"]) == 11
    assert png.stat().st_size > 1000
    assert main(["sensitivity", "--collective", "allgather", "--size", "100kB", "--gpus", "2",
                 "--policy", "bogus"]) == 2
    assert "unknown policy" in capsys.readouterr().err
