"""``nuna-jax reproduce``: the registry names real scripts; bad names exit 2; two quick experiments run
end to end (a smoke test, so a change that breaks an experiment fails CI)."""

import json
from pathlib import Path

from nuna_jax.cli import main
from nuna_jax.cli.reproduce import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[1]


def test_list_names_existing_scripts(capsys):
    assert main(["reproduce", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["experiments"]
    assert list(rows) == list(EXPERIMENTS)
    for r in rows.values():
        assert (ROOT / r["script"]).is_file(), r["script"]


def test_report_is_the_last_step_of_all():
    """--all runs in registry order; the generated report reads the JSON of all the others, so it comes last."""
    assert list(EXPERIMENTS)[-1] == "report"
    assert EXPERIMENTS["report"].script == "fidelity_table.py"


def test_bad_names_are_user_errors(capsys):
    assert main(["reproduce", "fig99"]) == 2
    assert "fig99" in capsys.readouterr().err
    assert main(["reproduce"]) == 2
    assert "--all" in capsys.readouterr().err


def test_bad_jobs_is_a_user_error(capsys):
    assert main(["reproduce", "fig2", "--jobs", "0"]) == 2
    assert "--jobs" in capsys.readouterr().err


def test_two_quick_experiments_run(tmp_path, capsys):
    """Two at once (--jobs 2): both run to completion and both are reported."""
    assert main(["reproduce", "--quick", "pk_table3", "fig2", "--out", str(tmp_path), "--json", "--jobs", "2"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["failed"] == [] and sorted(r["name"] for r in d["experiments"]) == ["fig2", "pk_table3"]
    figs = list((tmp_path / "fig2").glob("*.json"))
    assert figs and json.loads(figs[0].read_text())          # fig2 wrote its numbers under --out
