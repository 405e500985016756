"""The public API and the documents a newcomer reads: docs/api.md is generated from the
docstrings and current; every entry point states units and shows a call; ``import nuna_jax`` stays
lazy; README's library example is the one docs/api.md shows; README's experiment table lists what
``reproduce --list`` runs; docs and code comments name things instead of citing tracker numbers."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gen_api_doc  # noqa: E402

UNITS = re.compile(r"\b(ns|ps|bytes|bytes/ns|GHz|seconds|s)\b")


def test_api_doc_is_current():
    assert (ROOT / "docs" / "api.md").read_text() == gen_api_doc.render(), \
        "docs/api.md is stale: run python scripts/gen_api_doc.py"


@pytest.mark.parametrize("name", gen_api_doc.entry_points())
def test_entry_point_documents_units_and_a_call(name):
    import nuna_jax
    assert name in nuna_jax.__all__
    doc = gen_api_doc.entry(name).__doc__ or ""
    assert UNITS.search(doc), f"nuna_jax.{name}: the docstring names no unit"
    assert ">>>" in doc or "Example" in doc, f"nuna_jax.{name}: the docstring shows no call"
    assert f"{name}(" in doc, f"nuna_jax.{name}: the example does not call it"


def test_import_is_lazy():
    code = ("import sys, nuna_jax; assert 'make_scenario' in dir(nuna_jax); "
            "print(sorted(m for m in ('jax', 'flax', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_sweep_stays_callable_after_its_package_loads():
    """``nuna_jax.sweep`` names both the entry point and the package ``nuna_jax.sweep``; whichever
    the attribute holds, calling it runs the sweep."""
    code = ("import nuna_jax as nj; f = nj.sweep; import nuna_jax.sweep.grid; g = nj.sweep; "
            "assert callable(f) and callable(g); "
            "c = g({'axes': {'model': ['closed_form'], 'size': [1000, 2000], 'gpus': [2]}})['columns']; "
            "print(c['size'].tolist(), bool((c['time_ns'] > 0).all()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("[1000, 2000] True")


def _python_blocks(text):
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_library_example_is_the_documented_one():
    readme = (ROOT / "README.md").read_text()
    lib = readme[readme.index("## As a library"):]
    lib = lib[:lib.index("\n## ", 4)]
    example = _python_blocks(gen_api_doc.HEAD)[0]
    assert example in _python_blocks(lib), "README's library section lost the design-space example"
    assert len([ln for ln in example.splitlines() if ln.strip()]) <= 10


def test_readme_experiment_table_matches_reproduce_list(capsys):
    from nuna_jax.cli import main
    assert main(["reproduce", "--list", "--json"]) == 0
    scripts = {r["script"] for r in json.loads(capsys.readouterr().out)["experiments"].values()}
    readme = (ROOT / "README.md").read_text()
    sec = readme[readme.index("## Reproducing the papers"):]
    sec = sec[:sec.index("\n## ", 4)]
    table = [ln for ln in sec.splitlines() if ln.startswith("| `experiments/")]
    listed = set()
    for ln in table:
        cell = ln.split("|")[1]
        names = re.findall(r"`([^`]+\.py)`", cell)
        listed |= {n if n.startswith("experiments/") else f"experiments/{n}" for n in names}
    assert scripts <= listed, f"README's table misses {sorted(scripts - listed)}"
    on_disk = {f"experiments/{p.name}" for p in (ROOT / "experiments").glob("*.py")}
    assert listed <= on_disk, f"README lists scripts that do not exist: {sorted(listed - on_disk)}"


def test_no_tracker_numbers_in_docs_or_comments():
    pat = re.compile(r"\b[Ii]ssue[s]? #?\d+")
    bad = []
    files = [*ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("nuna_jax/**/*.py"),
             *ROOT.glob("experiments/*.py"), *ROOT.glob("benchmarks/*.py"), *ROOT.glob("scripts/*.py")]
    # variant names stored in committed JSON (data, read back by the report), not prose
    data_keys = ("previous (main before issue 10)", "p2p_reduce_eff 1, before issue 10")
    for p in files:
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if pat.search(line) and not any(k in line for k in data_keys):
                bad.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()[:80]}")
    assert not bad, "say what the thing is, not its tracker number:\n" + "\n".join(bad)


def test_every_experiment_takes_out():
    from nuna_jax.cli.reproduce import EXPERIMENTS
    assert [n for n, e in EXPERIMENTS.items() if not e.takes_out] == []
    shared = (ROOT / "experiments" / "script_args.py").read_text()
    assert '"--out"' in shared                        # the one --out of the scripts that take nothing else
    for e in EXPERIMENTS.values():                    # and the script really declares the option
        text = (ROOT / "experiments" / e.script).read_text()
        assert '"--out"' in text or "main(out_dir(__doc__," in text, e.script


@pytest.mark.parametrize("name", ["pk_table3", "pk_mechanisms"])
def test_reproduce_out_writes_nothing_into_the_clone(name, tmp_path, capsys):
    from nuna_jax.cli import main
    watched = [*(ROOT / "experiments" / "data").glob("*"), *(ROOT / "results").rglob("*"),
               *(ROOT / "experiments" / "out").glob("*")]
    before = {p: p.stat().st_mtime_ns for p in watched if p.is_file()}
    assert main(["reproduce", name, "--out", str(tmp_path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["failed"] == []
    written = sorted(p.name for p in (tmp_path / name).iterdir())
    assert f"{name}.json" in written and f"{name}.png" in written, written
    after = {p: p.stat().st_mtime_ns for p in before if p.exists()}
    assert after == before, "reproduce --out changed files of the clone"


def test_entry_points_on_a_small_case(tmp_path):
    """make_scenario and simulate compose as docs/api.md shows (2 GPUs, 20 kB All-Gather)."""
    import nuna_jax as nj
    sc = nj.make_scenario(nj.preset("table2", n_gpus=2), "allgather", "20kB", "ua", tbs_per_gpu=2)
    assert sc.describe()["tbs_per_gpu"] == 2 and sc.traffic.total_bytes == 20_000   # each GPU sends its 10 kB half
    r = nj.simulate(sc)
    assert r.completion_ns > 0 and 0 < r.loop_s <= r.wall_s and r.flits_delivered == sc.traffic.total_flits
    r2, info = nj.simulate(sc, trace=str(tmp_path / "t.json"))
    assert r2.completion_ps == r.completion_ps and info["slices"] > 0 and not info["truncated"]
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


@pytest.mark.slow
def test_model_entry_points_on_a_small_case():
    """estimate and sensitivity (each compiles the path model: about a minute on a loaded 2-core CPU)."""
    import nuna_jax as nj
    sc = nj.make_scenario(nj.preset("table2", n_gpus=2), "allgather", "20kB", "ua", tbs_per_gpu=2)
    e = nj.estimate(sc)
    assert e["policy"] == "UA" and e["tbs_per_gpu"] == 2
    assert 0 < e["lower_bound_ns"] <= e["time_ns"] and e["breakdown"]["bound"] in ("latency", "resource")
    assert nj.simulate(sc).completion_ns >= e["lower_bound_ns"] * (1 - 1e-6)
    rows = nj.sensitivity(sc)["rows"]
    assert rows and abs(rows[0]["elasticity"]) >= abs(rows[-1]["elasticity"])
