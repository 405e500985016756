"""experiments/calibrate_nccl.py: the fit recovers known alpha, beta from synthetic measurements
(exactly without noise, within a few % with 2% noise), the held-out split and error definitions by
hand, and the preset proposal reproduces the fitted alpha and beta through the closed form."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import calibrate_nccl as C  # noqa: E402

SIZES = [2**k for k in range(10, 31, 2)]      # 11 sizes: 6 fitted, 5 held out


def test_unit_terms_are_the_ring_formulas():
    # ring (Thakur et al.; ../shared/reference/collective-formulas.md), p = 4, n = 1000:
    # AG: 3 alpha + 750 beta; AR: 6 alpha + 1500 beta; A2A pairwise: 3 alpha + 750 beta
    u, v = C.unit_terms("all_gather", "ring", 4, [1000.0])
    assert (u[0], v[0]) == (3.0, 750.0)
    u, v = C.unit_terms("all_reduce", "ring", 4, [1000.0])
    assert (u[0], v[0]) == (6.0, 1500.0)
    u, v = C.unit_terms("all_to_all", "ring", 4, [1000.0])
    assert (u[0], v[0]) == (3.0, 750.0)


def test_fit_two_points_by_hand():
    # t = 10 u + 0.5 v at (u, v) = (1, 100) and (1, 1000): t = 60 and 510 -> exactly alpha 10, beta 0.5
    a, b = C.fit_alpha_beta([60.0, 510.0], [1.0, 1.0], [100.0, 1000.0])
    assert a == pytest.approx(10.0, rel=1e-12) and b == pytest.approx(0.5, rel=1e-12)
    # a negative unconstrained alpha is clipped: t proportional to v with a tiny negative offset
    a, b = C.fit_alpha_beta([99.0, 999.0], [1.0, 1.0], [100.0, 1000.0])
    assert a == 0.0 and b > 0


def test_split_and_errors_by_hand():
    tr, te = C.split_alternate([40, 10, 30, 20, 50])     # size order 10, 20, 30, 40, 50
    assert sorted(np.asarray([40, 10, 30, 20, 50])[tr]) == [10, 30, 50]
    assert sorted(np.asarray([40, 10, 30, 20, 50])[te]) == [20, 40]
    e = C.errors([1.1, 0.99, 1.0], [1.0, 1.0, 1.0])      # |e| = 0.1, 0.01, 0 (floored 1e-6)
    assert e["worst"] == pytest.approx(0.1) and e["mean"] == pytest.approx(0.11 / 3)
    assert e["geomean"] == pytest.approx((0.1 * 0.01 * 1e-6) ** (1 / 3))


def test_noise_free_fit_recovers_parameters_per_collective():
    alpha = {"all_gather": 5000.0, "reduce_scatter": 6000.0, "all_reduce": 9000.0, "all_to_all": 4000.0}
    bw = {"all_gather": 370.0, "reduce_scatter": 330.0, "all_reduce": 300.0, "all_to_all": 250.0}
    d = C.synthetic_results(alpha, bw, counts=(2, 8), sizes=SIZES, noise=0.0)
    # a one-device smoke run's rows (nothing moves) are left out of the fit
    d["results"] += [{"collective": "all_gather", "n_devices": 1, "size_bytes": S, "time_us": 3.0} for S in SIZES]
    cal = C.calibrate(d)
    assert len(cal["per_collective"]) == 8
    for g in cal["per_collective"]:
        c = g["collectives"][0]
        assert g["alpha_ns"] == pytest.approx(alpha[c], rel=1e-4)
        assert g["bw_GBps"] == pytest.approx(bw[c], rel=1e-4)
        assert g["held_out"]["worst"] < 1e-4 and g["held_out"]["n"] == 5 and g["train"]["n"] == 6
    assert cal["meets_target"]


def test_noisy_fit_recovers_parameters_and_reports_held_out_error():
    d = C.synthetic_results(8000.0, 360.0, counts=(2, 4, 8), sizes=[2**k for k in range(10, 31)],
                            noise=0.02, seed=3)
    cal = C.calibrate(d)
    for g in cal["per_collective"] + cal["pooled"]:
        assert g["alpha_ns"] == pytest.approx(8000.0, rel=0.05)
        assert g["bw_GBps"] == pytest.approx(360.0, rel=0.05)
    o = cal["held_out_overall"]
    # lognormal noise of sigma 2%: E|e| ~ 0.8 sigma = 1.6%; the held-out errors are about that
    assert 0.003 < o["geomean"] < 0.03 and o["worst"] < 0.1 and o["n"] == 3 * 4 * 10
    # within one (collective, p) every algorithm is alpha x rounds + beta x bytes, linear in n: the
    # per-group fit is the same curve (alpha, beta rescaled by ring / tree rounds and bytes) ...
    bad = C.calibrate(d, C.parse_algorithms("all_reduce=tree"))

    def ar8(cal, key):
        return [g for g in cal[key] if "all_reduce" in g["collectives"] and g["n_devices"] == 8][0]
    assert ar8(bad, "per_collective")["held_out"]["geomean"] == pytest.approx(
        ar8(cal, "per_collective")["held_out"]["geomean"], rel=1e-3)
    # tree: 2 lg p = 6 rounds, 2 n lg p = 6n bytes; ring: 14 rounds, 1.75 n bytes (p = 8)
    assert ar8(bad, "per_collective")["alpha_ns"] == pytest.approx(ar8(cal, "per_collective")["alpha_ns"] * 14 / 6, rel=1e-3)
    assert ar8(bad, "per_collective")["bw_GBps"] == pytest.approx(ar8(cal, "per_collective")["bw_GBps"] * 6 / 1.75, rel=1e-3)
    # ... but the pooled fit (one alpha, beta for the four collectives) tells the wrong algorithm
    assert ar8(bad, "pooled")["held_out"]["geomean"] > 3 * ar8(cal, "pooled")["held_out"]["geomean"]


def test_preset_proposal_reproduces_alpha_and_beta():
    p = C.preset_proposal(9000.0, 1 / 400.0, 8, base="mono")
    assert p["check"]["alpha_ns"] == pytest.approx(9000.0, rel=1e-5)
    assert p["check"]["beta_ns_per_byte"] == pytest.approx(1 / 400.0, rel=1e-6)
    assert p["overrides"]["port_bw_bytes_per_ns"] == pytest.approx(400.0 / 18)    # mono: 18 ports
    with pytest.raises(ValueError, match="below"):
        C.preset_proposal(10.0, 1 / 400.0, 8)        # alpha below the socket's own path latency


def test_parse_algorithms():
    assert C.parse_algorithms(None) == dict.fromkeys(C.COLLECTIVES, "ring")
    assert C.parse_algorithms("direct")["all_to_all"] == "direct"
    m = C.parse_algorithms("all_reduce=tree")
    assert m["all_reduce"] == "tree" and m["all_gather"] == "ring"
    for bad in ("all_gather=tree", "foo", "bcast=ring"):
        with pytest.raises(ValueError):
            C.parse_algorithms(bad)


@pytest.mark.slow
def test_script_end_to_end_and_bad_input(tmp_path, capsys):
    syn = tmp_path / "syn.json"
    assert C.main(["--synthetic", str(syn), "--devices", "2,8", "--noise", "0.01"]) == 0
    out = tmp_path / "cal.json"
    assert C.main([str(syn), "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["synthetic"] and "SYNTHETIC" in d["preset_proposal"]["warning"]
    assert (tmp_path / "cal.png").stat().st_size > 10_000 and (tmp_path / "cal.pdf").exists()
    assert d["preset_proposal"]["from"] == "pooled fit, 8 devices"
    assert len(d["per_collective"]) == 8 and d["held_out_overall"]["n"] == 2 * 4 * 10
    capsys.readouterr()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": [{"collective": "all_gather", "n_devices": 0, "size_bytes": 8,
                                            "time_us": 1.0}]}))
    assert C.main([str(bad), "--out", str(tmp_path / "x.json")]) == 2
    assert "n_devices" in capsys.readouterr().err
    assert C.main([str(tmp_path / "missing.json"), "--out", str(tmp_path / "x.json")]) == 2
    assert C.main(["--synthetic", str(syn), "--devices", "1"]) == 2
