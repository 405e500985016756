"""``nuna-jax estimate``: JSON keys, --policy all, --network, errors."""

import json
from pathlib import Path

import pytest

from nuna_jax.cli import main

DATA = Path(__file__).parent / "data"
GB = 2**30 / 1e9


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_single_policy_json_keys_and_bound(capsys):
    d = run_json(capsys, ["estimate", "--collective", "allgather", "--size", "100kB", "--gpus", "4",
                          "--policy", "nap+nar", "--json"])
    for k in ("time_ns", "lower_bound_ns", "smooth_estimate_ns", "breakdown", "closed_form_ns", "n_flows"):
        assert k in d
    b = d["breakdown"]
    for k in ("latency_ns", "cu_issue_ns", "link_ns", "hbm_ns", "port_ns", "window_ns", "bottleneck"):
        assert k in b
    assert 0 < d["lower_bound_ns"] <= d["time_ns"] * (1 + 1e-6)
    # no flow is faster than the best zero-load transfer of the socket
    from nuna_jax import preset
    from nuna_jax.models.collectives import alpha_ns
    assert d["lower_bound_ns"] >= float(alpha_ns(preset(n_gpus=4), "best")) * (1 - 1e-6)
    cf = d["closed_form_ns"]
    assert cf["best"] < cf["mean"] < cf["worst"]


def test_policy_all_table(capsys):
    d = run_json(capsys, ["estimate", "--collective", "allgather", "--size", "100kB", "--gpus", "2",
                          "--policy", "all", "--json"])
    pols = [r["policy"] for r in d["policies"]]
    assert pols == ["UA", "UA+NAR", "NUMA", "NUMA+NAR", "NAP*", "NAP", "NAP+NAR"]
    assert d["policies"][0]["speedup_over_ua"] == pytest.approx(1.0)
    for r in d["policies"]:
        assert r["speedup_over_ua"] == pytest.approx(d["policies"][0]["time_ns"] / r["time_ns"])
    assert main(["estimate", "--collective", "allgather", "--size", "100kB", "--gpus", "2", "--policy", "all"]) == 0
    assert "speedup" in capsys.readouterr().out


def test_network_file(capsys):
    d = run_json(capsys, ["estimate", "--collective", "allgather", "--size", "1MB",
                          "--network", str(DATA / "astra_switch8.yml"), "--json"])
    assert d["n_gpus"] == 8 and d["collective"] == "allgather" and d["size_bytes"] == 10**6
    assert d["time_ns"] == pytest.approx(3000 + 875000 / (50 * GB), rel=1e-6)


def test_user_errors_exit_2(capsys):
    assert main(["estimate", "--collective", "allgather", "--size", "1MB", "--policy", "bogus"]) == 2
    assert main(["estimate", "--collective", "allgather", "--size", "1MB", "--gpus", "4",
                 "--network", str(DATA / "astra_switch8.yml")]) == 2
    assert main(["estimate", "--collective", "allgather", "--size", "1MB",
                 "--network", str(DATA / "astra_bad_topology.yml")]) == 2
    err = capsys.readouterr().err
    assert "bogus" in err and "NPUs" in err and "Torus" in err


def test_msccl_plan_file(capsys):
    f = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "msccl" / "ncv4_ag_hier_4_LL.xml"
    if not f.is_file():
        pytest.skip("shared MSCCL data not present")
    d = run_json(capsys, ["estimate", "--plan", str(f), "--size", "1MB", "--policy", "ua", "--json"])
    assert d["policy"] == "UA" and d["n_flows"] > 0
    assert d["lower_bound_ns"] <= d["time_ns"] * (1 + 1e-6)
    assert "closed_form_ns" not in d   # an imported plan has no closed form


def test_policy_all_simulate_and_plot(capsys, tmp_path):
    png = tmp_path / "socket.png"
    d = run_json(capsys, ["estimate", "--collective", "allgather", "--size", "20kB", "--gpus", "2",
                          "--policy", "all", "--simulate", "--plot", str(png), "--json"])
    ua = d["policies"][0]
    for r in d["policies"]:
        # the simulator never beats the analytical lower bound (docs/analytical.md, the bound contract)
        assert r["simulated_ns"] >= r["lower_bound_ns"] * (1 - 1e-6)
        assert r["sim_speedup_over_ua"] == pytest.approx(ua["simulated_ns"] / r["simulated_ns"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["estimate", "--collective", "allgather", "--size", "20kB", "--policy", "ua", "--simulate"]) == 2
    assert "--policy all" in capsys.readouterr().err


def test_optimize_flag_needs_policy_all_and_simulate(capsys):
    assert main(["estimate", "--collective", "allgather", "--size", "20kB", "--policy", "nap+nar", "--optimize"]) == 2
    assert "--policy all" in capsys.readouterr().err
    assert main(["estimate", "--collective", "allgather", "--size", "20kB", "--policy", "all", "--optimize"]) == 2
    assert "--simulate" in capsys.readouterr().err


@pytest.mark.slow
def test_policy_all_with_optimized_row(capsys):
    """The OPTIMIZED row is judged by the simulator and never slower than NAP+NAR (the search keeps
    NAP+NAR when nothing it finds simulates faster, issue 12)."""
    d = run_json(capsys, ["estimate", "--collective", "allgather", "--size", "20kB", "--gpus", "2",
                          "--policy", "all", "--simulate", "--optimize", "--json"])
    rows = {r["policy"]: r for r in d["policies"]}
    opt, nap = rows["OPTIMIZED"], rows["NAP+NAR"]
    assert opt["simulated_ns"] <= nap["simulated_ns"] * (1 + 1e-9)
    assert opt["simulated_ns"] >= opt["lower_bound_ns"] * (1 - 1e-6)
    assert opt["sim_speedup_over_ua"] == pytest.approx(rows["UA"]["simulated_ns"] / opt["simulated_ns"])


# ---- any size with any plan (padding stated, kept out of the bandwidths)
SHARED_MSCCL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "msccl"


def _shared_plans():
    return sorted(SHARED_MSCCL.glob("*.xml")) if SHARED_MSCCL.is_dir() else []


@pytest.mark.skipif(not _shared_plans(), reason="../shared/data/msccl absent")
@pytest.mark.parametrize("size", ["1MB", pytest.param("1000002B", marks=pytest.mark.slow)])
def test_every_shared_msccl_plan_takes_1mb_with_the_padding_stated(capsys, size):
    from nuna_jax.msccl import parse_msccl
    from nuna_jax.units import parse_size
    b = parse_size(size)
    for f in _shared_plans():
        d = run_json(capsys, ["estimate", "--plan", str(f), "--size", size, "--policy", "ua", "--json"])
        # the padding by hand: chunks of ceil(size / (nchunksperloop * 2 B)) elements
        import re
        nchunks = int(re.search(r'nchunksperloop="(\d+)"', f.read_text()).group(1))
        padded = -(-b // (2 * nchunks)) * 2 * nchunks
        assert d["pad_bytes"] == padded - b, f.name
        assert d["scenario"]["plan"]["pad_bytes"] == padded - b and d["size_bytes"] == b
        assert d["algbw_bytes_per_ns"] == pytest.approx(b / d["time_ns"], rel=1e-12)   # padding not counted
        assert parse_msccl(f.read_bytes(), b).pad_bytes == padded - b
        assert main(["estimate", "--plan", str(f), "--size", size, "--policy", "ua"]) == 0
        text = capsys.readouterr().out
        assert "padding: " + ("none" if padded == b else f"{padded - b} B added") in text, f.name


def test_a_three_rank_ring_plan_takes_1mb_padded_by_2_bytes(capsys):
    # 3 chunks per loop of 2-byte elements: 1 MB -> 3 x 166,667 elements = 1,000,002 B
    d = run_json(capsys, ["estimate", "--plan", str(DATA / "ag3_ring.xml"), "--size", "1MB", "--policy", "ua",
                          "--json"])
    assert d["pad_bytes"] == 2
    assert d["busbw_bytes_per_ns"] == pytest.approx(10**6 / d["time_ns"] * 2 / 3, rel=1e-12)


def test_generated_plan_of_part_elements_is_padded(capsys):
    d = run_json(capsys, ["estimate", "--collective", "allreduce", "--size", "1001B", "--gpus", "4",
                          "--policy", "ua", "--tbs", "3", "--json"])
    assert d["pad_bytes"] == 1
    assert d["busbw_bytes_per_ns"] == pytest.approx(1001 / d["time_ns"] * 2 * 3 / 4, rel=1e-12)
