"""`nuna-jax info` interface: JSON keys, text output, errors."""

import json
import subprocess
import sys

import pytest

from nuna_jax.cli import main


def test_info_json_keys(capsys):
    assert main(["info", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for k in ("mesh", "n_cus", "n_hbm_stacks", "n_io_ports", "noc_latency_ns"):
        assert k in d
    assert d["mesh"] == [24, 6] and d["n_cus"] == 576
    for leg in ("cu_to_port", "port_to_stack"):
        v = d["noc_latency_ns"][leg]
        assert v["min"] <= v["mean"] <= v["max"]


def test_info_text_and_gpus_override(capsys):
    assert main(["info", "--gpus", "64"]) == 0
    out = capsys.readouterr().out
    assert "pod of 64 GPUs" in out and "paper" in out


def test_info_bad_system_is_a_clear_error(capsys):
    assert main(["info", "--system", "nope"]) == 2
    assert "unknown system preset 'nope'" in capsys.readouterr().err
    assert main(["info", "--gpus", "0"]) == 2
    assert "n_gpus" in capsys.readouterr().err


def test_python_dash_m_entry_point():
    r = subprocess.run([sys.executable, "-m", "nuna_jax", "info", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["n_io_ports"] == 144


@pytest.mark.parametrize("text,expected", [("100kB", 100_000), ("1MB", 10**6), ("1GiB", 2**30),
                                           ("4096", 4096), ("1.5MB", 1_500_000), ("2 MiB", 2 * 2**20)])
def test_parse_size(text, expected):
    from nuna_jax.cli.common import parse_size
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "1XB", "-5MB", "0", "1.5B", "MB"])
def test_parse_size_rejects(text):
    from nuna_jax.cli.common import parse_size
    with pytest.raises(ValueError):
        parse_size(text)


def test_zero_latency_best_path_gives_no_ratio(tmp_path, capsys):
    """With ``cu_to_noc_ns = 0`` a CU on a port's router reaches the port in 0 ns: the NoC spread
    (worst / best) is undefined, reported as null / "n/a" (it divided by zero: found by the slow fuzz)."""
    f = tmp_path / "sys.toml"
    f.write_text('base = "table2"\nlink_bw_bytes_per_ns = 1\ncu_to_noc_ns = 0\n')
    assert main(["info", "--system", str(f), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["noc_latency_ns"]["cu_to_port"]["min"] == 0
    assert d["ratios"]["noc_worst_over_best"] is None and d["ratios"]["noc_mean_over_best"] is None
    assert d["ratios"]["transfer_worst_over_best"] > 1        # the transfer's best path still takes time
    assert main(["info", "--system", str(f)]) == 0
    assert "n/a" in capsys.readouterr().out
