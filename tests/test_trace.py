"""`simulate --trace`: a Chrome / Perfetto trace-event file of the simulator's resource services.

The structure is checked against the trace-event format (the JSON object form): ``traceEvents``
with complete events (``ph: "X"``, ``ts``/``dur`` in microseconds, integer ``pid``/``tid``) and
metadata events (``ph: "M"``: ``process_name``, ``thread_name``, sort indices), every track named;
and against the simulation: no two slices of one resource overlap (FCFS, one flit at a time),
the CU slices hold every flit once, all slices together hold every flit-hop.
"""

import json
from collections import defaultdict

import numpy as np
import pytest

from nuna_jax.cli import main
from nuna_jax.presets import preset
from nuna_jax.scenario import make_scenario


def check_trace_format(doc):
    """The trace-event JSON object format, as Perfetto's and Chrome's JSON importers read it."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit") in ("ns", "ms")
    named_threads, named_procs = set(), set()
    slices = []
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and isinstance(e["name"], str)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
            if e["name"].endswith("_name"):
                assert isinstance(e["args"]["name"], str) and e["args"]["name"]
                (named_threads if e["name"] == "thread_name" else named_procs).add(
                    (e["pid"], e["tid"]) if e["name"] == "thread_name" else e["pid"])
            else:
                assert isinstance(e["args"]["sort_index"], int)
        else:
            assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
            assert e["ts"] >= 0 and e["dur"] > 0
            slices.append(e)
    for e in slices:                                     # every track and process has a name
        assert (e["pid"], e["tid"]) in named_threads and e["pid"] in named_procs
    return slices


def check_against_run(slices, d, complete=True):
    by_track, as_ns = defaultdict(list), defaultdict(list)
    for e in slices:
        by_track[(e["pid"], e["tid"])].append((round(e["ts"] * 1e6), round(e["dur"] * 1e6)))   # ps
        # what Perfetto's JSON importer keeps: whole ns, ts and dur truncated one by one
        as_ns[(e["pid"], e["tid"])].append((int(e["ts"] * 1000.0), int(e["dur"] * 1000.0)))
    for tracks in (by_track, as_ns):                     # one resource serves one flit at a time,
        for ivs in tracks.values():                      # and the slices stay properly nested in ns
            ivs.sort()
            for (a, da), (b, _) in zip(ivs, ivs[1:]):
                assert a + da <= b
    end_ps = max(a + da for ivs in by_track.values() for a, da in ivs)
    # ts/dur are microseconds, exact to the ps (each dur 1 ps short of its service)
    assert end_ps + 1 <= round(d["completion_ns"] * 1000)
    if complete:
        cu = [e for e in slices if e["tid"] < 576]       # Table 2: CUs are GPU-local ids 0..575
        assert sum(e["args"]["flits"] for e in cu) == d["flits_injected"]
        assert sum(e["args"]["flits"] for e in slices) == d["flit_hops"]


def test_trace_of_the_8gpu_1mb_allgather(tmp_path, capsys):
    out = tmp_path / "ag.json"
    # NAP+NAR with 112 threadblocks per GPU (its best count): 362,544 services, within the default bound
    rc = main(["simulate", "--collective", "allgather", "--size", "1MB", "--gpus", "8", "--policy", "nap+nar",
               "--tbs", "112", "--trace", str(out), "--json"])
    assert rc == 0
    cap = capsys.readouterr()
    d = json.loads(cap.out)
    assert "trace written to" in cap.err and "perfetto" in cap.err.lower()
    doc = json.loads(out.read_text())
    slices = check_trace_format(doc)
    assert d["trace"]["slices"] == len(slices) and d["trace"]["truncated"] is False
    assert d["trace"]["bytes"] == out.stat().st_size
    check_against_run(slices, d)
    assert {e["pid"] for e in slices} == set(range(8))
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    for kind in ("CU ", "HBM stack ", "link (", "egress port ", "ingress port "):
        assert any(n.startswith(kind) for n in names), kind
    assert doc["otherData"]["completion_ns"] == d["completion_ns"]
    # the summary fields: the event loop is a small part of the command
    assert 0 < d["sim_s"] <= d["sim_wall_s"] <= d["wall_s"]
    assert d["flit_hops_per_s"] == pytest.approx(d["flit_hops"] / d["sim_s"])
    assert set(d["time_s"]) == {"scenario", "program", "engine_setup", "event_loop", "trace", "plot"}
    assert sum(d["time_s"].values()) <= d["wall_s"] * 1.001


def test_trace_bound_keeps_a_complete_prefix(tmp_path, capsys):
    out = tmp_path / "small.json"
    args = ["simulate", "--collective", "allgather", "--size", "20kB", "--gpus", "2", "--policy", "ua",
            "--tbs", "2", "--json"]
    assert main(args + ["--trace", str(out)]) == 0
    full = json.loads(capsys.readouterr().out)
    whole = check_trace_format(json.loads(out.read_text()))
    assert full["trace"]["truncated"] is False
    assert main(args + ["--trace", str(out), "--trace-max-slices", "50"]) == 0
    cap = capsys.readouterr()
    d = json.loads(cap.out)
    assert "--trace-max-slices" in cap.err and "bounded" in cap.err
    doc = json.loads(out.read_text())
    part = check_trace_format(doc)
    assert d["trace"]["truncated"] is True and len(part) <= 50 and doc["otherData"]["truncated"] is True
    cut_us = d["trace"]["cut_ns"] / 1000
    # exactly the slices of the whole trace that start before the cut
    key = lambda e: (e["pid"], e["tid"], e["ts"], e["dur"], e["args"]["flow"])   # noqa: E731
    assert sorted(map(key, part)) == sorted(key(e) for e in whole if e["ts"] < cut_us)
    check_against_run(part, d, complete=False)
    # the simulation's numbers do not depend on the trace
    assert d["completion_ns"] == full["completion_ns"]


def test_trace_path_is_checked_before_simulating(tmp_path, capsys):
    base = ["simulate", "--collective", "allgather", "--size", "20kB", "--gpus", "2", "--policy", "ua"]
    assert main(base + ["--trace", str(tmp_path / "no" / "such" / "t.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(base + ["--trace", str(tmp_path / "t.txt")]) == 2
    assert ".json" in capsys.readouterr().err
    (tmp_path / "d.json").mkdir()
    assert main(base + ["--trace", str(tmp_path / "d.json")]) == 2
    assert "directory" in capsys.readouterr().err
    assert main(base + ["--trace-max-slices", "10"]) == 2
    assert "--trace" in capsys.readouterr().err


def test_fast_and_reference_record_the_same_services():
    from nuna_jax.sim import simulate
    sc = make_scenario(preset("table2", n_gpus=2), collective="allgather", size_bytes=20_000, policy="nap+nar",
                       tbs_per_gpu=2)
    a = simulate(sc.system, sc.traffic, trace_services=10**5)
    b = simulate(sc.system, sc.traffic, engine="reference", trace_services=10**5)
    rows = lambda r: sorted(zip(*(np.asarray(r.trace[k]).tolist()   # noqa: E731
                                  for k in ("resource", "start_ps", "flit", "service_ps"))))
    assert a.trace["complete_before_ps"] is None and b.trace["complete_before_ps"] is None
    assert rows(a) == rows(b) and len(rows(a)) == a.flit_hops
    # a small recording buffer: every service that starts before the cut, none lost
    c = simulate(sc.system, sc.traffic, trace_services=100)
    cut = c.trace["complete_before_ps"]
    assert cut is not None and len(c.trace["start_ps"]) == 100
    before = [x for x in rows(a) if x[1] < cut]
    assert sorted(x for x in rows(c) if x[1] < cut) == before and len(before) > 0
    assert c.completion_ps == a.completion_ps


def test_trace_document_equals_the_written_file(tmp_path):
    from nuna_jax.sim import simulate
    from nuna_jax.sim.trace import trace_document, write_trace
    sc = make_scenario(preset("table2", n_gpus=2), collective="allgather", size_bytes=20_000, policy="ua",
                       tbs_per_gpu=2)
    r = simulate(sc.system, sc.traffic, trace_services=10**5)
    doc, info = trace_document(sc.system, sc.traffic, r)
    w = write_trace(str(tmp_path / "t.json"), sc.system, sc.traffic, r)
    assert json.loads((tmp_path / "t.json").read_text()) == doc
    assert {k: w[k] for k in info} == info and len(check_trace_format(doc)) == info["slices"]
