"""ASTRA-sim network YAML reader and the hierarchical closed form, against hand calculations."""

from pathlib import Path

import pytest

from nuna_jax import astra

DATA = Path(__file__).parent / "data"
GB = 2**30 / 1e9  # ASTRA-sim's GB/s in bytes/ns


def test_parse_flow_lists_and_block_lists():
    net = astra.load_network(DATA / "astra_ring_fc_switch.yml")
    assert net.topology == ("Ring", "FullyConnected", "Switch")
    assert net.npus_count == (2, 8, 4) and net.n_npus == 64
    assert net.bandwidth_GBps == (200.0, 100.0, 50.0) and net.latency_ns == (50.0, 500.0, 2000.0)
    blk = astra.load_network(DATA / "astra_block_lists.yml")
    assert blk.topology == ("FullyConnected",) and blk.npus_count == (4,) and blk.bandwidth_GBps == (100.0,)


def test_gbps_are_binary():
    assert float(astra.gbps_to_bytes_per_ns(1.0)) == pytest.approx(1.073741824)


def test_switch_all_gather_by_hand():
    net = astra.load_network(DATA / "astra_switch8.yml")
    # default on a Switch: recursive doubling; 3 rounds x 2 hops x 500 ns + 7/8 MB / (50 GiB/s)
    r = astra.collective_time_ns(net, "all_gather", 1e6)
    assert r["time_ns"] == pytest.approx(3000 + 875000 / (50 * GB), rel=1e-6)  # float32 closed form
    # forced ring: 7 rounds of 2 hops
    r = astra.collective_time_ns(net, "all_gather", 1e6, algorithm="ring")
    assert r["time_ns"] == pytest.approx(7000 + 875000 / (50 * GB), rel=1e-6)  # float32 closed form
    # All-Reduce = RS + AG (no gamma in the file)
    r = astra.collective_time_ns(net, "all_reduce", 1e6)
    assert r["time_ns"] == pytest.approx(6000 + 2 * 875000 / (50 * GB), rel=1e-6)  # float32 closed form


def test_fully_connected_direct_uses_all_links():
    net = astra.load_network(DATA / "astra_block_lists.yml")
    # 4 NPUs, direct: one round of 1 hop (250 ns); each NPU sends 3 x n/4 over 3 links of 100 GiB/s
    r = astra.collective_time_ns(net, "all_to_all", 4e6)
    assert r["time_ns"] == pytest.approx(250 + 1e6 / (100 * GB), rel=1e-6)  # float32 closed form


def test_hierarchical_all_reduce_by_hand():
    net = astra.load_network(DATA / "astra_ring_fc_switch.yml")
    n = 64e6
    # dim 0: ring of 2 (1 hop, 50 ns, 200 GiB/s), size n: RS + AG = 2 * (1*50 + n/2 / bw0)
    d0 = 2 * (50 + (n / 2) / (200 * GB))
    # dim 1: fully connected 8, direct, size n/2: 2 * (500 + 7/8 * n/2 / (7 * bw1))
    d1 = 2 * (500 + (7 / 8) * (n / 2) / (7 * 100 * GB))
    # dim 2: switch of 4, recursive (2 rounds x 2 hops x 2000 ns), size n/16: 2 * (8000 + 3/4 * n/16 / bw2)
    d2 = 2 * (8000 + 0.75 * (n / 16) / (50 * GB))
    r = astra.collective_time_ns(net, "all-reduce", n)
    assert [x["size_bytes"] for x in r["dims"]] == [n, n / 2, n / 16]
    assert r["time_ns"] == pytest.approx(d0 + d1 + d2, rel=1e-6)  # float32 closed form


@pytest.mark.parametrize("text, field", [
    ("topology: [Switch]\nnpus_count: [8]\nbandwidth: [50]\n", "latency"),
    ("topology: [Switch]\nnpus_count: [8, 2]\nbandwidth: [50]\nlatency: [1]\n", "npus_count"),
    ("topology: [Switch]\nnpus_count: [8]\nbandwidth: [0]\nlatency: [1]\n", "bandwidth"),
    ("topology: [Switch]\nnpus_count: [8]\nbandwidth: [5]\nlatency: [1]\nlink_latency: [3]\n", "link_latency"),
    ("topology: [Switch]\nnpus_count: [2.5]\nbandwidth: [5]\nlatency: [1]\n", "npus_count"),
])
def test_bad_files_name_the_field(text, field):
    with pytest.raises(ValueError, match=field):
        astra.parse_network(text)


def test_bad_topology_file_and_missing_file():
    with pytest.raises(ValueError, match="Torus"):
        astra.load_network(DATA / "astra_bad_topology.yml")
    with pytest.raises(ValueError, match="does not exist"):
        astra.load_network(DATA / "nope.yml")


# ---- safe_load and validated numbers (issue 11)
_NET = "topology: [Ring]\nnpus_count: [{n}]\nbandwidth: [{bw}]\nlatency: [{lat}]\n"


@pytest.mark.parametrize("n,bw,lat,msg", [
    ("8", "100", "1e308", "latency"),          # a YAML 1.2 number (PyYAML reads a string)
    ("8", "100", "1.0e+308", "latency"),
    ("8", ".nan", "1", "bandwidth"),
    ("8", "100", ".inf", "latency"),
    ("8", "1.0e-300", "1", "bandwidth"),
    ("1.0e+400", "100", "1", "npus_count"),
    ("true", "100", "1", "npus_count"),
    ("99999999999999999999", "100", "1", "npus_count"),
    ("8", "'fast'", "1", "bandwidth"),
])
def test_numbers_are_range_checked(n, bw, lat, msg):
    with pytest.raises(ValueError, match=msg):
        astra.parse_network(_NET.format(n=n, bw=bw, lat=lat), "net.yml")


def test_yaml_1_2_numbers_read_as_numbers():
    net = astra.parse_network(_NET.format(n="8", bw="1e2", lat="5e2"))
    assert net.bandwidth_GBps == (100.0,) and net.latency_ns == (500.0,)


def test_npu_product_never_wraps():
    text = ("topology: [Ring, Ring, Ring, Ring]\nnpus_count: [65536, 65536, 65536, 65536]\n"
            "bandwidth: [1, 1, 1, 1]\nlatency: [1, 1, 1, 1]\n")
    with pytest.raises(ValueError, match="NPUs"):  # 2^64: wrapped to 0 in int64 before
        astra.parse_network(text)


@pytest.mark.parametrize("text,msg", [
    ("topology: !!python/object/apply:os.system ['true']\n", "invalid YAML at line 1"),
    ("topology: [Ring\n", "invalid YAML"),
    ("- a\n- b\n", "expected a mapping"),
    ("a: &x [1]\nb: [*x, *x]\n", "unknown key"),
])
def test_unsafe_or_malformed_yaml_is_refused(text, msg):
    with pytest.raises(ValueError, match=msg):
        astra.parse_network(text, "net.yml")
