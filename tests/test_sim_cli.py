"""`nuna-jax simulate`: JSON keys and values, text output, user errors."""

import json

from nuna_jax.cli import main
from nuna_jax.scenario import make_scenario
from nuna_jax.presets import preset


def test_simulate_json(capsys):
    rc = main(["simulate", "--collective", "allgather", "--size", "100kB", "--gpus", "2",
               "--policy", "nap+nar", "--tbs", "2", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    for k in ("completion_ns", "store_latency_ns", "flits_injected", "flits_delivered", "wall_s"):
        assert k in d
    assert set(d["store_latency_ns"]) >= {"mean", "p50", "p99", "max"}
    # 2 GPUs, 100 kB per-GPU buffer: each GPU sends its 50 kB half = ceil(50000/256) flits
    t = make_scenario(preset("table2", n_gpus=2), collective="allgather", size_bytes=100_000,
                      policy="nap+nar", tbs_per_gpu=2).traffic
    assert d["flits_injected"] == d["flits_delivered"] == int(t.total_flits)
    lat = d["store_latency_ns"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["max"] <= d["completion_ns"]


def test_simulate_text_and_errors(capsys):
    assert main(["simulate", "--collective", "allgather", "--size", "20kB", "--gpus", "2",
                 "--policy", "ua"]) == 0
    out = capsys.readouterr().out
    assert "completion_ns" in out and "store_latency_ns" in out and "flits_delivered" in out
    assert main(["simulate", "--collective", "allgather", "--size", "20kB", "--gpus", "2",
                 "--policy", "nosuch"]) == 2
    assert main(["simulate", "--collective", "allgather", "--size", "1MB", "--gpus", "2",
                 "--policy", "ua", "--max-time-ns", "10"]) == 2  # a user error (issue 11)
