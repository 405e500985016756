"""Every subcommand's ``--json`` against the schema kept in the repository (nuna_jax/schemas/cli.schema.json,
docs/json.md), and its text output: one vocabulary (``n_gpus``, ``size_bytes``, canonical policy names,
integers as integers, System field names, ``provenance``)."""

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

from nuna_jax.cli import main
from nuna_jax.schemas import SCHEMA_PATH, check, schema, validate

DATA = Path(__file__).parent / "data"
SHARED_MSCCL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "msccl"

NOC_CFG = ("topology = mesh;\nk = 2;\nn = 2;\nrouting_function = dor;\ntraffic = bitcomp;\n"
           "injection_rate = 0.002;\nsample_period = 2000;\n")
GRID = ('[sweep]\nsystem = "mono"\n[axes]\nmodel = ["closed_form"]\ncollective = ["allgather"]\ngpus = [2]\n'
        'size = ["100kB"]\n')

SMALL = ["--system", "mono", "--gpus", "2"]
AG = ["--collective", "allgather", "--size", "30kB"]

# (id, command for the schema, argv without --json); the costly ones (numba / the simulator / searches) are slow
CASES = [
    ("info", "info", ["info", *SMALL]),
    ("place", "place", ["place", *AG, *SMALL, "--policy", "ua", "--tbs", "1"]),
    ("estimate", "estimate", ["estimate", *AG, *SMALL, "--policy", "nap+nar", "--tbs", "1"]),
    ("estimate-network", "estimate", ["estimate", "--collective", "allreduce", "--size", "1MB",
                                      "--network", str(DATA / "astra_switch8.yml")]),
    ("estimate-plan", "estimate", ["estimate", "--plan", str(DATA / "ag3_ring.xml"), "--size", "1MB",
                                   "--system", "mono", "--policy", "UA"]),
    ("kernel", "kernel", ["kernel", "--op", "all-reduce", "--bytes", "1MB", "--gpus", "8", "--system", "h100"]),
    ("kernel-nccl", "kernel", ["kernel", "--op", "all-reduce", "--bytes", "1MB", "--gpus", "8", "--system", "h100",
                               "--baseline"]),
    ("kernel-workload", "kernel", ["kernel", "--op", "ring-attention", "--gpus", "8", "--system", "h100", "--baseline"]),
    ("kernel-gemm", "kernel", ["kernel", "--op", "gemm+rs", "--m", "4096", "--n", "4096", "--k", "4096",
                               "--gpus", "8"]),
    ("reproduce-list", "reproduce", ["reproduce", "--list"]),
    ("trace-network", "trace", ["trace", "{trace}", "--network", "{net}"]),
    pytest.param("trace-pod", "trace", ["trace", "{trace}", *SMALL], marks=pytest.mark.slow),
    ("e2e-list", "e2e", ["e2e", "--list"]),
    pytest.param("estimate-all", "estimate", ["estimate", *AG, *SMALL, "--policy", "all", "--tbs", "1"],
                 marks=pytest.mark.slow),
    pytest.param("simulate", "simulate", ["simulate", *AG, *SMALL, "--policy", "UA", "--tbs", "1"],
                 marks=pytest.mark.slow),
    pytest.param("sensitivity", "sensitivity", ["sensitivity", *AG, *SMALL, "--policy", "ua", "--tbs", "1"],
                 marks=pytest.mark.slow),
    pytest.param("optimize", "optimize", ["optimize", *AG, *SMALL, "--tbs", "2", "--nar-granularity", "3",
                                          "--candidates", "3", "--budget", "60", "--seed", "7",
                                          "--no-baselines"], marks=pytest.mark.slow),
    pytest.param("noc", "noc", ["noc", "{noc}"], marks=pytest.mark.slow),
    pytest.param("sweep", "sweep", ["sweep", "{grid}", "--out", "{out}"], marks=pytest.mark.slow),
    pytest.param("e2e", "e2e", ["e2e", "--model", "llama-7b", "--gpus", "2", "--phase", "decode", "--tp", "2",
                                "--batch", "1", "--seq-len", "1024", "--table", "{table}"], marks=pytest.mark.slow),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("json")
    (d / "small.cfg").write_text(NOC_CFG)
    (d / "grid.toml").write_text(GRID)
    from nuna_jax import chakra            # a 2-rank Chakra trace: compute, an All-Reduce, compute
    tr = d / "trace"
    tr.mkdir()
    for r in range(2):
        nodes = [dict(id=1, name="fwd", type="COMP", duration_micros=2 + r),
                 dict(id=2, name="ar", type="COMM_COLL", data_deps=[1], comm_type=0, comm_size=1 << 16),
                 dict(id=3, name="bwd", type="COMP", data_deps=[2], duration_micros=1)]
        (tr / f"w.{r}.et").write_bytes(chakra.encode_trace(nodes, "0.0.4"))
    (d / "net.yml").write_text("topology: [Switch]\nnpus_count: [2]\nbandwidth: [50]\nlatency: [100]\n")
    return {"noc": str(d / "small.cfg"), "grid": str(d / "grid.toml"), "out": str(d / "out.csv"),
            "trace": str(tr), "net": str(d / "net.yml"), "dir": d}


def _table(files):
    """A current collective table (the shipped numbers re-sealed for this tree: CLI plumbing only)."""
    from nuna_jax.e2e.llm import collective_table as C, provenance as P
    t = files["dir"] / "table.json"
    if not t.exists():
        d = C.read_table(C.SHIPPED)
        fh = P.model_file_hashes()
        t.write_text(json.dumps(C.seal({**d, "model_hash": P.model_hash(fh), "model_files": fh})))
    return str(t)


def _argv(argv, files):
    subs = dict(files)
    if any("{table}" in a for a in argv):
        subs["table"] = _table(files)
    return [a.format(**subs) if "{" in a else a for a in argv]


def run(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, (argv, err[-2000:])
    return out, err


@pytest.mark.parametrize("name,command,argv", CASES, ids=[getattr(c, "values", c)[0] for c in CASES])
def test_every_subcommand_json_matches_the_schema_and_its_text_runs(capsys, files, name, command, argv):
    argv = _argv(argv, files)
    Path(files["out"]).unlink(missing_ok=True)
    out, _ = run(capsys, argv + ["--json"])
    d = json.loads(out)
    check(d, command)
    p = d["provenance"]
    assert p["command_line"] == shlex.join(["nuna-jax", *argv, "--json"])
    if "--system" in argv:
        assert p["system"] == argv[argv.index("--system") + 1]
    Path(files["out"]).unlink(missing_ok=True)
    text, _ = run(capsys, argv)                       # the text form of the same call
    assert text.strip()
    # canonical policy names in text as well (a key such as nap_nar_simulated_ns is not a policy name)
    import re
    bad = re.findall(r"(?<![\w+*])(ua|nap\+nar|nap_nar|ua\+nar|numa)(?![\w+*])", text)
    assert not bad, (bad, text)


def test_provenance_names_the_toml_system_and_its_source(capsys, tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('base = "mono"\nname = "mine"\nhop_cycles = 12.0\n')
    d = json.loads(run(capsys, ["info", "--system", str(f), "--gpus", "2", "--json"])[0])
    assert d["provenance"]["system"] == "mine" and d["provenance"]["system_file"] == str(f)
    assert d["provenance"]["system_base"] == "mono"
    assert d["hop_cycles"] == 12.0                    # the System field, under its own name


def test_info_writes_every_system_field_under_its_own_name(capsys):
    from nuna_jax.system import System
    d = json.loads(run(capsys, ["info", "--system", "mono", "--gpus", "2", "--json"])[0])
    fields = [f.name for f in dataclasses.fields(System)]
    assert set(fields) <= set(d)
    assert set(fields) <= set(schema()["$defs"]["info"]["allOf"][1]["required"])
    from nuna_jax.presets import preset
    s = preset("mono", n_gpus=2)
    assert d["link_bw_bytes_per_ns"] == pytest.approx(float(s.link_bw_bytes_per_ns))
    assert d["scaleup_bw_bytes_per_ns"] == pytest.approx(s.n_io_ports * float(s.port_bw_bytes_per_ns))
    assert isinstance(d["n_cus"], int) and isinstance(d["mesh_cols"], int)


def test_the_schema_refuses_the_retired_spellings():
    """Each of the old spellings the issue lists is an error (so the schema test can fail)."""
    prov = {"nuna_jax_version": "0", "git_commit": None, "system": None, "system_base": None,
            "system_file": None, "command_line": "nuna-jax x"}
    ok = {"model": "m", "n_gpus": 4, "phase": "decode", "config": {k: 1 for k in ("tp", "ep", "dp", "pp", "batch",
                                                                                   "seq_len")},
          "time_ms": {"UA": 1.0, "NAP+NAR": 0.5}, "reduction": 0.5, "split_ms": {"UA": {}, "NAP+NAR": {}},
          "configs_evaluated": 3, "wall_s": 0.1, "collective_table": {}, "provenance": prov}
    assert validate(ok, "#/$defs/e2e") == []
    bad = [
        {**ok, "time_ms": {"ua": 1.0, "nap_nar": 0.5}},            # policy keys not canonical
        {**ok, "n_gpus": 4.0},                                      # an integer written as a float
        {**ok, "gpus": 4},                                          # gpus for n_gpus
        {**ok, "policy": "nap+nar"},                                # a policy value not canonical
        {**ok, "config": {**ok["config"], "size": "1MB"}},          # a size string for size_bytes
        {**ok, "collective": "all_reduce"},                         # ASTRA-sim's spelling
        {**ok, "link_bw_GBps": 1.0},                                # not the System field's name
        {**ok, "provenance": {k: v for k, v in prov.items() if k != "command_line"}},
    ]
    for b in bad:
        assert validate(b, "#/$defs/e2e"), b


def test_the_validator_agrees_with_jsonschema_where_it_is_installed(capsys):
    jsonschema = pytest.importorskip("jsonschema")
    d = json.loads(run(capsys, ["kernel", "--op", "all-reduce", "--bytes", "1MB", "--json"])[0])
    root = json.loads(SCHEMA_PATH.read_text())
    jsonschema.validate(d, {**root, "$ref": "#/$defs/kernel"})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**d, "gpus": 8}, {**root, "$ref": "#/$defs/kernel"})


def test_size_strings_wherever_a_byte_count_is_taken(capsys):
    a = json.loads(run(capsys, ["kernel", "--op", "all-reduce", "--bytes", "1MB", "--json"])[0])
    b = json.loads(run(capsys, ["kernel", "--op", "all-reduce", "--bytes", "1000000", "--json"])[0])
    assert a["size_bytes"] == b["size_bytes"] == 10**6 and a["terms_ns"] == b["terms_ns"]
    assert main(["kernel", "--op", "all-reduce", "--bytes", "1.5B"]) == 2
    assert "whole number of bytes" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".png", ".pdf", ".svg"])
def test_plot_takes_png_pdf_and_svg_and_says_where_it_wrote(capsys, tmp_path, suffix):
    f = tmp_path / f"map{suffix}"
    assert main(["info", "--system", "mono", "--gpus", "2", "--plot", str(f)]) == 0
    assert f.stat().st_size > 0 and f"plot written to {f}" in capsys.readouterr().err
    if suffix == ".svg":
        assert f.read_text().lstrip().startswith(("<?xml", "<svg"))


def test_plot_refuses_another_suffix_before_any_work(capsys, tmp_path):
    assert main(["sensitivity", *AG, *SMALL, "--plot", str(tmp_path / "x.jpg")]) == 2
    err = capsys.readouterr().err
    assert ".png, .pdf or .svg" in err and not (tmp_path / "x.jpg").exists()
