"""``nuna-jax place`` end to end."""

import json
from pathlib import Path

import pytest

from nuna_jax.cli import main

DATA = Path(__file__).parent / "data"
REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "msccl"


def run_json(capsys, *argv):
    assert main(["place", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_keys_and_values(capsys):
    out = run_json(capsys, "--collective", "allgather", "--size", "1MB", "--gpus", "8", "--policy", "nap+nar")
    for k in ("hops_cu_to_port", "hops_port_to_stack"):
        assert set(out[k]) >= {"mean", "max"}
    assert len(out["cus_used_per_die"]) == 4
    assert out["scenario"]["traffic"]["bytes"] == 7e6
    assert out["scenario"]["placement"]["policy"] == "NAP+NAR"
    ld = out["egress_port_load_bytes"]
    assert ld["min"] <= ld["mean"] <= ld["max"]
    # mean egress load = 7 MB over 8 GPUs x 144 ports
    assert ld["mean"] == pytest.approx(7e6 / (8 * 144))
    assert out["ports_used"]["per_gpu_max"] <= 144


def test_options_tbs_granularity_algorithm(capsys):
    out = run_json(capsys, "--collective", "alltoall", "--size", "100kB", "--gpus", "4", "--policy", "UA+NAR",
                   "--tbs", "6", "--nar-granularity", "4", "--algorithm", "ring")
    assert out["scenario"]["plan"]["tbs_per_gpu_max"] == 6
    assert out["scenario"]["placement"]["routing_granularity"] == 4
    assert out["scenario"]["plan"]["algorithm"] == "ring"


def test_plan_file(capsys):
    out = run_json(capsys, "--plan", str(DATA / "ag3_ring.xml"), "--size", "12kB", "--policy", "nap")
    assert out["n_gpus"] == 3  # taken from the file
    assert out["scenario"]["traffic"]["bytes"] == 2 * 12000


def test_real_plan_file(capsys):
    f = REAL / "ndv4_ag-1m.xml"
    if not f.is_file():
        pytest.skip("shared MSCCL data absent")
    out = run_json(capsys, "--plan", str(f), "--size", "1MiB", "--policy", "ua")
    assert out["scenario"]["traffic"]["bytes"] == 7 * 2**20


def test_text_output(capsys):
    assert main(["place", "--collective", "allreduce", "--size", "1MB", "--policy", "nap*"]) == 0
    text = capsys.readouterr().out
    assert "hops_cu_to_port" in text and "NAP*" in text


@pytest.mark.parametrize("argv,msg", [
    (["--collective", "allgather", "--size", "1MB", "--policy", "best"], "unknown policy"),
    (["--collective", "allgather", "--size", "1GB", "--tbs", "1008"], "more threadblocks than the CUs can hold"),
    (["--collective", "gather", "--size", "1MB"], "unknown collective"),
    (["--plan", "nope.xml", "--size", "1MB"], "does not exist"),
])
def test_user_errors_exit_2(capsys, argv, msg):
    assert main(["place", *argv]) == 2
    assert msg in capsys.readouterr().err
