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


def test_simulate_credit_flags(capsys):
    """--flow-control credit: the JSON reports the settings used and passes the schema; the run equals
    the library call with the same FlowControl; credit settings without credit mode are refused."""
    from nuna_jax import sim
    from nuna_jax.schemas import check
    from nuna_jax.sim.flow_control import FlowControl
    base = ["simulate", "--collective", "allgather", "--size", "20kB", "--gpus", "2", "--policy", "ua",
            "--tbs", "1", "--json"]
    assert main(base) == 0
    d0 = json.loads(capsys.readouterr().out)
    assert d0["flow_control"] == {"mode": "none"}
    assert main(base + ["--flow-control", "credit", "--num-vcs", "1", "--vc-buf-flits", "2", "--port-buf-flits", "1",
                        "--inj-buf-flits", "3", "--credit-delay", "4", "--router-cycles", "1,1,1,1,1"]) == 0
    d = json.loads(capsys.readouterr().out)
    check(d, "simulate")
    fc = FlowControl("credit", num_vcs=1, vc_buf_flits=2, port_buf_flits=1, inj_buf_flits=3, credit_delay_cycles=4,
                     router_cycles=(1, 1, 1, 1, 1))
    assert d["flow_control"] == {**fc._asdict(), "router_cycles": [1, 1, 1, 1, 1]}
    sc = make_scenario(preset("table2", n_gpus=2), collective="allgather", size_bytes=20_000, policy="ua",
                       tbs_per_gpu=1)
    r = sim.simulate(sc.system, sc.traffic, flow_control=fc)
    assert d["completion_ns"] == r.completion_ns and d["flit_hops"] == r.flit_hops == d0["flit_hops"]
    assert d["completion_ns"] > d0["completion_ns"]            # 1-flit port FIFOs over a 120 ns switch
    assert main(base + ["--num-vcs", "2"]) == 2                 # needs --flow-control credit
    assert main(base + ["--flow-control", "credit", "--router-cycles", "1,2"]) == 2
    assert main(base + ["--flow-control", "credit", "--vc-buf-flits", "0"]) == 2
    capsys.readouterr()
