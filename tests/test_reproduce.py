"""``nuna-jax reproduce``: the registry names real scripts; bad names exit 2; two quick experiments run
end to end (a smoke test, so a change that breaks an experiment fails CI)."""

import json
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("pair", [
    ("pk_mechanisms", "spread"),                                   # the two cheapest (about 9 + 10 CPU s)
    pytest.param(("pk_table3", "fig2"), marks=pytest.mark.slow),   # fig2 alone is about 27 CPU s
])
def test_two_quick_experiments_run(tmp_path, capsys, pair):
    """Two at once (--jobs 2): both run to completion and both are reported."""
    other, writer = pair                                            # ``writer`` takes --out
    assert main(["reproduce", "--quick", other, writer, "--out", str(tmp_path), "--json", "--jobs", "2"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["failed"] == [] and sorted(r["name"] for r in d["experiments"]) == sorted(pair)
    figs = list((tmp_path / writer).glob("*.json"))
    assert figs and json.loads(figs[0].read_text())          # it wrote its numbers under --out


def test_a_signal_ends_every_running_experiment(tmp_path):
    """SIGTERM (or SIGINT) to `reproduce` ends its running experiments and their children too (no orphan),
    and the command exits 128 + signal."""
    import os
    import signal
    import subprocess
    import sys
    import time
    exp = tmp_path / "experiments"
    exp.mkdir()
    pids = tmp_path / "pids"
    (exp / "nap.py").write_text(
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}} {{child.pid}}\\n')\n"
        "time.sleep(120)\n")
    code = ("import sys; from pathlib import Path; import nuna_jax.cli.reproduce as r\n"
            f"r.experiments_dir = lambda: Path({str(exp)!r})\n"
            "r.EXPERIMENTS = {'a': r.Experiment('nap.py', 'sleeps'), 'b': r.Experiment('nap.py', 'sleeps')}\n"
            "from nuna_jax.cli import main; sys.exit(main(['reproduce', 'a', 'b', '--jobs', '2']))\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while (not pids.exists() or pids.read_text().count("\n") < 2) and time.time() - t0 < 60:
        time.sleep(0.2)
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 4                       # two experiments, each with a child
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=30) == 128 + signal.SIGTERM
    time.sleep(0.5)
    for pid in started:
        try:
            os.kill(pid, 0)
            alive = open(f"/proc/{pid}/stat").read().split()[2] != "Z"
        except (ProcessLookupError, FileNotFoundError):
            alive = False
        assert not alive, pid


def test_relative_out_is_relative_to_the_working_directory(tmp_path, monkeypatch):
    import nuna_jax.cli.reproduce as r
    seen = {}

    def fake_waves(args, names, command, running):
        seen["cmd"] = command(names[0])
        return 0
    monkeypatch.setattr(r, "_run_waves", fake_waves)
    monkeypatch.chdir(tmp_path)
    from nuna_jax.cli import main
    assert main(["reproduce", "spread", "--out", "rel"]) == 0
    assert seen["cmd"][-1] == str(tmp_path / "rel" / "spread")


def test_max_work_reaches_every_experiment(tmp_path, monkeypatch, capsys):
    """reproduce --max-work F: each script runs with the library's limits multiplied by F
    (nuna_jax.cli.limited), as every other command's --max-work."""
    from nuna_jax.cli import reproduce as R
    out = tmp_path / "factor.txt"
    f = tmp_path / "probe.py"
    f.write_text("import sys\nfrom nuna_jax.limits import active\n"
                 f"open({str(out)!r}, 'w').write(repr(active().factor) + ' ' + ' '.join(sys.argv[1:]))\n")
    monkeypatch.setattr(R, "EXPERIMENTS", {"probe": R.Experiment(str(f), "limits probe", ("--quick",))})
    assert main(["reproduce", "probe", "--max-work", "0.25", "--quick", "--json"]) == 0
    assert out.read_text() == "0.25 --quick"
    assert main(["reproduce", "probe"]) == 0            # default: the script as it always ran
    assert out.read_text() == "1.0 "
    capsys.readouterr()
