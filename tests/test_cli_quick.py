"""A quick command line (issue 23, item 4): ``--help``, ``--version``, ``<cmd> --help``, ``--list``
and argument errors never import jax, flax or numba; the light copies of the library's names
that the parsers show agree with the library."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("jax", "flax", "numba")

# (argv, expected exit status)
LIGHT_CALLS = [
    (["--help"], 0), (["--version"], 0), ([], 2), (["bogus"], 2),
    (["e2e", "--list"], 0), (["e2e", "--list", "--json"], 0), (["reproduce", "--list"], 0),
    (["place", "--size"], 2), (["estimate", "--collective", "allgather"], 2),
    (["kernel", "--op", "nope"], 2), (["simulate", "--collective", "allgather", "--size", "1MB", "--engine", "x"], 2),
    (["sweep"], 2), (["info", "--gpus", "0"], 2), (["place", "--collective", "allgather", "--size", "1MB", "--tbs", "x"], 2),
]

_CHILD = r"""
import contextlib, io, json, sys
from nuna_jax.cli import SUBCOMMANDS, main
calls = json.loads(sys.argv[1]) + [[[c, "--help"], 0] for c in SUBCOMMANDS]
out = []
for argv, want in calls:
    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code or 0
    heavy = sorted(m for m in %r if m in sys.modules)
    out.append({"argv": argv, "rc": rc, "want": want, "heavy": heavy, "stdout": buf.getvalue()[:200],
                "stderr": err.getvalue()[:300]})
print(json.dumps(out))
""" % (HEAVY,)


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                NUNA_JAX_CACHE_DIR="")


def test_parsing_imports_no_jax_flax_numba():
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(LIGHT_CALLS)], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(rows) > len(LIGHT_CALLS)
    for row in rows:   # in order: the first row that loads a heavy module names the culprit
        assert row["rc"] == row["want"], row
        assert row["heavy"] == [], row
    by = {tuple(row["argv"]): row for row in rows}
    assert by[("--version",)]["stdout"].startswith("nuna-jax ")
    assert "usage: nuna-jax" in by[("--help",)]["stdout"]
    assert by[("bogus",)]["stderr"].count("\n") == 1   # argument errors stay one line


def test_python_m_help_and_bare_import_stay_light():
    code = ("import subprocess, sys, nuna_jax; "
            "assert not [m for m in %r if m in sys.modules], 'import nuna_jax'; "
            "print(nuna_jax.__version__)") % (HEAVY,)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "nuna_jax", "--help"], cwd=ROOT, env=_env(),
                       capture_output=True, text=True)
    assert r.returncode == 0 and "usage: nuna-jax" in r.stdout
    loaded = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if "|" in line}
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_lazy_package_names_still_work():
    import nuna_jax
    from nuna_jax import System, preset, preset_names

    assert isinstance(preset("table2"), System)
    assert "table2" in preset_names() and "System" in dir(nuna_jax)
    with pytest.raises(AttributeError):
        nuna_jax.no_such_name  # noqa: B018


def test_light_names_equal_the_library():
    from nuna_jax import placement, plans, sim
    from nuna_jax.cli import names
    from nuna_jax.kernel_presets import kernel_preset_names
    from nuna_jax.models import kernel as K

    assert names.POLICIES == placement.POLICIES
    assert names.COLLECTIVES == plans.COLLECTIVES and names.ALGORITHMS == plans.ALGORITHMS
    assert names.SIM_ENGINES == sim.ENGINES
    assert names.KERNEL_OPS == K.OPS and names.KERNEL_SCHEDULES == K.SCHEDULES
    assert names.KERNEL_MECHANISMS == K.MECHANISMS
    assert list(names.KERNEL_PRESETS) == kernel_preset_names()


_HIT_CHILD = r"""
import contextlib, io, json, sys
from nuna_jax.cli import main
argv = json.loads(sys.argv[1])
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    rc = main(argv)
print(json.dumps({"rc": rc, "stdout": buf.getvalue(), "heavy": sorted(m for m in %r if m in sys.modules)}))
""" % (HEAVY,)


def test_place_store_hit_imports_no_jax(tmp_path, monkeypatch, capsys):
    """The second ``place`` of a case answers from its stored record (cli.replay): the same stdout as
    a build, text and JSON, and no jax, flax or numba loaded (issue 23: the second place under 3 s);
    with ``--plot`` nothing is replayed (the figure needs the scenario)."""
    from nuna_jax import cache
    from nuna_jax.cli import main, place, replay
    argv = ["place", "--gpus", "2", "--collective", "allgather", "--size", "256KiB", "--policy", "ua", "--tbs", "2"]
    built = {}
    monkeypatch.setenv("NUNA_JAX_CACHE_DIR", "")            # store off: plain builds
    for extra in ([], ["--json"]):
        assert main(argv + extra) == 0
        built[bool(extra)] = capsys.readouterr().out
    monkeypatch.setenv("NUNA_JAX_CACHE_DIR", str(tmp_path))
    try:
        assert main(argv) == 0 and capsys.readouterr().out == built[False]      # builds, stores the record
        env = dict(_env(), NUNA_JAX_CACHE_DIR=str(tmp_path))
        for extra in ([], ["--json"]):
            r = subprocess.run([sys.executable, "-c", _HIT_CHILD, json.dumps(argv + extra)], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr[-2000:]
            got = json.loads(r.stdout.strip().splitlines()[-1])
            assert got["rc"] == 0 and got["heavy"] == [], got
            assert got["stdout"] == built[bool(extra)]
        keys, drawn = [], []
        real = replay.load_record
        monkeypatch.setattr(replay, "load_record", lambda k: keys.append(k) or real(k))
        monkeypatch.setattr(place, "write_plot", lambda args, fig: drawn.append(args.plot))
        assert main(argv + ["--plot", str(tmp_path / "p.png")]) == 0
        assert keys == [None] and drawn == [str(tmp_path / "p.png")]
        assert capsys.readouterr().out == built[False]
    finally:
        cache.use_scenarios(False)
