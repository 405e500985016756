"""The path of a flit: stage table against a hand calculation and the spread figures."""

import jax
import numpy as np
import pytest

from nuna_jax import preset
from nuna_jax.models.spread import nuna_spread
from nuna_jax.path import flow_stages, n_stages, resource_layout, zero_load_latency_ns
from nuna_jax.traffic import make_traffic

S = preset()
HOP = 10 / 1.2
LINK = 256 / (10e3 / 12)  # ns per flit on a mesh link
PORT = 256 / 50.0
HBM = 256 / 2500.0
CYC = 1 / 1.2


def test_zero_load_latency_by_hand():
    # CU 0 on router (0,0); read stack 0 channel 1 on (1,0); port 0 on (0,0); dst stack 15 channel 1 on (22,5)
    t = make_traffic(S, src_gpu=[0], cu=[0], read_stack=[0], read_channel=[1], port=[0], dst_gpu=[3],
                     dst_stack=[15], dst_channel=[1], flits=[1])
    hand = (CYC + 120 + 1 * HOP          # issue + request to the stack (1 hop)
            + HBM + 150                   # HBM read
            + 1 * (LINK + HOP)            # response, 1 hop
            + 120                         # store issue
            + 0                           # CU router is the port router
            + PORT + 500 + PORT           # egress, switch, ingress
            + 27 * (LINK + HOP)           # (0,0) -> (22,5)
            + HBM + 150)                  # HBM write
    assert float(zero_load_latency_ns(S, t)[0]) == pytest.approx(hand, rel=1e-5)


def test_stage_resources_are_per_gpu_and_in_range():
    t = make_traffic(S, src_gpu=[0, 7], cu=[575, 1], read_stack=[15, 3], port=[143, 70],
                     dst_gpu=[7, 0], dst_stack=[8, 2], flits=[2, 5],
                     read_channel=[1, 1], dst_channel=[1, 1])   # channel 1: the stretch's centre router
    st = flow_stages(S, t)
    lay = resource_layout(S)
    assert st.resource.shape == (2, n_stages(S))
    r = np.asarray(st.resource)
    used = r[r >= 0]
    assert used.max() < lay.n_resources
    # flow 0: first stage is CU 575 of GPU 0; last is HBM stack 8 of GPU 7
    assert r[0, 0] == 575 and r[0, -1] == 7 * lay.per_gpu + lay.offset_hbm + 8
    kinds = lay.kind_of(used)
    assert set(kinds) == {"cu", "hbm", "link", "egress", "ingress"}
    # flow 0: CU 575 on (23,5); stack 15 on (22,5); port 143 on (23,5); dst stack 8 on (1,5)
    # links: response 1 + store 0 + delivery 22;  flow 1: CU 1 on (0,0), stack 3 on (10,0),
    # port 70 on (0,5), dst stack 2 on (7,0): 10 + 5 + (7 + 5)
    n_links = (lay.kind_of(np.where(r >= 0, r, 0)) == "link").sum(axis=1)
    assert n_links.tolist() == [23, 27]


def test_jit_and_grad_of_zero_load_latency():
    t = make_traffic(S, src_gpu=[0], cu=[300], read_stack=[4], port=[80], dst_gpu=[1], dst_stack=[9], flits=[1])
    a = zero_load_latency_ns(S, t)
    b = jax.jit(zero_load_latency_ns)(S, t)
    np.testing.assert_allclose(a, b, rtol=1e-6)
    g = jax.grad(lambda s: zero_load_latency_ns(s, t).sum())(S)
    assert float(g.switch_latency_ns) == pytest.approx(1.0)
    assert float(g.hbm_latency_ns) == pytest.approx(2.0)   # read and write
    assert float(g.cu_to_noc_ns) == pytest.approx(2.0)     # read request and store


def test_spread_reproduces_paper_noc_ratios_within_a_few_percent():
    """NUNA section 1: NoC worst / mean are 3x / 2x the best; not fitted (Table 2 geometry)."""
    sp = nuna_spread(S)
    assert sp["cu_to_port"]["min"] == pytest.approx(120.0)          # CU on a port router
    assert sp["cu_to_port"]["max"] == pytest.approx(120 + 28 * HOP, rel=1e-5)  # opposite corner
    r = sp["ratios"]
    assert r["noc_worst_over_best"] == pytest.approx(3.0, rel=0.03)
    assert r["noc_mean_over_best"] == pytest.approx(2.0, rel=0.05)
    assert r["transfer_worst_over_best"] == pytest.approx(1.8, rel=0.05)
    assert r["transfer_mean_over_best"] == pytest.approx(1.45, rel=0.08)


def test_spread_store_min_matches_path_model():
    """The best one-way store computed in closed form equals the stage table's store half."""
    sp = nuna_spread(S)
    # best store: CU on port router (0,0), port 0, dst stack 0 at (1,0): 1 hop
    best = 120 + PORT + 500 + PORT + (LINK + HOP) + HBM + 150
    assert sp["store"]["min"] == pytest.approx(best, rel=1e-5)
