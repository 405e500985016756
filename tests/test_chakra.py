"""Chakra execution traces: the shipped ASTRA-sim microbenchmarks, generated traces with a critical
path worked by hand, and hostile files (exit 2 naming file and node, bounded time)."""

import gzip
import json
import math
import random
import time
from pathlib import Path

import pytest

from nuna_jax import chakra
from nuna_jax.cli import main

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "chakra" / "astra-sim-microbenchmarks"
MiB = 1 << 20


def bpns(gbps):
    return gbps * 1073741824 / 1e9


def write_ranks(d: Path, per_rank, prefix="w", version="0.0.4"):
    d.mkdir(parents=True, exist_ok=True)
    for r, nodes in enumerate(per_rank):
        (d / f"{prefix}.{r}.et").write_bytes(chakra.encode_trace(nodes, version))
    return d


def switch_net(tmp_path, p=2, bw=50, lat=100):
    f = tmp_path / "net.yml"
    f.write_text(f"topology: [Switch]\nnpus_count: [{p}]\nbandwidth: [{bw}]\nlatency: [{lat}]\n")
    return f


# ---- the shipped traces
@pytest.mark.parametrize("kind, ctype", [("all_gather", "ALL_GATHER"), ("all_reduce", "ALL_REDUCE")])
def test_shipped_traces_parse_as_named(kind, ctype):
    d = SHARED / kind / "8npus_1MB"
    if not d.is_dir():
        pytest.skip("shared Chakra traces not present")
    t = chakra.load_trace(d)
    assert t.n_ranks == 8
    assert len(t.collectives) == 1
    c = t.collectives[0]
    assert c.comm_type == ctype and c.size_bytes == MiB and c.ranks == tuple(range(8))
    assert t.ranks[3].metadata["version"] == "0.0.4"
    assert t.p2p == []


def test_shipped_trace_on_a_network(tmp_path, capsys):
    d = SHARED / "all_gather" / "8npus_1MB"
    if not d.is_dir():
        pytest.skip("shared Chakra traces not present")
    net = switch_net(tmp_path, p=8, bw=50, lat=500)
    assert main(["trace", str(d), "--network", str(net), "--backend", "aware", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # ASTRA-sim's All-Gather comm_size is each NPU's input: halving-doubling on a switch of 8 sends
    # 1, 2, 4 MiB (distance 4, 2, 1), each over 2 links (aware)
    want = sum(2 * math.floor(500 + x / bpns(50)) for x in (MiB, 2 * MiB, 4 * MiB))
    assert out["collectives"][0]["time_ns"] == {"ASTRA-sim aware": want}
    assert out["collectives"][0]["timed_size_bytes"] == 8 * MiB
    assert out["critical_path_ns"] == {"ASTRA-sim aware": want}
    assert out["size_cdf"] == [{"size_bytes": MiB, "fraction": 1.0}]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["all_gather", "all_reduce"])
def test_shipped_trace_on_the_pod(kind, capsys):
    """The path model's per-policy times (checked against the library's estimate) and the saving."""
    import nuna_jax as nj
    d = SHARED / kind / "8npus_1MB"
    if not d.is_dir():
        pytest.skip("shared Chakra traces not present")
    assert main(["trace", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = nj.preset("table2", n_gpus=8)
    size = 8 * MiB if kind == "all_gather" else MiB      # All-Gather: comm_size is the per-rank input
    for p in ("ua", "nap+nar"):
        want = nj.estimate(nj.make_scenario(s, kind.replace("_", ""), size, p))["time_ns"]
        assert out["collectives"][0]["time_ns"][p.upper()] == pytest.approx(want, rel=1e-6)
    cp = out["critical_path_ns"]
    assert out["speedup"]["NAP+NAR"] == pytest.approx(cp["UA"] / cp["NAP+NAR"])
    assert out["saving_ns"] == pytest.approx(cp["UA"] - cp["NAP+NAR"]) and out["saving_ns"] > 0
    assert main(["trace", str(d)]) == 0
    text = capsys.readouterr().out
    assert "NAP+NAR saves" in text and "UA" in text


# ---- a generated trace: compute + collective + send/recv, critical path by hand
def _workload(flops_ns=None):
    r0 = [dict(id=1, name="fwd", type="COMP", duration_micros=5),
          dict(id=2, name="ar", type="COMM_COLL", data_deps=[1], comm_type=0, comm_size=MiB),
          dict(id=3, name="bwd", type="COMP", data_deps=[2], duration_micros=2),
          dict(id=4, name="send", type="COMM_SEND", data_deps=[3], comm_dst=1, comm_size=1000, comm_tag=7)]
    r1 = [dict(id=1, name="fwd", type="COMP", duration_micros=8),
          dict(id=2, name="ar", type="COMM_COLL", data_deps=[1], comm_type=0, comm_size=MiB),
          dict(id=3, name="bwd", type="COMP", data_deps=[2], num_ops=3000 * flops_ns if flops_ns else 0),
          dict(id=9, name="side", type="COMP", duration_micros=1),
          dict(id=5, name="recv", type="COMM_RECV", data_deps=[3], comm_src=0, comm_size=1000, comm_tag=7),
          dict(id=6, name="tail", type="COMP", ctrl_deps=[5], duration_micros=1)]
    return [r0, r1]


def test_generated_trace_critical_path_by_hand(tmp_path, capsys):
    from nuna_jax.models.llm.hardware import machine
    from nuna_jax.presets import preset
    flops_ns = machine(preset("table2"))["flops_per_ns"]
    d = write_ranks(tmp_path / "t", _workload(flops_ns))
    net = switch_net(tmp_path)
    assert main(["trace", str(d), "--network", str(net), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    key = "ASTRA-sim unaware"
    # All-Reduce on a 2-NPU switch, halving-doubling: RS sends half the vector, AG sends it back
    ar = 2 * math.floor(200 + (MiB // 2) / bpns(50))
    send = math.floor(200 + 1000 / bpns(50))
    # rank 1's 8 us forward is the later arrival; rank 1's backward is 3000 ns by roofline (num_ops)
    want = 8000 + ar + max(2000, 3000) + send + 1000
    assert out["collectives"][0]["time_ns"][key] == ar
    assert out["p2p"][0]["time_ns"] == send
    assert out["critical_path_ns"][key] == pytest.approx(want, abs=1e-6)
    assert [(x["rank"], x["node_id"]) for x in out["critical_path"]] == [(1, 1), (0, 2), (1, 3), (0, 4), (1, 6)]
    assert out["collectives"][0]["ranks"] == [0, 1] and out["collectives"][0]["size_bytes"] == MiB


def test_critical_path_library_weights(tmp_path):
    d = write_ranks(tmp_path / "t", _workload())
    t = chakra.load_trace(d)
    w = {"fwd": 10.0, "bwd": 1.0, "side": 50.0, "tail": 4.0}
    r = chakra.critical_path(t, lambda rank, n: w.get(n.name, 0.0), lambda c: 100.0, lambda m: 3.0)
    # max(10, 10) + 100 + 1 + 3 + 4 = 118 beats the lone 50 ns node
    assert r["critical_path_ns"] == 118.0


def test_gzip_and_packed_deps_and_plot(tmp_path, capsys):
    d = tmp_path / "g"
    d.mkdir()
    for r, nodes in enumerate(_workload()):
        (d / f"w.{r}.et.gz").write_bytes(gzip.compress(chakra.encode_trace(nodes)))
    t = chakra.load_trace(d)
    assert t.ranks[1].by_id[6].ctrl_deps == [5] and t.ranks[0].by_id[2].data_deps == [1]
    png = tmp_path / "cdf.png"
    assert main(["trace", str(d), "--network", str(switch_net(tmp_path)), "--plot", str(png)]) == 0
    assert png.stat().st_size > 1000
    assert "critical path" in capsys.readouterr().out


# ---- hostile traces: exit 2, naming the file and the node
def _err(capsys, argv):
    t0 = time.process_time()
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert time.process_time() - t0 < 20
    return err


def _one_rank(tmp_path, nodes, name="h"):
    d = tmp_path / name
    return write_ranks(d, [nodes], prefix="h")


def test_unknown_node_type(tmp_path, capsys):
    d = _one_rank(tmp_path, [dict(id=4, name="odd", type=42)])
    err = _err(capsys, ["trace", str(d)])
    assert "h.0.et" in err and "node 4" in err and "unknown node type 42" in err


def test_cycle(tmp_path, capsys):
    d = _one_rank(tmp_path, [dict(id=1, type="COMP", data_deps=[2]), dict(id=2, type="COMP", ctrl_deps=[1])])
    err = _err(capsys, ["trace", str(d)])
    assert "h.0.et" in err and "cycle" in err and "node" in err


def test_missing_dependency_and_duplicate_id(tmp_path, capsys):
    d = _one_rank(tmp_path, [dict(id=1, type="COMP", data_deps=[77])])
    assert "node 1" in _err(capsys, ["trace", str(d)])
    d = _one_rank(tmp_path, [dict(id=1, type="COMP"), dict(id=1, type="COMP")], name="dup")
    assert "node id 1 appears twice" in _err(capsys, ["trace", str(d)])


def test_truncated_and_bad_length_prefix(tmp_path, capsys):
    good = chakra.encode_trace(_workload()[0])
    f = tmp_path / "cut.0.et"
    f.write_bytes(good[:-5])
    err = _err(capsys, ["trace", str(f)])
    assert "cut.0.et" in err and "message" in err
    f = tmp_path / "bad.0.et"
    f.write_bytes(good + b"\xff\xff\xff\x0f" + b"\x00" * 8)
    err = _err(capsys, ["trace", str(f)])
    assert "bad.0.et" in err and "length prefix" in err
    f = tmp_path / "var.0.et"
    f.write_bytes(good + b"\xff" * 12)
    assert "varint" in _err(capsys, ["trace", str(f)])
    f = tmp_path / "empty.0.et"
    f.write_bytes(b"")
    assert "empty" in _err(capsys, ["trace", str(f)])


def test_ranks_that_disagree(tmp_path, capsys):
    a, b = _workload()
    b[1] = dict(b[1], comm_size=2 * MiB)
    d = write_ranks(tmp_path / "dis", [a, b])
    err = _err(capsys, ["trace", str(d)])
    assert "disagree" in err and "w.0.et node 2" in err and "w.1.et node 2" in err
    b = [n for n in _workload()[1] if n["type"] != "COMM_RECV"]
    b[-1] = dict(b[-1], ctrl_deps=[])
    d = write_ranks(tmp_path / "norecv", [a, b])
    err = _err(capsys, ["trace", str(d)])
    assert "w.0.et" in err and "node 4" in err and "receive" in err


def test_missing_rank_and_deadlock(tmp_path, capsys):
    d = tmp_path / "gap"
    d.mkdir()
    (d / "w.0.et").write_bytes(chakra.encode_trace([dict(id=1, type="COMP")]))
    (d / "w.2.et").write_bytes(chakra.encode_trace([dict(id=1, type="COMP")]))
    assert "rank 1 is missing" in _err(capsys, ["trace", str(d)])
    r0 = [dict(id=1, type="COMM_RECV", comm_src=1, comm_size=8), dict(id=2, type="COMM_SEND", data_deps=[1],
                                                                       comm_dst=1, comm_size=8)]
    r1 = [dict(id=1, type="COMM_RECV", comm_src=0, comm_size=8), dict(id=2, type="COMM_SEND", data_deps=[1],
                                                                       comm_dst=0, comm_size=8)]
    d = write_ranks(tmp_path / "dl", [r0, r1])
    err = _err(capsys, ["trace", str(d), "--network", str(switch_net(tmp_path))])
    assert "deadlock" in err and "node" in err


def test_sizes_beyond_limits(tmp_path, capsys):
    d = _one_rank(tmp_path, [dict(id=3, name="huge", type="COMM_COLL", comm_type=0, comm_size=1 << 41)])
    err = _err(capsys, ["trace", str(d)])
    assert "node 3" in err and "trace_comm_bytes" in err
    d = _one_rank(tmp_path, [dict(id=3, type="COMM_COLL", comm_type=12, comm_size=8)], name="ct")
    assert "comm_type 12" in _err(capsys, ["trace", str(d)])
    d = _one_rank(tmp_path, [dict(id=i, type="COMP") for i in range(300)], name="many")
    assert "trace_nodes" in _err(capsys, ["trace", str(d), "--max-work", "0.0002"])
    f = tmp_path / "bomb.0.et.gz"
    f.write_bytes(gzip.compress(b"\x00" * (4 << 20)))
    assert "decompresses" in _err(capsys, ["trace", str(f), "--max-work", "0.001"])


def test_fuzz_mutated_files_exit_cleanly(tmp_path):
    """Random truncations, byte flips and insertions of a valid file: a result or a ValueError naming
    the file, never another exception, each in bounded time."""
    good = chakra.encode_trace(_workload()[1])
    rng = random.Random(20261202)
    f = tmp_path / "fz.0.et"
    t0 = time.process_time()
    outcomes = {"ok": 0, "error": 0}
    for k in range(400):
        b = bytearray(good)
        op = k % 3
        if op == 0:
            b = b[:rng.randrange(len(b))]
        elif op == 1:
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        else:
            i = rng.randrange(len(b))
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
        f.write_bytes(bytes(b))
        try:
            chakra.load_trace(f)
            outcomes["ok"] += 1
        except ValueError as e:
            assert "fz.0.et" in str(e)
            outcomes["error"] += 1
    assert outcomes["error"] > 100 and time.process_time() - t0 < 30


def test_fuzz_through_the_cli(tmp_path, capsys):
    good = chakra.encode_trace(_workload()[0])
    rng = random.Random(7)
    net = switch_net(tmp_path)
    for k in range(12):
        b = bytearray(good)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        f = tmp_path / f"c{k}.0.et"
        f.write_bytes(bytes(b))
        rc = main(["trace", str(f), "--network", str(net)])
        assert rc in (0, 2), capsys.readouterr().err
        capsys.readouterr()


def test_involved_dim_and_per_dimension_algorithms(tmp_path, capsys):
    """A 2 x 4 network; the trace's All-Gather runs over dimension 1 only (involved_dim), ring there."""
    net = tmp_path / "two.yml"
    net.write_text("topology: [Ring, Switch]\nnpus_count: [2, 4]\nbandwidth: [100, 50]\nlatency: [10, 500]\n")
    per = [[dict(id=1, type="COMM_COLL", comm_type=2, comm_size=MiB, involved_dim=[False, True])] for _ in range(8)]
    d = write_ranks(tmp_path / "inv", per)
    assert main(["trace", str(d), "--network", str(net), "--network-algorithm", "direct,ring", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # groups of 4 along dimension 1; ring All-Gather: 3 rounds of each NPU's 1 MiB input, 2 switch hops
    want = 3 * math.floor(1000 + MiB / bpns(50))
    c = out["collectives"][0]
    assert c["involved_dim"] == [False, True] and c["timed_size_bytes"] == 4 * MiB
    assert c["time_ns"] == {"ASTRA-sim unaware": want}
    per = [[dict(id=1, type="COMM_COLL", comm_type=2, comm_size=MiB, involved_dim=[True])] for _ in range(8)]
    d = write_ranks(tmp_path / "inv2", per)
    err = _err(capsys, ["trace", str(d), "--network", str(net)])
    assert "involved_dim" in err and "node 1" in err
