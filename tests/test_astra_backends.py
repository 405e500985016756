"""ASTRA-sim's congestion_unaware and congestion_aware analytical backends against hand calculations.

The rules (astra-network-analytical; nuna_jax/astra.py): bytes/ns = GBps * 2^30 / 1e9; unaware
send = floor(hops * latency + m / bw), hops Ring shorter way / FullyConnected 1 / Switch 2, on
several dimensions only the first differing one; aware: per link floor(latency + m / bw) to the
next device, the link busy floor(m / bw), FIFO.  Every expected value below is worked by hand
from those rules (integer ns).
"""

import math

import pytest

from nuna_jax import astra
from nuna_jax.cli import main

NET = "topology: [{t}]\nnpus_count: [{p}]\nbandwidth: [{bw}]\nlatency: [{lat}]\n"


def net1(t, p, bw=100.0, lat=10.0):
    return astra.parse_network(NET.format(t=t, p=p, bw=bw, lat=lat))


def bpns(gbps):
    return gbps * 1073741824 / 1e9


MiB = 1 << 20


# ---- one message
def test_ring_send_both_backends():
    n = net1("Ring", 8, 100, 10)
    s = MiB / bpns(100)                                     # 9765.625 ns of serialization
    assert astra.send_time_ns(n, 0, 1, MiB, "unaware")["time_ns"] == math.floor(10 + s) == 9775
    assert astra.send_time_ns(n, 0, 3, MiB, "unaware")["time_ns"] == math.floor(30 + s)
    assert astra.send_time_ns(n, 0, 7, MiB, "unaware")["hops"] == 1          # the shorter way round
    assert astra.send_time_ns(n, 0, 4, MiB, "unaware")["hops"] == 4
    # aware: store and forward, each hop floor(10 + s)
    assert astra.send_time_ns(n, 0, 3, MiB, "aware")["time_ns"] == 3 * math.floor(10 + s) == 29325
    assert astra.send_time_ns(n, 0, 6, MiB, "aware")["time_ns"] == 2 * 9775


def test_fully_connected_and_switch_send():
    fc, sw = net1("FullyConnected", 4, 50, 100), net1("Switch", 4, 50, 100)
    s = 1000 / bpns(50)                                     # 18.626... ns
    assert astra.send_time_ns(fc, 1, 3, 1000, "unaware")["time_ns"] == math.floor(100 + s) == 118
    assert astra.send_time_ns(fc, 1, 3, 1000, "aware")["time_ns"] == 118
    assert astra.send_time_ns(sw, 1, 3, 1000, "unaware")["time_ns"] == math.floor(200 + s) == 218
    assert astra.send_time_ns(sw, 1, 3, 1000, "aware")["time_ns"] == 2 * 118   # truncated per link


def test_multi_dim_send_unaware_charges_first_dim_aware_routes_all():
    n = astra.parse_network("topology: [Ring, FullyConnected, Switch]\nnpus_count: [4, 4, 4]\n"
                            "bandwidth: [100, 50, 25]\nlatency: [10, 100, 1000]\n")
    # NPU 63 = address (3, 3, 3): unaware charges dim 0 only (ring 0 -> 3: 1 hop)
    assert astra.send_time_ns(n, 0, 63, MiB, "unaware")["time_ns"] == math.floor(10 + MiB / bpns(100)) == 9775
    assert astra.send_time_ns(n, 0, 48, MiB, "unaware")["time_ns"] == math.floor(2000 + MiB / bpns(25))
    # aware: dim 0 (1 hop) + dim 1 (1 hop) + dim 2 (2 hops), each hop truncated on its own
    want = (math.floor(10 + MiB / bpns(100)) + math.floor(100 + MiB / bpns(50))
            + 2 * math.floor(1000 + MiB / bpns(25)))
    assert want == 9775 + 19631 + 2 * 40062
    assert astra.send_time_ns(n, 0, 63, MiB, "aware")["time_ns"] == want


# ---- collectives on one dimension
@pytest.mark.parametrize("backend", ["unaware", "aware"])
def test_ring_collectives(backend):
    n = net1("Ring", 4, 100, 10)
    step = math.floor(10 + (16 * MiB // 4) / bpns(100))    # one share to the neighbour: 39072
    assert step == 39072
    assert astra.backend_collective_ns(n, "reduce_scatter", 16 * MiB, backend)["time_ns"] == 3 * step
    assert astra.backend_collective_ns(n, "all_gather", 16 * MiB, backend)["time_ns"] == 3 * step
    assert astra.backend_collective_ns(n, "all_reduce", 16 * MiB, backend)["time_ns"] == 6 * step


def test_fully_connected_direct_both_backends():
    n = net1("FullyConnected", 4, 50, 100)
    share = 4 * MiB // 4
    one = math.floor(100 + share / bpns(50))
    # every NPU sends its 3 peers a share each, on 3 different links: no contention in either backend
    for b in ("unaware", "aware"):
        assert astra.backend_collective_ns(n, "reduce_scatter", 4 * MiB, b)["time_ns"] == one
        assert astra.backend_collective_ns(n, "all_reduce", 4 * MiB, b)["time_ns"] == 2 * one
        assert astra.backend_collective_ns(n, "all_to_all", 4 * MiB, b)["time_ns"] == one


def test_switch_direct_aware_queues_on_the_uplink():
    p, m = 4, 4 * MiB
    n = net1("Switch", p, 50, 500)
    share = m // p
    S = math.floor(share / bpns(50))                        # uplink busy per message
    T = math.floor(500 + share / bpns(50))                  # one link, latency included
    # unaware: one round, messages do not interact: 2 hops once
    assert astra.backend_collective_ns(n, "all_to_all", m, "unaware", "direct")["time_ns"] == \
        math.floor(1000 + share / bpns(50))
    # aware: NPU i's 3 messages leave its uplink at 0, S, 2S; downlink j gets them from j-1, j-2, j-3
    # at T, T+S, T+2S, each passes straight on: the last arrives at 2S + 2T
    assert astra.backend_collective_ns(n, "all_to_all", m, "aware", "direct")["time_ns"] == (p - 2) * S + 2 * T


@pytest.mark.parametrize("backend", ["unaware", "aware"])
def test_switch_halving_doubling(backend):
    n = net1("Switch", 8, 50, 500)
    # All-Gather of 1 MiB: distance 4, 2, 1 with 128, 256, 512 KiB; one partner per round: no contention
    sizes = (MiB // 8, MiB // 4, MiB // 2)
    if backend == "unaware":
        want = sum(math.floor(1000 + x / bpns(50)) for x in sizes)
    else:
        want = sum(2 * math.floor(500 + x / bpns(50)) for x in sizes)
    r = astra.backend_collective_ns(n, "all_gather", MiB, backend)
    assert [ph["algorithm"] for ph in r["phases"]] == ["recursive"]
    assert r["time_ns"] == want
    # Reduce-Scatter: 512, 256, 128 KiB at distance 1, 2, 4: the same sums
    assert astra.backend_collective_ns(n, "reduce_scatter", MiB, backend)["time_ns"] == want


@pytest.mark.parametrize("backend", ["unaware", "aware"])
def test_hierarchical_all_reduce(backend):
    n = astra.parse_network("topology: [Ring, Switch]\nnpus_count: [4, 8]\nbandwidth: [100, 50]\n"
                            "latency: [10, 500]\n")
    ring = 3 * math.floor(10 + (MiB // 4) / bpns(100))     # dim 0: ring RS of 1 MiB (and AG back)
    v = MiB // 4                                            # dim 1 sees a quarter of the vector
    if backend == "unaware":
        hd = sum(math.floor(1000 + (v >> k) / bpns(50)) for k in (1, 2, 3))
    else:
        hd = sum(2 * math.floor(500 + (v >> k) / bpns(50)) for k in (1, 2, 3))
    r = astra.backend_collective_ns(n, "all_reduce", MiB, backend)
    assert [(ph["dim"], ph["op"]) for ph in r["phases"]] == [(0, "reduce_scatter"), (1, "reduce_scatter"),
                                                             (1, "all_gather"), (0, "all_gather")]
    assert r["time_ns"] == 2 * (ring + hd)


def test_per_dimension_algorithms():
    n = astra.parse_network("topology: [Ring, Switch]\nnpus_count: [4, 8]\nbandwidth: [100, 50]\n"
                            "latency: [10, 500]\n")
    r = astra.backend_collective_ns(n, "reduce_scatter", MiB, "unaware", "direct,ring")
    assert [ph["algorithm"] for ph in r["phases"]] == ["direct", "ring"]
    # dim 0 direct: one round of MiB/4 over 1 ring hop (neighbours) or 2 (the far one): the far one sets it
    d0 = math.floor(2 * 10 + (MiB // 4) / bpns(100))
    d1 = 7 * math.floor(1000 + (MiB // 4 // 8) / bpns(50))   # ring of 8 on a switch: 2 hops per step
    assert r["time_ns"] == d0 + d1
    with pytest.raises(ValueError, match="3 algorithms"):
        astra.backend_collective_ns(n, "all_gather", MiB, "unaware", "ring,ring,ring")


def test_backend_errors():
    with pytest.raises(ValueError, match="power-of-2"):
        astra.backend_collective_ns(net1("Switch", 6), "all_gather", MiB, "aware", "recursive")
    with pytest.raises(ValueError, match="share of 0"):
        astra.backend_collective_ns(net1("Ring", 8), "all_gather", 4, "unaware")
    with pytest.raises(ValueError, match="same NPU"):
        astra.send_time_ns(net1("Ring", 8), 3, 3, 10)
    with pytest.raises(ValueError, match="NPU"):
        astra.send_time_ns(net1("Ring", 8), 0, 8, 10)
    with pytest.raises(ValueError, match="backend"):
        astra.send_time_ns(net1("Ring", 8), 0, 1, 10, "garnet")
    with pytest.raises(ValueError, match="messages"):       # bounded work: p^2 messages over the limit
        astra.backend_collective_ns(net1("Switch", 4096), "all_to_all", 1 << 30, "aware", "direct")


def test_estimate_cli_send_and_backend(tmp_path, capsys):
    import json
    f = tmp_path / "sw.yml"
    f.write_text(NET.format(t="Switch", p=4, bw=50, lat=100))
    assert main(["estimate", "--network", str(f), "--collective", "send", "--src", "0", "--dst", "2",
                 "--size", "1000", "--backend", "aware", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["time_ns"] == 2 * math.floor(100 + 1000 / bpns(50)) and d["hops"] == 2
    assert main(["estimate", "--network", str(f), "--collective", "allgather", "--size", "4MiB",
                 "--backend", "unaware", "--network-algorithm", "direct", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["time_ns"] == math.floor(200 + MiB / bpns(50))
    assert main(["estimate", "--network", str(f), "--collective", "send", "--size", "1000"]) == 2
    assert "--src" in capsys.readouterr().err
    assert main(["estimate", "--network", str(f), "--collective", "send", "--src", "0", "--dst", "9",
                 "--size", "1000"]) == 2
    assert "NPU" in capsys.readouterr().err
