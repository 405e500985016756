"""Fuzz the ``nuna-jax`` command (issue 11): command lines, TOML systems, MSCCL XML plans and
ASTRA-sim YAML networks generated from each one's grammar, valid and broken.

Every case must end in one of two ways (README "Limits and errors"):

* exit 0, and with ``--json`` one strict JSON object on stdout (``json.loads``
  with ``parse_constant`` raising: no NaN / Infinity), without ``--json`` no
  ``nan`` / ``inf`` in the text;
* exit 2 with exactly one line on stderr and no traceback;

never exit 1 (an internal error keeps its traceback), and within a bounded
time and memory per case.  The work limits are shrunk for the tests (so a
valid case stays small); ``-m slow`` runs many more examples (400 per test,
``NUNA_FUZZ_EXAMPLES=N`` to change), and the path
model (``estimate`` without ``--network``) and ``info``, whose JIT compiles
take seconds per new shape, only there.

Cases run in-process through :func:`nuna_jax.cli.main` (a subprocess per case
would spend ~2 s importing JAX).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna_jax import limits
from nuna_jax.cli import main

SMALL_LIMITS = {"gpus": 12, "mesh_routers": 256, "cus": 2048, "io_ports": 256, "threadblocks": 1024,
                "plan_steps": 4096, "pages": 8192, "flits": 6000, "reference_flits": 600, "file_bytes": 1 << 16, "network_npus": 4096,
                "latency_combinations": 1 << 23, "axis_values": 4096, "grid_points": 1 << 16,
                "model_points": 256, "static_systems": 64, "sim_flits": 1 << 16, "search_threadblocks": 1024, "search_budget": 4096,
                "search_steps": 256, "search_restarts": 8, "relaxed_elements": 1 << 16, "e2e_configs": 1 << 14,
                "e2e_batch": 1 << 10, "e2e_seq_len": 1 << 17}
assert set(SMALL_LIMITS) == set(limits.DEFAULT_LIMITS)
CASE_TIME_S = 180.0  # a first JIT compile of the path model for a new system can take a minute on 2 busy cores
CASE_RSS_GROWTH_BYTES = 1.5e9  # growth of the process's peak RSS that one case may cause
FAST = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
DEEP = settings(max_examples=int(os.environ.get("NUNA_FUZZ_EXAMPLES", "400")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
STATS = {"cases": 0, "exit0": 0, "exit2": 0}


@pytest.fixture(autouse=True, scope="module")
def small_limits():
    saved = dict(limits.DEFAULT_LIMITS)
    limits.DEFAULT_LIMITS.update(SMALL_LIMITS)
    yield
    limits.DEFAULT_LIMITS.clear()
    limits.DEFAULT_LIMITS.update(saved)


def _no_constant(name):
    raise AssertionError(f"non-strict JSON constant {name} in the output")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def check_cli(argv: list[str]) -> int:
    """Run one command line; assert the error contract; return the exit status."""
    out, err = io.StringIO(), io.StringIO()
    rss0, t0 = _peak_rss_bytes(), time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse --help / --version only
            rc = e.code
    dt, rss1 = time.process_time() - t0, _peak_rss_bytes()
    o, e = out.getvalue(), err.getvalue()
    STATS["cases"] += 1
    assert rc in (0, 2), f"exit {rc} for {argv}:\n{e[-3000:]}"
    assert "Traceback" not in e, f"traceback for {argv}:\n{e[-3000:]}"
    if rc == 0:
        STATS["exit0"] += 1
        if "--json" in argv:
            json.loads(o, parse_constant=_no_constant)
        else:
            assert not re.search(r"\b(nan|inf|infinity)\b", o, re.I), f"non-finite number in text for {argv}:\n{o}"
    else:
        STATS["exit2"] += 1
        assert e.endswith("\n") and e.count("\n") == 1, f"not one line on stderr for {argv}: {e[:2000]!r}"
        assert len(e) <= 700, f"message too long ({len(e)} chars) for {argv}"
        assert o == "", f"output beside an error for {argv}"
    assert dt < CASE_TIME_S, f"{argv} took {dt:.1f} s"
    assert rss1 - rss0 < CASE_RSS_GROWTH_BYTES, f"{argv} grew the peak RSS by {(rss1 - rss0) / 1e9:.2f} GB"
    return rc


# ---------------------------------------------------------------------------------------------
# command-line grammar: each flag draws from valid values and from hostile ones
_HOSTILE_NUM = ["nan", "NaN", "inf", "-inf", "1e400", "-1e400", "1e-400", "0", "-0", "-1", "1e19", "1e40",
                "9" * 30, "", "x", "1_0", "0x10", "1e308", "2.5", " 3 "]


def mostly(valid, hostile, odds: int = 4):
    """``valid`` about ``odds`` times in ``odds + 1``, else ``hostile``."""
    return st.integers(0, odds).flatmap(lambda i: hostile if i == 0 else valid)


_BAD_INT = st.one_of(st.sampled_from(_HOSTILE_NUM), st.integers(-10**20, 10**20).map(str))
_BAD_FLOAT = st.one_of(st.sampled_from(_HOSTILE_NUM), st.floats(allow_nan=True, allow_infinity=True).map(repr))
_INT = mostly(st.integers(1, 12).map(str), _BAD_INT)
_FLOAT = mostly(st.floats(1e-2, 1e4).map(repr), _BAD_FLOAT)
_SIZE = mostly(
    st.builds(lambda k, u: f"{k}{u}", st.integers(1, 64), st.sampled_from(["kB", "KiB", "B", ""])),
    st.sampled_from(["1e400MB", "1e19", "1e15", "0", "-5kB", "1.5", "1.3B", "1MB", "1 GB", "1e3TB", "kB", "5XB",
                     "nan", "infMB", "1e-400", "99999999999999999999999GB"]))
_COLLECTIVE = st.sampled_from(["allgather", "reducescatter", "allreduce", "alltoall", "all_gather",
                               "AllReduce", "broadcast", "", "x" * 50])
_POLICY = mostly(st.sampled_from(["ua", "ua+nar", "numa", "numa+nar", "nap", "nap+nar", "nap*", "NAP"]),
                 st.sampled_from(["all", "bogus", ""]))
_SYSTEM = mostly(st.sampled_from(["table2", "mono", "quad"]),
                 st.sampled_from(["nosuch", "/dev/null", "/tmp", "/nonexistent.toml", ""]))
_MAX_WORK = mostly(st.sampled_from(["1", "0.5", "2", "1e300"]), st.sampled_from(["0", "-1", "nan", "inf", "1e-300"]))


def _flags(draw, spec: dict) -> list[str]:
    argv = []
    for flag, strat in spec.items():
        if draw(st.booleans()):
            argv += [flag, draw(strat)]
    return argv


@st.composite
def scenario_argv(draw, command: str, gpus=st.integers(2, 6).map(str)) -> list[str]:
    argv = [command]
    if draw(st.integers(0, 9)):  # mostly a valid core, sometimes anything
        argv += ["--collective", draw(st.sampled_from(["allgather", "reducescatter", "allreduce", "alltoall"])),
                 "--size", draw(st.builds(lambda k: f"{k}kB", st.integers(1, 64))), "--gpus", draw(gpus)]
    else:
        argv += _flags(draw, {"--collective": _COLLECTIVE, "--size": _SIZE, "--gpus": _INT})
    argv += _flags(draw, {"--policy": _POLICY, "--tbs": _INT, "--nar-granularity": _INT,
                          "--algorithm": st.sampled_from(["direct", "ring", "tree", ""]), "--system": _SYSTEM,
                          "--max-work": _MAX_WORK})
    if command == "simulate":
        argv += _flags(draw, {"--max-time-ns": _FLOAT, "--engine": st.sampled_from(["fast", "reference", "x"])})
    if command == "estimate":
        argv += _flags(draw, {"--temperature": _FLOAT})
    if draw(st.booleans()):
        argv.append("--json")
    return argv


@st.composite
def kernel_argv(draw) -> list[str]:
    argv = ["kernel", "--op", draw(mostly(st.sampled_from(["gemm+rs", "gemm+ar", "ag+gemm", "gemm", "all-reduce"]),
                                          st.just("x")))]
    dim = mostly(st.sampled_from(["4096", "8192", "2048", "16384", "65536"]), _FLOAT, odds=6)
    if draw(st.integers(0, 5)):
        argv += ["--m", draw(dim), "--n", draw(dim), "--k", draw(dim)]
    gpus = mostly(st.sampled_from(["2", "4", "8"]), _INT)
    argv += _flags(draw, {"--bytes": _FLOAT, "--gpus": gpus,
                          "--comm-sms": mostly(st.integers(1, 100).map(str), _FLOAT),
                          "--elem-bytes": mostly(st.sampled_from(["1", "2", "0.5", "4"]), _FLOAT),
                          "--schedule": mostly(st.sampled_from(["intra", "inter"]), st.just("x")),
                          "--mechanism": mostly(st.sampled_from(["ce", "tma", "reg"]), st.just("x")),
                          "--system": mostly(st.sampled_from(["h100", "h200", "b200", "nuna-table2"]), st.just("x")),
                          "--max-work": _MAX_WORK})
    if draw(st.booleans()):
        argv.append("--baseline")
    argv.append("--json")
    return argv


_GARBAGE = st.lists(st.one_of(st.sampled_from(["info", "place", "estimate", "simulate", "kernel", "--json",
                                               "--gpus", "--size", "--plan", "--network", "--system", "-x",
                                               "--", "--max-work", "--collective", "allgather"]),
                              st.text(max_size=12)), max_size=8)


@FAST
@given(argv=st.one_of(scenario_argv("place"), _GARBAGE))
def test_fuzz_place_and_garbage(argv):
    check_cli(argv)


@settings(FAST, max_examples=20)
@given(argv=scenario_argv("simulate", gpus=st.integers(2, 3).map(str)))
def test_fuzz_simulate(argv):
    check_cli(argv)


@settings(FAST, max_examples=15)
@given(argv=kernel_argv())
def test_fuzz_kernel(argv):
    check_cli(argv)


@settings(FAST, max_examples=25)
@given(argv=st.one_of(scenario_argv("estimate"), st.builds(lambda a: ["info", *a], st.lists(
    st.sampled_from(["--gpus", "0", "-3", "1e9", "nan", "--system", "/tmp", "nosuch", "/dev/zero",
                     "--max-work", "inf"]), max_size=4))))
def test_fuzz_estimate_and_info_errors(argv):
    """The path model and ``info`` compile per shape (seconds): here only cases that must fail early."""
    broken = ["--temperature", "nan"] if "estimate" in argv else ["--gpus", "0"]
    check_cli(argv + broken)


@pytest.mark.slow
@DEEP
@given(argv=st.one_of(scenario_argv("estimate"), scenario_argv("place"), scenario_argv("simulate"), kernel_argv(),
                      st.builds(lambda s, g: ["info", "--system", s, "--gpus", g, "--json"], _SYSTEM, _INT)))
def test_fuzz_every_command_deep(argv):
    check_cli(argv)


# ---------------------------------------------------------------------------------------------
# TOML systems
_SYSTEM_FIELDS = ["mesh_cols", "mesh_rows", "n_dies", "cus_per_router", "n_hbm_stacks", "n_io_ports", "n_gpus",
                  "flit_bytes", "page_bytes", "max_outstanding_per_cu", "noc_clock_ghz", "hop_cycles",
                  "die_crossing_ns", "cu_to_noc_ns", "link_bw_bytes_per_ns", "hbm_bw_bytes_per_ns",
                  "hbm_latency_ns", "port_bw_bytes_per_ns", "switch_latency_ns", "flops_bf16_per_ns",
                  "flops_fp4_per_ns", "name", "base", "nosuch_field"]
_TOML_VALUE = st.one_of(
    st.integers(1, 64).map(str), st.sampled_from(["2", "4", "6", "8", "16", "144", "256", "4096"]),
    st.floats(1e-3, 1e4).map(repr), st.integers(-10**30, 10**30).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "0", "-1", "true", "1979-05-27", "[1, 2]", "{a = 1}",
                     '"table2"', '"mono"', '"x"', '""', "1e308", "0.0", "1e-320", '"' + "y" * 300 + '"']))


@st.composite
def toml_text(draw) -> str:
    lines = []
    if draw(st.booleans()):
        lines.append("[system]")
    if draw(st.booleans()):
        lines.append(f'base = "{draw(st.sampled_from(["table2", "mono", "quad", "nope"]))}"')
    for k in draw(st.lists(st.sampled_from(_SYSTEM_FIELDS), max_size=5, unique=True)):
        lines.append(f"{k} = {draw(_TOML_VALUE)}")
    text = "\n".join(lines) + "\n"
    if not draw(st.integers(0, 7)):  # broken syntax
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.sampled_from(["=", "[", '"', "\x00", "\n= 1\n", "]]", "\xff"])) + text[cut:]
    return text


def _write(tmp: str, name: str, text: str | bytes) -> str:
    path = os.path.join(tmp, name)
    with open(path, "wb") as fh:
        fh.write(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    return path


@FAST
@given(text=toml_text())
def test_fuzz_toml_systems(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "sys.toml", text)
        check_cli(["place", "--system", path, "--collective", "allgather", "--size", "16kB", "--gpus", "2", "--json"])


@pytest.mark.slow
@DEEP
@given(text=toml_text(), cmd=st.sampled_from(["info", "estimate", "simulate"]))
def test_fuzz_toml_systems_deep(text, cmd):
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "sys.toml", text)
        extra = [] if cmd == "info" else ["--collective", "allgather", "--size", "16kB", "--gpus", "2"]
        check_cli([cmd, "--system", path, *extra, "--json"])


# ---------------------------------------------------------------------------------------------
# MSCCL XML plans: a ring All-Gather from the format's grammar, then attribute-level mutations
def ring_allgather_xml(n: int, chunks_per_gpu: int = 1) -> dict:
    """A valid msccl-tools ring All-Gather as a tree of (tag, attrs, children)."""
    c = chunks_per_gpu
    gpus = []
    for g in range(n):
        nxt, prv = (g + 1) % n, (g - 1) % n
        steps = [("step", {"s": "0", "type": "s", "srcbuf": "o", "srcoff": str(g * c), "dstbuf": "o",
                           "dstoff": str(g * c), "cnt": str(c), "depid": "-1", "deps": "-1", "hasdep": "0"}, [])]
        for r in range(1, n - 1):
            blk = (g - r) % n
            steps.append(("step", {"s": str(r), "type": "rcs", "srcbuf": "o", "srcoff": str(blk * c),
                                   "dstbuf": "o", "dstoff": str(blk * c), "cnt": str(c), "depid": "-1",
                                   "deps": "-1", "hasdep": "0"}, []))
        blk = (g - (n - 1)) % n
        steps.append(("step", {"s": str(n - 1), "type": "r", "srcbuf": "o", "srcoff": str(blk * c), "dstbuf": "o",
                               "dstoff": str(blk * c), "cnt": str(c), "depid": "-1", "deps": "-1",
                               "hasdep": "0"}, []))
        tb = ("tb", {"id": "0", "send": str(nxt), "recv": str(prv), "chan": "0"}, steps)
        gpus.append(("gpu", {"id": str(g), "i_chunks": "0", "o_chunks": str(n * c), "s_chunks": "0"}, [tb]))
    return ("algo", {"name": "ring", "proto": "Simple", "nchannels": "1", "nchunksperloop": str(n * c),
                     "ngpus": str(n), "coll": "allgather", "inplace": "1"}, gpus)


def to_xml(node) -> str:
    tag, attrs, children = node
    a = "".join(f' {k}="{v}"' for k, v in attrs.items())
    if not children:
        return f"<{tag}{a}/>"
    return f"<{tag}{a}>\n" + "\n".join(to_xml(ch) for ch in children) + f"\n</{tag}>"


_ATTR_VALUE = st.one_of(st.integers(-2, 12).map(str), st.sampled_from(
    ["", "x", "1e3", "99999999999999999999", str(2**40), str(2**62), "-1", "o", "i", "s", "q", "rrcs", "nop",
     "1" * 60, "&amp;", "0x1"]))
_XML_ATTACKS = [
    '<?xml version="1.0"?><!DOCTYPE algo [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">]>'
    '<algo ngpus="2" nchunksperloop="1" name="&b;"/>',
    '<?xml version="1.0"?><!DOCTYPE algo SYSTEM "http://example.invalid/x.dtd"><algo/>',
    '<?xml version="1.0"?><!DOCTYPE algo [<!ENTITY x SYSTEM "file:///etc/passwd">]><algo name="&x;"/>',
    '<algo ngpus="100000000" nchunksperloop="1"/>',
    '<algo ngpus="2" nchunksperloop="1"><gpu id="0"/><gpu id="1"/></algo>',
    "<algo", "", "\xff\xfe<", "<algo ngpus='2' nchunksperloop='1'>" + "<gpu>" * 200,
]


def _mutate(node, draw, p_keep: int):
    tag, attrs, children = node
    attrs = dict(attrs)
    for k in list(attrs):
        if not draw(st.integers(0, p_keep)):
            if draw(st.booleans()):
                attrs[k] = draw(_ATTR_VALUE)
            else:
                del attrs[k]
    kids = [_mutate(ch, draw, p_keep) for ch in children]
    if kids and not draw(st.integers(0, p_keep)):
        kids.pop(draw(st.integers(0, len(kids) - 1)))
    return (tag, attrs, kids)


@st.composite
def msccl_text(draw) -> str:
    if not draw(st.integers(0, 9)):
        return draw(st.sampled_from(_XML_ATTACKS))
    tree = ring_allgather_xml(draw(st.integers(2, 6)), draw(st.integers(1, 3)))
    if draw(st.integers(0, 3)):  # mostly mutated; p_keep sets how rarely each attribute is touched
        tree = _mutate(tree, draw, draw(st.sampled_from([8, 30, 100])))
    return to_xml(tree)


@FAST
@given(text=msccl_text(), size=st.sampled_from(["12kB", "48kB", "1kB", "7B", "1e400MB"]))
def test_fuzz_msccl_plans(text, size):
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "plan.xml", text)
        check_cli(["place", "--plan", path, "--size", size, "--json"])


@pytest.mark.slow
@DEEP
@given(text=msccl_text(), size=st.sampled_from(["12kB", "48kB", "1kB"]), cmd=st.sampled_from(["estimate", "simulate"]))
def test_fuzz_msccl_plans_deep(text, size, cmd):
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "plan.xml", text)
        check_cli([cmd, "--plan", path, "--size", size, "--json"])


# ---------------------------------------------------------------------------------------------
# ASTRA-sim YAML networks
_YAML_NUM = st.one_of(st.integers(1, 16).map(str), st.floats(1e-2, 1e4).map(repr), st.sampled_from(
    ["0", "-1", ".nan", ".inf", "-.inf", "1e400", "1.0e+400", "1e308", "1.0e+308", "99999999999999999999",
     "true", "null", "'8'", "x", "[1]", "{a: 1}", "65536", "1e-320", "0x10", "2.5"]))
_YAML_TOPO = st.sampled_from(["Ring", "FullyConnected", "Switch", "ring", "Torus", "1", "!!python/name:os.system",
                              "*a", "&a x"])


@st.composite
def yaml_text(draw) -> str:
    n = draw(st.integers(0, 4))
    keys = {"topology": _YAML_TOPO, "npus_count": _YAML_NUM, "bandwidth": _YAML_NUM, "latency": _YAML_NUM}
    lines = []
    for k, strat in keys.items():
        if not draw(st.integers(0, 12)):
            continue  # a missing key
        m = n if draw(st.integers(0, 8)) else draw(st.integers(0, 5))
        vals = [draw(strat) for _ in range(m)]
        if draw(st.booleans()):
            lines.append(f"{k}: [ {', '.join(vals)} ]")
        else:
            lines.append(f"{k}:")
            lines += [f"  - {v}" for v in vals]
    if not draw(st.integers(0, 10)):
        lines.append(draw(st.sampled_from(["extra: 1", "a: &x [1,2]\nb: [*x,*x,*x]", "!!python/object:os.system {}",
                                            "topology: [Ring", "\t- bad", "%YAML 9.9"])))
    return "\n".join(lines) + "\n"


@FAST
@given(text=yaml_text(), coll=st.sampled_from(["allgather", "allreduce", "alltoall", "reducescatter"]),
       alg=st.sampled_from([None, "direct", "ring", "recursive", "tree"]))
def test_fuzz_astra_networks(text, coll, alg):
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "net.yml", text)
        argv = ["estimate", "--collective", coll, "--size", "1MB", "--network", path, "--json"]
        if alg:
            argv += ["--network-algorithm", alg]
        check_cli(argv)


def test_hostile_examples_of_issue_11(tmp_path):
    """The examples named in issue 11, each with exit 2 and one clear line (or success)."""
    big = tmp_path / "big.xml"
    big.write_text('<algo ngpus="100000000" nchunksperloop="1"/>')  # 43 bytes, once 9.5 GB of set
    miss = tmp_path / "miss.xml"
    miss.write_text('<algo ngpus="200000" nchunksperloop="1"><gpu id="0"/></algo>')
    named = tmp_path / "named.toml"
    named.write_text('base = "table2"\nname = "mine"\nn_gpus = 4\n')
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('n_gpus = "eight"\n')
    ovf = tmp_path / "ovf.yml"
    ovf.write_text("topology: [Ring, Ring, Ring, Ring]\nnpus_count: [65536, 65536, 65536, 65536]\n"
                   "bandwidth: [1, 1, 1, 1]\nlatency: [1, 1, 1, 1]\n")
    lat = tmp_path / "lat.yml"
    lat.write_text("topology: [Ring]\nnpus_count: [8]\nbandwidth: [100]\nlatency: [1e308]\n")
    cnt = tmp_path / "cnt.yml"
    cnt.write_text("topology: [Ring]\nnpus_count: [1.0e+400]\nbandwidth: [100]\nlatency: [1]\n")
    place = ["place", "--collective", "allgather", "--gpus", "2"]
    cases = [
        (["place", "--plan", str(big), "--size", "1MB"], "ngpus=100000000"),
        (["place", "--plan", str(miss), "--size", "1MB"], "199999 in all"),
        (["place", "--plan", "/dev/zero", "--size", "1MB"], "not a regular file"),
        ([*place, "--size", "1e400MB"], "out of range"),
        ([*place, "--size", "1e19"], "out of range"),
        ([*place, "--size", "1MB", "--tbs", "1000000000"], "threadblocks"),
        (["place", "--collective", "allgather", "--size", "1MB", "--gpus", "100000"], "gpus"),
        (["simulate", "--collective", "allgather", "--size", "1MB", "--max-time-ns", "inf"], "max_time_ns"),
        (["simulate", "--collective", "allgather", "--gpus", "2", "--size", "16kB", "--max-time-ns", "1"],
         "too small"),
        (["estimate", "--collective", "allgather", "--size", "1MB", "--temperature", "0"], "temperature"),
        (["estimate", "--collective", "allgather", "--size", "1MB", "--temperature", "nan"], "temperature"),
        (["estimate", "--collective", "allgather", "--size", "1MB", "--temperature", "-1"], "temperature"),
        (["kernel", "--op", "gemm+rs", "--m", "4096", "--n", "4096", "--k", "4096", "--schedule", "inter",
          "--comm-sms", "nan"], "comm_sms"),
        (["kernel", "--op", "gemm+rs", "--m", "1e40", "--n", "4096", "--k", "4096"], "--m"),
        (["estimate", "--collective", "allgather", "--size", "1MB", "--network", str(ovf)], "NPUs"),
        (["estimate", "--collective", "allgather", "--size", "1MB", "--network", str(lat)], "latency"),
        (["estimate", "--collective", "allgather", "--size", "1MB", "--network", str(cnt)], "npus_count"),
        (["info", "--system", str(wrong)], "n_gpus"),
        (["info", "--system", str(tmp_path)], "not a regular file"),
    ]
    for argv, needle in cases:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv)
        assert rc == 2, (argv, err.getvalue())
        line = err.getvalue()
        assert line.count("\n") == 1 and needle in line, (argv, line)
        if "wrong" in str(argv) or ".xml" in str(argv) or ".yml" in str(argv):
            assert str(tmp_path) in line  # names the file
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["place", "--system", str(named), "--collective", "allgather", "--size", "16kB", "--json"]) == 0
    assert json.loads(out.getvalue())["n_gpus"] == 4  # name with base: a named custom system
